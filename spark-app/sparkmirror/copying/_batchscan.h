/* _batchscan.c's functions, listed in the `_merge` module's method table (_merge.c). */
#ifndef SPARKMIRROR_BATCHSCAN_H
#define SPARKMIRROR_BATCHSCAN_H
#include <Python.h>
#include <stdint.h>

void batchscan_init(void);
uint32_t batchscan_crc32c(const uint8_t *p, size_t n);
PyObject *batchscan_crc32c_py(PyObject *self, PyObject *arg);
PyObject *batchscan_register(PyObject *self, PyObject *args);
PyObject *batchscan_scan(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *batchscan_rewrite_into(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

#endif
