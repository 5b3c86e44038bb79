/* The compiled fast path of the calls a KeyedProcessFunction makes once or twice per element.
 *
 * ValueState.value()/update() over a heap store and the timer calls of timers.TimerService (collected while a key's
 * elements run, passed straight to the internal timer service otherwise) are single dict operations or one call;
 * as Python methods, the call itself costs several times the work. These types do the common case in C and hand
 * everything else (no current key, a value that needs the type check, a timestamp that is not a plain int in
 * range) to the Python implementation they were built with, which stays the definition of the behaviour: see
 * keyedstate/fastpath.py.
 * TimerFlush applies a key's collected timer calls to the heap timer queues the same way, and rows_from_columns
 * builds the Spark group function's element Rows.
 *
 * No attribute name is written here: every object whose attributes are read is passed in at construction, together
 * with the names of the attributes to read, which the Python side takes from where they are declared (the key
 * context's fields, the queues' __slots__). A constructor checks that the object has the attribute, so a rename
 * fails at construction instead of silently taking the slow path.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <string.h>
#include <stddef.h>

/* An interned attribute name (new reference) from a constructor argument; with `owner` given, it must have it. */
static PyObject *
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

/* Objects made with __new__ alone (without __init__) have NULL fields: refuse them instead of crashing. */
static int
not_initialized(const void *field, const char *type_name)
{
    if (field != NULL) {
        return 0;
    }
    PyErr_Format(PyExc_RuntimeError, "%s was created without calling __init__", type_name);
    return 1;
}

/* ---- HeapValueAccess ------------------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *data;        /* the heap store's dict: stored key -> value */
    PyObject *backend;     /* the keyed state backend (a KeyContext) */
    PyObject *prefix_field; /* the name of its current key's prefix (bytes, or None without a current key) */
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
    Py_VISIT(self->prefix_field);
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
    Py_CLEAR(self->prefix_field);
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
    static char *keywords[] = {"data", "backend", "prefix_field", "namespace", "exact_types", "slow_value",
                               "slow_update", NULL};
    PyObject *data, *backend, *prefix_field, *namespace, *exact_types, *slow_value, *slow_update;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!OOO!OOO:HeapValueAccess", keywords, &PyDict_Type, &data,
                                     &backend, &prefix_field, &PyBytes_Type, &namespace, &exact_types, &slow_value,
                                     &slow_update)) {
        return -1;
    }
    prefix_field = attribute_name(prefix_field, backend, "HeapValueAccess");
    if (prefix_field == NULL) {
        return -1;
    }
    Py_XSETREF(self->prefix_field, prefix_field);
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
    if (not_initialized(self->data, "HeapValueAccess")) {
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
    if (not_initialized(self->data, "HeapValueAccess")) {
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
    .tp_doc = "value()/update() of one heap ValueState without TTL (see keyedstate.fastpath).",
    .tp_basicsize = sizeof(HeapValueAccess),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)access_init,
    .tp_dealloc = (destructor)access_dealloc,
    .tp_traverse = (traverseproc)access_traverse,
    .tp_clear = (inquiry)access_clear,
    .tp_methods = access_methods,
};

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

static PyTypeObject CollectingFlagType = {
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

static PyTypeObject TimerCallType = {
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

/* ---- TimerFlush ------------------------------------------------------------------------------------------- */

/* TimerService.flush for the common case: the heap timer queues, not firing, a current key. For every
 * collected timestamp it builds the timer tuple and settles it with one set lookup when the queue already agrees
 * (a deletion of a timer that was never queued, a registration of one already queued); the rest go to the queue's
 * own add()/remove(). Anything else (another queue type, a queue that is firing, no current key) goes to the
 * Python flush before anything is applied. The collected calls are cleared either way, as the Python flush does.
 * This is the heap branch of KeyGroupPartitionedTimerQueue.apply_changes (timers/partitioned.py) in C. */

typedef struct {
    PyObject_HEAD
    PyObject *context;          /* the backend's KeyContext: the current key's prefix and key group */
    PyObject *event_queue;      /* the service's two HeapPartitionedTimerQueues */
    PyObject *processing_queue;
    PyObject *event_changes;    /* dict timestamp -> bool of the current key's run, event time */
    PyObject *processing_changes;
    PyObject *namespace;        /* VOID_NAMESPACE */
    PyObject *queue_type;       /* HeapPartitionedTimerQueue: the only queue type handled here */
    PyObject *fallback;         /* callable(): the Python flush */
    /* attribute names, declared on the Python side */
    PyObject *prefix_field;     /* context: the current key's prefix (bytes or None) */
    PyObject *key_group_field;  /* context: its key group (int) */
    PyObject *firing_field;     /* queue: the batch being fired, None while not firing */
    PyObject *queues_field;     /* queue: dict key group -> HeapTimerQueue */
    PyObject *live_field;       /* HeapTimerQueue: the set of its timers */
    PyObject *add_field;        /* queue methods */
    PyObject *remove_field;
} TimerFlush;

#define TIMER_FLUSH_OBJECTS(X) \
    X(context) X(event_queue) X(processing_queue) X(event_changes) X(processing_changes) X(namespace) \
    X(queue_type) X(fallback) X(prefix_field) X(key_group_field) X(firing_field) X(queues_field) X(live_field) \
    X(add_field) X(remove_field)

static int
timer_flush_traverse(TimerFlush *self, visitproc visit, void *arg)
{
#define VISIT(field) Py_VISIT(self->field);
    TIMER_FLUSH_OBJECTS(VISIT)
#undef VISIT
    return 0;
}

static int
timer_flush_clear(TimerFlush *self)
{
#define CLEAR(field) Py_CLEAR(self->field);
    TIMER_FLUSH_OBJECTS(CLEAR)
#undef CLEAR
    return 0;
}

static void
timer_flush_dealloc(TimerFlush *self)
{
    PyObject_GC_UnTrack(self);
    timer_flush_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
timer_flush_init(TimerFlush *self, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"context", "event_queue", "processing_queue", "event_changes", "processing_changes",
                               "namespace", "queue_type", "fallback", "prefix_field", "key_group_field",
                               "firing_field", "queues_field", "live_field", "add_field", "remove_field", NULL};
    PyObject *context, *event_queue, *processing_queue, *event_changes, *processing_changes, *namespace, *queue_type,
        *fallback, *names[7];
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOO!O!O!O!OOOOOOOO:TimerFlush", keywords, &context, &event_queue,
                                     &processing_queue, &PyDict_Type, &event_changes, &PyDict_Type,
                                     &processing_changes, &PyBytes_Type, &namespace, &PyType_Type, &queue_type,
                                     &fallback, &names[0], &names[1], &names[2], &names[3], &names[4], &names[5],
                                     &names[6])) {
        return -1;
    }
    /* checked on the key context and on the handled queue type (slots and methods are class attributes); the live
     * set belongs to per-key-group queues that may not exist yet */
    PyObject *owners[7] = {context, context, queue_type, queue_type, NULL, queue_type, queue_type};
    for (int i = 0; i < 7; i++) {
        names[i] = attribute_name(names[i], owners[i], "TimerFlush");
        if (names[i] == NULL) {
            for (int j = 0; j < i; j++) {
                Py_DECREF(names[j]);
            }
            return -1;
        }
    }
    Py_XSETREF(self->context, Py_NewRef(context));
    Py_XSETREF(self->event_queue, Py_NewRef(event_queue));
    Py_XSETREF(self->processing_queue, Py_NewRef(processing_queue));
    Py_XSETREF(self->event_changes, Py_NewRef(event_changes));
    Py_XSETREF(self->processing_changes, Py_NewRef(processing_changes));
    Py_XSETREF(self->namespace, Py_NewRef(namespace));
    Py_XSETREF(self->queue_type, Py_NewRef(queue_type));
    Py_XSETREF(self->fallback, Py_NewRef(fallback));
    Py_XSETREF(self->prefix_field, names[0]);
    Py_XSETREF(self->key_group_field, names[1]);
    Py_XSETREF(self->firing_field, names[2]);
    Py_XSETREF(self->queues_field, names[3]);
    Py_XSETREF(self->live_field, names[4]);
    Py_XSETREF(self->add_field, names[5]);
    Py_XSETREF(self->remove_field, names[6]);
    return 0;
}

/* 1: the queue can be handled here (exact type, not firing); 0: not; -1: error. */
static int
queue_handled(TimerFlush *self, PyObject *queue)
{
    if ((PyObject *)Py_TYPE(queue) != self->queue_type) {
        return 0;
    }
    PyObject *batch = PyObject_GetAttr(queue, self->firing_field);
    if (batch == NULL) {
        return -1;
    }
    int idle = batch == Py_None;
    Py_DECREF(batch);
    return idle;
}

/* The live set of the key group's queue (new reference), or NULL without error when the key group has none. */
static PyObject *
live_timers(TimerFlush *self, PyObject *queue, PyObject *key_group)
{
    PyObject *queues = PyObject_GetAttr(queue, self->queues_field);
    if (queues == NULL) {
        return NULL;
    }
    PyObject *group_queue = PyDict_GetItemWithError(queues, key_group);
    PyObject *live = NULL;
    if (group_queue != NULL) {
        live = PyObject_GetAttr(group_queue, self->live_field);
    }
    Py_DECREF(queues);
    return live;
}

static int
apply_changes(TimerFlush *self, PyObject *queue, PyObject *changes, PyObject *prefix, PyObject *key_group)
{
    PyObject *live = live_timers(self, queue, key_group);
    if (live == NULL && PyErr_Occurred()) {
        return -1;
    }
    if (live != NULL && !PySet_Check(live)) {
        Py_DECREF(live);
        PyErr_SetString(PyExc_TypeError, "TimerFlush: a key group's live timers must be a set");
        return -1;
    }
    Py_ssize_t position = 0;
    PyObject *timestamp, *registered;
    int result = 0;
    while (PyDict_Next(changes, &position, &timestamp, &registered)) {
        int is_registration = registered == Py_True;
        if (!is_registration && live == NULL) {
            continue; /* deleting a timer of a key group without timers */
        }
        PyObject *timer = PyTuple_Pack(4, timestamp, prefix, self->namespace, key_group);
        if (timer == NULL) {
            result = -1;
            break;
        }
        int present = live == NULL ? 0 : PySet_Contains(live, timer);
        PyObject *outcome;
        if (present < 0) {
            outcome = NULL;
        } else if (is_registration && !present) {
            outcome = PyObject_CallMethodOneArg(queue, self->add_field, timer);
        } else if (!is_registration && present) {
            outcome = PyObject_CallMethodOneArg(queue, self->remove_field, timer);
        } else {
            outcome = Py_NewRef(Py_None); /* the queue already agrees */
        }
        Py_DECREF(timer);
        if (outcome == NULL) {
            result = -1;
            break;
        }
        Py_DECREF(outcome);
        if (live == NULL) { /* add() created the key group's queue */
            live = live_timers(self, queue, key_group);
            if (live == NULL) {
                if (!PyErr_Occurred()) {
                    PyErr_SetString(PyExc_RuntimeError, "TimerFlush: add() left the key group without a queue");
                }
                result = -1;
                break;
            }
        }
    }
    Py_XDECREF(live);
    return result;
}

static PyObject *
timer_flush_call(TimerFlush *self, PyObject *Py_UNUSED(ignored))
{
    if (not_initialized(self->context, "TimerFlush")) {
        return NULL;
    }
    int has_event = PyDict_GET_SIZE(self->event_changes) > 0;
    int has_processing = PyDict_GET_SIZE(self->processing_changes) > 0;
    if (!has_event && !has_processing) {
        Py_RETURN_NONE;
    }
    PyObject *prefix = NULL, *key_group = NULL;
    PyObject *result = NULL;
    int handled = 0;
    prefix = PyObject_GetAttr(self->context, self->prefix_field);
    if (prefix == NULL) goto done;
    key_group = PyObject_GetAttr(self->context, self->key_group_field);
    if (key_group == NULL) goto done;
    handled = PyBytes_CheckExact(prefix) && PyLong_CheckExact(key_group);
    if (handled && has_event) {
        handled = queue_handled(self, self->event_queue);
    }
    if (handled > 0 && has_processing) {
        handled = queue_handled(self, self->processing_queue);
    }
    if (handled < 0) goto done;
    if (!handled) {
        result = PyObject_CallNoArgs(self->fallback);
        goto done;
    }
    if (has_event && apply_changes(self, self->event_queue, self->event_changes, prefix, key_group) < 0) goto done;
    if (has_processing &&
        apply_changes(self, self->processing_queue, self->processing_changes, prefix, key_group) < 0)
        goto done;
    result = Py_NewRef(Py_None);
done:
    if (handled > 0 || result == NULL) {
        /* the Python flush clears in its own finally; here the calls are cleared whatever happened */
        PyDict_Clear(self->event_changes);
        PyDict_Clear(self->processing_changes);
    }
    Py_XDECREF(prefix);
    Py_XDECREF(key_group);
    return result;
}

static PyMethodDef timer_flush_methods[] = {
    {"call", (PyCFunction)timer_flush_call, METH_NOARGS, "Apply the collected timer calls of the current key."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject TimerFlushType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "keyedstate._fastpath.TimerFlush",
    .tp_doc = "TimerService.flush over heap timer queues (see keyedstate.fastpath).",
    .tp_basicsize = sizeof(TimerFlush),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)timer_flush_init,
    .tp_dealloc = (destructor)timer_flush_dealloc,
    .tp_traverse = (traverseproc)timer_flush_traverse,
    .tp_clear = (inquiry)timer_flush_clear,
    .tp_methods = timer_flush_methods,
};

/* ---- rows from columns ------------------------------------------------------------------------------------- */

/* rows_from_columns(row_type, columns): one row_type instance per position of the equally long lists ``columns``.
 * What ``list(map(partial(tuple.__new__, row_type), zip(*columns)))`` builds, with one allocation per row instead
 * of a zip tuple, a call and a copy. */
static PyObject *
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

static PyMethodDef module_methods[] = {
    {"rows_from_columns", (PyCFunction)(void (*)(void))rows_from_columns, METH_FASTCALL,
     "rows_from_columns(row_type, columns) -> [row_type(values at i) for each position i of the columns]"},
    {NULL, NULL, 0, NULL},
};

/* ---- module ------------------------------------------------------------------------------------------------ */

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
