/* The C files' functions (_batchscan.c, _produce.c, _answers.c, _forwarding.c), listed in the `_merge` module's
method table (_merge.c). */
#ifndef SPARKMIRROR_BATCHSCAN_H
#define SPARKMIRROR_BATCHSCAN_H
#include <Python.h>
#include <stdint.h>

/* Kafka's big-endian fields, read from bytes the caller has bounds-checked. */
static inline int64_t be64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = (v << 8) | p[i];
    return (int64_t)v;
}

static inline int32_t be32(const uint8_t *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3]);
}

static inline int16_t be16(const uint8_t *p) { return (int16_t)(((uint16_t)p[0] << 8) | (uint16_t)p[1]); }

void batchscan_init(void);
uint32_t batchscan_crc32c(const uint8_t *p, size_t n);
int batchscan_check_whole(const uint8_t *src, Py_ssize_t n); /* -1 with ValueError: not one whole batch */
void batchscan_rewrite_at(uint8_t *o, Py_ssize_t n, int64_t producer_id, int16_t epoch, int32_t seq,
                          int transactional); /* a checked batch's header fields and CRC32C, in place */
PyObject *produce_request(PyObject *self, PyObject *const *args, Py_ssize_t nargs); /* _produce.c */
int answers_init(PyObject *module); /* _answers.c: its Produced type, added to the module */
PyObject *answers_parse_produce(PyObject *self, PyObject *const *args, Py_ssize_t nargs); /* _answers.c */
/* _forwarding.c */
PyObject *forwarding_first_not_as_is(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *forwarding_sequences(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *forwarding_tally(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *batchscan_crc32c_py(PyObject *self, PyObject *arg);
PyObject *batchscan_register(PyObject *self, PyObject *args);
PyObject *batchscan_scan(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *batchscan_rewrite_into(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

#endif
