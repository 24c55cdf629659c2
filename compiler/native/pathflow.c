/* The path-edge sums of the mcf planner's first-order flow at scale, compiled: a2acc.flows.scale._Incidence's
 * numpy expressions are the reference (np.bincount over the path-edge entries), and each loop below adds the
 * same terms in the same order as np.bincount does (entry by entry, from 0.0), so the sums are the same floats.
 * At 1024 GPUs there are ~47 M entries, and the flow and its bound's ascent run a few hundred such sums each.
 *
 * Paths p (in [p0, p1)) own the entries ptr[p] .. ptr[p + 1] of edges (int64 edge ids in [0, E)).
 *
 * path_sums(ptr, edges, p0, p1, a, b) -> (ga, gb): per path of [p0, p1), the sum of a[e] (and of b[e]) over its
 *   entries; a, b: float64 [E] (b may be None: gb is then empty).
 *   Reference: np.bincount(entry_path - p0, weights=a[entry_edge], minlength=p1 - p0) over the entries.
 * edge_sums(ptr, edges, p0, p1, w, E) -> out: per edge, the sum of w[p - p0] over the entries of the paths of
 *   [p0, p1) on it; w: float64 [p1 - p0].
 *   Reference: np.bincount(entry_edge, weights=w[entry_path - p0], minlength=E) over the entries. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int64_t i64;

/* ptr [np + 1] nondecreasing from 0 to len(edges), 0 <= p0 <= p1 <= np. The edge ids themselves are checked
 * in the summing loops (one pass over the entries, not two): an id outside [0, E) fails the call. */
static int check(const Py_buffer *bp, const Py_buffer *be, i64 p0, i64 p1) {
    i64 np1 = bp->len / (Py_ssize_t)sizeof(i64), ne = be->len / (Py_ssize_t)sizeof(i64);
    const i64 *ptr = bp->buf;
    if (np1 < 1 || p0 < 0 || p1 < p0 || p1 > np1 - 1 || ptr[0] != 0 || ptr[np1 - 1] != ne) return 0;
    for (i64 p = p0; p < p1; p++)
        if (ptr[p + 1] < ptr[p]) return 0;
    return 1;
}

static int bad_edge(i64 e, i64 E) { return (uint64_t)e >= (uint64_t)E; }

static PyObject *py_path_sums(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer bp, be, ba, bb = {0};
    long long p0, p1;
    PyObject *b_obj;
    if (!PyArg_ParseTuple(args, "y*y*LLy*O", &bp, &be, &p0, &p1, &ba, &b_obj)) return NULL;
    PyObject *res = NULL;
    int have_b = b_obj != Py_None;
    if (have_b && PyObject_GetBuffer(b_obj, &bb, PyBUF_SIMPLE) < 0) goto done_ab;
    i64 E = ba.len / (Py_ssize_t)sizeof(double);
    if ((have_b && bb.len != ba.len) || !check(&bp, &be, p0, p1)) {
        PyErr_SetString(PyExc_ValueError, "pathflow.path_sums: bad arguments");
        goto done;
    }
    {
        i64 n = p1 - p0;
        PyObject *ga = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * (i64)sizeof(double)));
        PyObject *gb = PyBytes_FromStringAndSize(NULL, have_b ? (Py_ssize_t)(n * (i64)sizeof(double)) : 0);
        if (!ga || !gb) {
            Py_XDECREF(ga);
            Py_XDECREF(gb);
            goto done;
        }
        const i64 *ptr = bp.buf, *edges = be.buf;
        const double *a = ba.buf, *b = have_b ? bb.buf : NULL;
        double *oa = (double *)PyBytes_AS_STRING(ga), *ob = (double *)PyBytes_AS_STRING(gb);
        int bad = 0;
        Py_BEGIN_ALLOW_THREADS
        for (i64 p = p0; p < p1 && !bad; p++) {
            double sa = 0.0, sb = 0.0;
            for (i64 i = ptr[p]; i < ptr[p + 1]; i++) {
                if (bad_edge(edges[i], E)) {
                    bad = 1;
                    break;
                }
                sa += a[edges[i]];
                if (b) sb += b[edges[i]];
            }
            oa[p - p0] = sa;
            if (b) ob[p - p0] = sb;
        }
        Py_END_ALLOW_THREADS
        if (bad) {
            Py_DECREF(ga);
            Py_DECREF(gb);
            PyErr_SetString(PyExc_ValueError, "pathflow.path_sums: bad arguments");
            goto done;
        }
        res = Py_BuildValue("(NN)", ga, gb);
    }
done:
    if (have_b) PyBuffer_Release(&bb);
done_ab:
    PyBuffer_Release(&bp);
    PyBuffer_Release(&be);
    PyBuffer_Release(&ba);
    return res;
}

static PyObject *py_edge_sums(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer bp, be, bw;
    long long p0, p1, E;
    if (!PyArg_ParseTuple(args, "y*y*LLy*L", &bp, &be, &p0, &p1, &bw, &E)) return NULL;
    PyObject *res = NULL;
    if (E < 0 || bw.len != (p1 - p0) * (Py_ssize_t)sizeof(double) || !check(&bp, &be, p0, p1)) {
        PyErr_SetString(PyExc_ValueError, "pathflow.edge_sums: bad arguments");
        goto done;
    }
    {
        PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(E * (i64)sizeof(double)));
        if (!out) goto done;
        const i64 *ptr = bp.buf, *edges = be.buf;
        const double *w = bw.buf;
        double *o = (double *)PyBytes_AS_STRING(out);
        int bad = 0;
        Py_BEGIN_ALLOW_THREADS
        memset(o, 0, (size_t)E * sizeof(double));
        for (i64 p = p0; p < p1 && !bad; p++) {
            double x = w[p - p0];
            for (i64 i = ptr[p]; i < ptr[p + 1]; i++) {
                if (bad_edge(edges[i], E)) {
                    bad = 1;
                    break;
                }
                o[edges[i]] += x;
            }
        }
        Py_END_ALLOW_THREADS
        if (bad) {
            Py_DECREF(out);
            PyErr_SetString(PyExc_ValueError, "pathflow.edge_sums: bad arguments");
            goto done;
        }
        res = out;
    }
done:
    PyBuffer_Release(&bp);
    PyBuffer_Release(&be);
    PyBuffer_Release(&bw);
    return res;
}

static PyMethodDef METHODS[] = {
    {"path_sums", py_path_sums, METH_VARARGS, "per path of [p0, p1): the sums of a (and b) over its edges"},
    {"edge_sums", py_edge_sums, METH_VARARGS, "per edge: the sum of w over the paths of [p0, p1) on it"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_pathflow", NULL, -1, METHODS, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__pathflow(void) { return PyModule_Create(&MODULE); }
