#include "fastpath.h"

#define KEY_GROUP_BYTES 2
#define TIMESTAMP_BYTES 8
#define RECORD_VALUE_BYTES 5

/* encode_timer_records(timers, version, fallback): the raw-column (key, value) record of every timer, what
 * timers.codec.encode_records returns. A timer is a tuple (timestamp, prefix, namespace, ...); one whose timestamp
 * is not a plain int of 64 bits, whose prefix or namespace is not bytes, or whose prefix is shorter than its key
 * group is encoded by fallback(timer) (the Python encode_record, which raises the errors). Records of keys of the
 * same length share their value. */
PyObject *
encode_timer_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "encode_timer_records(timers, version, fallback) takes three arguments");
        return NULL;
    }
    long version = PyLong_AsLong(args[1]);
    if (version == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (version < 0 || version > 255) {
        PyErr_SetString(PyExc_ValueError, "encode_timer_records: version must fit in one byte");
        return NULL;
    }
    PyObject *fallback = args[2];
    PyObject *iterator = PyObject_GetIter(args[0]);
    if (iterator == NULL) {
        return NULL;
    }
    PyObject *records = PyList_New(0);
    PyObject *shared_value = NULL; /* the value of the last key length, reused while it stays the same */
    Py_ssize_t shared_length = -1;
    PyObject *timer;
    if (records == NULL) {
        goto fail;
    }
    while ((timer = PyIter_Next(iterator)) != NULL) {
        PyObject *record = NULL;
        PyObject *timestamp, *prefix, *namespace;
        long long millis = 0;
        int usable = PyTuple_Check(timer) && PyTuple_GET_SIZE(timer) >= 3;
        if (usable) {
            timestamp = PyTuple_GET_ITEM(timer, 0);
            prefix = PyTuple_GET_ITEM(timer, 1);
            namespace = PyTuple_GET_ITEM(timer, 2);
            usable = PyLong_CheckExact(timestamp) && PyBytes_CheckExact(prefix) && PyBytes_CheckExact(namespace) &&
                     PyBytes_GET_SIZE(prefix) >= KEY_GROUP_BYTES &&
                     PyBytes_GET_SIZE(prefix) - KEY_GROUP_BYTES <= 0xffffffffLL;
        }
        if (usable) {
            int overflow;
            millis = PyLong_AsLongLongAndOverflow(timestamp, &overflow);
            if (millis == -1 && PyErr_Occurred()) {
                Py_DECREF(timer);
                goto fail;
            }
            usable = !overflow;
        }
        if (!usable) {
            record = PyObject_CallOneArg(fallback, timer);
            Py_DECREF(timer);
            if (record == NULL || PyList_Append(records, record) < 0) {
                Py_XDECREF(record);
                goto fail;
            }
            Py_DECREF(record);
            continue;
        }
        Py_ssize_t prefix_size = PyBytes_GET_SIZE(prefix), namespace_size = PyBytes_GET_SIZE(namespace);
        Py_ssize_t key_length = prefix_size - KEY_GROUP_BYTES;
        PyObject *key = PyBytes_FromStringAndSize(NULL, prefix_size + TIMESTAMP_BYTES + namespace_size);
        if (key == NULL) {
            Py_DECREF(timer);
            goto fail;
        }
        unsigned char *out = (unsigned char *)PyBytes_AS_STRING(key);
        const char *prefix_bytes = PyBytes_AS_STRING(prefix);
        /* the sign-flipped long, big-endian: byte order is numeric order (timestamp + 2**63 for every long) */
        unsigned long long flipped = (unsigned long long)millis ^ (1ULL << 63);
        memcpy(out, prefix_bytes, KEY_GROUP_BYTES);
        for (int i = 0; i < TIMESTAMP_BYTES; i++) {
            out[KEY_GROUP_BYTES + i] = (unsigned char)(flipped >> (8 * (TIMESTAMP_BYTES - 1 - i)));
        }
        memcpy(out + KEY_GROUP_BYTES + TIMESTAMP_BYTES, prefix_bytes + KEY_GROUP_BYTES, (size_t)key_length);
        memcpy(out + prefix_size + TIMESTAMP_BYTES, PyBytes_AS_STRING(namespace), (size_t)namespace_size);
        Py_DECREF(timer);
        if (key_length != shared_length) {
            unsigned char value[RECORD_VALUE_BYTES] = {
                (unsigned char)version, (unsigned char)(key_length >> 24), (unsigned char)(key_length >> 16),
                (unsigned char)(key_length >> 8), (unsigned char)key_length};
            PyObject *made = PyBytes_FromStringAndSize((const char *)value, RECORD_VALUE_BYTES);
            if (made == NULL) {
                Py_DECREF(key);
                goto fail;
            }
            Py_XSETREF(shared_value, made);
            shared_length = key_length;
        }
        record = PyTuple_New(2);
        if (record == NULL) {
            Py_DECREF(key);
            goto fail;
        }
        PyTuple_SET_ITEM(record, 0, key);
        PyTuple_SET_ITEM(record, 1, Py_NewRef(shared_value));
        if (PyList_Append(records, record) < 0) {
            Py_DECREF(record);
            goto fail;
        }
        Py_DECREF(record);
    }
    if (PyErr_Occurred()) {
        goto fail;
    }
    Py_DECREF(iterator);
    Py_XDECREF(shared_value);
    return records;
fail:
    Py_DECREF(iterator);
    Py_XDECREF(records);
    Py_XDECREF(shared_value);
    return NULL;
}
