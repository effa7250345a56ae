/* The batch path's merge of small uncompressed v2 record batches into one (coalesce.py), in C.

Why not aiokafka's Cython builder, which coalesce.py used before: it decodes every record into Python objects and
encodes them again, and its build() computes the batch's CRC32C in software (0.57 us of the 1.0-1.1 us a 1 KiB
record cost, at about 1.8 GB/s) although `batches.rewrite` computes it again with the `crc32c` library when the
batch goes. No maintained library merges record batches as bytes. Here each record's bytes are copied as they
are, past three varints: its length, timestamp delta and offset delta, which change with the batch they land in.
The CRC is left to the caller (`coalesce.merge`, with the `crc32c` library).

Every read is bounds-checked against its batch: a batch that does not hold what its header says raises
ValueError naming the batch and record, never reads past the buffer.

The module also carries _batchscan.c's scan, rewrite and CRC32C (batches.py) and _produce.c's Produce request
(protocol.py): one extension, one build. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_batchscan.h"

#define HEADER_SIZE 61
#define MAGIC_AT 16
#define ATTRIBUTES_AT 21
#define LAST_OFFSET_DELTA_AT 23
#define FIRST_TIMESTAMP_AT 27
#define RECORD_COUNT_AT 57
#define COMPRESSION_MASK 0x07
#define TIMESTAMP_LOG_APPEND 0x08
#define CONTROL 0x20
#define MAX_HEADER_GROWTH 20 /* a record's length, timestamp delta and offset delta varints: at most 20 bytes more */

static uint8_t *put64(uint8_t *o, int64_t v) {
    for (int i = 7; i >= 0; i--) *o++ = (uint8_t)((uint64_t)v >> (8 * i));
    return o;
}

static uint8_t *put32(uint8_t *o, int32_t v) {
    for (int i = 3; i >= 0; i--) *o++ = (uint8_t)((uint32_t)v >> (8 * i));
    return o;
}

static uint8_t *put16(uint8_t *o, int16_t v) {
    *o++ = (uint8_t)((uint16_t)v >> 8);
    *o++ = (uint8_t)v;
    return o;
}

/* A zigzag varint (Kafka's record fields) at p[*pos], not past `end`. 0: read; -1: cut off or too long. */
static int read_varint(const uint8_t *p, Py_ssize_t end, Py_ssize_t *pos, int64_t *out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 70 && *pos < end; shift += 7) {
        uint8_t b = p[(*pos)++];
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
            return 0;
        }
    }
    return -1;
}

/* Two's-complement addition without signed overflow (undefined in C): timestamps of a batch that lies are
merged as Kafka's Java reader would wrap them, and never crash. */
static int64_t wrap_add(int64_t a, uint64_t b) { return (int64_t)((uint64_t)a + b); }

static uint64_t zigzag(int64_t v) { return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63); }

static Py_ssize_t varint_size(int64_t v) {
    uint64_t z = zigzag(v);
    Py_ssize_t n = 1;
    while (z >= 0x80) {
        z >>= 7;
        n++;
    }
    return n;
}

static uint8_t *put_varint(uint8_t *o, int64_t v) {
    uint64_t z = zigzag(v);
    while (z >= 0x80) {
        *o++ = (uint8_t)(z | 0x80);
        z >>= 7;
    }
    *o++ = (uint8_t)z;
    return o;
}

static PyObject *refuse(Py_ssize_t batch, int64_t record, const char *why) {
    if (record < 0)
        PyErr_Format(PyExc_ValueError, "batch %zd of the group: %s", batch, why);
    else
        PyErr_Format(PyExc_ValueError, "batch %zd of the group, record %lld: %s", batch, (long long)record, why);
    return NULL;
}

/* One record's timestamp delta, read from the start of the records of a batch (the group's first timestamp). */
static int first_record_delta(const uint8_t *p, Py_ssize_t end, int64_t *delta) {
    Py_ssize_t pos = HEADER_SIZE;
    int64_t length;
    if (read_varint(p, end, &pos, &length) < 0 || pos + 1 > end) return -1;
    pos++; /* attributes */
    return read_varint(p, end, &pos, delta);
}

static PyObject *merge(PyObject *self, PyObject *arg) {
    (void)self;
    PyObject *seq = PySequence_Fast(arg, "merge takes a list of batches");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    Py_buffer *views = PyMem_Calloc(n > 0 ? (size_t)n : 1, sizeof(Py_buffer));
    PyObject *out = NULL;
    Py_ssize_t got = 0;
    if (views == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (n == 0) {
        PyErr_SetString(PyExc_ValueError, "an empty group");
        goto done;
    }
    Py_ssize_t room = HEADER_SIZE;
    for (; got < n; got++) {
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(seq, got), &views[got], PyBUF_SIMPLE) < 0) goto done;
        const uint8_t *p = views[got].buf;
        Py_ssize_t len = views[got].len;
        if (len < HEADER_SIZE) { refuse(got, -1, "shorter than a v2 header"); got++; goto done; }
        if ((int64_t)be32(p + 8) + 12 != len) { refuse(got, -1, "its batchLength is not its size"); got++; goto done; }
        if (p[MAGIC_AT] != 2) { refuse(got, -1, "not a v2 batch"); got++; goto done; }
        if (be16(p + ATTRIBUTES_AT) & (COMPRESSION_MASK | TIMESTAMP_LOG_APPEND | CONTROL)) {
            refuse(got, -1, "compressed, LogAppendTime or a control batch");
            got++;
            goto done;
        }
        int32_t count = be32(p + RECORD_COUNT_AT);
        if (count < 0 || count > len) { refuse(got, -1, "a record count out of range"); got++; goto done; }
        if ((int64_t)count * MAX_HEADER_GROWTH + len > (int64_t)INT32_MAX - room) {
            refuse(got, -1, "a merged batch would pass 2 GiB");  /* batchLength and counts are int32 */
            got++;
            goto done;
        }
        room += len - HEADER_SIZE + (Py_ssize_t)count * MAX_HEADER_GROWTH;
    }
    int64_t first_delta;
    const uint8_t *first = views[0].buf;
    if (be32(first + RECORD_COUNT_AT) == 0 || first_record_delta(first, views[0].len, &first_delta) < 0) {
        refuse(0, 0, "no readable first record");
        goto done;
    }
    int64_t first_ts = wrap_add(be64(first + FIRST_TIMESTAMP_AT), (uint64_t)first_delta), max_ts = first_ts;

    out = PyByteArray_FromStringAndSize(NULL, room);
    if (out == NULL) goto done;
    uint8_t *o = (uint8_t *)PyByteArray_AS_STRING(out) + HEADER_SIZE;
    int64_t index = 0;
    for (Py_ssize_t b = 0; b < n; b++) {
        const uint8_t *p = views[b].buf;
        Py_ssize_t end = views[b].len, pos = HEADER_SIZE;
        int64_t base_ts = be64(p + FIRST_TIMESTAMP_AT);
        int32_t count = be32(p + RECORD_COUNT_AT);
        for (int32_t r = 0; r < count; r++) {
            int64_t length, ts_delta, offset_delta;
            if (read_varint(p, end, &pos, &length) < 0 || length < 3 || length > end - pos) {
                Py_CLEAR(out);
                refuse(b, r, "its length runs past the batch");
                goto done;
            }
            Py_ssize_t stop = pos + (Py_ssize_t)length;
            uint8_t attributes = p[pos++];
            if (read_varint(p, stop, &pos, &ts_delta) < 0 || read_varint(p, stop, &pos, &offset_delta) < 0) {
                Py_CLEAR(out);
                refuse(b, r, "a timestamp or offset delta runs past the record");
                goto done;
            }
            int64_t ts = wrap_add(base_ts, (uint64_t)ts_delta);
            if (ts > max_ts) max_ts = ts;
            Py_ssize_t rest = stop - pos;
            int64_t delta = wrap_add(ts, -(uint64_t)first_ts);
            o = put_varint(o, 1 + varint_size(delta) + varint_size(index) + rest);
            *o++ = attributes;
            o = put_varint(o, delta);
            o = put_varint(o, index);
            memcpy(o, p + pos, (size_t)rest);
            o += rest;
            pos = stop;
            index++;
        }
        if (pos != end) {
            Py_CLEAR(out);
            refuse(b, -1, "bytes after its last record");
            goto done;
        }
    }
    uint8_t *start = (uint8_t *)PyByteArray_AS_STRING(out);
    Py_ssize_t size = o - start;
    uint8_t *h = start;
    h = put64(h, 0);                      /* baseOffset */
    h = put32(h, (int32_t)(size - 12));   /* batchLength */
    h = put32(h, -1);                     /* partitionLeaderEpoch: none, as a producer sends it */
    *h++ = 2;                             /* magic */
    h = put32(h, 0);                      /* CRC32C: the caller's */
    h = put16(h, 0);                      /* attributes: uncompressed, CreateTime, not transactional */
    h = put32(h, (int32_t)(index - 1));   /* lastOffsetDelta */
    h = put64(h, first_ts);
    h = put64(h, max_ts);
    h = put64(h, -1);                     /* producerId */
    h = put16(h, -1);                     /* producerEpoch */
    h = put32(h, -1);                     /* baseSequence */
    put32(h, (int32_t)index);             /* records */
    if (PyByteArray_Resize(out, size) < 0) Py_CLEAR(out);
done:
    for (Py_ssize_t i = 0; i < got; i++) PyBuffer_Release(&views[i]);
    PyMem_Free(views);
    Py_DECREF(seq);
    return out;
}

static PyMethodDef methods[] = {
    {"merge", merge, METH_O,
     "merge(batches) -> bytearray: uncompressed CreateTime v2 batches as one, offset deltas from 0, the first "
     "record's timestamp as the base, CRC32C 0 (the caller's to set), producer fields -1."},
    {"crc32c", batchscan_crc32c_py, METH_O, "crc32c(data) -> int: CRC32C of a bytes-like object (_batchscan.c)."},
    {"register", batchscan_register, METH_VARARGS,
     "register(Batch, field_names, BatchFormatError): the class scan builds and the error it raises."},
    {"scan", (PyCFunction)(void (*)(void))batchscan_scan, METH_FASTCALL,
     "scan(records, verify) -> (batches, bad, found): split_batches, with the first v2 batch whose CRC32C "
     "fails (index, -1 for none) and the CRC its bytes give."},
    {"rewrite_into", (PyCFunction)(void (*)(void))batchscan_rewrite_into, METH_FASTCALL,
     "rewrite_into(out, raw, producer_id, producer_epoch, base_sequence, transactional): batches.rewrite, "
     "appended to the bytearray out."},
    {"produce_request", (PyCFunction)(void (*)(void))produce_request, METH_FASTCALL,
     "produce_request(version, correlation_id, client_id, transactional_id, acks, timeout_ms, keys, raws, "
     "producer_id, producer_epoch, sequences, transactional) -> bytearray (_produce.c)."},
    {"parse_produce", (PyCFunction)(void (*)(void))answers_parse_produce, METH_FASTCALL,
     "parse_produce(body, version) -> [Produced(topic, partition, error_code, base_offset, error_message), ...] "
     "(_answers.c)."},
    {"first_not_as_is", (PyCFunction)(void (*)(void))forwarding_first_not_as_is, METH_FASTCALL,
     "first_not_as_is(batches, merge_below) -> int (_forwarding.c)."},
    {"sequences", (PyCFunction)(void (*)(void))forwarding_sequences, METH_FASTCALL,
     "sequences(batches, first) -> (list, next) (_forwarding.c)."},
    {"tally", (PyCFunction)(void (*)(void))forwarding_tally, METH_FASTCALL,
     "tally(batches, written, timestamps, ts_min) -> (records, bytes, ts_sum, ts_min, target_first, target_last) "
     "(_forwarding.c)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_merge", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__merge(void) {
    batchscan_init();
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && answers_init(m) < 0) Py_CLEAR(m);
    return m;
}
