/* _batchscan.c's and _produce.c's functions, listed in the `_merge` module's method table (_merge.c). */
#ifndef SPARKMIRROR_BATCHSCAN_H
#define SPARKMIRROR_BATCHSCAN_H
#include <Python.h>
#include <stdint.h>

void batchscan_init(void);
uint32_t batchscan_crc32c(const uint8_t *p, size_t n);
int batchscan_check_whole(const uint8_t *src, Py_ssize_t n); /* -1 with ValueError: not one whole batch */
void batchscan_rewrite_at(uint8_t *o, Py_ssize_t n, int64_t producer_id, int16_t epoch, int32_t seq,
                          int transactional); /* a checked batch's header fields and CRC32C, in place */
PyObject *produce_request(PyObject *self, PyObject *const *args, Py_ssize_t nargs); /* _produce.c */
PyObject *batchscan_crc32c_py(PyObject *self, PyObject *arg);
PyObject *batchscan_register(PyObject *self, PyObject *args);
PyObject *batchscan_scan(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *batchscan_rewrite_into(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

#endif
