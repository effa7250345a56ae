/* The batch path's per-batch hot work in C (batches.py): split a Fetch partition's records into `Batch`es with
each v2 batch's CRC32C checked, and append a batch rewritten for the target to a Produce request. Part of the
`_merge` extension module (its method table lists these); batches.py keeps the Python reference of each, used
where the extension was not built and by the tests that compare the two.

Why in C: in Python a batch cost about 1.0 us to split (a struct unpack and a dataclass __init__ of 14 fields),
0.7 us to check (a memoryview slice and a call) and 2.1 us to rewrite (four pack_into and a CRC), per 8 KiB lz4
batch of 15 records. Here the `Batch` is allocated and its slots filled directly (their offsets are read once,
from the class's member descriptors, by `register`), so no Python code runs per batch.

CRC32C: our own, because the `crc32c` package exports only a Python function (no C API or capsule): calling it
from here would cost the very Python call and memoryview this file saves. With SSE4.2 (checked at run time) the
crc32 instruction runs on three interleaved 256-byte streams, joined by table-driven "append n zero bytes"
shifts (the raw CRC register is linear), about 3x one stream's speed on an 8 KiB batch; elsewhere a byte table.

Every read is bounds-checked against the buffer: a batch whose length runs short raises the registered
`BatchFormatError` naming its offset (as batches.split_batches does), a partial last batch is left out. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

#include "_batchscan.h"

#define LOG_OVERHEAD 12
#define HEADER_SIZE 61
#define MAGIC_AT 16
#define CRC_AT 17
#define CRC_FROM 21
#define PRODUCER_AT 43
#define TRANSACTIONAL 0x10
#define FIELDS 14 /* Batch's: 13 header fields, then raw */
#define BLOCK 256 /* bytes of each of the three interleaved CRC streams */

static uint32_t crc_table[256];
static uint32_t shift1[4][256], shift2[4][256]; /* the raw register after BLOCK, 2 * BLOCK zero bytes */
static int have_sse42;

static uint32_t crc_sw(uint32_t s, const uint8_t *p, size_t n) {
    while (n--) s = crc_table[(s ^ *p++) & 0xff] ^ (s >> 8);
    return s;
}

static uint32_t shifted(uint32_t (*t)[256], uint32_t s) {
    return t[0][s & 0xff] ^ t[1][(s >> 8) & 0xff] ^ t[2][(s >> 16) & 0xff] ^ t[3][s >> 24];
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define CAN_SSE42 1

static uint64_t load64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t s, const uint8_t *p, size_t n) {
    while (n >= 3 * BLOCK) {
        uint64_t a = s, b = 0, c = 0;
        for (size_t i = 0; i < BLOCK; i += 8) {
            a = _mm_crc32_u64(a, load64(p + i));
            b = _mm_crc32_u64(b, load64(p + BLOCK + i));
            c = _mm_crc32_u64(c, load64(p + 2 * BLOCK + i));
        }
        s = shifted(shift2, (uint32_t)a) ^ shifted(shift1, (uint32_t)b) ^ (uint32_t)c;
        p += 3 * BLOCK;
        n -= 3 * BLOCK;
    }
    uint64_t w = s;
    for (; n >= 8; n -= 8, p += 8) w = _mm_crc32_u64(w, load64(p));
    s = (uint32_t)w;
    for (; n; n--) s = _mm_crc32_u8(s, *p++);
    return s;
}
#endif

uint32_t batchscan_crc32c(const uint8_t *p, size_t n) {
#ifdef CAN_SSE42
    if (have_sse42) return ~crc_hw(0xffffffffu, p, n);
#endif
    return ~crc_sw(0xffffffffu, p, n);
}

/* The raw register after `n` zero bytes fed to state `s`: what joining the streams shifts by. */
static uint32_t zeros(uint32_t s, size_t n) {
    while (n--) s = crc_table[s & 0xff] ^ (s >> 8);
    return s;
}

static void fill_shift(uint32_t (*t)[256], size_t n) {
    uint32_t basis[32];
    for (int i = 0; i < 32; i++) basis[i] = zeros(1u << i, n);
    for (int j = 0; j < 4; j++)
        for (int v = 0; v < 256; v++) {
            uint32_t x = 0;
            for (int b = 0; b < 8; b++)
                if (v & (1 << b)) x ^= basis[8 * j + b];
            t[j][v] = x;
        }
}

void batchscan_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & -(c & 1));
        crc_table[i] = c;
    }
    fill_shift(shift1, BLOCK);
    fill_shift(shift2, 2 * BLOCK);
#ifdef CAN_SSE42
    __builtin_cpu_init();
    have_sse42 = __builtin_cpu_supports("sse4.2");
#endif
}

static void put_be(uint8_t *o, uint64_t v, int bytes) {
    for (int i = bytes - 1; i >= 0; i--) *o++ = (uint8_t)(v >> (8 * i));
}

PyObject *batchscan_crc32c_py(PyObject *self, PyObject *arg) {
    (void)self;
    Py_buffer v;
    if (PyObject_GetBuffer(arg, &v, PyBUF_SIMPLE) < 0) return NULL;
    uint32_t c = batchscan_crc32c(v.buf, (size_t)v.len);
    PyBuffer_Release(&v);
    return PyLong_FromUnsignedLong(c);
}

static PyTypeObject *batch_type;
static PyObject *format_error;
static Py_ssize_t slot_at[FIELDS];

PyObject *batchscan_register(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *type, *names, *error;
    if (!PyArg_ParseTuple(args, "O!OO", &PyType_Type, &type, &names, &error)) return NULL;
    PyObject *seq = PySequence_Fast(names, "field names");
    if (seq == NULL) return NULL;
    Py_ssize_t at[FIELDS];
    int ok = PySequence_Fast_GET_SIZE(seq) == FIELDS;
    for (Py_ssize_t i = 0; ok && i < FIELDS; i++) {
        PyObject *d = PyObject_GetAttr(type, PySequence_Fast_GET_ITEM(seq, i));
        if (d == NULL) {
            Py_DECREF(seq);
            return NULL;
        }
        /* a __slots__ field: an object pointer at a fixed offset, NULL until set (T_OBJECT_EX) */
        ok = Py_IS_TYPE(d, &PyMemberDescr_Type) && ((PyMemberDescrObject *)d)->d_member->type == T_OBJECT_EX &&
             !(((PyMemberDescrObject *)d)->d_member->flags & READONLY);
        if (ok) at[i] = ((PyMemberDescrObject *)d)->d_member->offset;
        Py_DECREF(d);
    }
    Py_DECREF(seq);
    if (!ok) {
        PyErr_SetString(PyExc_TypeError, "register takes a slots class and its 14 writable field names");
        return NULL;
    }
    memcpy(slot_at, at, sizeof at);
    Py_INCREF(type);
    Py_XSETREF(batch_type, (PyTypeObject *)type);
    Py_INCREF(error);
    Py_XSETREF(format_error, error);
    Py_RETURN_NONE;
}

/* A Batch of the 13 header values and `raw` (a new reference, stolen), its __init__ skipped. */
static PyObject *make_batch(const int64_t *values, PyObject *raw) {
    PyObject *o = batch_type->tp_alloc(batch_type, 0);
    if (o == NULL) {
        Py_DECREF(raw);
        return NULL;
    }
    *(PyObject **)((char *)o + slot_at[FIELDS - 1]) = raw;
    for (int i = 0; i < FIELDS - 1; i++) {
        PyObject *v = PyLong_FromLongLong(values[i]);
        if (v == NULL) {
            Py_DECREF(o);
            return NULL;
        }
        *(PyObject **)((char *)o + slot_at[i]) = v;
    }
    return o;
}

/* scan(records, verify) -> (batches, bad, found): the whole batches (as split_batches gives them); with
`verify`, the index of the first v2 batch whose CRC32C does not match (-1: none) and the CRC its bytes give. */
PyObject *batchscan_scan(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2) return PyErr_Format(PyExc_TypeError, "scan takes records and verify");
    if (batch_type == NULL) return PyErr_Format(PyExc_RuntimeError, "scan before register");
    int verify = PyObject_IsTrue(args[1]);
    if (verify < 0) return NULL;
    PyObject *out = PyList_New(0), *view = NULL;
    Py_ssize_t bad = -1;
    uint32_t found = 0;
    if (out == NULL) return NULL;
    if (args[0] == Py_None) goto done;
    view = PyMemoryView_FromObject(args[0]);
    if (view == NULL) goto fail;
    Py_buffer *b = PyMemoryView_GET_BUFFER(view);
    if (!PyBuffer_IsContiguous(b, 'C') || b->itemsize != 1) {
        PyErr_SetString(PyExc_TypeError, "scan takes contiguous bytes");
        goto fail;
    }
    const uint8_t *p = b->buf;
    Py_ssize_t end = b->len, pos = 0;
    while (end - pos >= LOG_OVERHEAD) {
        int64_t v[FIELDS - 1];
        const uint8_t *h = p + pos;
        int64_t base_offset = be64(h), length = be32(h + 8);
        if (length > end - pos - LOG_OVERHEAD) break; /* partial batch at the size limit */
        Py_ssize_t stop = pos + LOG_OVERHEAD + (Py_ssize_t)length;
        if (length + LOG_OVERHEAD < MAGIC_AT + 1) {
            PyErr_Format(format_error, "batch at offset %lld is %lld bytes long", (long long)base_offset,
                         (long long)length);
            goto fail;
        }
        uint8_t magic = h[MAGIC_AT];
        if (magic < 2) {
            int64_t old[FIELDS - 1] = {base_offset, length, -1, magic, 0, 0, 0, -1, -1, -1, -1, -1, 1};
            memcpy(v, old, sizeof v);
        } else {
            if (length + LOG_OVERHEAD < HEADER_SIZE) {
                PyErr_Format(format_error, "v2 batch at offset %lld is %lld bytes long", (long long)base_offset,
                             (long long)length);
                goto fail;
            }
            v[0] = base_offset;
            v[1] = length;
            v[2] = be32(h + 12);
            v[3] = (int8_t)magic; /* signed, as the header's struct reads it: 0x80.. is an old magic */
            v[4] = (uint32_t)be32(h + CRC_AT);
            v[5] = be16(h + CRC_FROM);
            v[6] = be32(h + 23);
            v[7] = be64(h + 27);
            v[8] = be64(h + 35);
            v[9] = be64(h + PRODUCER_AT);
            v[10] = be16(h + 51);
            v[11] = be32(h + 53);
            v[12] = be32(h + 57);
            if (verify && bad < 0 && (int8_t)magic >= 2) {
                uint32_t c = batchscan_crc32c(h + CRC_FROM, (size_t)(stop - pos - CRC_FROM));
                if (c != (uint32_t)v[4]) {
                    bad = PyList_GET_SIZE(out);
                    found = c;
                }
            }
        }
        PyObject *raw = PySequence_GetSlice(view, pos, stop);
        PyObject *batch = raw == NULL ? NULL : make_batch(v, raw);
        if (batch == NULL) goto fail;
        int appended = PyList_Append(out, batch);
        Py_DECREF(batch);
        if (appended < 0) goto fail;
        pos = stop;
    }
done:
    Py_XDECREF(view);
    return Py_BuildValue("(Nnk)", out, bad, (unsigned long)found);
fail:
    Py_XDECREF(view);
    Py_DECREF(out);
    return NULL;
}

int batchscan_check_whole(const uint8_t *src, Py_ssize_t n) {
    if (n < HEADER_SIZE || (int64_t)be32(src + 8) + LOG_OVERHEAD != n) {
        PyErr_Format(PyExc_ValueError, "not one whole v2 batch (%zd bytes)", n);
        return -1;
    }
    return 0;
}

void batchscan_rewrite_at(uint8_t *o, Py_ssize_t n, int64_t producer_id, int16_t epoch, int32_t seq,
                          int transactional) {
    uint16_t attributes = (uint16_t)be16(o + CRC_FROM);
    attributes = transactional ? (attributes | TRANSACTIONAL) : (attributes & ~TRANSACTIONAL);
    put_be(o, 0, 8);                /* baseOffset */
    put_be(o + 12, 0xffffffffu, 4); /* partitionLeaderEpoch -1 */
    put_be(o + CRC_FROM, attributes, 2);
    put_be(o + PRODUCER_AT, (uint64_t)producer_id, 8);
    put_be(o + 51, (uint64_t)(uint16_t)epoch, 2);
    put_be(o + 53, (uint64_t)(uint32_t)seq, 4);
    put_be(o + CRC_AT, batchscan_crc32c(o + CRC_FROM, (size_t)(n - CRC_FROM)), 4);
}

/* rewrite_into(out, raw, producer_id, producer_epoch, base_sequence, transactional): `raw` (one whole v2 batch)
appended to the bytearray `out` with baseOffset 0, partitionLeaderEpoch -1, the producer fields and the
transactional bit given, CRC32C recomputed: the batch's one copy. */
PyObject *batchscan_rewrite_into(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 6) return PyErr_Format(PyExc_TypeError, "rewrite_into takes 6 arguments");
    if (!PyByteArray_Check(args[0])) return PyErr_Format(PyExc_TypeError, "rewrite_into appends to a bytearray");
    long long pid = PyLong_AsLongLong(args[2]);
    long epoch = PyLong_AsLong(args[3]), seq = PyLong_AsLong(args[4]);
    int transactional = PyObject_IsTrue(args[5]);
    if (PyErr_Occurred() || transactional < 0) return NULL;
    if (epoch < INT16_MIN || epoch > INT16_MAX || seq < INT32_MIN || seq > INT32_MAX)
        return PyErr_Format(PyExc_OverflowError, "producer epoch or base sequence out of range");
    Py_buffer v;
    if (PyObject_GetBuffer(args[1], &v, PyBUF_SIMPLE) < 0) return NULL;
    Py_ssize_t n = v.len, start = PyByteArray_GET_SIZE(args[0]);
    if (batchscan_check_whole(v.buf, n) < 0 || PyByteArray_Resize(args[0], start + n) < 0) {
        PyBuffer_Release(&v);
        return NULL;
    }
    uint8_t *o = (uint8_t *)PyByteArray_AS_STRING(args[0]) + start;
    memcpy(o, v.buf, (size_t)n);
    PyBuffer_Release(&v);
    batchscan_rewrite_at(o, n, pid, (int16_t)epoch, (int32_t)seq, transactional);
    Py_RETURN_NONE;
}
