/* keyedstate._fastpath, the compiled fast path of the calls a KeyedProcessFunction makes once or twice per element.
 *
 * ValueState.value()/update() over a heap store and the timer calls of timers.TimerService (collected while a key's
 * elements run, passed straight to the internal timer service otherwise) are single dict operations or one call;
 * as Python methods, the call itself costs several times the work. These types do the common case in C and hand
 * everything else (no current key, a value that needs the type check, a timestamp that is not a plain int in
 * range) to the Python implementation they were built with, which stays the definition of the behaviour: see
 * keyedstate/fastpath.py.
 * TimerFlush applies a key's collected timer calls to the heap timer queues the same way, rows_from_columns
 * builds the Spark group function's element Rows, encode_timer_records a batch of timers' raw-column records, and
 * encode_changelog_contents the stored changelog of a new RocksDB database's whole content.
 *
 * No attribute name is written here: every object whose attributes are read is passed in at construction, together
 * with the names of the attributes to read, which the Python side takes from where they are declared (the key
 * context's fields, the queues' __slots__). A constructor checks that the object has the attribute, so a rename
 * fails at construction instead of silently taking the slow path.
 *
 * One extension module built from the files of this folder (setup.py compiles every *.c here): one file per type,
 * rows_from_columns, encode_timer_records, encode_changelog_contents, and module.c, which registers them. This header is what they share.
 */
#ifndef KEYEDSTATE_FASTPATH_H
#define KEYEDSTATE_FASTPATH_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <string.h>
#include <stddef.h>

/* Shared between the files of this module only: kept out of the extension's exported symbols (only
 * PyInit__fastpath is), so they cannot clash with another library's. */
#if defined(__GNUC__) && !defined(_WIN32)
#define FASTPATH_INTERNAL __attribute__((visibility("hidden")))
#else
#define FASTPATH_INTERNAL
#endif

/* module.c */
FASTPATH_INTERNAL PyObject *attribute_name(PyObject *name, PyObject *owner, const char *type_name);

/* Objects made with __new__ alone (without __init__) have NULL fields: refuse them instead of crashing. Checked on
 * every call, so defined here to be inlined in each file. */
static inline int
not_initialized(const void *field, const char *type_name)
{
    if (field != NULL) {
        return 0;
    }
    PyErr_Format(PyExc_RuntimeError, "%s was created without calling __init__", type_name);
    return 1;
}

/* rows_from_columns.c */
FASTPATH_INTERNAL PyObject *rows_from_columns(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
/* timer_records.c */
FASTPATH_INTERNAL PyObject *encode_timer_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
/* changelog_contents.c */
FASTPATH_INTERNAL PyObject *encode_changelog_contents(PyObject *module, PyObject *const *args, Py_ssize_t nargs);

/* one file each */
FASTPATH_INTERNAL extern PyTypeObject HeapValueAccessType;
FASTPATH_INTERNAL extern PyTypeObject CollectingFlagType; /* timer_call.c, with the TimerCalls that read it */
FASTPATH_INTERNAL extern PyTypeObject TimerCallType;
FASTPATH_INTERNAL extern PyTypeObject TimerFlushType;

#endif
