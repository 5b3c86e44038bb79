/* The module keyedstate._fastpath: the registration of the types and functions, and attribute_name, which their
 * constructors share (see fastpath.h). */
#include "fastpath.h"

/* An interned attribute name (new reference) from a constructor argument; with `owner` given, it must have it. */
PyObject *
attribute_name(PyObject *name, PyObject *owner, const char *type_name)
{
    if (!PyUnicode_CheckExact(name)) {
        PyErr_Format(PyExc_TypeError, "%s: attribute names must be str", type_name);
        return NULL;
    }
    Py_INCREF(name);
    PyUnicode_InternInPlace(&name);
    if (owner != NULL) {
        PyObject *value = PyObject_GetAttr(owner, name);
        if (value == NULL) {
            if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
                PyErr_Clear();
                PyErr_Format(PyExc_AttributeError, "%s: %R has no attribute %R (renamed without updating its "
                             "declaration?)", type_name, Py_TYPE(owner), name);
            }
            Py_DECREF(name);
            return NULL;
        }
        Py_DECREF(value);
    }
    return name;
}

/* ---- module ------------------------------------------------------------------------------------------------ */

static PyMethodDef module_methods[] = {
    {"rows_from_columns", (PyCFunction)(void (*)(void))rows_from_columns, METH_FASTCALL,
     "rows_from_columns(row_type, columns) -> [row_type(values at i) for each position i of the columns]"},
    {"encode_timer_records", (PyCFunction)(void (*)(void))encode_timer_records, METH_FASTCALL,
     "encode_timer_records(timers, version, fallback) -> [(key, value) raw-column record of each timer]"},
    {"encode_changelog_contents", (PyCFunction)(void (*)(void))encode_changelog_contents, METH_FASTCALL,
     "encode_changelog_contents(families, version, put, fallback) -> msgpack bytes of a database's content as puts"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef fastpath_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "keyedstate._fastpath",
    .m_doc = "Compiled fast path of per-element state and timer calls (optional; see keyedstate.fastpath).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC
PyInit__fastpath(void)
{
    if (PyType_Ready(&HeapValueAccessType) < 0 || PyType_Ready(&CollectingFlagType) < 0 ||
        PyType_Ready(&TimerCallType) < 0 || PyType_Ready(&TimerFlushType) < 0) {
        return NULL;
    }
    PyObject *module = PyModule_Create(&fastpath_module);
    if (module == NULL) {
        return NULL;
    }
    if (PyModule_AddObjectRef(module, "HeapValueAccess", (PyObject *)&HeapValueAccessType) < 0 ||
        PyModule_AddObjectRef(module, "CollectingFlag", (PyObject *)&CollectingFlagType) < 0 ||
        PyModule_AddObjectRef(module, "TimerCall", (PyObject *)&TimerCallType) < 0 ||
        PyModule_AddObjectRef(module, "TimerFlush", (PyObject *)&TimerFlushType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
