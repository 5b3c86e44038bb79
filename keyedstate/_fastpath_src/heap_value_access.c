#include "fastpath.h"

typedef struct {
    PyObject_HEAD
    PyObject *entries;     /* the store's entries (ValueAccess): a dict, stored key -> value as is */
    PyObject *backend;     /* the keyed state backend (a KeyContext) */
    PyObject *prefix_field; /* the name of its current key's prefix (bytes, or None without a current key) */
    PyObject *namespace;   /* encoded namespace (bytes) */
    PyObject *prefix;      /* the prefix stored_key was built from (held, so its identity stays unique) or NULL */
    PyObject *stored_key;  /* prefix + namespace, or NULL */
    PyObject *exact_types; /* container of types stored without a check, or None when every value is accepted */
    PyObject *tuple_items; /* container: a tuple whose items' types are all in it is stored without a check too; or
                              None (the default) */
    PyObject *slow_value;  /* callable(): the Python value() */
    PyObject *slow_update; /* callable(value): the Python update() */
} HeapValueAccess;

static int
access_traverse(HeapValueAccess *self, visitproc visit, void *arg)
{
    Py_VISIT(self->entries);
    Py_VISIT(self->backend);
    Py_VISIT(self->prefix_field);
    Py_VISIT(self->namespace);
    Py_VISIT(self->prefix);
    Py_VISIT(self->stored_key);
    Py_VISIT(self->exact_types);
    Py_VISIT(self->tuple_items);
    Py_VISIT(self->slow_value);
    Py_VISIT(self->slow_update);
    return 0;
}

static int
access_clear(HeapValueAccess *self)
{
    Py_CLEAR(self->entries);
    Py_CLEAR(self->backend);
    Py_CLEAR(self->prefix_field);
    Py_CLEAR(self->namespace);
    Py_CLEAR(self->prefix);
    Py_CLEAR(self->stored_key);
    Py_CLEAR(self->exact_types);
    Py_CLEAR(self->tuple_items);
    Py_CLEAR(self->slow_value);
    Py_CLEAR(self->slow_update);
    return 0;
}

static void
access_dealloc(HeapValueAccess *self)
{
    PyObject_GC_UnTrack(self);
    access_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
access_init(HeapValueAccess *self, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"entries", "backend", "prefix_field", "namespace", "exact_types", "slow_value",
                               "slow_update", "tuple_items", NULL};
    PyObject *entries, *backend, *prefix_field, *namespace, *exact_types, *slow_value, *slow_update;
    PyObject *tuple_items = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!OOO!OOO|O:HeapValueAccess", keywords, &PyDict_Type, &entries,
                                     &backend, &prefix_field, &PyBytes_Type, &namespace, &exact_types, &slow_value,
                                     &slow_update, &tuple_items)) {
        return -1;
    }
    prefix_field = attribute_name(prefix_field, backend, "HeapValueAccess");
    if (prefix_field == NULL) {
        return -1;
    }
    Py_XSETREF(self->prefix_field, prefix_field);
    Py_XSETREF(self->entries, Py_NewRef(entries));
    Py_XSETREF(self->backend, Py_NewRef(backend));
    Py_XSETREF(self->namespace, Py_NewRef(namespace));
    Py_XSETREF(self->exact_types, Py_NewRef(exact_types));
    Py_XSETREF(self->tuple_items, Py_NewRef(tuple_items));
    Py_XSETREF(self->slow_value, Py_NewRef(slow_value));
    Py_XSETREF(self->slow_update, Py_NewRef(slow_update));
    Py_CLEAR(self->prefix);
    Py_CLEAR(self->stored_key);
    return 0;
}

/* 1 with *key set (borrowed), 0 when the Python implementation must handle the call, -1 on error. */
static int
access_stored_key(HeapValueAccess *self, PyObject **key)
{
    PyObject *prefix = PyObject_GetAttr(self->backend, self->prefix_field);
    if (prefix == NULL) {
        return -1;
    }
    if (prefix != self->prefix) {
        if (!PyBytes_CheckExact(prefix)) { /* None: no current key */
            Py_DECREF(prefix);
            return 0;
        }
        Py_ssize_t prefix_size = PyBytes_GET_SIZE(prefix);
        Py_ssize_t namespace_size = PyBytes_GET_SIZE(self->namespace);
        PyObject *stored_key = PyBytes_FromStringAndSize(NULL, prefix_size + namespace_size);
        if (stored_key == NULL) {
            Py_DECREF(prefix);
            return -1;
        }
        memcpy(PyBytes_AS_STRING(stored_key), PyBytes_AS_STRING(prefix), prefix_size);
        memcpy(PyBytes_AS_STRING(stored_key) + prefix_size, PyBytes_AS_STRING(self->namespace), namespace_size);
        Py_XSETREF(self->stored_key, stored_key);
        Py_XSETREF(self->prefix, prefix); /* takes the reference GetAttr returned */
    }
    else {
        Py_DECREF(prefix);
    }
    *key = self->stored_key;
    return 1;
}

static PyObject *
access_value(HeapValueAccess *self, PyObject *Py_UNUSED(ignored))
{
    if (not_initialized(self->entries, "HeapValueAccess")) {
        return NULL;
    }
    PyObject *key;
    int found = access_stored_key(self, &key);
    if (found < 0) {
        return NULL;
    }
    if (found == 0) {
        return PyObject_CallNoArgs(self->slow_value);
    }
    PyObject *value = PyDict_GetItemWithError(self->entries, key);
    if (value == NULL) {
        if (PyErr_Occurred()) {
            return NULL;
        }
        Py_RETURN_NONE;
    }
    return Py_NewRef(value);
}

static PyObject *
access_update(HeapValueAccess *self, PyObject *value)
{
    if (not_initialized(self->entries, "HeapValueAccess")) {
        return NULL;
    }
    if (value == Py_None) {
        return PyObject_CallOneArg(self->slow_update, value);
    }
    if (self->exact_types != Py_None) {
        int exact = PySequence_Contains(self->exact_types, (PyObject *)Py_TYPE(value));
        if (exact < 0) {
            return NULL;
        }
        if (!exact && self->tuple_items != Py_None && PyTuple_CheckExact(value)) {
            exact = 1;
            for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(value) && exact == 1; i++) {
                exact = PySequence_Contains(self->tuple_items, (PyObject *)Py_TYPE(PyTuple_GET_ITEM(value, i)));
            }
            if (exact < 0) {
                return NULL;
            }
        }
        if (!exact) {
            return PyObject_CallOneArg(self->slow_update, value);
        }
    }
    PyObject *key;
    int found = access_stored_key(self, &key);
    if (found < 0) {
        return NULL;
    }
    if (found == 0) {
        return PyObject_CallOneArg(self->slow_update, value);
    }
    if (PyDict_SetItem(self->entries, key, value) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
access_set_namespace(HeapValueAccess *self, PyObject *namespace)
{
    if (!PyBytes_CheckExact(namespace)) {
        PyErr_SetString(PyExc_TypeError, "namespace must be bytes");
        return NULL;
    }
    Py_XSETREF(self->namespace, Py_NewRef(namespace));
    Py_CLEAR(self->prefix);
    Py_CLEAR(self->stored_key);
    Py_RETURN_NONE;
}

static PyMethodDef access_methods[] = {
    {"value", (PyCFunction)access_value, METH_NOARGS, "The current key's value in the namespace, or None."},
    {"update", (PyCFunction)access_update, METH_O, "Store the current key's value in the namespace."},
    {"set_namespace", (PyCFunction)access_set_namespace, METH_O, "Scope further calls to an encoded namespace."},
    {NULL, NULL, 0, NULL},
};

PyTypeObject HeapValueAccessType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "keyedstate._fastpath.HeapValueAccess",
    .tp_doc = "value()/update() of one ValueState without TTL over a dict of entries (see keyedstate.fastpath).",
    .tp_basicsize = sizeof(HeapValueAccess),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)access_init,
    .tp_dealloc = (destructor)access_dealloc,
    .tp_traverse = (traverseproc)access_traverse,
    .tp_clear = (inquiry)access_clear,
    .tp_methods = access_methods,
};
