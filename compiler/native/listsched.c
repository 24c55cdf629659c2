/* The mcf planner's list scheduler, compiled: a2acc.flows.schedule.list_schedule is the reference and this
 * follows it operation by operation (the same heaps ordered as Python's tuples, the same arithmetic in the same
 * order), so the schedule - admission order, admitting op, admission and end times - is the same.
 *
 * run(edge, key, size, last, first, lat, rate, budget, window) -> (order, after, ready, end): int64 / float64
 * bytes, one per hop.
 *   edge: int64 [nh] the link of each hop; key: float64 [nh] its priority; size: float64 [nh] its bytes;
 *   last: uint8 [nh] (the piece's last hop); first: int64 [np] the first hop of each piece with hops, in order;
 *   lat, rate, budget: float64 [ne] per link (latency, bytes/s, bytes in flight that admit beyond the window);
 *   window: ops admitted per link at once. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tuple_heap.h"

typedef int64_t i64;

/* A hop's inputs and results side by side: the loop reaches hops in time order, all over the arrays, and a hop
 * and the next hop of its piece share a cache line or two instead of one line per array (at 17.6 M hops the
 * separate arrays made every access a cache miss). */
typedef struct {
    double key, size;
    int32_t edge, last;
} hop_t;

typedef struct {
    double ready, end;
    i64 after;
} res_t;

typedef struct {
    i64 nh, ne, window;
    hop_t *hop;
    res_t *res;
    const double *lat, *rate, *budget;
    /* per link (reference: _Links) */
    kheap_t *waiting, *fins; /* per link: (key, hop) ready to admit; (finishing virtual time, hop) */
    i64 *count, *n, *ver;
    double *pend, *v, *t, *sumfin;
    /* per hop */
    i64 *order, norder;
    theap_t events; /* (time, 0: hop starts streaming | 1: link departure, hop or link, version) */
} ls_t;

/* reference: list_schedule.admit */
static int admit(ls_t *s, i64 e, double now, i64 trigger) {
    kheap_t *q = &s->waiting[e];
    while (q->n) {
        if (s->count[e] >= s->window) {
            double busy = s->pend[e] + s->sumfin[e];
            if (s->n[e]) busy -= (double)s->n[e] * (s->v[e] + (now - s->t[e]) * s->rate[e] / (double)s->n[e]);
            if (busy >= s->budget[e]) return 0;
        }
        i64 j = kheap_pop(q).x;
        s->res[j].after = trigger;
        s->res[j].ready = now;
        s->order[s->norder++] = j;
        s->count[e] += 1;
        s->pend[e] += s->hop[j].size;
        tent_t ev = {now + s->lat[e], 0, j, 0};
        if (theap_push(&s->events, ev)) return -1;
    }
    return 0;
}

static int schedule(ls_t *s, const i64 *first, i64 nfirst) {
    for (i64 a = 0; a < nfirst; a++) {
        i64 j = first[a];
        kent_t w = {s->hop[j].key, j};
        if (kheap_push(&s->waiting[s->hop[j].edge], w)) return -1;
    }
    for (i64 e = 0; e < s->ne; e++)
        if (admit(s, e, 0.0, -1)) return -1;
    while (s->events.n) {
        tent_t ev = theap_pop(&s->events);
        double now = ev.t;
        i64 x = ev.x, e = ev.kind == 0 ? s->hop[x].edge : x;
        if (ev.kind == 1 && ev.ver != s->ver[e]) continue;
        if (s->n[e]) s->v[e] += (now - s->t[e]) * s->rate[e] / (double)s->n[e];
        s->t[e] = now;
        kheap_t *fe = &s->fins[e];
        if (ev.kind == 0) {
            double sz = s->hop[x].size;
            kent_t f = {s->v[e] + sz, x};
            if (kheap_push(fe, f)) return -1;
            s->sumfin[e] += s->v[e] + sz;
            s->pend[e] -= sz;
            s->n[e] += 1;
        } else {
            if (fe->v[0].t > s->v[e]) s->v[e] = fe->v[0].t;
            i64 trig = -1;
            while (fe->n && fe->v[0].t <= s->v[e] * (1.0 + 1e-12) + 1e-9) {
                kent_t f = kheap_pop(fe);
                i64 j = f.x;
                s->sumfin[e] -= f.t;
                s->n[e] -= 1;
                s->count[e] -= 1;
                s->res[j].end = now;
                trig = j;
                if (!s->hop[j].last) {
                    i64 e2 = s->hop[j + 1].edge;
                    kent_t w = {s->hop[j + 1].key, j + 1};
                    if (kheap_push(&s->waiting[e2], w)) return -1;
                    if (admit(s, e2, now, j)) return -1;
                }
            }
            if (admit(s, e, now, trig)) return -1;
        }
        if (fe->n) {
            s->ver[e] += 1;
            double t_next = now + (fe->v[0].t - s->v[e]) * (double)s->n[e] / s->rate[e];
            tent_t d = {t_next, 1, e, s->ver[e]};
            if (theap_push(&s->events, d)) return -1;
        }
    }
    return s->norder == s->nh ? 0 : -2;
}

static PyObject *py_run(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer be, bk, bs, bl, bf, blat, br, bb;
    long long window;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*y*L", &be, &bk, &bs, &bl, &bf, &blat, &br, &bb, &window)) return NULL;
    PyObject *res = NULL;
    ls_t S;
    memset(&S, 0, sizeof(S));
    ls_t *s = &S;
    i64 nh = be.len / (Py_ssize_t)sizeof(i64), ne = blat.len / (Py_ssize_t)sizeof(double);
    i64 nfirst = bf.len / (Py_ssize_t)sizeof(i64);
    int ok = window >= 1 && bk.len == nh * (Py_ssize_t)sizeof(double) && bs.len == nh * (Py_ssize_t)sizeof(double) &&
             bl.len == nh && br.len == ne * (Py_ssize_t)sizeof(double) && bb.len == ne * (Py_ssize_t)sizeof(double);
    ok = ok && ne < INT32_MAX;
    s->nh = nh;
    s->ne = ne;
    s->window = window;
    const i64 *edge = be.buf;
    const double *key = bk.buf, *size = bs.buf;
    const unsigned char *last = bl.buf;
    s->lat = blat.buf;
    s->rate = br.buf;
    s->budget = bb.buf;
    const i64 *first = bf.buf;
    PyObject *order = NULL, *after = NULL, *ready = NULL, *end = NULL;
    for (i64 j = 0; ok && j < nh; j++) ok = edge[j] >= 0 && edge[j] < ne && (last[j] || j + 1 < nh);
    for (i64 a = 0; ok && a < nfirst; a++) ok = first[a] >= 0 && first[a] < nh;
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "listsched.run: bad arguments");
        goto done;
    }
    {
        size_t H = (size_t)(nh ? nh : 1), E = (size_t)(ne ? ne : 1);
        Py_ssize_t nb = (Py_ssize_t)(nh * (i64)sizeof(double));
        s->waiting = calloc(E, sizeof(kheap_t));
        s->fins = calloc(E, sizeof(kheap_t));
        s->count = calloc(E, sizeof(i64));
        s->n = calloc(E, sizeof(i64));
        s->ver = calloc(E, sizeof(i64));
        s->pend = calloc(E, sizeof(double));
        s->v = calloc(E, sizeof(double));
        s->t = calloc(E, sizeof(double));
        s->sumfin = calloc(E, sizeof(double));
        s->hop = malloc(sizeof(hop_t) * H);
        s->res = malloc(sizeof(res_t) * H);
        order = PyBytes_FromStringAndSize(NULL, nb);
        if (!s->waiting || !s->fins || !s->count || !s->n || !s->ver || !s->pend || !s->v || !s->t || !s->sumfin ||
            !s->hop || !s->res || !order) {
            if (!PyErr_Occurred()) PyErr_NoMemory();
            goto done;
        }
        s->order = (i64 *)PyBytes_AS_STRING(order);
        for (i64 j = 0; j < nh; j++) {
            hop_t h = {key[j], size[j], (int32_t)edge[j], last[j] != 0};
            res_t r = {0.0, 0.0, -1};
            s->hop[j] = h;
            s->res[j] = r;
        }
        int st;
        Py_BEGIN_ALLOW_THREADS
        st = schedule(s, first, nfirst);
        Py_END_ALLOW_THREADS
        if (st == -1) {
            PyErr_NoMemory();
            goto done;
        }
        if (st == -2) {
            PyErr_Format(PyExc_RuntimeError, "list schedule admitted %lld of %lld hops", (long long)s->norder,
                         (long long)nh);
            goto done;
        }
        free(s->hop);
        s->hop = NULL;
        after = PyBytes_FromStringAndSize(NULL, nb);
        ready = PyBytes_FromStringAndSize(NULL, nb);
        end = PyBytes_FromStringAndSize(NULL, nb);
        if (!after || !ready || !end) goto done;
        i64 *pa = (i64 *)PyBytes_AS_STRING(after);
        double *pr = (double *)PyBytes_AS_STRING(ready), *pe = (double *)PyBytes_AS_STRING(end);
        for (i64 j = 0; j < nh; j++) {
            pa[j] = s->res[j].after;
            pr[j] = s->res[j].ready;
            pe[j] = s->res[j].end;
        }
        res = PyTuple_Pack(4, order, after, ready, end);
    }
done:
    Py_XDECREF(order);
    Py_XDECREF(after);
    Py_XDECREF(ready);
    Py_XDECREF(end);
    if (s->waiting)
        for (i64 e = 0; e < ne; e++) free(s->waiting[e].v);
    if (s->fins)
        for (i64 e = 0; e < ne; e++) free(s->fins[e].v);
    free(s->waiting); free(s->fins); free(s->count); free(s->n); free(s->ver); free(s->pend); free(s->v); free(s->t);
    free(s->sumfin); free(s->hop); free(s->res); free(s->events.v);
    PyBuffer_Release(&be);
    PyBuffer_Release(&bk);
    PyBuffer_Release(&bs);
    PyBuffer_Release(&bl);
    PyBuffer_Release(&bf);
    PyBuffer_Release(&blat);
    PyBuffer_Release(&br);
    PyBuffer_Release(&bb);
    return res;
}

static PyMethodDef METHODS[] = {
    {"run", py_run, METH_VARARGS, "list-schedule pieces on links; (order, after, ready, end) per hop as bytes"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_listsched", NULL, -1, METHODS, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__listsched(void) { return PyModule_Create(&MODULE); }
