/* The fast simulator's event loop, compiled: a2acc.analysis.fastsim._event_loop and the classes it drives
 * (_Dag, the route-group queues, _Fluid) are the reference, and this follows them operation by operation
 * (the same heap order, the same sums in the same order, numpy's pairwise summation where the reference calls
 * ndarray.sum), so the op start and end times are the same floats. The Python module prepares the inputs (the
 * routes, the op classes: solo, route group, fluid) and reports; only the events run here.
 *
 * run(bind, k, cap, size, lat, solo, grp, route_rate, succ_ptr, succ_ids, delay, missing, tolerance,
 *     retire_window, incast, onset) -> (start, end, ep_now, ep_ptr, ep_link, ep_k): float64 / int64 bytes.
 *   bind: int64 [n * k] binding links padded with len(cap); cap: float64 [nl]; size, lat, route_rate: float64 [n];
 *   solo: uint8 [n]; grp: int64 [n] (-1: fluid); succ_ptr: int64 [n + 1]; succ_ids: int64 [m]; delay: float64 [m]
 *   or None; missing: int64 [n] (dependencies per op).
 *   incast: None, or (rx int64 [n], src int64 [n], rx_switch int64 [nl], nranks, buffer_bytes, window_bytes,
 *   dt_alpha, retransmit, fanin_loss): the capacities step with the active set as
 *   a2acc.analysis.simulate.incast_capacity computes them, and the calls the reference makes to
 *   Episodes.update come back as a log (ep_now per call, the overloaded links and fan-ins of call i in
 *   ep_link / ep_k [ep_ptr[i]:ep_ptr[i + 1]]) for the caller to replay; calls that cannot change the episodes
 *   (nothing overloaded now or at the call before) are left out.
 *   onset: None, or (cost float64 [n], side int8 [m], tie): incast onset at step boundaries
 *   (a2acc.analysis.simulate.onset_delay), with each successor edge's side (1 sender, 2 receive port, 0 other).
 *
 * clear_unreached(dep_ptr, dep_ids, a, b, link, ok, budget): for every pair i where op b[i] does not depend
 *   (transitively) on op a[i], ok[link[i]] = 0 (ok: uint8 per link, written in place). The search is
 *   a2acc.analysis.fastsim._reaches (backward from b over ops with id > a, giving up - "not reached" - once
 *   budget ops are seen), in its order, so the links cleared are the reference's. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "maxmin_core.h"
#include "tuple_heap.h"

typedef int64_t i64;

#define SAT_RTOL 1e-9
#define GROUP_MIN 64

/* numpy's float64 add reduction (ndarray.sum): 0.0 + pairwise sum, blocks of 8 accumulators up to 128 */
static double pairwise(const double *a, Py_ssize_t n) {
    if (n < 8) {
        double r = 0.0;
        for (Py_ssize_t i = 0; i < n; i++) r += a[i];
        return r;
    }
    if (n <= 128) {
        double r[8];
        for (int j = 0; j < 8; j++) r[j] = a[j];
        Py_ssize_t i;
        for (i = 8; i < n - (n % 8); i += 8)
            for (int j = 0; j < 8; j++) r[j] += a[i + j];
        double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++) res += a[i];
        return res;
    }
    Py_ssize_t n2 = n / 2;
    n2 -= n2 % 8;
    return pairwise(a, n2) + pairwise(a + n2, n - n2);
}

static double np_sum(const double *a, Py_ssize_t n) { return 0.0 + pairwise(a, n); }

/* ------------------------------------------------------------------------------------------------ state */
enum { REM0, T0, RATE, PROJ, GRACE, NVAL };

typedef struct {
    /* inputs */
    Py_ssize_t n, k, nl;
    const i64 *bind, *grp, *succ_ptr, *succ_ids;
    const double *cap, *size, *lat, *route_rate, *delay;
    const unsigned char *solo;
    double tolerance, retire_window;
    /* incast onset (reference: simulate.onset_delay); NULL when off */
    const double *onset;
    const signed char *side;
    double tie;
    double *sender_t, *port_t;
    /* the DAG (reference: _Dag) */
    i64 *missing;
    double *solo_time, *start, *ready, *act_t, *scale, *end;
    theap_t heap;
    i64 done;
    i64 *stack_o;
    double *stack_t;
    /* route groups (reference: _route_group_queues) */
    Py_ssize_t ngrp;
    double *g_rate, *g_v, *g_t;
    i64 *g_n, *g_ver;
    theap_t *g_fin; /* per group: (finishing virtual time, op) */
    /* fluid flows (reference: _Fluid), in admission order */
    Py_ssize_t nf;
    i64 *ids, *rows;
    double *val;
    unsigned char *bn;
    double deadline, window;
    unsigned char *sat, *seed, *mark;
    i64 *lcount;
    double *on_at, *ext0;
    /* scratch */
    i64 *added;
    Py_ssize_t nadded;
    unsigned char *fin, *comp;
    i64 *crow, *order, *grow, *cflow, *lptr, *lfill, *lflows, *lqueue, *hkey, *hval;
    Py_ssize_t hcap, fcap, acap; /* capacities: hash table, per-flow arrays, the activation batch */
    double *crate, *cw, *load, *level, *tmp1, *tmp2;
    i64 *lon;
    /* incast (reference: simulate.incast_capacity, Episodes) */
    int incast;
    const i64 *rx, *src, *rx_switch;
    i64 nranks;
    double buffer_bytes, window_bytes, dt_alpha, retransmit, fanin_loss;
    double *cur, *prev;      /* capacities now (pad: inf) and at the last evaluation */
    i64 *ikey, *iidx;        /* scratch: the on-flows' (link, sender) keys, sorted */
    double *pbytes, *pin;    /* per pair: bytes; per link: in flight */
    i64 *plink, *pk, *ncong; /* per link: id, senders; per switch: congested ports */
    Py_ssize_t nsw;
    /* the Episodes.update log */
    double *ep_now;
    i64 *ep_ptr, *ep_link, *ep_k;
    Py_ssize_t ep_n, ep_cap, ep_m, ep_mcap;
    int ep_open;
} sim_t;

/* Per-flow arrays sized by the most fluid flows active at once (not by the op count: a 17 M-op Program has a
 * few thousand concurrent flows), grown by doubling; the flow state (ids, rows, val, bn) is kept. */
#define GROW_TO(ptr, n) \
    do { \
        void *np_ = realloc((ptr), (n)); \
        if (!np_) return -1; \
        (ptr) = np_; \
    } while (0)

static int grow_flows(sim_t *s, Py_ssize_t need) {
    if (need <= s->fcap) return 0;
    Py_ssize_t c = s->fcap ? s->fcap : 256;
    while (c < need) c *= 2;
    size_t C = (size_t)c, K = (size_t)s->k;
    GROW_TO(s->ids, sizeof(i64) * C);
    GROW_TO(s->rows, sizeof(i64) * C * K);
    GROW_TO(s->val, sizeof(double) * C * NVAL);
    GROW_TO(s->bn, C * K);
    GROW_TO(s->fin, C);
    GROW_TO(s->comp, C);
    GROW_TO(s->crow, sizeof(i64) * C * K);
    GROW_TO(s->order, sizeof(i64) * C);
    GROW_TO(s->grow, sizeof(i64) * C * K);
    GROW_TO(s->lon, sizeof(i64) * C);
    GROW_TO(s->cflow, sizeof(i64) * C);
    GROW_TO(s->lflows, sizeof(i64) * C * K);
    GROW_TO(s->crate, sizeof(double) * C);
    GROW_TO(s->cw, sizeof(double) * C);
    GROW_TO(s->tmp1, sizeof(double) * C);
    GROW_TO(s->tmp2, sizeof(double) * C);
    Py_ssize_t hc = 16;
    while (hc < 2 * c) hc *= 2;
    GROW_TO(s->hkey, sizeof(i64) * (size_t)hc);
    GROW_TO(s->hval, sizeof(i64) * (size_t)hc);
    s->hcap = hc;
    if (s->incast) {
        GROW_TO(s->ikey, sizeof(i64) * C);
        GROW_TO(s->iidx, sizeof(i64) * C);
        GROW_TO(s->pbytes, sizeof(double) * C);
        GROW_TO(s->pin, sizeof(double) * C);
        GROW_TO(s->plink, sizeof(i64) * C);
        GROW_TO(s->pk, sizeof(i64) * C);
    }
    s->fcap = c;
    return 0;
}

/* reference: a2acc.analysis.simulate.onset_delay */
static double onset_delay(double onset, double sender, double port, double ready, double tie) {
    if (sender <= port + tie) {
        double d = sender + onset - ready;
        return d > 0.0 ? d : 0.0;
    }
    return 0.0;
}

static int finish(sim_t *s, i64 op, double t_end, double t_now) {
    s->end[op] = t_end;
    s->done += 1;
    Py_ssize_t sp = 0;
    s->stack_o[sp] = op;
    s->stack_t[sp++] = t_end;
    while (sp) {
        sp--;
        i64 o = s->stack_o[sp];
        double te = s->stack_t[sp];
        double dur = te - s->act_t[o];
        for (i64 kk = s->succ_ptr[o]; kk < s->succ_ptr[o + 1]; kk++) {
            i64 x = s->succ_ids[kk];
            s->missing[x] -= 1;
            double t_e = s->delay ? te + s->delay[kk] : te;
            if (t_e >= s->ready[x]) {
                s->ready[x] = t_e;
                s->scale[x] = dur;
            }
            if (s->onset) {
                if (s->side[kk] == 1 && te > s->sender_t[x]) s->sender_t[x] = te;
                else if (s->side[kk] == 2 && te > s->port_t[x]) s->port_t[x] = te;
            }
            if (s->missing[x] == 0) {
                double t_ready = s->ready[x];
                s->start[x] = t_ready;
                double t_act = t_ready + s->lat[x];
                if (s->onset && s->onset[x] > 0)
                    t_act += onset_delay(s->onset[x], s->sender_t[x], s->port_t[x], t_ready, s->tie);
                if (s->solo[x]) {
                    s->act_t[x] = t_act;
                    double e = s->act_t[x] + s->solo_time[x];
                    s->end[x] = e;
                    s->done += 1;
                    s->stack_o[sp] = x;
                    s->stack_t[sp++] = e;
                } else {
                    double a = t_act;
                    tent_t ev = {t_now > a ? t_now : a, s->grp[x] < 0 ? 0 : 1, x, 0};
                    if (theap_push(&s->heap, ev)) return -1;
                }
            }
        }
    }
    return 0;
}

static int group_event(sim_t *s, tent_t ev) {
    i64 g = ev.kind == 1 ? s->grp[ev.x] : ev.x;
    if (ev.kind == 2 && ev.ver != s->g_ver[g]) return 0;
    double t_ev = ev.t > s->g_t[g] ? ev.t : s->g_t[g];
    if (s->g_n[g]) s->g_v[g] += (t_ev - s->g_t[g]) * s->g_rate[g] / (double)s->g_n[g];
    s->g_t[g] = t_ev;
    theap_t *fins = &s->g_fin[g];
    if (ev.kind == 1) {
        s->act_t[ev.x] = t_ev;
        tent_t f = {s->g_v[g] + s->size[ev.x], 0, ev.x, 0};
        if (theap_push(fins, f)) return -1;
        s->g_n[g] += 1;
    } else {
        if (fins->v[0].t > s->g_v[g]) s->g_v[g] = fins->v[0].t;
        while (fins->n && fins->v[0].t <= s->g_v[g] * (1.0 + 1e-12) + 1e-9) {
            i64 op = theap_pop(fins).x;
            s->g_n[g] -= 1;
            if (finish(s, op, t_ev, t_ev)) return -1;
        }
    }
    if (fins->n) {
        s->g_ver[g] += 1;
        double t_next = t_ev + (fins->v[0].t - s->g_v[g]) * (double)s->g_n[g] / s->g_rate[g];
        tent_t e = {t_next, 2, g, s->g_ver[g]};
        if (theap_push(&s->heap, e)) return -1;
    }
    return 0;
}

/* reference: _Fluid.activation_batch */
static double activation_batch(sim_t *s, double t_heap) {
    i64 first = s->heap.v[0].x;
    const i64 *links = s->bind + first * s->k;
    double fair = s->ext0[links[0]] / (double)(s->lcount[links[0]] + 1);
    for (Py_ssize_t j = 1; j < s->k; j++) {
        double f = s->ext0[links[j]] / (double)(s->lcount[links[j]] + 1);
        if (f < fair) fair = f;
    }
    double d = s->size[first] / fair, sc = s->scale[first];
    double top = t_heap + 2.0 * s->tolerance * (sc > d ? sc : d);
    if (s->deadline < top) top = s->deadline;
    double tot = 0.0;
    s->nadded = 0;
    while (s->heap.n && s->heap.v[0].t <= top && s->heap.v[0].kind == 0) {
        if (s->nadded == s->acap) {
            Py_ssize_t c = s->acap ? 2 * s->acap : 256;
            i64 *a = realloc(s->added, sizeof(i64) * (size_t)c);
            if (!a) return NAN; /* the caller reports it */
            s->added = a;
            s->acap = c;
        }
        tent_t e = theap_pop(&s->heap);
        tot += e.t;
        s->added[s->nadded++] = e.x;
    }
    double mean = tot / (double)s->nadded;
    double lo = t_heap > mean ? t_heap : mean, hi = (t_heap + top) / 2.0;
    return hi < lo ? hi : lo;
}

static void seed_row(sim_t *s, const i64 *r) {
    for (Py_ssize_t j = 0; j < s->k; j++) s->seed[r[j]] = 1;
}

/* reference: _Fluid.retire; returns 1 when any flow ended, -1 on error */
static int retire(sim_t *s, double horizon, double now, int *seeded) {
    Py_ssize_t nf = s->nf, k = s->k;
    if (!nf) return 0;
    int any = 0;
    for (Py_ssize_t f = 0; f < nf; f++) {
        s->fin[f] = s->val[f * NVAL + PROJ] <= horizon;
        any |= s->fin[f];
    }
    if (!any) return 0;
    for (Py_ssize_t f = 0; f < nf; f++)
        if (s->fin[f])
            for (Py_ssize_t j = 0; j < k; j++) s->lcount[s->rows[f * k + j]] -= 1;
    for (Py_ssize_t f = 0; f < nf; f++)
        if (s->fin[f] && finish(s, s->ids[f], s->val[f * NVAL + PROJ], now)) return -1;
    /* links of the ended flows that were saturated (before anything is cleared), listed in lqueue (free
     * outside solve; each link enters once, so nl entries suffice) */
    Py_ssize_t unsat = 0;
    for (Py_ssize_t f = 0; f < nf; f++)
        if (s->fin[f])
            for (Py_ssize_t j = 0; j < k; j++) {
                i64 l = s->rows[f * k + j];
                if (s->sat[l] == 1) { s->sat[l] = 2; s->lqueue[unsat++] = l; } /* 2: to clear */
            }
    Py_ssize_t keep = 0;
    for (Py_ssize_t f = 0; f < nf; f++) {
        if (s->fin[f]) continue;
        if (keep != f) {
            s->ids[keep] = s->ids[f];
            memcpy(s->rows + keep * k, s->rows + f * k, sizeof(i64) * (size_t)k);
            memcpy(s->val + keep * NVAL, s->val + f * NVAL, sizeof(double) * NVAL);
            memcpy(s->bn + keep * k, s->bn + f * k, (size_t)k);
        }
        keep++;
    }
    s->nf = keep;
    if (unsat) {
        for (Py_ssize_t u = 0; u < unsat; u++) s->sat[s->lqueue[u]] = 0;
        for (Py_ssize_t f = 0; f < keep; f++) {
            int held = 0;
            for (Py_ssize_t j = 0; j < k && !held; j++) held = s->bn[f * k + j] && s->sat[s->rows[f * k + j]];
            if (!held) {
                seed_row(s, s->rows + f * k);
                *seeded = 1;
            }
        }
    }
    return 1;
}

/* reference: _Fluid.admit */
static int admit(sim_t *s, double now, int *seeded) {
    Py_ssize_t k = s->k;
    if (grow_flows(s, s->nf + s->nadded)) return -1;
    for (Py_ssize_t a = 0; a < s->nadded; a++) {
        i64 op = s->added[a];
        s->on_at[op] = now;
        s->act_t[op] = now;
        const i64 *r = s->bind + op * k;
        for (Py_ssize_t j = 0; j < k; j++) s->lcount[r[j]] += 1;
        seed_row(s, r);
        Py_ssize_t f = s->nf++;
        s->ids[f] = op;
        memcpy(s->rows + f * k, r, sizeof(i64) * (size_t)k);
        double *v = s->val + f * NVAL;
        v[REM0] = s->size[op];
        v[T0] = now;
        v[RATE] = 0.0;
        v[PROJ] = INFINITY;
        v[GRACE] = 0.0;
        memset(s->bn + f * k, 0, (size_t)k);
    }
    if (s->nadded) *seeded = 1;
    return 0;
}

/* the rows and their width for the lexicographic comparison, set before each qsort: per thread, since the event
 * loop runs without the GIL (a JIT's background compile may simulate while the main thread does) */
static _Thread_local Py_ssize_t g_k;
static _Thread_local const i64 *g_rows;

static int row_cmp(const void *pa, const void *pb) {
    i64 a = *(const i64 *)pa, b = *(const i64 *)pb;
    const i64 *ra = g_rows + a * g_k, *rb = g_rows + b * g_k;
    for (Py_ssize_t j = 0; j < g_k; j++)
        if (ra[j] != rb[j]) return ra[j] < rb[j] ? -1 : 1;
    return a < b ? -1 : (a > b);
}

/* reference: fastsim._rates over the component's rows crow [nc * k] into crate */
static int rates(sim_t *s, Py_ssize_t nc) {
    Py_ssize_t k = s->k, pad = s->nl;
    int alone = 1;
    for (Py_ssize_t x = 0; x < nc * k && alone; x++)
        if (s->crow[x] != pad && s->lcount[s->crow[x]] != 1) alone = 0;
    if (alone) {
        for (Py_ssize_t c = 0; c < nc; c++) {
            const i64 *r = s->crow + c * k;
            double m = s->cur[r[0]];
            for (Py_ssize_t j = 1; j < k; j++) m = s->cur[r[j]] < m ? s->cur[r[j]] : m;
            s->crate[c] = m;
        }
        return 0;
    }
    if (nc >= GROUP_MIN) {
        /* distinct rows (hashed), then sorted as numpy.unique sorts them (lexicographically): the max-min input
         * in the reference's order, each weighted by how many flows take it */
        Py_ssize_t hc = 16, nu = 0;
        while (hc < 2 * nc) hc *= 2;
        for (Py_ssize_t h = 0; h < hc; h++) s->hkey[h] = -1;
        for (Py_ssize_t c = 0; c < nc; c++) {
            const i64 *r = s->crow + c * k;
            uint64_t hv = 1469598103934665603ULL;
            for (Py_ssize_t j = 0; j < k; j++) hv = (hv ^ (uint64_t)r[j]) * 1099511628211ULL;
            Py_ssize_t h = (Py_ssize_t)((hv ^ (hv >> 29)) & (uint64_t)(hc - 1));
            while (s->hkey[h] >= 0 && memcmp(s->crow + s->hkey[h] * k, r, sizeof(i64) * (size_t)k))
                h = (h + 1) & (hc - 1);
            if (s->hkey[h] < 0) {
                s->hkey[h] = c;
                s->hval[h] = nu;
                s->order[nu++] = c;
            }
            s->lon[c] = s->hval[h];
        }
        if ((double)nu <= 0.8 * (double)nc) {
            i64 *rank = s->hkey; /* the table is done with: distinct id -> sorted position */
            g_k = k;
            g_rows = s->crow;
            qsort(s->order, (size_t)nu, sizeof(i64), row_cmp);
            for (Py_ssize_t u = 0; u < nu; u++) {
                memcpy(s->grow + u * k, s->crow + s->order[u] * k, sizeof(i64) * (size_t)k);
                s->cw[u] = 0.0;
            }
            /* order[u] is a representative flow; its distinct id is lon[order[u]] */
            for (Py_ssize_t u = 0; u < nu; u++) rank[s->lon[s->order[u]]] = u;
            for (Py_ssize_t c = 0; c < nc; c++) s->cw[rank[s->lon[c]]] += 1.0;
            int st = maxmin_core(s->grow, nu, k, s->cur, s->nl, s->cw, s->tmp1);
            if (st) return st;
            for (Py_ssize_t c = 0; c < nc; c++) s->crate[c] = s->tmp1[rank[s->lon[c]]];
            return 0;
        }
    }
    return maxmin_core(s->crow, nc, k, s->cur, s->nl, NULL, s->crate);
}

/* reference: _Fluid.solve and _bottlenecks */
static int solve(sim_t *s, double now) {
    Py_ssize_t nf = s->nf, k = s->k, nl = s->nl;
    s->seed[nl] = 0;
    if (nf > 4) { /* the component through shared links of the seeded links (reference: _component) */
        /* flows per link (CSR over the live flows), then a search from the seeded links */
        i64 *ptr = s->lptr, *lf = s->lflows, *queue = s->lqueue;
        memset(ptr, 0, sizeof(i64) * (size_t)(nl + 2));
        for (Py_ssize_t x = 0; x < nf * k; x++) ptr[s->rows[x] + 1]++;
        for (Py_ssize_t l = 0; l <= nl; l++) ptr[l + 1] += ptr[l];
        memcpy(s->lfill, ptr, sizeof(i64) * (size_t)(nl + 1));
        for (Py_ssize_t f = 0; f < nf; f++)
            for (Py_ssize_t j = 0; j < k; j++) lf[s->lfill[s->rows[f * k + j]]++] = f;
        memcpy(s->mark, s->seed, (size_t)(nl + 1));
        memset(s->comp, 0, (size_t)nf);
        Py_ssize_t qh = 0, qt = 0;
        for (Py_ssize_t l = 0; l < nl; l++)
            if (s->mark[l]) queue[qt++] = l;
        while (qh < qt) {
            i64 l = queue[qh++];
            for (i64 a = ptr[l]; a < ptr[l + 1]; a++) {
                i64 f = lf[a];
                if (s->comp[f]) continue;
                s->comp[f] = 1;
                const i64 *r = s->rows + f * k;
                for (Py_ssize_t j = 0; j < k; j++)
                    if (r[j] != nl && !s->mark[r[j]]) {
                        s->mark[r[j]] = 1;
                        queue[qt++] = r[j];
                    }
            }
        }
    } else {
        memset(s->comp, 1, (size_t)nf);
    }
    Py_ssize_t nc = 0;
    for (Py_ssize_t f = 0; f < nf; f++)
        if (s->comp[f]) {
            memcpy(s->crow + nc * k, s->rows + f * k, sizeof(i64) * (size_t)k);
            s->cflow[nc++] = f;
        }
    const i64 *cflow = s->cflow;
    int st = rates(s, nc);
    if (st) return st;
    for (Py_ssize_t c = 0; c < nc; c++) {
        double *v = s->val + cflow[c] * NVAL;
        double rem = v[REM0] - v[RATE] * (now - v[T0]);
        rem = rem > 0.0 ? rem : (rem == rem ? 0.0 : rem); /* np.maximum(x, 0.0) keeps a NaN */
        double rate = s->crate[c];
        double proj = now + (rate > 0 ? rem / rate : INFINITY);
        v[REM0] = rem;
        v[T0] = now;
        v[RATE] = rate;
        v[PROJ] = proj;
        v[GRACE] = s->retire_window * (proj - s->on_at[s->ids[cflow[c]]]);
    }
    /* bottlenecks: per link the load (sum in flow order) and the largest rate */
    for (Py_ssize_t c = 0; c < nc; c++)
        for (Py_ssize_t j = 0; j < k; j++) {
            i64 l = s->crow[c * k + j];
            s->load[l] = 0.0;
            s->level[l] = 0.0;
        }
    for (Py_ssize_t c = 0; c < nc; c++)
        for (Py_ssize_t j = 0; j < k; j++) {
            i64 l = s->crow[c * k + j];
            double r = s->crate[c];
            s->load[l] += r;
            if (r > s->level[l]) s->level[l] = r;
        }
    for (Py_ssize_t c = 0; c < nc; c++)
        for (Py_ssize_t j = 0; j < k; j++) {
            i64 l = s->crow[c * k + j];
            if (l != nl) s->sat[l] = s->load[l] >= s->cur[l] * (1.0 - SAT_RTOL);
        }
    for (Py_ssize_t c = 0; c < nc; c++)
        for (Py_ssize_t j = 0; j < k; j++) {
            i64 l = s->crow[c * k + j];
            s->bn[cflow[c] * k + j] = s->sat[l] && s->crate[c] >= s->level[l] * (1.0 - SAT_RTOL);
        }
    return 0;
}

/* reference: fastsim._next_retirement */
static void next_retirement(sim_t *s) {
    Py_ssize_t nf = s->nf, i = 0;
    for (Py_ssize_t f = 1; f < nf; f++)
        if (s->val[f * NVAL + PROJ] < s->val[i * NVAL + PROJ]) i = f;
    double first = s->val[i * NVAL + PROJ];
    if (!isfinite(first)) {
        s->deadline = INFINITY;
        s->window = -INFINITY;
        return;
    }
    double g = s->val[i * NVAL + GRACE], top = first + 2.0 * g;
    Py_ssize_t m = 0;
    for (Py_ssize_t f = 0; f < nf; f++) {
        double p = s->val[f * NVAL + PROJ];
        if (p <= top) {
            double w = s->val[f * NVAL + RATE];
            s->tmp1[m] = w;
            s->tmp2[m] = w * p;
            m++;
        }
    }
    double tot = np_sum(s->tmp1, m);
    double t = tot > 0 ? np_sum(s->tmp2, m) / tot : first;
    t = first > t ? first : t;
    s->deadline = first + g < t ? first + g : t;
    s->window = top;
}

static int cmp_i64(const void *pa, const void *pb) {
    i64 a = *(const i64 *)pa, b = *(const i64 *)pb;
    return a < b ? -1 : (a > b);
}

static int ep_log(sim_t *s, double now, Py_ssize_t nover) {
    /* append one Episodes.update call (its links and fan-ins are in plink / pk where the flag tmp1 is set) */
    if (s->ep_n + 1 >= s->ep_cap) {
        Py_ssize_t nc = s->ep_cap ? 2 * s->ep_cap : 256;
        double *a = realloc(s->ep_now, sizeof(double) * (size_t)nc);
        if (!a) return -1;
        s->ep_now = a;
        i64 *b = realloc(s->ep_ptr, sizeof(i64) * (size_t)(nc + 1));
        if (!b) return -1;
        s->ep_ptr = b;
        s->ep_cap = nc;
    }
    if (s->ep_m + nover > s->ep_mcap) {
        Py_ssize_t nc = s->ep_mcap ? 2 * s->ep_mcap : 256;
        while (nc < s->ep_m + nover) nc *= 2;
        i64 *a = realloc(s->ep_link, sizeof(i64) * (size_t)nc), *b;
        if (!a) return -1;
        s->ep_link = a;
        b = realloc(s->ep_k, sizeof(i64) * (size_t)nc);
        if (!b) return -1;
        s->ep_k = b;
        s->ep_mcap = nc;
    }
    s->ep_now[s->ep_n] = now;
    s->ep_ptr[s->ep_n + 1] = s->ep_ptr[s->ep_n] + nover;
    s->ep_n++;
    return 0;
}

/* reference: simulate.incast_capacity over the fluid flows, then Episodes.update and the changed links. Writes
 * the capacities into cur, seeds the links whose capacity changed since the last evaluation. */
static int incast_step(sim_t *s, double now, int *seeded) {
    Py_ssize_t nf = s->nf, nl = s->nl, non = 0, nover = 0;
    for (Py_ssize_t l = 0; l < nl; l++) s->cur[l] = s->cap[l];
    for (Py_ssize_t f = 0; f < nf; f++) {
        i64 op = s->ids[f];
        if (s->rx[op] >= 0) {
            s->ikey[non] = (s->rx[op] * s->nranks + s->src[op]) * (i64)(s->n + 1) + f; /* key, then flow order */
            non++;
        }
    }
    if (non >= 2) {
        qsort(s->ikey, (size_t)non, sizeof(i64), cmp_i64);
        /* pairs (link, sender) in key order, bytes summed in flow order; then per link in pair order */
        Py_ssize_t npair = 0, nlink = 0;
        i64 last = -1;
        for (Py_ssize_t a = 0; a < non; a++) {
            i64 key = s->ikey[a] / (i64)(s->n + 1), f = s->ikey[a] % (i64)(s->n + 1);
            if (a == 0 || key != last) {
                s->iidx[npair] = key;
                s->pbytes[npair++] = 0.0;
                last = key;
            }
            s->pbytes[npair - 1] += s->size[s->ids[f]];
        }
        for (Py_ssize_t p = 0; p < npair; p++) {
            i64 link = s->iidx[p] / s->nranks;
            if (nlink == 0 || s->plink[nlink - 1] != link) {
                s->plink[nlink] = link;
                s->pk[nlink] = 0;
                s->pin[nlink++] = 0.0;
            }
            s->pk[nlink - 1] += 1;
            double b = s->pbytes[p] < s->window_bytes ? s->pbytes[p] : s->window_bytes;
            s->pin[nlink - 1] += b;
        }
        int any = 0;
        for (Py_ssize_t j = 0; j < nlink; j++) any |= s->pk[j] >= 2;
        if (any) {
            for (Py_ssize_t w = 0; w < s->nsw; w++) s->ncong[w] = 0;
            for (Py_ssize_t j = 0; j < nlink; j++)
                if (s->pk[j] >= 2) s->ncong[s->rx_switch[s->plink[j]]] += 1;
            double top = s->buffer_bytes * s->dt_alpha;
            for (Py_ssize_t j = 0; j < nlink; j++) {
                s->tmp1[j] = 0.0;
                if (s->pk[j] < 2) continue;
                i64 nc = s->ncong[s->rx_switch[s->plink[j]]];
                double q = top / (1.0 + s->dt_alpha * (double)(nc > 1 ? nc : 1));
                if (!(s->pin[j] > q)) continue;
                double waste = s->retransmit * pow((double)(s->pk[j] - 1 > 1 ? s->pk[j] - 1 : 1), s->fanin_loss);
                double eta = 1.0 / (1.0 + waste * (1.0 - q / s->pin[j]));
                s->cur[s->plink[j]] = s->cap[s->plink[j]] * eta;
                s->tmp1[j] = 1.0;
                nover++;
            }
            if (nover || s->ep_open) {
                if (ep_log(s, now, nover)) return -1;
                Py_ssize_t at = (Py_ssize_t)s->ep_ptr[s->ep_n - 1];
                for (Py_ssize_t j = 0; j < nlink; j++)
                    if (s->tmp1[j] != 0.0) {
                        s->ep_link[at] = s->plink[j];
                        s->ep_k[at++] = s->pk[j];
                    }
                s->ep_m = at;
            }
        } else if (s->ep_open) {
            if (ep_log(s, now, 0)) return -1;
        }
    } else if (s->ep_open) {
        if (ep_log(s, now, 0)) return -1;
    }
    s->ep_open = nover > 0;
    for (Py_ssize_t l = 0; l < nl; l++)
        if (s->cur[l] != s->prev[l]) {
            s->seed[l] = 1;
            *seeded = 1;
            s->prev[l] = s->cur[l];
        }
    return 0;
}

static int event_loop(sim_t *s) {
    while (s->done < s->n) {
        double t_heap = s->heap.n ? s->heap.v[0].t : INFINITY;
        if (t_heap == INFINITY && s->deadline == INFINITY) return -3;
        if (t_heap <= s->deadline && s->heap.v[0].kind != 0) {
            if (group_event(s, theap_pop(&s->heap))) return -1;
            continue;
        }
        double now, horizon;
        s->nadded = 0;
        if (t_heap <= s->deadline) {
            now = activation_batch(s, t_heap);
            if (isnan(now)) return -1;
            horizon = now;
        } else {
            now = s->deadline;
            horizon = s->window;
        }
        int seeded = 0;
        memset(s->seed, 0, (size_t)(s->nl + 1));
        int retired = retire(s, horizon, now, &seeded);
        if (retired < 0) return -1;
        if (s->nadded) {
            if (admit(s, now, &seeded)) return -1;
        }
        else if (!retired)
            continue;
        if (!s->nf) {
            if (s->incast && s->ep_open) { /* Episodes.update(now, none, none) closes what was open */
                if (ep_log(s, now, 0)) return -1;
                s->ep_open = 0;
            }
            s->deadline = INFINITY;
            s->window = -INFINITY;
            continue;
        }
        if (s->incast && incast_step(s, now, &seeded)) return -1;
        if (seeded) {
            int st = solve(s, now);
            if (st) return st;
        }
        next_retirement(s);
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------------ Python */
static void *buf_of(Py_buffer *b, Py_ssize_t want, Py_ssize_t item, int *ok) {
    if (b->len != want * item) *ok = 0;
    return b->buf;
}

static PyObject *py_run(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer bb, bc, bs, bl, bso, bg, br, bp, bi, bd, bm, brx, bsrc, bsw, bon, bsd;
    Py_ssize_t k;
    PyObject *dobj, *iobj, *oobj;
    double tolerance, retire_window;
    if (!PyArg_ParseTuple(args, "y*ny*y*y*y*y*y*y*y*Oy*ddOO", &bb, &k, &bc, &bs, &bl, &bso, &bg, &br, &bp, &bi,
                          &dobj, &bm, &tolerance, &retire_window, &iobj, &oobj))
        return NULL;
    int have_d = dobj != Py_None, have_i = iobj != Py_None, have_o = oobj != Py_None;
    memset(&bd, 0, sizeof(bd));
    memset(&brx, 0, sizeof(brx));
    memset(&bsrc, 0, sizeof(bsrc));
    memset(&bsw, 0, sizeof(bsw));
    memset(&bon, 0, sizeof(bon));
    memset(&bsd, 0, sizeof(bsd));
    sim_t S;
    memset(&S, 0, sizeof(S));
    sim_t *s = &S;
    if ((have_d && PyObject_GetBuffer(dobj, &bd, PyBUF_SIMPLE) < 0) ||
        (have_i && !PyArg_ParseTuple(iobj, "y*y*y*Lddddd", &brx, &bsrc, &bsw, &s->nranks, &s->buffer_bytes,
                                     &s->window_bytes, &s->dt_alpha, &s->retransmit, &s->fanin_loss)) ||
        (have_o && !PyArg_ParseTuple(oobj, "y*y*d", &bon, &bsd, &s->tie))) {
        Py_buffer *all[] = {&bb, &bc, &bs, &bl, &bso, &bg, &br, &bp, &bi, &bm};
        for (size_t q = 0; q < sizeof(all) / sizeof(all[0]); q++) PyBuffer_Release(all[q]);
        Py_buffer *opt[] = {&bd, &brx, &bsrc, &bsw, &bon, &bsd};
        for (size_t q = 0; q < sizeof(opt) / sizeof(opt[0]); q++)
            if (opt[q]->obj) PyBuffer_Release(opt[q]);
        return NULL;
    }
    PyObject *res = NULL;
    int ok = k > 0;
    Py_ssize_t n = (Py_ssize_t)(bs.len / (Py_ssize_t)sizeof(double));
    Py_ssize_t nl = (Py_ssize_t)(bc.len / (Py_ssize_t)sizeof(double));
    Py_ssize_t m = (Py_ssize_t)(bi.len / (Py_ssize_t)sizeof(i64));
    s->n = n;
    s->k = k;
    s->nl = nl;
    s->bind = buf_of(&bb, n * k, sizeof(i64), &ok);
    s->cap = buf_of(&bc, nl, sizeof(double), &ok);
    s->size = bs.buf;
    s->lat = buf_of(&bl, n, sizeof(double), &ok);
    s->solo = buf_of(&bso, n, 1, &ok);
    s->grp = buf_of(&bg, n, sizeof(i64), &ok);
    s->route_rate = buf_of(&br, n, sizeof(double), &ok);
    s->succ_ptr = buf_of(&bp, n + 1, sizeof(i64), &ok);
    s->succ_ids = bi.buf;
    s->delay = have_d ? buf_of(&bd, m, sizeof(double), &ok) : NULL;
    if (have_o) {
        s->onset = buf_of(&bon, n, sizeof(double), &ok);
        s->side = buf_of(&bsd, m, 1, &ok);
        for (Py_ssize_t x = 0; ok && x < m; x++) ok = s->side[x] >= 0 && s->side[x] <= 2;
    }
    const i64 *miss0 = buf_of(&bm, n, sizeof(i64), &ok);
    s->tolerance = tolerance;
    s->retire_window = retire_window;
    for (Py_ssize_t x = 0; ok && x < n * k; x++) ok = s->bind[x] >= 0 && s->bind[x] <= nl;
    for (Py_ssize_t x = 0; ok && x < m; x++) ok = s->succ_ids[x] >= 0 && s->succ_ids[x] < n;
    for (Py_ssize_t x = 0; ok && x < n; x++) ok = s->succ_ptr[x] <= s->succ_ptr[x + 1];
    ok = ok && s->succ_ptr[0] == 0 && s->succ_ptr[n] == m;
    if (have_i) {
        s->incast = 1;
        s->rx = buf_of(&brx, n, sizeof(i64), &ok);
        s->src = buf_of(&bsrc, n, sizeof(i64), &ok);
        s->rx_switch = buf_of(&bsw, nl, sizeof(i64), &ok);
        ok = ok && s->nranks > 0;
        for (Py_ssize_t x = 0; ok && x < nl; x++)
            if (s->rx_switch[x] + 1 > s->nsw) s->nsw = s->rx_switch[x] + 1;
        for (Py_ssize_t x = 0; ok && x < n; x++)
            ok = s->rx[x] >= -1 && s->rx[x] < nl && (s->rx[x] < 0 || s->rx_switch[s->rx[x]] >= 0) &&
                 s->src[x] >= 0 && s->src[x] < s->nranks;
        /* the (link, sender, flow) sort key must fit 63 bits */
        ok = ok && (double)nl * (double)s->nranks * (double)(n + 1) < 4.0e18;
    }
    i64 ngrp = 0;
    for (Py_ssize_t x = 0; ok && x < n; x++) {
        ok = s->grp[x] >= -1;
        if (s->grp[x] + 1 > ngrp) ngrp = s->grp[x] + 1;
    }
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "fastsim.run: bad arguments");
        goto done;
    }
    {
        size_t N = (size_t)(n ? n : 1), L = (size_t)(nl + 1);
        s->ngrp = ngrp;
        s->missing = malloc(sizeof(i64) * N);
        s->solo_time = malloc(sizeof(double) * N);
        s->start = malloc(sizeof(double) * N);
        s->ready = calloc(N, sizeof(double));
        if (have_o) {
            s->sender_t = calloc(N, sizeof(double));
            s->port_t = malloc(sizeof(double) * N);
            if (s->port_t)
                for (size_t q = 0; q < N; q++) s->port_t[q] = -INFINITY;
        }
        s->act_t = calloc(N, sizeof(double));
        s->scale = calloc(N, sizeof(double));
        s->end = malloc(sizeof(double) * N);
        s->stack_o = malloc(sizeof(i64) * N);
        s->stack_t = malloc(sizeof(double) * N);
        s->g_rate = calloc((size_t)ngrp + 1, sizeof(double));
        s->g_v = calloc((size_t)ngrp + 1, sizeof(double));
        s->g_t = calloc((size_t)ngrp + 1, sizeof(double));
        s->g_n = calloc((size_t)ngrp + 1, sizeof(i64));
        s->g_ver = calloc((size_t)ngrp + 1, sizeof(i64));
        s->g_fin = calloc((size_t)ngrp + 1, sizeof(theap_t));
        s->sat = calloc(L, 1);
        s->seed = calloc(L, 1);
        s->mark = calloc(L, 1);
        s->lcount = calloc(L, sizeof(i64));
        s->on_at = calloc(N, sizeof(double));
        s->ext0 = malloc(sizeof(double) * L);
        s->lptr = malloc(sizeof(i64) * (L + 1));
        s->lfill = malloc(sizeof(i64) * L);
        s->lqueue = malloc(sizeof(i64) * L);
        s->load = calloc(L, sizeof(double));
        s->level = calloc(L, sizeof(double));
        s->cur = malloc(sizeof(double) * L);
        s->prev = malloc(sizeof(double) * L);
        if (s->incast) {
            s->ncong = malloc(sizeof(i64) * (size_t)(s->nsw + 1));
            s->ep_ptr = malloc(sizeof(i64) * 257);
            s->ep_now = malloc(sizeof(double) * 256);
            s->ep_cap = 256;
            if (!s->ncong || !s->ep_ptr || !s->ep_now) {
                PyErr_NoMemory();
                goto done;
            }
            s->ep_ptr[0] = 0;
        }
        if ((have_o && (!s->sender_t || !s->port_t)) || !s->missing || !s->solo_time || !s->start || !s->ready ||
            !s->act_t || !s->scale || !s->end ||
            !s->stack_o || !s->stack_t || !s->g_rate || !s->g_v || !s->g_t || !s->g_n || !s->g_ver || !s->g_fin ||
            !s->sat || !s->seed || !s->mark || !s->lcount || !s->on_at || !s->ext0 || !s->lptr || !s->lfill ||
            !s->lqueue || !s->load || !s->level || !s->cur || !s->prev) {
            PyErr_NoMemory();
            goto done;
        }
        for (Py_ssize_t x = 0; x < n; x++) {
            s->missing[x] = miss0[x];
            s->solo_time[x] = s->size[x] > 0 ? s->size[x] / s->route_rate[x] : 0.0;
            s->start[x] = NAN;
            s->end[x] = NAN;
            if (s->grp[x] >= 0) s->g_rate[s->grp[x]] = s->route_rate[x];
        }
        for (Py_ssize_t l = 0; l < nl; l++) s->ext0[l] = s->cap[l];
        s->ext0[nl] = INFINITY;
        for (Py_ssize_t l = 0; l <= nl; l++) s->cur[l] = s->prev[l] = s->ext0[l];
        s->deadline = INFINITY;
        s->window = -INFINITY;
        int st = 0;
        Py_BEGIN_ALLOW_THREADS
        /* reference: _Dag.start_roots */
        for (Py_ssize_t x = 0; x < n && !st; x++) {
            if (miss0[x] != 0) continue; /* the roots as they were: finishing one releases others */
            s->start[x] = 0.0;
            if (s->solo[x]) {
                s->act_t[x] = s->lat[x];
                st = finish(s, x, s->lat[x] + s->solo_time[x], 0.0);
            } else {
                tent_t e = {s->lat[x], s->grp[x] < 0 ? 0 : 1, x, 0};
                st = theap_push(&s->heap, e);
            }
        }
        if (!st) st = event_loop(s);
        Py_END_ALLOW_THREADS
        if (st == -1)
            PyErr_NoMemory();
        else if (st == -2)
            PyErr_SetString(PyExc_ArithmeticError, "fastsim.run: a flow without a binding link");
        else if (st == -3)
            PyErr_SetString(PyExc_ArithmeticError, "fastsim.run: simulation stalled (zero-capacity link?)");
        else
            res = Py_BuildValue("(y#y#y#y#y#y#)", (const char *)s->start, (Py_ssize_t)(n * (Py_ssize_t)sizeof(double)),
                                (const char *)s->end, (Py_ssize_t)(n * (Py_ssize_t)sizeof(double)),
                                s->ep_now ? (const char *)s->ep_now : "", (Py_ssize_t)(s->ep_n * (Py_ssize_t)sizeof(double)),
                                s->ep_ptr ? (const char *)s->ep_ptr : "",
                                (Py_ssize_t)(s->incast ? (s->ep_n + 1) * (Py_ssize_t)sizeof(i64) : 0),
                                s->ep_link ? (const char *)s->ep_link : "", (Py_ssize_t)(s->ep_m * (Py_ssize_t)sizeof(i64)),
                                s->ep_k ? (const char *)s->ep_k : "", (Py_ssize_t)(s->ep_m * (Py_ssize_t)sizeof(i64)));
    }
done:
    free(s->missing); free(s->solo_time); free(s->start); free(s->ready); free(s->act_t); free(s->scale);
    free(s->end); free(s->stack_o); free(s->stack_t); free(s->g_rate); free(s->g_v); free(s->g_t); free(s->g_n);
    free(s->g_ver);
    if (s->g_fin)
        for (Py_ssize_t g = 0; g < s->ngrp; g++) free(s->g_fin[g].v);
    free(s->g_fin); free(s->ids); free(s->rows); free(s->val); free(s->bn); free(s->sat); free(s->seed);
    free(s->mark); free(s->lcount); free(s->on_at); free(s->ext0); free(s->added); free(s->fin); free(s->comp);
    free(s->crow); free(s->order); free(s->grow); free(s->lon); free(s->cflow); free(s->lptr); free(s->lfill); free(s->lflows); free(s->lqueue);
    free(s->hkey); free(s->hval); free(s->crate); free(s->cw); free(s->load);
    free(s->level); free(s->tmp1); free(s->tmp2); free(s->heap.v);
    free(s->cur); free(s->prev); free(s->ikey); free(s->iidx); free(s->pbytes); free(s->pin); free(s->plink);
    free(s->pk); free(s->ncong); free(s->ep_now); free(s->ep_ptr); free(s->ep_link); free(s->ep_k);
    free(s->sender_t); free(s->port_t);
    Py_buffer *all[] = {&bb, &bc, &bs, &bl, &bso, &bg, &br, &bp, &bi, &bm};
    for (size_t q = 0; q < sizeof(all) / sizeof(all[0]); q++) PyBuffer_Release(all[q]);
    if (have_d) PyBuffer_Release(&bd);
    if (have_i) {
        PyBuffer_Release(&brx);
        PyBuffer_Release(&bsrc);
        PyBuffer_Release(&bsw);
    }
    if (have_o) {
        PyBuffer_Release(&bon);
        PyBuffer_Release(&bsd);
    }
    return res;
}

/* reference: fastsim._reaches; seen[] holds the search's stamp */
static int reaches(i64 a, i64 b, const i64 *dep_ptr, const i64 *dep_ids, i64 budget, i64 *seen, i64 stamp,
                   i64 *stack) {
    Py_ssize_t sp = 0, nseen = 1;
    stack[sp++] = b;
    seen[b] = stamp;
    while (sp) {
        i64 x = stack[--sp];
        for (i64 q = dep_ptr[x]; q < dep_ptr[x + 1]; q++) {
            i64 d = dep_ids[q];
            if (d == a) return 1;
            if (d > a && seen[d] != stamp) {
                if (nseen >= budget) return 0;
                seen[d] = stamp;
                nseen++;
                stack[sp++] = d;
            }
        }
    }
    return 0;
}

static PyObject *py_clear_unreached(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer bp, bi, ba, bb, bl, bo;
    i64 budget;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*w*L", &bp, &bi, &ba, &bb, &bl, &bo, &budget)) return NULL;
    PyObject *res = NULL;
    Py_ssize_t n = bp.len / (Py_ssize_t)sizeof(i64) - 1, m = bi.len / (Py_ssize_t)sizeof(i64);
    Py_ssize_t np_ = ba.len / (Py_ssize_t)sizeof(i64), nl = bo.len;
    const i64 *dep_ptr = bp.buf, *dep_ids = bi.buf, *a = ba.buf, *b = bb.buf, *link = bl.buf;
    unsigned char *ok = bo.buf;
    int good = n >= 0 && budget > 0 && bb.len == ba.len && bl.len == ba.len && dep_ptr[0] == 0 && dep_ptr[n] == m;
    for (Py_ssize_t x = 0; good && x < n; x++) good = dep_ptr[x] <= dep_ptr[x + 1];
    for (Py_ssize_t x = 0; good && x < m; x++) good = dep_ids[x] >= 0 && dep_ids[x] < n;
    for (Py_ssize_t x = 0; good && x < np_; x++)
        good = a[x] >= 0 && a[x] < n && b[x] >= 0 && b[x] < n && link[x] >= 0 && link[x] < nl;
    if (!good) {
        PyErr_SetString(PyExc_ValueError, "fastsim.clear_unreached: bad arguments");
        goto done;
    }
    {
        size_t N = (size_t)(n ? n : 1);
        i64 *seen = malloc(sizeof(i64) * N), *stack = malloc(sizeof(i64) * (N + 1));
        if (!seen || !stack) {
            free(seen);
            free(stack);
            PyErr_NoMemory();
            goto done;
        }
        for (Py_ssize_t x = 0; x < n; x++) seen[x] = -1;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t x = 0; x < np_; x++)
            if (ok[link[x]] && !reaches(a[x], b[x], dep_ptr, dep_ids, budget, seen, x, stack)) ok[link[x]] = 0;
        Py_END_ALLOW_THREADS
        free(seen);
        free(stack);
        res = Py_None;
        Py_INCREF(res);
    }
done:
    PyBuffer_Release(&bp);
    PyBuffer_Release(&bi);
    PyBuffer_Release(&ba);
    PyBuffer_Release(&bb);
    PyBuffer_Release(&bl);
    PyBuffer_Release(&bo);
    return res;
}

static PyMethodDef METHODS[] = {
    {"run", py_run, METH_VARARGS, "run the fast simulator's events; (start, end) per op as float64 bytes"},
    {"clear_unreached", py_clear_unreached, METH_VARARGS,
     "clear the links of the op pairs whose later op does not depend on the earlier one"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_fastsim", NULL, -1, METHODS, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__fastsim(void) { return PyModule_Create(&MODULE); }
