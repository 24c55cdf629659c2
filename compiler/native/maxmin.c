/* Max-min fair rates by local-bottleneck progressive filling: the compiled core of
 * a2acc.analysis.fastsim.max_min (the Python function is the reference and gives bit-identical results).
 *
 * max_min(rows, k, cap, weight) -> bytes of float64 rates, one per flow.
 *   rows:   int64 [nf * k], the flows' binding links, padded with len(cap) (the "no link" column);
 *   cap:    float64 [nl], link capacities;
 *   weight: float64 [nf] or None: a row with weight w stands for w identical flows.
 *
 * The algorithm and its arithmetic live in maxmin_core.h (shared with the simulator's compiled event loop); this
 * file checks the arguments and returns the rates. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "maxmin_core.h"

typedef int64_t i64;

static PyObject *py_max_min(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer br, bc, bw;
    Py_ssize_t k;
    PyObject *wobj;
    if (!PyArg_ParseTuple(args, "y*ny*O", &br, &k, &bc, &wobj)) return NULL;
    int have_w = wobj != Py_None;
    memset(&bw, 0, sizeof(bw));
    if (have_w && PyObject_GetBuffer(wobj, &bw, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&br);
        PyBuffer_Release(&bc);
        return NULL;
    }
    PyObject *res = NULL;
    Py_ssize_t ncap = bc.len / (Py_ssize_t)sizeof(double);
    Py_ssize_t nf = k > 0 ? br.len / (Py_ssize_t)sizeof(i64) / k : 0;
    int ok = k > 0 && br.len % ((Py_ssize_t)sizeof(i64) * k) == 0 && bc.len % (Py_ssize_t)sizeof(double) == 0 &&
             (!have_w || bw.len == nf * (Py_ssize_t)sizeof(double));
    const i64 *rows0 = br.buf;
    for (Py_ssize_t x = 0; ok && x < nf * k; x++) ok = rows0[x] >= 0 && rows0[x] <= ncap;
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "max_min: bad arguments");
        goto done;
    }
    {
        double *rate = malloc(sizeof(double) * (size_t)(nf ? nf : 1));
        int st = rate ? maxmin_core(rows0, nf, k, bc.buf, ncap, have_w ? bw.buf : NULL, rate) : -1;
        if (st == -1)
            PyErr_NoMemory();
        else if (st == -2)
            PyErr_SetString(PyExc_ArithmeticError, "max_min: a flow without a binding link");
        else
            res = PyBytes_FromStringAndSize((const char *)rate, (Py_ssize_t)(nf * (Py_ssize_t)sizeof(double)));
        free(rate);
    }
done:
    PyBuffer_Release(&br);
    PyBuffer_Release(&bc);
    if (have_w) PyBuffer_Release(&bw);
    return res;
}

static PyMethodDef METHODS[] = {
    {"max_min", py_max_min, METH_VARARGS, "max-min fair rates (local-bottleneck progressive filling)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_maxmin", NULL, -1, METHODS, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__maxmin(void) { return PyModule_Create(&MODULE); }
