/* A partition's run of batches forwarded as they are, taken whole in C (forwarding.py): whether every batch goes
as it is, the producer sequences they take, and what they add to the interval's share. Part of the `_merge`
module.

Why: on a compressed topic each source batch goes alone, and the lane's Python spent a dozen steps a batch
deciding so (coalesce.runs, batchtarget._as_it_is), numbering it (batchwriter.produce) and adding it to its share
(batchtarget.write): more than the C scan and the C Produce request together. Here each is one call a partition.

Every figure is read from the batch's own bytes (`raw`, the header as fetched; scan made its fields from them),
never past them: a batch too short for a v2 header is one that does not go as it is, and `tally` takes only
whole v2 batches. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "_batchscan.h"

#define MAGIC_AT 16
#define ATTRIBUTES_AT 21
#define LAST_DELTA_AT 23
#define BASE_TS_AT 27
#define MAX_TS_AT 35
#define COUNT_AT 57
#define COMPRESSION_MASK 0x07
#define LOG_APPEND_TIME 0x08

static PyObject *raw_name, *count_name;

/* A 128-bit sum as a Python int: a partition's records times their millisecond timestamps passes 2**63 at about
5 million records. */
static PyObject *long_from_128(__int128 v) {
    PyObject *hi = PyLong_FromLongLong((long long)(v >> 64)), *lo = PyLong_FromUnsignedLongLong((uint64_t)v);
    PyObject *shift = PyLong_FromLong(64), *up = NULL, *out = NULL;
    if (hi != NULL && lo != NULL && shift != NULL && (up = PyNumber_Lshift(hi, shift)) != NULL)
        out = PyNumber_Or(up, lo);
    Py_XDECREF(hi);
    Py_XDECREF(lo);
    Py_XDECREF(shift);
    Py_XDECREF(up);
    return out;
}

/* The header of `batch.raw` into `h` (61 bytes) and the batch's length. `whole`: -1 with an error when it is not
one whole v2 batch; otherwise a batch too short for a v2 header (an old-format message) reads as magic 0. */
static Py_ssize_t header(PyObject *batch, uint8_t *h, int whole) {
    PyObject *raw = PyObject_GetAttr(batch, raw_name);
    if (raw == NULL) return -1;
    Py_buffer v;
    int taken = PyObject_GetBuffer(raw, &v, PyBUF_SIMPLE);
    Py_DECREF(raw);
    if (taken < 0) return -1;
    Py_ssize_t n = v.len;
    if (whole && batchscan_check_whole(v.buf, n) < 0) {
        PyBuffer_Release(&v);
        return -1;
    }
    memset(h, 0, 61);
    memcpy(h, v.buf, (size_t)(n < 61 ? n : 61));
    PyBuffer_Release(&v);
    return n;
}

static int names(void) {
    if (raw_name == NULL && (raw_name = PyUnicode_InternFromString("raw")) == NULL) return -1;
    if (count_name == NULL && (count_name = PyUnicode_InternFromString("record_count")) == NULL) return -1;
    return 0;
}

/* first_not_as_is(batches, merge_below) -> int: the index of the first batch that cannot go to the target as it
is (magic below 2, LogAppendTime, offset gaps) or, with merge_below > 0, would be merged with its neighbours
(uncompressed and shorter than merge_below bytes); -1 when every one goes as it is. */
PyObject *forwarding_first_not_as_is(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2) return PyErr_Format(PyExc_TypeError, "first_not_as_is takes batches and merge_below");
    Py_ssize_t below = PyLong_AsSsize_t(args[1]);
    if ((below == -1 && PyErr_Occurred()) || names() < 0) return NULL;
    PyObject *seq = PySequence_Fast(args[0], "batches");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq), found = -1;
    uint8_t h[61];
    for (Py_ssize_t i = 0; i < n && found < 0; i++) {
        Py_ssize_t len = header(PySequence_Fast_GET_ITEM(seq, i), h, 0);
        if (len < 0) {
            Py_DECREF(seq);
            return NULL;
        }
        int attributes = be16(h + ATTRIBUTES_AT);
        if (len < 61 || (int8_t)h[MAGIC_AT] < 2 || (attributes & LOG_APPEND_TIME) ||
            (int64_t)be32(h + LAST_DELTA_AT) + 1 != (int64_t)be32(h + COUNT_AT) ||
            (below > 0 && !(attributes & COMPRESSION_MASK) && len < below))
            found = i;
    }
    Py_DECREF(seq);
    return PyLong_FromSsize_t(found);
}

/* sequences(batches, first) -> (list, next): each batch's base sequence, from `first` on, each the last plus the
record count before it, wrapping at 2**31 as the broker does. */
PyObject *forwarding_sequences(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2) return PyErr_Format(PyExc_TypeError, "sequences takes batches and first");
    long long s = PyLong_AsLongLong(args[1]);
    if ((s == -1 && PyErr_Occurred()) || names() < 0) return NULL;
    PyObject *seq = PySequence_Fast(args[0], "batches");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject *out = PyList_New(n);
    if (out == NULL) goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PyLong_FromLongLong(s);
        if (v == NULL) goto fail;
        PyList_SET_ITEM(out, i, v);
        PyObject *c = PyObject_GetAttr(PySequence_Fast_GET_ITEM(seq, i), count_name);
        if (c == NULL) goto fail;
        long long count = PyLong_AsLongLong(c);
        Py_DECREF(c);
        if (count == -1 && PyErr_Occurred()) goto fail;
        s = (s + count) & 0x7FFFFFFF;
    }
    Py_DECREF(seq);
    return Py_BuildValue("(NL)", out, s);
fail:
    Py_XDECREF(out);
    Py_DECREF(seq);
    return NULL;
}

/* tally(batches, written, timestamps, ts_min) -> (records, bytes, ts_sum, ts_min, target_first, target_last):
what the batches (each acknowledged, `written[i]` the target base offset it got) add to their share; each record's timestamp
(its batch's max, as the record path's latency counts it) is appended to the list `timestamps`. `ts_min` is
carried through each batch's first timestamp as the share does it. */
PyObject *forwarding_tally(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 4) return PyErr_Format(PyExc_TypeError, "tally takes batches, written, timestamps, ts_min");
    if (!PyList_Check(args[2])) return PyErr_Format(PyExc_TypeError, "timestamps is a list");
    long long ts_min = PyLong_AsLongLong(args[3]);
    if ((ts_min == -1 && PyErr_Occurred()) || names() < 0) return NULL;
    PyObject *seq = PySequence_Fast(args[0], "batches"), *done = NULL, *ts = NULL;
    if (seq == NULL) return NULL;
    if ((done = PySequence_Fast(args[1], "written")) == NULL) goto fail;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (PySequence_Fast_GET_SIZE(done) != n) {
        PyErr_SetString(PyExc_ValueError, "batches and written differ in length");
        goto fail;
    }
    long long records = 0, bytes = 0, first = -1, last = -1;
    __int128 ts_sum = 0;
    PyObject *list = args[2];
    uint8_t h[61];
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t len = header(PySequence_Fast_GET_ITEM(seq, i), h, 1);
        if (len < 0) goto fail;
        long long count = be32(h + COUNT_AT), max_ts = be64(h + MAX_TS_AT), base_ts = be64(h + BASE_TS_AT);
        records += count;
        bytes += len;
        ts_sum += (__int128)count * max_ts;
        if (ts_min < 0 || base_ts < ts_min) ts_min = base_ts;
        if (count > 0) {
            if ((ts = PyLong_FromLongLong(max_ts)) == NULL) goto fail;
            for (long long k = 0; k < count; k++)
                if (PyList_Append(list, ts) < 0) goto fail;
            Py_CLEAR(ts);
        }
        long long b = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(done, i));
        if (b == -1 && PyErr_Occurred()) goto fail;
        if (first < 0) first = b;
        last = b + count - 1;
    }
    Py_DECREF(seq);
    Py_DECREF(done);
    return Py_BuildValue("(LLNLLL)", records, bytes, long_from_128(ts_sum), ts_min, first, last);
fail:
    Py_XDECREF(ts);
    Py_XDECREF(done);
    Py_DECREF(seq);
    return NULL;
}
