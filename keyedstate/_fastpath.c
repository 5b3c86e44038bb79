/* The compiled fast path of the calls a KeyedProcessFunction makes once or twice per element.
 *
 * ValueState.value()/update() over a heap store and the timer calls that CoalescingTimerService collects while a
 * key's elements run are single dict operations; as Python methods, the call itself costs several times the dict
 * operation. These types do the common case in C and hand everything else (no current key, a value that needs the
 * type check, a timestamp that is not a plain int in range, calls outside a run of elements) to the Python
 * implementation they were built with, which stays the definition of the behaviour: see keyedstate/compiled.py.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

static PyObject *name_current_prefix; /* "_current_prefix" */
static PyObject *name_collecting;     /* "collecting" */

/* ---- HeapValueAccess ------------------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *data;        /* the heap store's dict: stored key -> value */
    PyObject *backend;     /* the keyed state backend: its _current_prefix (bytes, or None without a current key) */
    PyObject *namespace;   /* encoded namespace (bytes) */
    PyObject *prefix;      /* the prefix stored_key was built from (held, so its identity stays unique) or NULL */
    PyObject *stored_key;  /* prefix + namespace, or NULL */
    PyObject *exact_types; /* container of types stored without a check, or None when every value is accepted */
    PyObject *slow_value;  /* callable(): the Python value() */
    PyObject *slow_update; /* callable(value): the Python update() */
} HeapValueAccess;

static int
access_traverse(HeapValueAccess *self, visitproc visit, void *arg)
{
    Py_VISIT(self->data);
    Py_VISIT(self->backend);
    Py_VISIT(self->namespace);
    Py_VISIT(self->prefix);
    Py_VISIT(self->stored_key);
    Py_VISIT(self->exact_types);
    Py_VISIT(self->slow_value);
    Py_VISIT(self->slow_update);
    return 0;
}

static int
access_clear(HeapValueAccess *self)
{
    Py_CLEAR(self->data);
    Py_CLEAR(self->backend);
    Py_CLEAR(self->namespace);
    Py_CLEAR(self->prefix);
    Py_CLEAR(self->stored_key);
    Py_CLEAR(self->exact_types);
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
    static char *keywords[] = {"data", "backend", "namespace", "exact_types", "slow_value", "slow_update", NULL};
    PyObject *data, *backend, *namespace, *exact_types, *slow_value, *slow_update;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!OO!OOO:HeapValueAccess", keywords, &PyDict_Type, &data,
                                     &backend, &PyBytes_Type, &namespace, &exact_types, &slow_value, &slow_update)) {
        return -1;
    }
    Py_XSETREF(self->data, Py_NewRef(data));
    Py_XSETREF(self->backend, Py_NewRef(backend));
    Py_XSETREF(self->namespace, Py_NewRef(namespace));
    Py_XSETREF(self->exact_types, Py_NewRef(exact_types));
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
    PyObject *prefix = PyObject_GetAttr(self->backend, name_current_prefix);
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
    PyObject *key;
    int found = access_stored_key(self, &key);
    if (found < 0) {
        return NULL;
    }
    if (found == 0) {
        return PyObject_CallNoArgs(self->slow_value);
    }
    PyObject *value = PyDict_GetItemWithError(self->data, key);
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
    if (value == Py_None) {
        return PyObject_CallOneArg(self->slow_update, value);
    }
    if (self->exact_types != Py_None) {
        int exact = PySequence_Contains(self->exact_types, (PyObject *)Py_TYPE(value));
        if (exact < 0) {
            return NULL;
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
    if (PyDict_SetItem(self->data, key, value) < 0) {
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

static PyTypeObject HeapValueAccessType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "keyedstate._fastpath.HeapValueAccess",
    .tp_doc = "value()/update() of one heap ValueState without TTL (see keyedstate.compiled).",
    .tp_basicsize = sizeof(HeapValueAccess),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)access_init,
    .tp_dealloc = (destructor)access_dealloc,
    .tp_traverse = (traverseproc)access_traverse,
    .tp_clear = (inquiry)access_clear,
    .tp_methods = access_methods,
};

/* ---- TimerCall --------------------------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *owner;    /* the CoalescingTimerService: collects only while its `collecting` is true */
    PyObject *changes;  /* dict timestamp -> True (registered) / False (deleted) of the current key's run */
    PyObject *mark;     /* what this call stores: True or False */
    PyObject *fallback; /* callable(timestamp): the Python method */
    long long max_timestamp;
} TimerCall;

static int
timer_call_traverse(TimerCall *self, visitproc visit, void *arg)
{
    Py_VISIT(self->owner);
    Py_VISIT(self->changes);
    Py_VISIT(self->mark);
    Py_VISIT(self->fallback);
    return 0;
}

static int
timer_call_clear(TimerCall *self)
{
    Py_CLEAR(self->owner);
    Py_CLEAR(self->changes);
    Py_CLEAR(self->mark);
    Py_CLEAR(self->fallback);
    return 0;
}

static void
timer_call_dealloc(TimerCall *self)
{
    PyObject_GC_UnTrack(self);
    timer_call_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
timer_call_init(TimerCall *self, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"owner", "changes", "mark", "fallback", "max_timestamp", NULL};
    PyObject *owner, *changes, *mark, *fallback;
    long long max_timestamp;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO!O!OL:TimerCall", keywords, &owner, &PyDict_Type, &changes,
                                     &PyBool_Type, &mark, &fallback, &max_timestamp)) {
        return -1;
    }
    Py_XSETREF(self->owner, Py_NewRef(owner));
    Py_XSETREF(self->changes, Py_NewRef(changes));
    Py_XSETREF(self->mark, Py_NewRef(mark));
    Py_XSETREF(self->fallback, Py_NewRef(fallback));
    self->max_timestamp = max_timestamp;
    return 0;
}

static PyObject *
timer_call_call(TimerCall *self, PyObject *timestamp)
{
    if (PyLong_CheckExact(timestamp)) {
        int overflow;
        long long millis = PyLong_AsLongLongAndOverflow(timestamp, &overflow);
        if (millis == -1 && PyErr_Occurred()) {
            return NULL;
        }
        if (!overflow && millis >= 0 && millis <= self->max_timestamp) {
            PyObject *collecting = PyObject_GetAttr(self->owner, name_collecting);
            if (collecting == NULL) {
                return NULL;
            }
            int is_collecting = PyObject_IsTrue(collecting);
            Py_DECREF(collecting);
            if (is_collecting < 0) {
                return NULL;
            }
            if (is_collecting) {
                if (PyDict_SetItem(self->changes, timestamp, self->mark) < 0) {
                    return NULL;
                }
                Py_RETURN_NONE;
            }
        }
    }
    return PyObject_CallOneArg(self->fallback, timestamp);
}

static PyMethodDef timer_call_methods[] = {
    {"call", (PyCFunction)timer_call_call, METH_O, "Register or delete the current key's timer at a timestamp."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject TimerCallType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "keyedstate._fastpath.TimerCall",
    .tp_doc = "One collected timer call of CoalescingTimerService (see keyedstate.compiled).",
    .tp_basicsize = sizeof(TimerCall),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)timer_call_init,
    .tp_dealloc = (destructor)timer_call_dealloc,
    .tp_traverse = (traverseproc)timer_call_traverse,
    .tp_clear = (inquiry)timer_call_clear,
    .tp_methods = timer_call_methods,
};

/* ---- module ------------------------------------------------------------------------------------------------ */

static struct PyModuleDef fastpath_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "keyedstate._fastpath",
    .m_doc = "Compiled fast path of per-element state and timer calls (optional; see keyedstate.compiled).",
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit__fastpath(void)
{
    name_current_prefix = PyUnicode_InternFromString("_current_prefix");
    name_collecting = PyUnicode_InternFromString("collecting");
    if (name_current_prefix == NULL || name_collecting == NULL) {
        return NULL;
    }
    if (PyType_Ready(&HeapValueAccessType) < 0 || PyType_Ready(&TimerCallType) < 0) {
        return NULL;
    }
    PyObject *module = PyModule_Create(&fastpath_module);
    if (module == NULL) {
        return NULL;
    }
    if (PyModule_AddObjectRef(module, "HeapValueAccess", (PyObject *)&HeapValueAccessType) < 0 ||
        PyModule_AddObjectRef(module, "TimerCall", (PyObject *)&TimerCallType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
