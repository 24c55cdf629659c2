/* Max-min fair rates by local-bottleneck progressive filling: the compiled core of
 * a2acc.analysis.fastsim.max_min (the Python function is the reference and gives bit-identical results).
 *
 * max_min(rows, k, cap, weight) -> bytes of float64 rates, one per flow.
 *   rows:   int64 [nf * k], the flows' binding links, padded with len(cap) (the "no link" column);
 *   cap:    float64 [nl], link capacities;
 *   weight: float64 [nf] or None: a row with weight w stands for w identical flows.
 *
 * Each round: count flows per link (weighted), share = remaining / count; a flow's fair share is the smallest
 * share on its links; a link on which every crossing flow has its minimum there is a local bottleneck and fixes
 * all its flows at that share. The arithmetic follows the Python reference operation by operation (sums in flow
 * order, the same comparisons), so the rates are the same floats. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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
        Py_ssize_t nl = ncap + 1, pad = ncap;
        const double *cap = bc.buf, *w0 = have_w ? bw.buf : NULL;
        double *rate = calloc((size_t)(nf ? nf : 1), sizeof(double));
        double *rem = malloc(sizeof(double) * (size_t)nl), *cnt = malloc(sizeof(double) * (size_t)nl);
        double *share = malloc(sizeof(double) * (size_t)nl), *fmin = malloc(sizeof(double) * (size_t)(nf ? nf : 1));
        i64 *notmin = malloc(sizeof(i64) * (size_t)nl);
        Py_ssize_t *idx = malloc(sizeof(Py_ssize_t) * (size_t)(nf ? nf : 1));
        unsigned char *fix = malloc((size_t)(nf ? nf : 1));
        if (!rate || !rem || !cnt || !share || !fmin || !notmin || !idx || !fix) {
            PyErr_NoMemory();
        } else {
            for (Py_ssize_t l = 0; l < ncap; l++) rem[l] = cap[l];
            rem[pad] = INFINITY;
            Py_ssize_t live = nf;
            for (Py_ssize_t i = 0; i < nf; i++) idx[i] = i;
            int bad = 0;
            while (live > 0) {
                for (Py_ssize_t l = 0; l < nl; l++) { cnt[l] = 0.0; notmin[l] = 0; }
                for (Py_ssize_t a = 0; a < live; a++) {
                    Py_ssize_t f = idx[a];
                    double wf = w0 ? w0[f] : 1.0;
                    for (Py_ssize_t j = 0; j < k; j++) cnt[rows0[f * k + j]] += wf;
                }
                cnt[pad] = 0.0;
                for (Py_ssize_t l = 0; l < nl; l++)
                    share[l] = cnt[l] == 0.0 ? INFINITY : rem[l] / (cnt[l] > 1.0 ? cnt[l] : 1.0);
                for (Py_ssize_t a = 0; a < live; a++) {
                    const i64 *r = rows0 + idx[a] * k;
                    double mn = share[r[0]];
                    for (Py_ssize_t j = 1; j < k; j++) mn = share[r[j]] < mn ? share[r[j]] : mn;
                    if (!isfinite(mn)) bad = 1;
                    fmin[a] = mn;
                    double lim = mn * (1 + 1e-12);
                    for (Py_ssize_t j = 0; j < k; j++)
                        if (!(share[r[j]] <= lim)) notmin[r[j]]++;
                }
                if (bad) break;
                for (Py_ssize_t a = 0; a < live; a++) {
                    const i64 *r = rows0 + idx[a] * k;
                    fix[a] = 0;
                    for (Py_ssize_t j = 0; j < k && !fix[a]; j++)
                        fix[a] = notmin[r[j]] == 0 && cnt[r[j]] > 0.0;
                }
                for (Py_ssize_t a = 0; a < live; a++)
                    if (fix[a]) rate[idx[a]] = fmin[a];
                /* rem -= bincount(rows[fix], weights=repeat(r * w, k)): accumulate in flow order first */
                for (Py_ssize_t l = 0; l < nl; l++) cnt[l] = 0.0;
                for (Py_ssize_t a = 0; a < live; a++) {
                    if (!fix[a]) continue;
                    Py_ssize_t f = idx[a];
                    double used = w0 ? fmin[a] * w0[f] : fmin[a];
                    for (Py_ssize_t j = 0; j < k; j++) cnt[rows0[f * k + j]] += used;
                }
                for (Py_ssize_t l = 0; l < nl; l++) {
                    rem[l] -= cnt[l];
                    if (rem[l] < 0.0) rem[l] = 0.0;
                }
                Py_ssize_t keep = 0;
                for (Py_ssize_t a = 0; a < live; a++)
                    if (!fix[a]) idx[keep++] = idx[a];
                if (keep == live) { bad = 1; break; }
                live = keep;
            }
            if (bad)
                PyErr_SetString(PyExc_ArithmeticError, "max_min: a flow without a binding link");
            else
                res = PyBytes_FromStringAndSize((const char *)rate, (Py_ssize_t)(nf * (Py_ssize_t)sizeof(double)));
        }
        free(rate); free(rem); free(cnt); free(share); free(fmin); free(notmin); free(idx); free(fix);
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
