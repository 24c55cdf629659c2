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

typedef struct {
    i64 nh, ne, window;
    const i64 *edge;
    const double *key, *size, *lat, *rate, *budget;
    const unsigned char *last;
    /* per link (reference: _Links) */
    theap_t *waiting, *fins; /* per link: (key, hop) ready to admit; (finishing virtual time, hop) */
    i64 *count, *n, *ver;
    double *pend, *v, *t, *sumfin;
    /* per hop */
    i64 *after, *order, norder;
    double *ready, *end;
    theap_t events; /* (time, 0: hop starts streaming | 1: link departure, hop or link, version) */
} ls_t;

/* reference: list_schedule.admit */
static int admit(ls_t *s, i64 e, double now, i64 trigger) {
    theap_t *q = &s->waiting[e];
    while (q->n) {
        if (s->count[e] >= s->window) {
            double busy = s->pend[e] + s->sumfin[e];
            if (s->n[e]) busy -= (double)s->n[e] * (s->v[e] + (now - s->t[e]) * s->rate[e] / (double)s->n[e]);
            if (busy >= s->budget[e]) return 0;
        }
        i64 j = theap_pop(q).x;
        s->after[j] = trigger;
        s->ready[j] = now;
        s->order[s->norder++] = j;
        s->count[e] += 1;
        s->pend[e] += s->size[j];
        tent_t ev = {now + s->lat[e], 0, j, 0};
        if (theap_push(&s->events, ev)) return -1;
    }
    return 0;
}

static int schedule(ls_t *s, const i64 *first, i64 nfirst) {
    for (i64 a = 0; a < nfirst; a++) {
        i64 j = first[a];
        tent_t w = {s->key[j], 0, j, 0};
        if (theap_push(&s->waiting[s->edge[j]], w)) return -1;
    }
    for (i64 e = 0; e < s->ne; e++)
        if (admit(s, e, 0.0, -1)) return -1;
    while (s->events.n) {
        tent_t ev = theap_pop(&s->events);
        double now = ev.t;
        i64 x = ev.x, e = ev.kind == 0 ? s->edge[x] : x;
        if (ev.kind == 1 && ev.ver != s->ver[e]) continue;
        if (s->n[e]) s->v[e] += (now - s->t[e]) * s->rate[e] / (double)s->n[e];
        s->t[e] = now;
        theap_t *fe = &s->fins[e];
        if (ev.kind == 0) {
            tent_t f = {s->v[e] + s->size[x], 0, x, 0};
            if (theap_push(fe, f)) return -1;
            s->sumfin[e] += s->v[e] + s->size[x];
            s->pend[e] -= s->size[x];
            s->n[e] += 1;
        } else {
            if (fe->v[0].t > s->v[e]) s->v[e] = fe->v[0].t;
            i64 trig = -1;
            while (fe->n && fe->v[0].t <= s->v[e] * (1.0 + 1e-12) + 1e-9) {
                tent_t f = theap_pop(fe);
                i64 j = f.x;
                s->sumfin[e] -= f.t;
                s->n[e] -= 1;
                s->count[e] -= 1;
                s->end[j] = now;
                trig = j;
                if (!s->last[j]) {
                    i64 e2 = s->edge[j + 1];
                    tent_t w = {s->key[j + 1], 0, j + 1, 0};
                    if (theap_push(&s->waiting[e2], w)) return -1;
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
    s->nh = nh;
    s->ne = ne;
    s->window = window;
    s->edge = be.buf;
    s->key = bk.buf;
    s->size = bs.buf;
    s->last = bl.buf;
    s->lat = blat.buf;
    s->rate = br.buf;
    s->budget = bb.buf;
    const i64 *first = bf.buf;
    for (i64 j = 0; ok && j < nh; j++) ok = s->edge[j] >= 0 && s->edge[j] < ne && (s->last[j] || j + 1 < nh);
    for (i64 a = 0; ok && a < nfirst; a++) ok = first[a] >= 0 && first[a] < nh;
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "listsched.run: bad arguments");
        goto done;
    }
    {
        size_t H = (size_t)(nh ? nh : 1), E = (size_t)(ne ? ne : 1);
        s->waiting = calloc(E, sizeof(theap_t));
        s->fins = calloc(E, sizeof(theap_t));
        s->count = calloc(E, sizeof(i64));
        s->n = calloc(E, sizeof(i64));
        s->ver = calloc(E, sizeof(i64));
        s->pend = calloc(E, sizeof(double));
        s->v = calloc(E, sizeof(double));
        s->t = calloc(E, sizeof(double));
        s->sumfin = calloc(E, sizeof(double));
        s->after = malloc(sizeof(i64) * H);
        s->order = malloc(sizeof(i64) * H);
        s->ready = calloc(H, sizeof(double));
        s->end = calloc(H, sizeof(double));
        if (!s->waiting || !s->fins || !s->count || !s->n || !s->ver || !s->pend || !s->v || !s->t || !s->sumfin ||
            !s->after || !s->order || !s->ready || !s->end) {
            PyErr_NoMemory();
            goto done;
        }
        for (i64 j = 0; j < nh; j++) s->after[j] = -1;
        int st;
        Py_BEGIN_ALLOW_THREADS
        st = schedule(s, first, nfirst);
        Py_END_ALLOW_THREADS
        if (st == -1)
            PyErr_NoMemory();
        else if (st == -2)
            PyErr_Format(PyExc_RuntimeError, "list schedule admitted %lld of %lld hops", (long long)s->norder,
                         (long long)nh);
        else
            res = Py_BuildValue("(y#y#y#y#)", (const char *)s->order, (Py_ssize_t)(nh * (i64)sizeof(i64)),
                                (const char *)s->after, (Py_ssize_t)(nh * (i64)sizeof(i64)), (const char *)s->ready,
                                (Py_ssize_t)(nh * (i64)sizeof(double)), (const char *)s->end,
                                (Py_ssize_t)(nh * (i64)sizeof(double)));
    }
done:
    if (s->waiting)
        for (i64 e = 0; e < ne; e++) free(s->waiting[e].v);
    if (s->fins)
        for (i64 e = 0; e < ne; e++) free(s->fins[e].v);
    free(s->waiting); free(s->fins); free(s->count); free(s->n); free(s->ver); free(s->pend); free(s->v); free(s->t);
    free(s->sumfin); free(s->after); free(s->order); free(s->ready); free(s->end); free(s->events.v);
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
