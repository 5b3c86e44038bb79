#include "fastpath.h"

/* encode_changelog_contents(families, version, put, fallback): the msgpack bytes (use_bin_type) of
 * [version, [name of each family with keys], [put, index of its name, key, value, ...]], what
 * keyedstate.state.rocksdb.changelog's ChangeLog._encode_contents returns for families [(name, keys, values), ...].
 * Anything else than a list of triples of a str name and lists or tuples of bytes of the same length, or a length
 * msgpack cannot hold, hands the whole list to fallback(families) (the Python encoder, which raises the errors). */

/* What the second pass writes, held as tuples (copies of lists): nothing that runs between the passes (an
 * allocation may run a finalizer) can change their sizes or drop the name. */
typedef struct {
    PyObject *keys;   /* a tuple of the family's keys */
    PyObject *values; /* and of its values */
    PyObject *name_object;
    const char *name; /* its UTF-8, owned by name_object */
    Py_ssize_t name_size;
} Family;

static Py_ssize_t
uint_size(size_t n)
{
    return n < 128 ? 1 : n <= 0xff ? 2 : n <= 0xffff ? 3 : n <= 0xffffffffULL ? 5 : 9;
}

static Py_ssize_t
array_header_size(size_t n)
{
    return n < 16 ? 1 : n <= 0xffff ? 3 : 5;
}

static Py_ssize_t
str_header_size(size_t n)
{
    return n < 32 ? 1 : n <= 0xff ? 2 : n <= 0xffff ? 3 : 5;
}

static Py_ssize_t
bin_header_size(size_t n)
{
    return n <= 0xff ? 2 : n <= 0xffff ? 3 : 5;
}

static unsigned char *
put_big_endian(unsigned char *out, unsigned long long value, int bytes)
{
    for (int i = bytes - 1; i >= 0; i--) {
        out[i] = (unsigned char)(value & 0xff);
        value >>= 8;
    }
    return out + bytes;
}

static unsigned char *
put_uint(unsigned char *out, size_t n)
{
    if (n < 128) {
        *out = (unsigned char)n;
        return out + 1;
    }
    if (n <= 0xff) {
        *out = 0xcc;
        return put_big_endian(out + 1, n, 1);
    }
    if (n <= 0xffff) {
        *out = 0xcd;
        return put_big_endian(out + 1, n, 2);
    }
    if (n <= 0xffffffffULL) {
        *out = 0xce;
        return put_big_endian(out + 1, n, 4);
    }
    *out = 0xcf;
    return put_big_endian(out + 1, n, 8);
}

static unsigned char *
put_array_header(unsigned char *out, size_t n)
{
    if (n < 16) {
        *out = (unsigned char)(0x90 | n);
        return out + 1;
    }
    if (n <= 0xffff) {
        *out = 0xdc;
        return put_big_endian(out + 1, n, 2);
    }
    *out = 0xdd;
    return put_big_endian(out + 1, n, 4);
}

static unsigned char *
put_str(unsigned char *out, const char *data, size_t n)
{
    if (n < 32) {
        *out++ = (unsigned char)(0xa0 | n);
    } else if (n <= 0xff) {
        *out = 0xd9;
        out = put_big_endian(out + 1, n, 1);
    } else if (n <= 0xffff) {
        *out = 0xda;
        out = put_big_endian(out + 1, n, 2);
    } else {
        *out = 0xdb;
        out = put_big_endian(out + 1, n, 4);
    }
    memcpy(out, data, n);
    return out + n;
}

static unsigned char *
put_bin(unsigned char *out, PyObject *bytes)
{
    size_t n = (size_t)PyBytes_GET_SIZE(bytes);
    if (n <= 0xff) {
        *out = 0xc4;
        out = put_big_endian(out + 1, n, 1);
    } else if (n <= 0xffff) {
        *out = 0xc5;
        out = put_big_endian(out + 1, n, 2);
    } else {
        *out = 0xc6;
        out = put_big_endian(out + 1, n, 4);
    }
    memcpy(out, PyBytes_AS_STRING(bytes), n);
    return out + n;
}

/* The encoded size of a sequence's bytes with their headers, or -1 when an item is not bytes or too long. */
static Py_ssize_t
bins_size(PyObject *fast)
{
    Py_ssize_t size = 0, count = PySequence_Fast_GET_SIZE(fast);
    PyObject **items = PySequence_Fast_ITEMS(fast);
    for (Py_ssize_t i = 0; i < count; i++) {
        if (!PyBytes_CheckExact(items[i]) || (size_t)PyBytes_GET_SIZE(items[i]) > 0xffffffffULL) {
            return -1;
        }
        size += bin_header_size((size_t)PyBytes_GET_SIZE(items[i])) + PyBytes_GET_SIZE(items[i]);
    }
    return size;
}

static void
release(Family *families, Py_ssize_t count)
{
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_XDECREF(families[i].keys);
        Py_XDECREF(families[i].values);
        Py_XDECREF(families[i].name_object);
    }
    PyMem_Free(families);
}

PyObject *
encode_changelog_contents(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError,
                        "encode_changelog_contents(families, version, put, fallback) takes four arguments");
        return NULL;
    }
    long version = PyLong_AsLong(args[1]), put = PyLong_AsLong(args[2]);
    if ((version == -1 || put == -1) && PyErr_Occurred()) {
        return NULL;
    }
    if (version < 0 || version > 127 || put < 0 || put > 127) {
        PyErr_SetString(PyExc_ValueError, "encode_changelog_contents: version and put must be below 128");
        return NULL;
    }
    PyObject *given = args[0], *fallback = args[3];
    if (!PyList_CheckExact(given)) {
        return PyObject_CallOneArg(fallback, given);
    }
    PyObject *snapshot = PyList_AsTuple(given); /* holds every family while the tuples below are made */
    if (snapshot == NULL) {
        return NULL;
    }
    Py_ssize_t family_count = PyTuple_GET_SIZE(snapshot);
    Family *families = PyMem_Calloc(family_count ? (size_t)family_count : 1, sizeof(Family));
    if (families == NULL) {
        Py_DECREF(snapshot);
        return PyErr_NoMemory();
    }
    Py_ssize_t used = 0, names = 0, entries = 0;
    Py_ssize_t size = 1 + 1; /* the outer array of three, the version */
    Py_ssize_t names_size = 0, flat_size = 0;
    for (Py_ssize_t i = 0; i < family_count; i++) {
        PyObject *family = PyTuple_GET_ITEM(snapshot, i);
        if (!PyTuple_CheckExact(family) || PyTuple_GET_SIZE(family) != 3 ||
            !PyUnicode_CheckExact(PyTuple_GET_ITEM(family, 0))) {
            goto use_fallback;
        }
        PyObject *keys = PyTuple_GET_ITEM(family, 1), *values = PyTuple_GET_ITEM(family, 2);
        if (!(PyList_CheckExact(keys) || PyTuple_CheckExact(keys)) ||
            !(PyList_CheckExact(values) || PyTuple_CheckExact(values))) {
            goto use_fallback; /* the Python encoder takes their length: other iterables are its to refuse */
        }
        Family *slot = &families[used++];
        slot->name_object = Py_NewRef(PyTuple_GET_ITEM(family, 0));
        slot->keys = PySequence_Tuple(keys);
        slot->values = slot->keys == NULL ? NULL : PySequence_Tuple(values);
        if (slot->values == NULL) {
            release(families, used);
            Py_DECREF(snapshot);
            return NULL;
        }
        Py_ssize_t count = PySequence_Fast_GET_SIZE(slot->keys);
        if (count != PySequence_Fast_GET_SIZE(slot->values)) {
            goto use_fallback;
        }
        if (count == 0) {
            continue; /* a family without keys is not named */
        }
        slot->name = PyUnicode_AsUTF8AndSize(slot->name_object, &slot->name_size);
        if (slot->name == NULL) {
            PyErr_Clear();
            goto use_fallback;
        }
        Py_ssize_t keys_size = bins_size(slot->keys), values_size = bins_size(slot->values);
        if (keys_size < 0 || values_size < 0 || (size_t)slot->name_size > 0xffffffffULL) {
            goto use_fallback;
        }
        names_size += str_header_size((size_t)slot->name_size) + slot->name_size;
        flat_size += keys_size + values_size + count * (1 + uint_size((size_t)names));
        entries += count;
        names++;
    }
    if ((size_t)entries * 4 > 0xffffffffULL) {
        goto use_fallback;
    }
    size += array_header_size((size_t)names) + names_size + array_header_size((size_t)entries * 4) + flat_size;
    Py_DECREF(snapshot);
    PyObject *encoded = PyBytes_FromStringAndSize(NULL, size);
    if (encoded == NULL) {
        release(families, used);
        return NULL;
    }
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(encoded);
    *out++ = 0x93;
    *out++ = (unsigned char)version;
    out = put_array_header(out, (size_t)names);
    for (Py_ssize_t i = 0; i < used; i++) {
        if (PySequence_Fast_GET_SIZE(families[i].keys) > 0) {
            out = put_str(out, families[i].name, (size_t)families[i].name_size);
        }
    }
    out = put_array_header(out, (size_t)entries * 4);
    Py_ssize_t index = 0;
    for (Py_ssize_t i = 0; i < used; i++) {
        Py_ssize_t count = PySequence_Fast_GET_SIZE(families[i].keys);
        if (count == 0) {
            continue;
        }
        PyObject **keys = PySequence_Fast_ITEMS(families[i].keys);
        PyObject **values = PySequence_Fast_ITEMS(families[i].values);
        for (Py_ssize_t j = 0; j < count; j++) {
            *out++ = (unsigned char)put;
            out = put_uint(out, (size_t)index);
            out = put_bin(out, keys[j]);
            out = put_bin(out, values[j]);
        }
        index++;
    }
    release(families, used);
    return encoded;
use_fallback:
    release(families, used);
    Py_DECREF(snapshot);
    return PyObject_CallOneArg(fallback, given);
}
