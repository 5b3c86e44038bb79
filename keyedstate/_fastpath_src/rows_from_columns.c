#include "fastpath.h"

/* rows_from_columns(row_type, columns): one row_type instance per position of the equally long lists ``columns``.
 * What ``list(map(partial(tuple.__new__, row_type), zip(*columns)))`` builds, with one allocation per row instead
 * of a zip tuple, a call and a copy. */
PyObject *
rows_from_columns(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "rows_from_columns(row_type, columns) takes two arguments");
        return NULL;
    }
    PyObject *type_object = args[0];
    if (!PyType_Check(type_object) || !PyType_IsSubtype((PyTypeObject *)type_object, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "rows_from_columns: row_type must be a tuple subclass");
        return NULL;
    }
    PyTypeObject *row_type = (PyTypeObject *)type_object;
    PyObject *columns = PySequence_Fast(args[1], "rows_from_columns: columns must be a sequence of lists");
    if (columns == NULL) {
        return NULL;
    }
    Py_ssize_t width = PySequence_Fast_GET_SIZE(columns);
    PyObject **column_items = PySequence_Fast_ITEMS(columns);
    Py_ssize_t count = -1;
    for (Py_ssize_t c = 0; c < width; c++) {
        if (!PyList_CheckExact(column_items[c])) {
            PyErr_SetString(PyExc_TypeError, "rows_from_columns: every column must be a list");
            Py_DECREF(columns);
            return NULL;
        }
        Py_ssize_t length = PyList_GET_SIZE(column_items[c]);
        if (count >= 0 && length != count) {
            PyErr_SetString(PyExc_ValueError, "rows_from_columns: the columns differ in length");
            Py_DECREF(columns);
            return NULL;
        }
        count = length;
    }
    if (count < 0) {
        count = 0;
    }
    PyObject *rows = PyList_New(count);
    if (rows == NULL) {
        Py_DECREF(columns);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *row = row_type->tp_alloc(row_type, width);
        if (row == NULL) {
            Py_DECREF(rows);
            Py_DECREF(columns);
            return NULL;
        }
#if PY_VERSION_HEX >= 0x030E0000
        ((PyTupleObject *)row)->ob_hash = -1; /* tuples cache their hash from 3.14: -1 = not computed yet */
#endif
        PyList_SET_ITEM(rows, i, row);
        for (Py_ssize_t c = 0; c < width; c++) {
            /* allocation can run a garbage collection, and a finalizer could shrink a list (the caller holds
             * the outer sequence, and the Spark group function runs with the collector off) */
            if (i >= PyList_GET_SIZE(column_items[c])) {
                PyErr_SetString(PyExc_RuntimeError, "rows_from_columns: a column changed size");
                Py_DECREF(rows);
                Py_DECREF(columns);
                return NULL;
            }
            PyObject *value = PyList_GET_ITEM(column_items[c], i);
            Py_INCREF(value);
            PyTuple_SET_ITEM(row, c, value);
        }
    }
    Py_DECREF(columns);
    return rows;
}
