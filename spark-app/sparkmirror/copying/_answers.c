/* A Produce answer read in C (protocol.parse_produce): every partition's (topic, partition, error code, base
offset, error message), versions 3-11. Part of the `_merge` module.

Why: a lane reads one Produce answer per request, and in Python (a Cursor's method call per field, a dataclass
per partition) that cost about as much as building the request did before _produce.c. Here each partition is a
struct sequence (a tuple with field names), a topic's name is decoded once for all its partitions, and tagged
fields are skipped unread.

Every read is bounds-checked: a short or malformed answer raises ValueError (protocol.py names it a
ProtocolError). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "_batchscan.h"

#define PRODUCE_FLEXIBLE 9

static PyStructSequence_Field produced_fields[] = {
    {"topic", NULL}, {"partition", NULL}, {"error_code", NULL}, {"base_offset", NULL}, {"error_message", NULL},
    {NULL, NULL}};
static PyStructSequence_Desc produced_desc = {
    "sparkmirror.copying._merge.Produced", "A partition's answer to a Produce request (protocol.Produced's fields).",
    produced_fields, 5};
static PyTypeObject *produced_type;

int answers_init(PyObject *module) {
    produced_type = PyStructSequence_NewType(&produced_desc);
    if (produced_type == NULL) return -1;
    Py_INCREF(produced_type);
    return PyModule_AddObject(module, "Produced", (PyObject *)produced_type) < 0 ? -1 : 0;
}

typedef struct {
    const uint8_t *p, *end;
    int flex;
} Reader;

static int short_answer(void) {
    PyErr_SetString(PyExc_ValueError, "a Produce answer runs past its end");
    return -1;
}

static int need(Reader *r, Py_ssize_t n) { return n < 0 || r->end - r->p < n ? short_answer() : 0; }

static int uvarint(Reader *r, uint64_t *out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (r->p >= r->end) return short_answer();
        uint8_t b = *r->p++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = v;
            return 0;
        }
    }
    PyErr_SetString(PyExc_ValueError, "a varint of a Produce answer runs over 64 bits");
    return -1;
}

/* An array's or string's length as the version frames it (-1: null). `fixed`: 2 or 4 bytes when not flexible. */
static int length(Reader *r, int fixed, Py_ssize_t *out) {
    if (r->flex) {
        uint64_t v;
        if (uvarint(r, &v) < 0) return -1;
        if (v > (uint64_t)PY_SSIZE_T_MAX) return short_answer();
        *out = (Py_ssize_t)v - 1;
        return 0;
    }
    if (need(r, fixed) < 0) return -1;
    *out = fixed == 2 ? be16(r->p) : be32(r->p);
    r->p += fixed;
    return 0;
}

static int tags(Reader *r) {
    if (!r->flex) return 0;
    uint64_t n, tag, size;
    if (uvarint(r, &n) < 0) return -1;
    for (uint64_t i = 0; i < n; i++) {
        if (uvarint(r, &tag) < 0 || uvarint(r, &size) < 0) return -1;
        if (size > (uint64_t)(r->end - r->p)) return short_answer();
        r->p += size;
    }
    return 0;
}

/* A nullable string: a new str, Py_None (new reference) for null; NULL with an error set. */
static PyObject *string(Reader *r) {
    Py_ssize_t n;
    if (length(r, 2, &n) < 0) return NULL;
    if (n < 0) Py_RETURN_NONE;
    if (need(r, n) < 0) return NULL;
    PyObject *s = PyUnicode_DecodeUTF8((const char *)r->p, n, "strict");
    r->p += n;
    return s;
}

/* The batch-level errors and the message (v8+) as one message, as protocol.parse_produce_by_python joins them:
"<message> (batch i: <msg>; ...)". Py_None when there are none. */
static PyObject *message(Reader *r) {
    Py_ssize_t n;
    if (length(r, 4, &n) < 0) return NULL;
    PyObject *errors = PyList_New(0), *msg = NULL, *out = NULL;
    if (errors == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (need(r, 4) < 0) goto done;
        int32_t index = be32(r->p);
        r->p += 4;
        PyObject *text = string(r);
        if (text == NULL) goto done;
        PyObject *line = PyUnicode_FromFormat("batch %d: %S", (int)index, text);
        Py_DECREF(text);
        if (line == NULL) goto done;
        int appended = PyList_Append(errors, line);
        Py_DECREF(line);
        if (appended < 0 || tags(r) < 0) goto done;
    }
    if ((msg = string(r)) == NULL) goto done;
    if (PyList_GET_SIZE(errors) == 0) {
        out = msg;
        msg = NULL;
        goto done;
    }
    PyObject *sep = PyUnicode_FromString("; ");
    PyObject *joined = sep == NULL ? NULL : PyUnicode_Join(sep, errors);
    Py_XDECREF(sep);
    if (joined == NULL) goto done;
    out = msg == Py_None ? PyUnicode_FromFormat(" (%U)", joined) : PyUnicode_FromFormat("%U (%U)", msg, joined);
    Py_DECREF(joined);
done:
    Py_DECREF(errors);
    Py_XDECREF(msg);
    return out;
}

/* parse_produce(body, version) -> [Produced(topic, partition, error_code, base_offset, error_message), ...] */
PyObject *answers_parse_produce(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2) return PyErr_Format(PyExc_TypeError, "parse_produce takes 2 arguments");
    long version = PyLong_AsLong(args[1]);
    if (version == -1 && PyErr_Occurred()) return NULL;
    Py_buffer v;
    if (PyObject_GetBuffer(args[0], &v, PyBUF_SIMPLE) < 0) return NULL;
    Reader r = {v.buf, (const uint8_t *)v.buf + v.len, version >= PRODUCE_FLEXIBLE};
    Py_ssize_t fixed = version >= 5 ? 30 : 22; /* index, error, base offset, append time, log start offset */
    PyObject *out = PyList_New(0), *topic = NULL;
    Py_ssize_t topics, parts;
    if (out == NULL || length(&r, 4, &topics) < 0) goto fail;
    for (Py_ssize_t t = 0; t < topics; t++) {
        Py_CLEAR(topic);
        if ((topic = string(&r)) == NULL) goto fail;
        if (topic == Py_None) {
            Py_DECREF(topic);
            topic = PyUnicode_FromStringAndSize("", 0);
            if (topic == NULL) goto fail;
        }
        if (length(&r, 4, &parts) < 0) goto fail;
        for (Py_ssize_t i = 0; i < parts; i++) {
            if (need(&r, fixed) < 0) goto fail;
            int32_t index = be32(r.p);
            int16_t error = be16(r.p + 4);
            int64_t base = be64(r.p + 6);
            r.p += fixed;
            PyObject *msg;
            if (r.flex && r.end - r.p >= 3 && r.p[0] == 1 && r.p[1] == 0 && r.p[2] == 0) {
                r.p += 3; /* no record errors, no message, no tags: the common answer */
                msg = Py_NewRef(Py_None);
            } else {
                if (version >= 8) {
                    if ((msg = message(&r)) == NULL) goto fail;
                } else {
                    msg = Py_NewRef(Py_None);
                }
                if (tags(&r) < 0) {
                    Py_DECREF(msg);
                    goto fail;
                }
            }
            PyObject *row = PyStructSequence_New(produced_type);
            if (row == NULL) {
                Py_DECREF(msg);
                goto fail;
            }
            PyStructSequence_SET_ITEM(row, 0, Py_NewRef(topic));
            PyStructSequence_SET_ITEM(row, 4, msg);
            PyObject *fields[3] = {PyLong_FromLong(index), PyLong_FromLong(error), PyLong_FromLongLong(base)};
            for (int k = 0; k < 3; k++) PyStructSequence_SET_ITEM(row, k + 1, fields[k]);
            if (fields[0] == NULL || fields[1] == NULL || fields[2] == NULL) {
                Py_DECREF(row);
                goto fail;
            }
            int appended = PyList_Append(out, row);
            Py_DECREF(row);
            if (appended < 0) goto fail;
        }
        if (tags(&r) < 0) goto fail;
    }
    Py_XDECREF(topic);
    PyBuffer_Release(&v);
    return out;
fail:
    Py_XDECREF(topic);
    Py_XDECREF(out);
    PyBuffer_Release(&v);
    return NULL;
}
