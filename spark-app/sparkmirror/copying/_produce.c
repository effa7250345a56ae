/* A whole Produce request in C (protocol.produce_request): its header and per-topic, per-partition framing, and
each partition's one batch rewritten into it as _batchscan.c's rewrite_into does. Part of the `_merge` module.

Why: once the rewrite was in C, framing a request in Python (ProduceBuilder: a Counter of topics, a
string_field, array_len, pack and bytes_len per partition, a bytearray grown once a partition) cost about as
much as everything else the copy thread does per batch. Here the request's size is worked out first, the
bytearray allocated once and every field written in place. Python still picks the partitions, batches and
sequences (batchwriter._send_round); this only encodes them. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_batchscan.h"

#define API_PRODUCE 0
#define PRODUCE_FLEXIBLE 9

static Py_ssize_t uvarint_size(uint64_t n) {
    Py_ssize_t s = 1;
    while (n >= 0x80) {
        n >>= 7;
        s++;
    }
    return s;
}

static uint8_t *put_uvarint(uint8_t *o, uint64_t n) {
    while (n >= 0x80) {
        *o++ = (uint8_t)(n | 0x80);
        n >>= 7;
    }
    *o++ = (uint8_t)n;
    return o;
}

static uint8_t *put(uint8_t *o, uint64_t v, int bytes) {
    for (int i = bytes - 1; i >= 0; i--) *o++ = (uint8_t)(v >> (8 * i));
    return o;
}

/* A length the way the request's version frames it: compact (uvarint of n + 1) or a fixed int16/int32. */
static Py_ssize_t len_size(Py_ssize_t n, int flex, int fixed) { return flex ? uvarint_size((uint64_t)n + 1) : fixed; }

static uint8_t *put_len(uint8_t *o, Py_ssize_t n, int flex, int fixed) {
    return flex ? put_uvarint(o, (uint64_t)n + 1) : put(o, (uint64_t)n, fixed);
}

typedef struct {
    const char *topic;
    Py_ssize_t topic_len, index;
    long long seq;
    Py_buffer raw;
} Part;

static PyObject *raw_name;

/* produce_request(version, correlation_id, client_id, transactional_id, acks, timeout_ms, keys, batches,
producer_id, producer_epoch, sequences, transactional) -> bytearray: size included, ready to send; each batch's
bytes are its `raw`. */
PyObject *produce_request(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 12) return PyErr_Format(PyExc_TypeError, "produce_request takes 12 arguments");
    if (raw_name == NULL && (raw_name = PyUnicode_InternFromString("raw")) == NULL) return NULL;
    long version = PyLong_AsLong(args[0]), correlation = PyLong_AsLong(args[1]);
    long acks = PyLong_AsLong(args[4]), timeout = PyLong_AsLong(args[5]);
    long long pid = PyLong_AsLongLong(args[8]);
    long epoch = PyLong_AsLong(args[9]);
    int transactional = PyObject_IsTrue(args[11]);
    if (PyErr_Occurred() || transactional < 0) return NULL;
    if (version < 0 || version > INT16_MAX || acks < INT16_MIN || acks > INT16_MAX || epoch < INT16_MIN ||
        epoch > INT16_MAX || correlation < INT32_MIN || correlation > INT32_MAX || timeout < INT32_MIN ||
        timeout > INT32_MAX)
        return PyErr_Format(PyExc_OverflowError, "a request field out of range");
    int flex = version >= PRODUCE_FLEXIBLE;
    Py_ssize_t cid_len, tid_len = -1;
    const char *cid = PyUnicode_AsUTF8AndSize(args[2], &cid_len), *tid = NULL;
    if (cid == NULL) return NULL;
    if (args[3] != Py_None && (tid = PyUnicode_AsUTF8AndSize(args[3], &tid_len)) == NULL) return NULL;
    if (cid_len > INT16_MAX || tid_len > INT16_MAX) return PyErr_Format(PyExc_ValueError, "an id too long");
    PyObject *keys = PySequence_Fast(args[6], "keys"), *raws = NULL, *seqs = NULL, *out = NULL;
    Part *parts = NULL;
    Py_ssize_t n = 0, got = 0;
    if (keys == NULL) goto done;
    if ((raws = PySequence_Fast(args[7], "batches")) == NULL || (seqs = PySequence_Fast(args[10], "sequences")) == NULL)
        goto done;
    n = PySequence_Fast_GET_SIZE(keys);
    if (PySequence_Fast_GET_SIZE(raws) != n || PySequence_Fast_GET_SIZE(seqs) != n) {
        PyErr_SetString(PyExc_ValueError, "keys, batches and sequences differ in length");
        goto done;
    }
    if ((parts = PyMem_Calloc(n > 0 ? (size_t)n : 1, sizeof(Part))) == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    /* sizes first: the header, then each topic's name and count, each partition's index, length and batch */
    Py_ssize_t size = 4 + 2 + 2 + 4 + 2 + cid_len + flex;
    size += tid == NULL ? (flex ? 1 : 2) : len_size(tid_len, flex, 2) + tid_len;
    size += 2 + 4 + 5 + flex; /* acks, timeout, the topics' count (4 bytes, or a uvarint of at most 5), tags */
    Py_ssize_t topics = 0;
    for (; got < n; got++) {
        Part *p = &parts[got];
        PyObject *key = PySequence_Fast_GET_ITEM(keys, got);
        PyObject *topic = PyTuple_Check(key) && PyTuple_GET_SIZE(key) == 2 ? PyTuple_GET_ITEM(key, 0) : NULL;
        if (topic == NULL || (p->topic = PyUnicode_AsUTF8AndSize(topic, &p->topic_len)) == NULL) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "a key is (topic, partition)");
            goto done;
        }
        p->index = PyLong_AsSsize_t(PyTuple_GET_ITEM(key, 1));
        p->seq = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seqs, got));
        if (PyErr_Occurred()) goto done;
        if (p->index < INT32_MIN || p->index > INT32_MAX || p->seq < INT32_MIN || p->seq > INT32_MAX) {
            PyErr_SetString(PyExc_OverflowError, "a partition or sequence out of range");
            goto done;
        }
        PyObject *raw = PyObject_GetAttr(PySequence_Fast_GET_ITEM(raws, got), raw_name);
        if (raw == NULL) goto done;
        int taken = PyObject_GetBuffer(raw, &p->raw, PyBUF_SIMPLE);
        Py_DECREF(raw); /* the buffer holds its exporter */
        if (taken < 0) goto done;
        if (batchscan_check_whole(p->raw.buf, p->raw.len) < 0) {
            got++;
            goto done;
        }
        int same = got > 0 && p->topic_len == parts[got - 1].topic_len &&
                   memcmp(p->topic, parts[got - 1].topic, (size_t)p->topic_len) == 0;
        if (!same) {
            for (Py_ssize_t j = 0; j < got; j++)
                if (parts[j].topic_len == p->topic_len && memcmp(parts[j].topic, p->topic, (size_t)p->topic_len) == 0) {
                    PyErr_Format(PyExc_ValueError, "topic %s: its partitions are not together", p->topic);
                    got++;
                    goto done;
                }
            topics++;
            size += len_size(p->topic_len, flex, 2) + p->topic_len + 5 + flex; /* name, count (<= 5), tags */
        }
        size += 4 + len_size(p->raw.len, flex, 4) + p->raw.len + flex;
    }
    out = PyByteArray_FromStringAndSize(NULL, size);
    if (out == NULL) goto done;
    uint8_t *start = (uint8_t *)PyByteArray_AS_STRING(out), *o = start + 4;
    o = put(o, API_PRODUCE, 2);
    o = put(o, (uint64_t)version, 2);
    o = put(o, (uint64_t)correlation, 4);
    o = put(o, (uint64_t)cid_len, 2);
    memcpy(o, cid, (size_t)cid_len);
    o += cid_len;
    if (flex) *o++ = 0;
    if (tid == NULL) {
        o = flex ? put(o, 0, 1) : put(o, 0xffff, 2);
    } else {
        o = put_len(o, tid_len, flex, 2);
        memcpy(o, tid, (size_t)tid_len);
        o += tid_len;
    }
    o = put(o, (uint64_t)acks, 2);
    o = put(o, (uint64_t)timeout, 4);
    o = put_len(o, topics, flex, 4);
    for (Py_ssize_t i = 0; i < n;) {
        Py_ssize_t run = i + 1;
        while (run < n && parts[run].topic_len == parts[i].topic_len &&
               memcmp(parts[run].topic, parts[i].topic, (size_t)parts[i].topic_len) == 0)
            run++;
        o = put_len(o, parts[i].topic_len, flex, 2);
        memcpy(o, parts[i].topic, (size_t)parts[i].topic_len);
        o += parts[i].topic_len;
        o = put_len(o, run - i, flex, 4);
        for (; i < run; i++) {
            Part *p = &parts[i];
            o = put(o, (uint64_t)p->index, 4);
            o = put_len(o, p->raw.len, flex, 4);
            memcpy(o, p->raw.buf, (size_t)p->raw.len);
            batchscan_rewrite_at(o, p->raw.len, pid, (int16_t)epoch, (int32_t)p->seq, transactional);
            o += p->raw.len;
            if (flex) *o++ = 0; /* the partition's tagged fields */
        }
        if (flex) *o++ = 0; /* the topic's */
    }
    if (flex) *o++ = 0; /* the body's */
    put(start, (uint64_t)(o - start - 4), 4);
    if (PyByteArray_Resize(out, o - start) < 0) Py_CLEAR(out); /* the counts' varints took less than 5 bytes */
done:
    for (Py_ssize_t i = 0; i < got; i++) PyBuffer_Release(&parts[i].raw);
    PyMem_Free(parts);
    Py_XDECREF(keys);
    Py_XDECREF(raws);
    Py_XDECREF(seqs);
    return out;
}
