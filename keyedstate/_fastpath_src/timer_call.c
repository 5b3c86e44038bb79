#include "fastpath.h"

/* ---- CollectingFlag --------------------------------------------------------------------------------------- */

/* One TimerService's `collecting` flag, shared by its four TimerCalls: the service sets it once per run of elements
 * (one store), and every call reads it through a pointer (no attribute lookup per call). */
typedef struct {
    PyObject_HEAD
    char on;
} CollectingFlag;

static PyMemberDef collecting_flag_members[] = {
    {"on", T_BOOL, offsetof(CollectingFlag, on), 0, "Collect the timer calls (True) or make them (False)."},
    {NULL, 0, 0, 0, NULL},
};

PyTypeObject CollectingFlagType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "keyedstate._fastpath.CollectingFlag",
    .tp_doc = "The collecting flag a TimerService shares with its TimerCalls (see keyedstate.fastpath).",
    .tp_basicsize = sizeof(CollectingFlag),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_members = collecting_flag_members,
};

/* ---- TimerCall --------------------------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    CollectingFlag *collecting; /* the TimerService's flag: collect, or call `direct` */
    PyObject *changes;  /* dict timestamp -> True (registered) / False (deleted) of the current key's run */
    PyObject *mark;     /* what this call stores: True or False */
    PyObject *direct;   /* callable(namespace, timestamp): the internal service's method, when not collecting */
    PyObject *namespace;
    PyObject *fallback; /* callable(timestamp): the Python method */
    long long max_timestamp;
} TimerCall;

static int
timer_call_traverse(TimerCall *self, visitproc visit, void *arg)
{
    Py_VISIT(self->collecting);
    Py_VISIT(self->changes);
    Py_VISIT(self->mark);
    Py_VISIT(self->direct);
    Py_VISIT(self->namespace);
    Py_VISIT(self->fallback);
    return 0;
}

static int
timer_call_clear(TimerCall *self)
{
    Py_CLEAR(self->collecting);
    Py_CLEAR(self->changes);
    Py_CLEAR(self->mark);
    Py_CLEAR(self->direct);
    Py_CLEAR(self->namespace);
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
    static char *keywords[] = {"collecting", "changes", "mark", "direct", "namespace", "fallback", "max_timestamp",
                               NULL};
    PyObject *collecting, *changes, *mark, *direct, *namespace, *fallback;
    long long max_timestamp;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!O!O!OOOL:TimerCall", keywords, &CollectingFlagType,
                                     &collecting, &PyDict_Type, &changes, &PyBool_Type, &mark, &direct, &namespace,
                                     &fallback, &max_timestamp)) {
        return -1;
    }
    if (!PyCallable_Check(direct) || !PyCallable_Check(fallback)) {
        PyErr_SetString(PyExc_TypeError, "TimerCall: direct and fallback must be callable");
        return -1;
    }
    Py_XSETREF(self->collecting, (CollectingFlag *)Py_NewRef(collecting));
    Py_XSETREF(self->changes, Py_NewRef(changes));
    Py_XSETREF(self->mark, Py_NewRef(mark));
    Py_XSETREF(self->direct, Py_NewRef(direct));
    Py_XSETREF(self->namespace, Py_NewRef(namespace));
    Py_XSETREF(self->fallback, Py_NewRef(fallback));
    self->max_timestamp = max_timestamp;
    return 0;
}

static PyObject *
timer_call_call(TimerCall *self, PyObject *timestamp)
{
    if (not_initialized(self->changes, "TimerCall")) {
        return NULL;
    }
    if (PyLong_CheckExact(timestamp)) {
        int overflow;
        long long millis = PyLong_AsLongLongAndOverflow(timestamp, &overflow);
        if (millis == -1 && PyErr_Occurred()) {
            return NULL;
        }
        if (!overflow && millis >= 0 && millis <= self->max_timestamp) {
            if (self->collecting->on) {
                if (PyDict_SetItem(self->changes, timestamp, self->mark) < 0) {
                    return NULL;
                }
                Py_RETURN_NONE;
            }
            /* outside a key run (on_timer): what the Python method does, without its frame; the free slot in
             * front lets a bound method put its self there instead of copying the arguments */
            PyObject *call_args[3] = {NULL, self->namespace, timestamp};
            return PyObject_Vectorcall(self->direct, call_args + 1, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        }
    }
    return PyObject_CallOneArg(self->fallback, timestamp);
}

static PyMethodDef timer_call_methods[] = {
    {"call", (PyCFunction)timer_call_call, METH_O, "Register or delete the current key's timer at a timestamp."},
    {NULL, NULL, 0, NULL},
};

/* Read-only: the flag is set through its owner (TimerService.collecting), never through one of its calls. */
static PyMemberDef timer_call_members[] = {
    {"collecting", T_OBJECT_EX, offsetof(TimerCall, collecting), READONLY, "The shared CollectingFlag."},
    {NULL, 0, 0, 0, NULL},
};

PyTypeObject TimerCallType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "keyedstate._fastpath.TimerCall",
    .tp_doc = "One register or delete call of timers.TimerService (see keyedstate.fastpath).",
    .tp_basicsize = sizeof(TimerCall),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)timer_call_init,
    .tp_dealloc = (destructor)timer_call_dealloc,
    .tp_traverse = (traverseproc)timer_call_traverse,
    .tp_clear = (inquiry)timer_call_clear,
    .tp_methods = timer_call_methods,
    .tp_members = timer_call_members,
};
