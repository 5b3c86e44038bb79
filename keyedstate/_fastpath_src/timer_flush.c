#include "fastpath.h"

/* TimerService.flush for the common case: a partitioned queue of a handled type, not firing, whose queue of the
 * current key's key group keeps its timers as a set (`live`: a heap queue, or a column queue whose timers are not
 * written yet), and a current key. For every collected timestamp it builds the timer tuple and settles it with one
 * set lookup when the queue already agrees (a deletion of a timer that was never queued, a registration of one
 * already queued); the rest go to the partitioned queue's own add()/remove(). Anything else (another queue type, a
 * queue that is firing, a key group queue without the set, no current key) goes to the Python flush before anything
 * is applied. The collected calls are cleared either way, as the Python flush does. This is the set branch of
 * KeyGroupPartitionedTimerQueue.apply_changes (timers/partitioned.py) in C. */

typedef struct {
    PyObject_HEAD
    PyObject *context;          /* the backend's KeyContext: the current key's prefix and key group */
    PyObject *event_queue;      /* the service's two partitioned queues */
    PyObject *processing_queue;
    PyObject *event_changes;    /* dict timestamp -> bool of the current key's run, event time */
    PyObject *processing_changes;
    PyObject *namespace;        /* VOID_NAMESPACE */
    PyObject *queue_types;      /* tuple: the partitioned queue types handled here (exact types) */
    PyObject *fallback;         /* callable(): the Python flush */
    /* attribute names, declared on the Python side */
    PyObject *prefix_field;     /* context: the current key's prefix (bytes or None) */
    PyObject *key_group_field;  /* context: its key group (int) */
    PyObject *firing_field;     /* queue: the batch being fired, None while not firing */
    PyObject *queues_field;     /* queue: dict key group -> the key group's queue */
    PyObject *live_field;       /* a key group's queue: the set of its timers, or None when it keeps none */
    PyObject *add_field;        /* queue methods */
    PyObject *remove_field;
    /* for metrics: the collected registrations and deletions this object applied (one per timestamp and run; the
     * ones the fallback applies are counted by the Python flush) */
    Py_ssize_t registered;
    Py_ssize_t deleted;
} TimerFlush;

#define TIMER_FLUSH_OBJECTS(X) \
    X(context) X(event_queue) X(processing_queue) X(event_changes) X(processing_changes) X(namespace) \
    X(queue_types) X(fallback) X(prefix_field) X(key_group_field) X(firing_field) X(queues_field) X(live_field) \
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
                               "namespace", "queue_types", "fallback", "prefix_field", "key_group_field",
                               "firing_field", "queues_field", "live_field", "add_field", "remove_field", NULL};
    PyObject *context, *event_queue, *processing_queue, *event_changes, *processing_changes, *namespace, *queue_types,
        *fallback, *names[7];
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOO!O!O!O!OOOOOOOO:TimerFlush", keywords, &context, &event_queue,
                                     &processing_queue, &PyDict_Type, &event_changes, &PyDict_Type,
                                     &processing_changes, &PyBytes_Type, &namespace, &PyTuple_Type, &queue_types,
                                     &fallback, &names[0], &names[1], &names[2], &names[3], &names[4], &names[5],
                                     &names[6])) {
        return -1;
    }
    Py_ssize_t type_count = PyTuple_GET_SIZE(queue_types);
    if (type_count == 0) {
        PyErr_SetString(PyExc_TypeError, "TimerFlush: queue_types must name at least one queue type");
        return -1;
    }
    for (Py_ssize_t t = 0; t < type_count; t++) {
        if (!PyType_Check(PyTuple_GET_ITEM(queue_types, t))) {
            PyErr_SetString(PyExc_TypeError, "TimerFlush: queue_types must be a tuple of types");
            return -1;
        }
    }
    /* checked on the key context and on every handled queue type (slots and methods are class attributes); the
     * live set belongs to per-key-group queues that may not exist yet */
    int of_queue[7] = {0, 0, 1, 1, -1, 1, 1}; /* 0: the context's, 1: the queue types', -1: unchecked */
    for (int i = 0; i < 7; i++) {
        PyObject *name = attribute_name(names[i], of_queue[i] == 0 ? context : NULL, "TimerFlush");
        for (Py_ssize_t t = 0; name != NULL && of_queue[i] == 1 && t < type_count; t++) {
            PyObject *checked = attribute_name(name, PyTuple_GET_ITEM(queue_types, t), "TimerFlush");
            Py_DECREF(name);
            name = checked;
        }
        names[i] = name;
        if (name == NULL) {
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
    Py_XSETREF(self->queue_types, Py_NewRef(queue_types));
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

/* The key group's queue's `live` attribute (new reference: a set, or None when that queue keeps no set), or NULL
 * without an error when the key group has no queue. */
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

/* 1: the queue can be handled here (a handled exact type, not firing, the key group's queue keeping a set of its
 * timers or not there yet); 0: not; -1: error. */
static int
queue_handled(TimerFlush *self, PyObject *queue, PyObject *key_group)
{
    int handled_type = 0;
    for (Py_ssize_t t = 0; t < PyTuple_GET_SIZE(self->queue_types); t++) {
        handled_type |= (PyObject *)Py_TYPE(queue) == PyTuple_GET_ITEM(self->queue_types, t);
    }
    if (!handled_type) {
        return 0;
    }
    PyObject *batch = PyObject_GetAttr(queue, self->firing_field);
    if (batch == NULL) {
        return -1;
    }
    int idle = batch == Py_None;
    Py_DECREF(batch);
    if (!idle) {
        return 0;
    }
    PyObject *live = live_timers(self, queue, key_group);
    if (live == NULL) {
        return PyErr_Occurred() ? -1 : 1;
    }
    int is_set = PySet_Check(live);
    Py_DECREF(live);
    return is_set;
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
    /* set when add() created a key group queue that keeps no set of its timers (a column queue): every later call
     * goes to the queue, which settles duplicates and unknown timers itself */
    int direct = 0;
    Py_ssize_t position = 0;
    PyObject *timestamp, *registered;
    int result = 0;
    while (PyDict_Next(changes, &position, &timestamp, &registered)) {
        int is_registration = registered == Py_True;
        if (is_registration) {
            self->registered++;
        } else {
            self->deleted++;
        }
        if (!is_registration && live == NULL && !direct) {
            continue; /* deleting a timer of a key group without timers */
        }
        PyObject *timer = PyTuple_Pack(4, timestamp, prefix, self->namespace, key_group);
        if (timer == NULL) {
            result = -1;
            break;
        }
        int present = live != NULL ? PySet_Contains(live, timer) : direct && !is_registration;
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
        if (live == NULL && !direct) { /* add() created the key group's queue */
            live = live_timers(self, queue, key_group);
            if (live == NULL) {
                if (!PyErr_Occurred()) {
                    PyErr_SetString(PyExc_RuntimeError, "TimerFlush: add() left the key group without a queue");
                }
                result = -1;
                break;
            }
            if (live == Py_None) {
                Py_CLEAR(live);
                direct = 1;
            } else if (!PySet_Check(live)) {
                PyErr_SetString(PyExc_TypeError, "TimerFlush: a key group's live timers must be a set or None");
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
        handled = queue_handled(self, self->event_queue, key_group);
    }
    if (handled > 0 && has_processing) {
        handled = queue_handled(self, self->processing_queue, key_group);
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

static PyMemberDef timer_flush_members[] = {
    {"registered", T_PYSSIZET, offsetof(TimerFlush, registered), READONLY,
     "Registrations applied so far (one per timestamp a run registered)."},
    {"deleted", T_PYSSIZET, offsetof(TimerFlush, deleted), READONLY,
     "Deletions applied so far (one per timestamp a run deleted)."},
    {NULL, 0, 0, 0, NULL},
};

static PyMethodDef timer_flush_methods[] = {
    {"call", (PyCFunction)timer_flush_call, METH_NOARGS, "Apply the collected timer calls of the current key."},
    {NULL, NULL, 0, NULL},
};

PyTypeObject TimerFlushType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "keyedstate._fastpath.TimerFlush",
    .tp_doc = "TimerService.flush over queues that keep their timers as sets (see keyedstate.fastpath).",
    .tp_basicsize = sizeof(TimerFlush),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)timer_flush_init,
    .tp_dealloc = (destructor)timer_flush_dealloc,
    .tp_traverse = (traverseproc)timer_flush_traverse,
    .tp_clear = (inquiry)timer_flush_clear,
    .tp_methods = timer_flush_methods,
    .tp_members = timer_flush_members,
};
