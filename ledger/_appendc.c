/* The ledger writer's append, in native code.
 *
 * Appender(pending=, event_types=, on_due=, flush_records=, flush_at_ns=, closed_error=, path=)
 *
 * `Appender.append(event, *, source, wall_ns=None, mono_ns=None) -> seq` does exactly what
 * its pure-Python twin `ledger._append.AppenderPy.append` does (that module holds the
 * definition; a property test pins the two together): check the event and times, add the
 * stored record `(seq, wall delta, mono delta, source, event)` to `pending`, call
 * `on_record` when set, and call `on_due()` once `pending` holds `flush_records` records
 * or the monotonic clock has reached `flush_at_ns`.
 *
 * Why native: a witness appends one event every microsecond or two, and in Python this
 * function's checks, clock read and bookkeeping cost about twice what building one plain
 * msgspec record does (benchmarks/ledger_bench.py). Here it is one C call. It runs under
 * the GIL, and from reading its state to updating it runs no Python code (not even a
 * garbage collection), so it is as atomic as the KI-protected Python twin.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdio.h>
#include <time.h>

typedef struct {
    PyObject_HEAD
    PyObject *pending;      /* list of stored records; NULL once closed */
    PyObject *event_types;  /* frozenset of the event classes */
    PyObject *on_due;       /* callable(): flush */
    PyObject *on_record;    /* None or callable(seq, wall_ns, mono_ns, source, event) */
    PyObject *closed_error; /* exception class raised by an append after close */
    PyObject *path;         /* str: the ledger, for that error's message */
    long long next_seq;
    long long last_wall;    /* ns; times are stored as deltas from the previous record */
    long long last_mono;
    long long flush_at_ns;  /* monotonic ns */
    Py_ssize_t flush_records;
} Appender;

static PyObject *kw_event, *kw_source, *kw_wall_ns, *kw_mono_ns; /* interned keyword names */

static int clock_ns(clockid_t clock, long long *out) {
    struct timespec ts;
    if (clock_gettime(clock, &ts) != 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    *out = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
    return 0;
}

/* Raise TypeError "<what>, got <type(value).__name__>", as the Python twin words it. */
static void type_error(const char *what, PyObject *value) {
    PyObject *name = PyType_GetName(Py_TYPE(value));
    if (name != NULL) {
        PyErr_Format(PyExc_TypeError, "%s, got %U", what, name);
        Py_DECREF(name);
    }
}

/* A timestamp argument as ns in 0 .. 2**63-1. */
static int timestamp(PyObject *value, const char *name, long long *out) {
    if (!PyLong_Check(value)) {
        char what[64];
        snprintf(what, sizeof what, "%s must be an int (ns)", name);
        type_error(what, value);
        return -1;
    }
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (v == -1 && PyErr_Occurred()) return -1;
    if (overflow || v < 0) {
        PyErr_Format(PyExc_ValueError, "%s must be in 0..2**63-1 ns, got %R", name, value);
        return -1;
    }
    *out = v;
    return 0;
}

static int kw_is(PyObject *name, PyObject *interned) {
    return name == interned || PyUnicode_Compare(name, interned) == 0;
}

/* Store one keyword argument; a second value for the same name is an error, as in Python. */
static int take(PyObject **slot, PyObject *value, const char *name) {
    if (*slot != NULL) {
        PyErr_Format(PyExc_TypeError, "append() got multiple values for argument '%s'", name);
        return -1;
    }
    *slot = value;
    return 0;
}

static void raise_closed(Appender *self) {
    if (self->event_types == NULL) /* never initialised, or cleared by the garbage collector */
        PyErr_SetString(PyExc_RuntimeError, "this Appender is not initialised");
    else
        PyErr_Format(self->closed_error, "%U: append after close", self->path);
}

static PyObject *Appender_append(Appender *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    PyObject *event = NULL, *source = NULL, *wall = NULL, *mono = NULL;
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    if (nargs > 1) {
        PyErr_Format(PyExc_TypeError, "append() takes 1 positional argument (event) but %zd were given", nargs);
        return NULL;
    }
    if (nargs == 1) event = args[0];
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, i), *value = args[nargs + i];
        int failed;
        if (kw_is(name, kw_source)) failed = take(&source, value, "source");
        else if (kw_is(name, kw_wall_ns)) failed = take(&wall, value, "wall_ns");
        else if (kw_is(name, kw_mono_ns)) failed = take(&mono, value, "mono_ns");
        else if (kw_is(name, kw_event)) failed = take(&event, value, "event");
        else {
            PyErr_Format(PyExc_TypeError, "append() got an unexpected keyword argument '%U'", name);
            return NULL;
        }
        if (failed) return NULL;
    }
    if (event == NULL || source == NULL) {
        PyErr_Format(PyExc_TypeError, "append() missing required argument: '%s'", event == NULL ? "event" : "source");
        return NULL;
    }
    if (self->pending == NULL) {
        raise_closed(self);
        return NULL;
    }
    int known = PySet_Contains(self->event_types, (PyObject *)Py_TYPE(event));
    if (known < 0) return NULL;
    if (!known) {
        type_error("not a ledger event", event);
        return NULL;
    }
    if (!PyUnicode_Check(source)) {
        type_error("source must be a str", source);
        return NULL;
    }
    long long now, wall_ns, mono_ns;
    if (clock_ns(CLOCK_MONOTONIC, &now) < 0) return NULL; /* the flush clock, as time.monotonic_ns() */
    if (wall == NULL || wall == Py_None) {
        if (clock_ns(CLOCK_REALTIME, &wall_ns) < 0) return NULL; /* as time.time_ns() */
    } else if (timestamp(wall, "wall_ns", &wall_ns) < 0) {
        return NULL;
    }
    if (mono == NULL || mono == Py_None) mono_ns = now;
    else if (timestamp(mono, "mono_ns", &mono_ns) < 0) return NULL;

    /* Allocate the record first: allocating a tuple may run the garbage collector, and so
     * finalisers that could append or close. From reading the state to updating it,
     * nothing below allocates a tracked object or runs Python code. */
    PyObject *record = PyTuple_New(5);
    if (record == NULL) return NULL;
    if (self->pending == NULL) {
        Py_DECREF(record);
        raise_closed(self);
        return NULL;
    }
    long long seq = self->next_seq;
    PyObject *seq_obj = PyLong_FromLongLong(seq);
    PyObject *wall_delta = PyLong_FromLongLong(wall_ns - self->last_wall); /* both in 0..2**63-1: no overflow */
    PyObject *mono_delta = PyLong_FromLongLong(mono_ns - self->last_mono);
    if (seq_obj == NULL || wall_delta == NULL || mono_delta == NULL) {
        Py_XDECREF(seq_obj);
        Py_XDECREF(wall_delta);
        Py_XDECREF(mono_delta);
        Py_DECREF(record);
        return NULL;
    }
    Py_INCREF(seq_obj); /* one reference for the tuple, one returned */
    PyTuple_SET_ITEM(record, 0, seq_obj);
    PyTuple_SET_ITEM(record, 1, wall_delta);
    PyTuple_SET_ITEM(record, 2, mono_delta);
    PyTuple_SET_ITEM(record, 3, Py_NewRef(source));
    PyTuple_SET_ITEM(record, 4, Py_NewRef(event));
    int failed = PyList_Append(self->pending, record); /* may grow the list: no collection */
    Py_DECREF(record);
    if (failed) {
        Py_DECREF(seq_obj);
        return NULL;
    }
    self->last_wall = wall_ns;
    self->last_mono = mono_ns;
    self->next_seq = seq + 1;

    /* The record is appended: from here an exception propagates as the twin's does. */
    if (self->on_record != NULL && self->on_record != Py_None) {
        PyObject *wall_obj = PyLong_FromLongLong(wall_ns), *mono_obj = PyLong_FromLongLong(mono_ns);
        PyObject *result = NULL;
        if (wall_obj != NULL && mono_obj != NULL) {
            PyObject *call_args[5] = {seq_obj, wall_obj, mono_obj, source, event};
            PyObject *callback = Py_NewRef(self->on_record);
            result = PyObject_Vectorcall(callback, call_args, 5, NULL);
            Py_DECREF(callback);
        }
        Py_XDECREF(wall_obj);
        Py_XDECREF(mono_obj);
        if (result == NULL) {
            Py_DECREF(seq_obj);
            return NULL;
        }
        Py_DECREF(result);
    }
    /* a callback may have closed the writer */
    if (self->pending != NULL && self->on_due != NULL
        && (PyList_GET_SIZE(self->pending) >= self->flush_records || now >= self->flush_at_ns)) {
        PyObject *callback = Py_NewRef(self->on_due);
        PyObject *result = PyObject_CallNoArgs(callback);
        Py_DECREF(callback);
        if (result == NULL) {
            Py_DECREF(seq_obj);
            return NULL;
        }
        Py_DECREF(result);
    }
    return seq_obj;
}

static PyObject *Appender_close(Appender *self, PyObject *Py_UNUSED(ignored)) {
    Py_CLEAR(self->pending);
    Py_RETURN_NONE;
}

static int Appender_init(Appender *self, PyObject *args, PyObject *kwds) {
    static char *names[] = {"pending", "event_types", "on_due", "flush_records", "flush_at_ns",
                            "closed_error", "path", NULL};
    PyObject *pending, *event_types, *on_due, *closed_error, *path;
    Py_ssize_t flush_records;
    long long flush_at_ns;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "$O!O!OnLOU:Appender", names, &PyList_Type, &pending,
                                     &PyFrozenSet_Type, &event_types, &on_due, &flush_records, &flush_at_ns,
                                     &closed_error, &path))
        return -1;
    if (!PyCallable_Check(on_due)) {
        PyErr_SetString(PyExc_TypeError, "on_due must be callable");
        return -1;
    }
    if (!PyExceptionClass_Check(closed_error)) {
        PyErr_SetString(PyExc_TypeError, "closed_error must be an exception class");
        return -1;
    }
    if (self->event_types != NULL) { /* a second init would restart the seqs on the same records */
        PyErr_SetString(PyExc_RuntimeError, "an Appender is initialised once");
        return -1;
    }
    Py_XSETREF(self->pending, Py_NewRef(pending));
    Py_XSETREF(self->event_types, Py_NewRef(event_types));
    Py_XSETREF(self->on_due, Py_NewRef(on_due));
    Py_XSETREF(self->on_record, Py_NewRef(Py_None));
    Py_XSETREF(self->closed_error, Py_NewRef(closed_error));
    Py_XSETREF(self->path, Py_NewRef(path));
    self->flush_records = flush_records;
    self->flush_at_ns = flush_at_ns;
    self->next_seq = self->last_wall = self->last_mono = 0;
    return 0;
}

static int Appender_traverse(Appender *self, visitproc visit, void *arg) {
    Py_VISIT(self->pending);
    Py_VISIT(self->event_types);
    Py_VISIT(self->on_due);
    Py_VISIT(self->on_record);
    Py_VISIT(self->closed_error);
    Py_VISIT(self->path);
    return 0;
}

static int Appender_clear(Appender *self) {
    Py_CLEAR(self->pending);
    Py_CLEAR(self->event_types);
    Py_CLEAR(self->on_due);
    Py_CLEAR(self->on_record);
    Py_CLEAR(self->closed_error);
    Py_CLEAR(self->path);
    return 0;
}

static void Appender_dealloc(Appender *self) {
    PyObject_GC_UnTrack(self);
    Appender_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Appender_get_next_seq(Appender *self, void *Py_UNUSED(closure)) {
    return PyLong_FromLongLong(self->next_seq);
}

static PyObject *Appender_get_flush_at_ns(Appender *self, void *Py_UNUSED(closure)) {
    return PyLong_FromLongLong(self->flush_at_ns);
}

static int Appender_set_flush_at_ns(Appender *self, PyObject *value, void *Py_UNUSED(closure)) {
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "flush_at_ns cannot be deleted");
        return -1;
    }
    long long v = PyLong_AsLongLong(value);
    if (v == -1 && PyErr_Occurred()) return -1;
    self->flush_at_ns = v;
    return 0;
}

static PyObject *Appender_get_on_record(Appender *self, void *Py_UNUSED(closure)) {
    return Py_NewRef(self->on_record != NULL ? self->on_record : Py_None);
}

static PyObject *Appender_get_flush_records(Appender *self, void *Py_UNUSED(closure)) {
    return PyLong_FromSsize_t(self->flush_records);
}

static int Appender_set_flush_records(Appender *self, PyObject *value, void *Py_UNUSED(closure)) {
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "flush_records cannot be deleted");
        return -1;
    }
    Py_ssize_t v = PyLong_AsSsize_t(value);
    if (v == -1 && PyErr_Occurred()) return -1;
    self->flush_records = v;
    return 0;
}

static int Appender_set_on_record(Appender *self, PyObject *value, void *Py_UNUSED(closure)) {
    if (value == NULL || (value != Py_None && !PyCallable_Check(value))) {
        PyErr_SetString(PyExc_TypeError, "on_record must be None or callable");
        return -1;
    }
    Py_XSETREF(self->on_record, Py_NewRef(value));
    return 0;
}

static PyObject *Appender_get_closed(Appender *self, void *Py_UNUSED(closure)) {
    return PyBool_FromLong(self->pending == NULL);
}

static PyGetSetDef Appender_getset[] = {
    {"next_seq", (getter)Appender_get_next_seq, NULL, "the sequence number the next record gets", NULL},
    {"flush_at_ns", (getter)Appender_get_flush_at_ns, (setter)Appender_set_flush_at_ns,
     "monotonic ns at or after which an append calls on_due", NULL},
    {"flush_records", (getter)Appender_get_flush_records, (setter)Appender_set_flush_records,
     "pending records at which an append calls on_due", NULL},
    {"on_record", (getter)Appender_get_on_record, (setter)Appender_set_on_record,
     "None, or callable(seq, wall_ns, mono_ns, source, event) after each append", NULL},
    {"closed", (getter)Appender_get_closed, NULL, "True after close()", NULL},
    {NULL},
};

static PyMethodDef Appender_methods[] = {
    {"append", (PyCFunction)(void (*)(void))Appender_append, METH_FASTCALL | METH_KEYWORDS,
     "append(event, *, source, wall_ns=None, mono_ns=None) -> seq (see ledger._append.AppenderPy.append)"},
    {"close", (PyCFunction)Appender_close, METH_NOARGS, "close(): later appends raise closed_error"},
    {NULL},
};

static PyTypeObject AppenderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ledger._appendc.Appender",
    .tp_doc = "The ledger writer's append state and hot path (see ledger._append.AppenderPy).",
    .tp_basicsize = sizeof(Appender),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Appender_init,
    .tp_dealloc = (destructor)Appender_dealloc,
    .tp_traverse = (traverseproc)Appender_traverse,
    .tp_clear = (inquiry)Appender_clear,
    .tp_methods = Appender_methods,
    .tp_getset = Appender_getset,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "ledger._appendc", NULL, -1, NULL, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__appendc(void) {
    if (PyType_Ready(&AppenderType) < 0) return NULL;
    kw_event = PyUnicode_InternFromString("event");
    kw_source = PyUnicode_InternFromString("source");
    kw_wall_ns = PyUnicode_InternFromString("wall_ns");
    kw_mono_ns = PyUnicode_InternFromString("mono_ns");
    if (kw_event == NULL || kw_source == NULL || kw_wall_ns == NULL || kw_mono_ns == NULL) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddObjectRef(m, "Appender", (PyObject *)&AppenderType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
