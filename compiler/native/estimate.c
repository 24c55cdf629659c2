/* The ranking estimate, compiled: a2acc.analysis.estimate is the reference (its numpy preparation, then the
 * fast simulator's Python event loop with every op in a processor-sharing queue), and this follows it operation
 * by operation - the same sums in the same order, the same comparisons, the same event order - so the estimate
 * is the same float. One call prepares the candidate and runs its events: no Program object, no per-op Python.
 *
 * estimate(src, dst, cnt, stage, dep_ptr, dep_ids, unit, nranks, pair_bind, k, pair_alpha, pair_rx, cap,
 *          rx_switch, alpha_s, stage_s, eager_bytes, fill_bytes, incast, above) -> float (the makespan, seconds,
 *          or inf when it is past ``above``: the search's best so far, a bound that lets a hopeless candidate stop)
 *   per op (n): src, dst, cnt, stage int64; dep_ptr int64 [n + 1], dep_ids int64 (a topological order: every
 *   dependency of op i is below i); per rank pair (nranks^2, src * nranks + dst): pair_bind int64 [k per pair]
 *   (binding links padded with nl = len(cap)), pair_alpha float64, pair_rx int64 (-1: none); per link:
 *   cap float64 [nl] (after goodput), rx_switch int64 [nl]; incast: None or (buffer_bytes, window_bytes,
 *   dt_alpha, retransmit, fanin_loss).
 *
 * The steps, each as the reference computes it (a2acc.analysis.simulate for the first three):
 *   1. the DAG's successors (Routes: a stable sort of the dependency edges by dependency), kept per class of
 *      ops with one pair and one dependency list when ops have four or more edges each (such ops become ready
 *      together, with the same delays: the same ready times, each shared edge walked once);
 *   2. synchronised ops and their message bytes (simulate.synchronised: the ops of one pair with the same
 *      dependency set are one message, keyed by a 64-bit sum of splitmix64 over the dependency ids; with
 *      classes, a message is a class);
 *   3. per successor edge the delay (Routes.step_delays: the pipeline fill on the sender's side, the rendezvous
 *      on the receiver's);
 *   4. the queues (estimate._queues, _incast_efficiency): per receive link and stage the incast goodput, then
 *      per op the binding link with the most bytes per capacity, queues numbered in sorted (link, stage) order;
 *   5. the events (fastsim._Dag, _route_group_queues, _event_loop with no fluid op): activations (kind 1, by op)
 *      and departures (kind 2, by queue) in (time, kind, id) order. The reference keeps stale departures in its
 *      heap and skips them; here each queue has one departure slot in an indexed heap, which pops the valid ones
 *      in the same order; the roots' activations, known up front, are sorted once and read beside the heap.
 * Nothing above changes a float: maxima and (time, id) orders do not depend on the order they are taken in. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int64_t i64;

/* dependency edges per op from which ops are grouped into classes (step 1); below it each op is its own */
#ifndef CLASS_EDGES
#define CLASS_EDGES 4
#endif
typedef uint64_t u64;

/* ------------------------------------------------------------------------------------------- small tools */
static u64 mix64(u64 x) { /* simulate._mix64: splitmix64's finaliser */
    u64 z = x + 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static int cmp_i64(const void *a, const void *b) {
    i64 x = *(const i64 *)a, y = *(const i64 *)b;
    return x < y ? -1 : (x > y);
}

/* min-heaps of (t, x) entries ordered by t, then x: plain (activations, a queue's departures) and indexed
 * (pos[x]: where x's one entry is, or -1; the queues' next departures, moved in place) */
typedef struct {
    double t;
    i64 x;
} ent_t;

typedef struct {
    ent_t *v;
    i64 *pos; /* NULL: plain */
    Py_ssize_t n;
} heap_t;

#define LESS(a, b) ((a).t != (b).t ? (a).t < (b).t : (a).x < (b).x)

static int cmp_ent(const void *a, const void *b) { /* qsort in LESS order */
    const ent_t *x = a, *y = b;
    return LESS(*x, *y) ? -1 : LESS(*y, *x);
}
#define ARITY 4 /* a 4-ary heap: half the levels of a binary one, its children in one cache line */

static void sift_up(heap_t *h, Py_ssize_t i, ent_t e) {
    while (i > 0) {
        Py_ssize_t p = (i - 1) / ARITY;
        if (!LESS(e, h->v[p])) break;
        h->v[i] = h->v[p];
        if (h->pos) h->pos[h->v[i].x] = i;
        i = p;
    }
    h->v[i] = e;
    if (h->pos) h->pos[e.x] = i;
}

static void sift_down(heap_t *h, Py_ssize_t i, ent_t e) {
    Py_ssize_t n = h->n;
    for (;;) {
        Py_ssize_t c = ARITY * i + 1, end = c + ARITY < n ? c + ARITY : n;
        if (c >= n) break;
        for (Py_ssize_t d = c + 1; d < end; d++)
            if (LESS(h->v[d], h->v[c])) c = d;
        if (!LESS(h->v[c], e)) break;
        h->v[i] = h->v[c];
        if (h->pos) h->pos[h->v[i].x] = i;
        i = c;
    }
    h->v[i] = e;
    if (h->pos) h->pos[e.x] = i;
}

static void push(heap_t *h, double t, i64 x) {
    ent_t e = {t, x};
    sift_up(h, h->n++, e);
}

/* the top removed: its hole walks down the smaller children to a leaf, and the last entry climbs from there
 * (Floyd's variant: the last entry mostly belongs near the bottom, so this spares a comparison per level) */
static void pop_top(heap_t *h) {
    if (h->pos) h->pos[h->v[0].x] = -1;
    Py_ssize_t n = --h->n, i = 0;
    if (n <= 0) return;
    for (;;) {
        Py_ssize_t c = ARITY * i + 1, end = c + ARITY < n ? c + ARITY : n;
        if (c >= n) break;
        for (Py_ssize_t d = c + 1; d < end; d++)
            if (LESS(h->v[d], h->v[c])) c = d;
        h->v[i] = h->v[c];
        if (h->pos) h->pos[h->v[i].x] = i;
        i = c;
    }
    sift_up(h, i, h->v[n]);
}

/* an indexed heap: x's entry set to t (inserted, or moved up or down) */
static void set_key(heap_t *h, double t, i64 x) {
    Py_ssize_t i = h->pos[x];
    ent_t e = {t, x};
    if (i < 0)
        sift_up(h, h->n++, e);
    else if (t < h->v[i].t)
        sift_up(h, i, e);
    else
        sift_down(h, i, e);
}

/* ----------------------------------------------------------------------------------------------- state */
typedef struct {
    Py_ssize_t n;
    const i64 *grp, *succ_ptr, *succ_ids; /* successors per op: classes (below), each edge once */
    const i64 *cmem_ptr, *cmem;            /* per class its ops, ascending (NULL: each op its own class) */
    const double *size, *lat, *delay, *solo_time;
    const unsigned char *solo;
    i64 *missing, done; /* missing: per class */
    double *ready, *end; /* ready: per class; end: per op */
    i64 *stack_o;
    double *stack_t;
    heap_t act;              /* activations: (time, op) */
    heap_t dep;              /* departures: (time, queue), indexed */
    double *g_rate, *g_v, *g_t;
    double *left;  /* per queue: the time its unserved work takes at its rate (the bound below), or NULL */
    double limit;  /* the bound past which the candidate stops (with left) */
    int past;      /* a queue's bound passed it */
    i64 *g_n;
    heap_t *g_fin; /* per queue: (finishing virtual time, op), a plain heap in one shared buffer */
} est_t;

/* op x's dependencies are done, the last at t_now, the latest with its delay at t_ready: a zero-byte op ends
 * (its successors next, from the stack), any other is activated */
static inline void on_ready(est_t *s, i64 x, double t_ready, double t_now, Py_ssize_t *sp) {
    if (s->solo[x]) {
        double fin = t_ready + s->lat[x] + s->solo_time[x];
        s->end[x] = fin;
        s->done += 1;
        s->stack_o[*sp] = x;
        s->stack_t[(*sp)++] = fin;
    } else {
        double a = t_ready + s->lat[x];
        push(&s->act, t_now > a ? t_now : a, x);
    }
}

/* reference: fastsim._Dag._finisher */
static void finish(est_t *s, i64 op, double t_end, double t_now) {
    s->end[op] = t_end;
    s->done += 1;
    Py_ssize_t sp = 0;
    s->stack_o[sp] = op;
    s->stack_t[sp++] = t_end;
    while (sp) {
        sp--;
        i64 o = s->stack_o[sp];
        double te = s->stack_t[sp];
        for (i64 e = s->succ_ptr[o]; e < s->succ_ptr[o + 1]; e++) {
            i64 c = s->succ_ids[e];
            s->missing[c] -= 1;
            double t_e = te + s->delay[e];
            if (t_e >= s->ready[c]) s->ready[c] = t_e;
            if (s->missing[c] != 0) continue;
            if (!s->cmem) /* each op its own class */
                on_ready(s, c, s->ready[c], t_now, &sp);
            else /* every op of the class: the same dependencies, the same delays */
                for (i64 j = s->cmem_ptr[c]; j < s->cmem_ptr[c + 1]; j++) on_ready(s, s->cmem[j], s->ready[c], t_now, &sp);
        }
    }
}

/* reference: fastsim._route_group_queues' event, after its time and queue were settled: schedule the queue's
 * next departure (or none) */
static void next_departure(est_t *s, i64 g, double t_ev) {
    heap_t *fins = &s->g_fin[g];
    if (fins->n) /* (an emptied queue's slot was popped with its departure: the reference's goes stale) */
        set_key(&s->dep, t_ev + (fins->v[0].t - s->g_v[g]) * (double)s->g_n[g] / s->g_rate[g], g);
}

static void advance(est_t *s, i64 g, double *t_ev) {
    if (*t_ev < s->g_t[g]) *t_ev = s->g_t[g];
    if (s->g_n[g]) {
        s->g_v[g] += (*t_ev - s->g_t[g]) * s->g_rate[g] / (double)s->g_n[g];
        /* busy since g_t: that much of its work is served, so its bound g_t + left stays (up to rounding,
         * far below the bound's margin) */
        if (s->left) s->left[g] -= *t_ev - s->g_t[g];
    } else if (s->left && *t_ev + s->left[g] > s->limit) {
        /* idle since g_t, its work starts no sooner than now: the only way a queue's bound rises, so checking
         * it here is checking the largest */
        s->past = 1;
    }
    s->g_t[g] = *t_ev;
}

static void arrive(est_t *s, i64 x, double t_ev) {
    i64 g = s->grp[x];
    advance(s, g, &t_ev);
    heap_t *fins = &s->g_fin[g];
    push(fins, s->g_v[g] + s->size[x], x);
    s->g_n[g] += 1;
    next_departure(s, g, t_ev);
}

static void depart(est_t *s, i64 g, double t_ev) {
    advance(s, g, &t_ev);
    heap_t *fins = &s->g_fin[g];
    if (fins->v[0].t > s->g_v[g]) s->g_v[g] = fins->v[0].t;
    while (fins->n && fins->v[0].t <= s->g_v[g] * (1.0 + 1e-12) + 1e-9) {
        i64 op = fins->v[0].x;
        pop_top(fins);
        s->g_n[g] -= 1;
        finish(s, op, t_ev, t_ev);
    }
    /* the queue's entry is still the departures' top (nothing above touches that heap): moved to the next
     * departure in place, or removed with the queue emptied */
    if (fins->n)
        next_departure(s, g, t_ev);
    else
        pop_top(&s->dep);
}

/* --------------------------------------------------------------------------------------- preparation */
typedef struct {
    double buffer_bytes, window_bytes, dt_alpha, retransmit, fanin_loss;
} incast_t;

/* estimate._incast_efficiency: per op the goodput of its receive link in its stage */
static int incast_eff(Py_ssize_t n, const i64 *src, const i64 *stage, i64 stages, const i64 *rx,
                      const double *size, i64 nranks, const i64 *rx_switch, const incast_t *in, double *eff) {
    Py_ssize_t m = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        eff[i] = 1.0;
        m += rx[i] >= 0;
    }
    if (!m) return 0;
    /* pairs (port, sender), sorted; bytes summed in op order */
    i64 *key = malloc(sizeof(i64) * (size_t)m), *opk = malloc(sizeof(i64) * (size_t)n);
    i64 *ukey = malloc(sizeof(i64) * (size_t)m);
    double *pb = calloc((size_t)m, sizeof(double));
    if (!key || !opk || !ukey || !pb) {
        free(key); free(opk); free(ukey); free(pb);
        return -1;
    }
    Py_ssize_t j = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        if (rx[i] >= 0) key[j++] = (rx[i] * stages + stage[i]) * nranks + src[i];
    memcpy(ukey, key, sizeof(i64) * (size_t)m);
    qsort(ukey, (size_t)m, sizeof(i64), cmp_i64);
    Py_ssize_t npair = 0;
    for (Py_ssize_t a = 0; a < m; a++)
        if (!a || ukey[a] != ukey[npair - 1]) ukey[npair++] = ukey[a];
    for (Py_ssize_t i = 0, a = 0; i < n; i++) {
        if (rx[i] < 0) continue;
        /* binary search of the op's pair */
        i64 kk = key[a++];
        Py_ssize_t lo = 0, hi = npair - 1;
        while (lo < hi) {
            Py_ssize_t mid = (lo + hi) / 2;
            if (ukey[mid] < kk) lo = mid + 1; else hi = mid;
        }
        opk[i] = lo;
        pb[lo] += size[i];
    }
    /* ports (pairs in order): fan-in and bytes in flight (summed in pair order) */
    i64 *pport = key; /* reuse: per pair its port index */
    i64 *port = malloc(sizeof(i64) * (size_t)npair), *fan = calloc((size_t)npair, sizeof(i64));
    double *infl = calloc((size_t)npair, sizeof(double)), *peff = malloc(sizeof(double) * (size_t)npair);
    i64 *sw = malloc(sizeof(i64) * (size_t)npair), *ncong = NULL;
    int status = 0;
    if (!port || !fan || !infl || !peff || !sw) {
        status = -1;
        goto out;
    }
    Py_ssize_t nport = 0;
    for (Py_ssize_t p = 0; p < npair; p++) {
        i64 pt = ukey[p] / nranks;
        if (!nport || port[nport - 1] != pt) port[nport++] = pt;
        pport[p] = nport - 1;
        fan[nport - 1] += 1;
        infl[nport - 1] += pb[p] < in->window_bytes ? pb[p] : in->window_bytes;
    }
    i64 nsw = 0;
    for (Py_ssize_t q = 0; q < nport; q++) {
        sw[q] = rx_switch[port[q] / stages] * stages + port[q] % stages;
        if (sw[q] + 1 > nsw) nsw = sw[q] + 1;
    }
    ncong = calloc((size_t)(nsw + 1), sizeof(i64));
    if (!ncong) {
        status = -1;
        goto out;
    }
    for (Py_ssize_t q = 0; q < nport; q++)
        if (fan[q] >= 2) ncong[sw[q]] += 1;
    for (Py_ssize_t q = 0; q < nport; q++) {
        peff[q] = 1.0;
        if (fan[q] < 2) continue;
        i64 nc = ncong[sw[q]];
        double qb = in->buffer_bytes * in->dt_alpha / (1.0 + in->dt_alpha * (double)(nc > 1 ? nc : 1));
        if (!(infl[q] > qb)) continue;
        double waste = in->retransmit * pow((double)(fan[q] - 1 > 1 ? fan[q] - 1 : 1), in->fanin_loss);
        peff[q] = 1.0 / (1.0 + waste * (1.0 - qb / infl[q]));
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (rx[i] >= 0) eff[i] = peff[pport[opk[i]]];
out:
    free(key); free(opk); free(ukey); free(pb); free(port); free(fan); free(infl); free(peff); free(sw);
    free(ncong);
    return status;
}

/* ------------------------------------------------------------------------------------------- the call */
typedef struct {
    Py_ssize_t n, k, nl, m;
    i64 nranks;
    const i64 *src, *dst, *cnt, *stage, *dep_ptr, *dep_ids, *pbind, *prx, *rx_switch;
    const double *palpha, *cap;
    double unit, alpha_s, stage_s, eager, fill_bytes, above;
    int incast;
    incast_t in;
} args_t;

/* whether a pair table's bindings are links or the padding (0..nl) */
static int binds_ok(const i64 *pbind, Py_ssize_t count, Py_ssize_t nl) {
    for (Py_ssize_t x = 0; x < count; x++)
        if (pbind[x] < 0 || pbind[x] > nl) return 0;
    return 1;
}

/* each binding link's bytes (load: nl + 1 slots, the padding last), added op by op and each op's links in route
 * order: link_bound's np.bincount over the ravelled bindings, so the same floats */
static void add_loads(Py_ssize_t n, const i64 *src, const i64 *dst, const i64 *cnt, double unit, i64 nranks,
                      const i64 *pbind, Py_ssize_t k, double *load) {
    for (Py_ssize_t i = 0; i < n; i++) {
        const i64 *b = pbind + (src[i] * nranks + dst[i]) * k;
        double size = (double)cnt[i] * unit;
        for (Py_ssize_t j = 0; j < k; j++) load[b[j]] += size;
    }
}

/* hash slot of a message key (src, dst, ndeps, sig) */
static u64 msg_hash(i64 a, i64 b, i64 c, u64 sig) {
    return mix64((u64)a * 0x100000001B3ULL ^ mix64((u64)b ^ ((u64)c << 32)) ^ sig);
}

static int run(const args_t *A, double *makespan) {
    Py_ssize_t n = A->n, k = A->k, nl = A->nl, m = A->m;
    int status = -1;
    i64 *succ_ptr = calloc((size_t)n + 1, sizeof(i64)), *succ_ids = malloc(sizeof(i64) * (size_t)(m ? m : 1));
    i64 *slot = malloc(sizeof(i64) * (size_t)n), *fillp = malloc(sizeof(i64) * (size_t)n);
    double *size = malloc(sizeof(double) * (size_t)n), *lat = malloc(sizeof(double) * (size_t)n);
    double *delay = calloc((size_t)(m ? m : 1), sizeof(double)), *msg = calloc((size_t)n, sizeof(double));
    unsigned char *sync = calloc((size_t)n, 1), *solo = malloc((size_t)n);
    double *load = calloc((size_t)nl + 1, sizeof(double)), *eff = malloc(sizeof(double) * (size_t)n);
    double *rate = malloc(sizeof(double) * (size_t)n), *solo_time = malloc(sizeof(double) * (size_t)n);
    i64 *qkey = malloc(sizeof(i64) * (size_t)n), *grp = malloc(sizeof(i64) * (size_t)n);
    i64 *ukey = malloc(sizeof(i64) * (size_t)n);
    i64 *cls = malloc(sizeof(i64) * (size_t)n), *crep = malloc(sizeof(i64) * (size_t)n);
    i64 *cmem_ptr = calloc((size_t)n + 1, sizeof(i64)), *cmem = malloc(sizeof(i64) * (size_t)n);
    i64 *ctab = NULL;
    Py_ssize_t ncls = 0;
    u64 *hkey = NULL;
    i64 *hslot = NULL;
    double *htot = NULL;
    est_t S;
    memset(&S, 0, sizeof(S));
    if (!succ_ptr || !succ_ids || !slot || !fillp || !size || !lat || !delay || !msg || !sync || !solo || !load ||
        !eff || !rate || !solo_time || !qkey || !grp || !ukey || !cls || !crep || !cmem_ptr || !cmem)
        goto out;
    /* 1. classes: the ops of one pair with the same dependency list (the ops of one message, mostly) become
     * ready at the same time with the same edge delays, so the successors are kept per class, each edge once
     * (a grouped shape's transfers of one queue all wait for the previous group's sends and receives: at 8 x 8
     * 170k edges become 57k). Classes are numbered in order of their first op, so a successor list in class
     * order is in op order too, and the events see the reference's ready times. */
    int classed = m >= CLASS_EDGES * n;
    if (!classed) { /* few edges per op: each op its own class (finding classes would cost more) */
        for (Py_ssize_t i = 0; i < n; i++) cls[i] = crep[i] = i;
        ncls = n;
    } else {
        Py_ssize_t hc = 16;
        while (hc < 2 * n) hc *= 2;
        ctab = malloc(sizeof(i64) * (size_t)hc);
        if (!ctab) goto out;
        for (Py_ssize_t h = 0; h < hc; h++) ctab[h] = -1;
        for (Py_ssize_t i = 0; i < n; i++) {
            i64 nd = A->dep_ptr[i + 1] - A->dep_ptr[i];
            const i64 *di = A->dep_ids + A->dep_ptr[i];
#define SAME_CLASS(r)                                                                                          \
    (A->src[r] == A->src[i] && A->dst[r] == A->dst[i] && A->dep_ptr[(r) + 1] - A->dep_ptr[r] == nd &&          \
     !memcmp(A->dep_ids + A->dep_ptr[r], di, sizeof(i64) * (size_t)nd))
            if (i > 0 && SAME_CLASS(i - 1)) { /* planners list a queue's ops together */
                cls[i] = cls[i - 1];
                continue;
            }
            /* a table slot only (SAME_CLASS decides, comparing whole lists): the list's first and last four
             * ids (FNV-1a over them), so a long list costs no more than a short one */
            u64 sig = 0xCBF29CE484222325ULL;
            for (i64 e = 0; e < nd && e < 4; e++) sig = (sig ^ (u64)di[e]) * 0x100000001B3ULL;
            for (i64 e = nd > 8 ? nd - 4 : 4; e < nd; e++) sig = (sig ^ (u64)di[e]) * 0x100000001B3ULL;
            Py_ssize_t h = (Py_ssize_t)(msg_hash(A->src[i], A->dst[i], nd, sig) & (u64)(hc - 1));
            for (;;) {
                if (ctab[h] < 0) {
                    ctab[h] = ncls;
                    crep[ncls] = i;
                    cls[i] = ncls++;
                    break;
                }
                if (SAME_CLASS(crep[ctab[h]])) {
                    cls[i] = ctab[h];
                    break;
                }
                h = (h + 1) & (hc - 1);
            }
#undef SAME_CLASS
        }
        for (Py_ssize_t i = 0; i < n; i++) cmem_ptr[cls[i] + 1]++;
        for (Py_ssize_t c = 0; c < ncls; c++) cmem_ptr[c + 1] += cmem_ptr[c];
        memcpy(fillp, cmem_ptr, sizeof(i64) * (size_t)ncls);
        for (Py_ssize_t i = 0; i < n; i++) cmem[fillp[cls[i]]++] = i;
    }
    /* successors: a counting sort of the classes' edges by dependency, classes ascending within (a stable
     * sort); counted here, placed with their delays after step 3 */
    for (Py_ssize_t c = 0; c < ncls; c++)
        for (i64 e = A->dep_ptr[crep[c]]; e < A->dep_ptr[crep[c] + 1]; e++) succ_ptr[A->dep_ids[e] + 1]++;
    for (Py_ssize_t i = 0; i < n; i++) succ_ptr[i + 1] += succ_ptr[i];
    int delays = 0; /* whether the edges carry delays (steps 2-3 found synchronised ops) */
    /* per op: bytes, latency */
    for (Py_ssize_t i = 0; i < n; i++) {
        i64 pair = A->src[i] * A->nranks + A->dst[i];
        size[i] = (double)A->cnt[i] * A->unit;
        lat[i] = A->palpha[pair] + A->alpha_s;
    }
    /* 2-3. synchronised ops, their messages, the edge delays */
    if (m && (A->fill_bytes > 0 || A->stage_s > 0)) {
        Py_ssize_t nsync = 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            if (A->src[i] == A->dst[i]) continue;
            if (crep[cls[i]] != i) { /* its class's first op decided: the same source, the same dependencies */
                sync[i] = sync[crep[cls[i]]];
                nsync += sync[i];
                continue;
            }
            for (i64 e = A->dep_ptr[i]; e < A->dep_ptr[i + 1]; e++) {
                i64 d = A->dep_ids[e];
                if (!(A->src[d] == A->src[i] || A->dst[d] == A->src[i])) {
                    sync[i] = 1;
                    break;
                }
            }
            nsync += sync[i];
        }
        if (nsync) {
            if (classed) {
                /* a message is the ops of one pair with one dependency set: with classes, exactly a class (sorted
                 * lists: the same set is the same list), its bytes summed in op order */
                htot = calloc((size_t)ncls, sizeof(double));
                if (!htot) goto out;
                for (Py_ssize_t i = 0; i < n; i++)
                    if (sync[i]) htot[cls[i]] += (double)A->cnt[i];
                for (Py_ssize_t i = 0; i < n; i++) slot[i] = cls[i];
            } else {
                Py_ssize_t hc = 16;
                while (hc < 2 * nsync) hc *= 2;
                hkey = malloc(sizeof(u64) * 4 * (size_t)hc);
                hslot = malloc(sizeof(i64) * (size_t)hc);
                htot = calloc((size_t)hc, sizeof(double));
                if (!hkey || !hslot || !htot) goto out;
                for (Py_ssize_t h = 0; h < hc; h++) hslot[h] = -1;
                Py_ssize_t prev = -1; /* the last synchronised op: planners list a message's ops together */
                for (Py_ssize_t i = 0; i < n; i++) {
                    if (!sync[i]) continue;
                    i64 r = i, nd = A->dep_ptr[i + 1] - A->dep_ptr[i];
                    if (r == i && prev >= 0 && A->src[prev] == A->src[i] && A->dst[prev] == A->dst[i] &&
                        A->dep_ptr[prev + 1] - A->dep_ptr[prev] == nd &&
                        !memcmp(A->dep_ids + A->dep_ptr[prev], A->dep_ids + A->dep_ptr[i], sizeof(i64) * (size_t)nd))
                        r = prev; /* the same message as the op before (each op its own class) */
                    prev = i;
                    if (r != i) { /* the op before's message: the same key */
                        htot[slot[r]] += (double)A->cnt[i];
                        slot[i] = slot[r];
                        continue;
                    }
                    u64 sig = 0;
                    for (i64 e = A->dep_ptr[i]; e < A->dep_ptr[i + 1]; e++) sig += mix64((u64)A->dep_ids[e]);
                    Py_ssize_t h = (Py_ssize_t)(msg_hash(A->src[i], A->dst[i], nd, sig) & (u64)(hc - 1));
                    for (;;) {
                        if (hslot[h] < 0) {
                            hslot[h] = i;
                            hkey[4 * h] = (u64)A->src[i];
                            hkey[4 * h + 1] = (u64)A->dst[i];
                            hkey[4 * h + 2] = (u64)nd;
                            hkey[4 * h + 3] = sig;
                            break;
                        }
                        if (hkey[4 * h] == (u64)A->src[i] && hkey[4 * h + 1] == (u64)A->dst[i] &&
                            hkey[4 * h + 2] == (u64)nd && hkey[4 * h + 3] == sig)
                            break;
                        h = (h + 1) & (hc - 1);
                    }
                    htot[h] += (double)A->cnt[i]; /* in op order, as np.bincount adds */
                    slot[i] = h;
                }
            }
            /* scratch until step 4: solo_time holds each op's fill time, rate its rendezvous */
            for (Py_ssize_t i = 0; i < n; i++) {
                rate[i] = 0.0;
                solo_time[i] = 0.0;
                if (!sync[i]) continue;
                msg[i] = htot[slot[i]] * A->unit;
                if (A->fill_bytes > 0) {
                    const i64 *b = A->pbind + (A->src[i] * A->nranks + A->dst[i]) * k;
                    double r = b[0] < nl ? A->cap[b[0]] : INFINITY;
                    for (Py_ssize_t j = 1; j < k; j++) {
                        double c = b[j] < nl ? A->cap[b[j]] : INFINITY;
                        if (c < r) r = c;
                    }
                    solo_time[i] = (msg[i] < A->fill_bytes ? msg[i] : A->fill_bytes) / r;
                }
                rate[i] = A->stage_s * (msg[i] > A->eager ? 1.0 : 0.0);
            }
            delays = 1;
        }
    }
    /* the successors placed, each edge with its delay (Routes.step_delays: the fill on the sender's side, the
     * rendezvous on the receiver's; the same for every op of a class: one pair, one message), read in class
     * order: one pass over the classes' dependency lists */
    memcpy(fillp, succ_ptr, sizeof(i64) * (size_t)n);
    for (Py_ssize_t c = 0; c < ncls; c++) {
        i64 i = crep[c];
        for (i64 e = A->dep_ptr[i]; e < A->dep_ptr[i + 1]; e++) {
            i64 d = A->dep_ids[e], at = fillp[d]++;
            succ_ids[at] = c;
            if (delays) delay[at] = A->src[d] == A->src[i] || A->dst[d] == A->src[i] ? solo_time[i] : rate[i];
        }
    }
    /* 4. queues: incast goodput per receive link and stage, then each op's bottleneck link */
    i64 stages = 1;
    for (Py_ssize_t i = 0; i < n; i++)
        if (A->stage[i] + 1 > stages) stages = A->stage[i] + 1;
    for (Py_ssize_t l = 0; l <= nl; l++) load[l] = 0.0;
    add_loads(n, A->src, A->dst, A->cnt, A->unit, A->nranks, A->pbind, k, load);
    if (A->incast) {
        i64 *rx = qkey; /* scratch: each op's receive link */
        for (Py_ssize_t i = 0; i < n; i++) rx[i] = A->prx[A->src[i] * A->nranks + A->dst[i]];
        if (incast_eff(n, A->src, A->stage, stages, rx, size, A->nranks, A->rx_switch, &A->in, eff)) goto out;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        i64 pair = A->src[i] * A->nranks + A->dst[i];
        const i64 *b = A->pbind + pair * k;
        i64 rxl = A->incast ? A->prx[pair] : -1;
        Py_ssize_t best = 0;
        double best_load = 0.0, best_cap = 0.0;
        for (Py_ssize_t j = 0; j < k; j++) {
            double c = b[j] < nl ? A->cap[b[j]] : INFINITY;
            if (rxl >= 0 && b[j] == rxl) c = c * eff[i];
            double v = load[b[j]] / c;
            if (j == 0 || v > best_load) {
                best = j;
                best_load = v;
                best_cap = c;
            }
        }
        rate[i] = best_cap;
        qkey[i] = b[best] * stages + A->stage[i];
        solo[i] = size[i] <= 0;
        solo_time[i] = size[i] > 0 ? size[i] / rate[i] : 0.0;
    }
    /* queues numbered in sorted key order (np.unique over every op's key): a table over the keys when they are
     * few (link x stage), a sort otherwise */
    Py_ssize_t ng = 0;
    i64 nkeys = (i64)(nl + 1) * stages;
    if (nkeys <= 4 * (i64)n + 4096) {
        i64 *rank = calloc((size_t)nkeys, sizeof(i64));
        if (!rank) goto out;
        for (Py_ssize_t i = 0; i < n; i++) rank[qkey[i]] = 1;
        for (i64 q = 0; q < nkeys; q++)
            if (rank[q]) rank[q] = ng++;
        for (Py_ssize_t i = 0; i < n; i++) grp[i] = solo[i] ? -1 : rank[qkey[i]];
        free(rank);
    } else {
        memcpy(ukey, qkey, sizeof(i64) * (size_t)n);
        qsort(ukey, (size_t)n, sizeof(i64), cmp_i64);
        for (Py_ssize_t a = 0; a < n; a++)
            if (!a || ukey[a] != ukey[ng - 1]) ukey[ng++] = ukey[a];
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_ssize_t lo = 0, hi = ng - 1;
            while (lo < hi) {
                Py_ssize_t mid = (lo + hi) / 2;
                if (ukey[mid] < qkey[i]) lo = mid + 1; else hi = mid;
            }
            grp[i] = solo[i] ? -1 : lo;
        }
    }
    /* bounds: a queue serves at most at its rate, so it cannot finish before its last event (g_t) plus the time
     * its unserved work takes (``left``: its work time, less the time it has been busy), and no op ends before
     * its longest dependency path does; a candidate that cannot finish by ``above`` stops before its events when
     * either bound passes ``above`` (with a margin far above the rounding of either side), and during them as
     * soon as a queue's bound or the events' time does */
    double limit = A->above * (1.0 + 1e-9); /* the margin: the bound's own rounding is far below it */
    if (A->above < INFINITY) {
        S.left = calloc((size_t)ng + 1, sizeof(double));
        if (!S.left) goto out;
        S.limit = limit;
        for (Py_ssize_t i = 0; i < n; i++)
            if (grp[i] >= 0) S.left[grp[i]] += size[i] / rate[i];
        double most = 0.0; /* every queue's bound before its first op: its work */
        for (Py_ssize_t g = 0; g < ng; g++)
            if (S.left[g] > most) most = S.left[g];
        /* and the longest dependency path, every op at its queue's whole rate: no op ends before its
         * dependencies (plus the edge's delay), its latency and its bytes at that rate (ops are in a topological
         * order: one pass) */
        double *cp = calloc((size_t)n, sizeof(double)), longest = 0.0; /* per class */
        if (!cp) goto out;
        for (Py_ssize_t o = 0; o < n; o++) {
            double end = cp[cls[o]] + lat[o] + solo_time[o];
            if (end > longest) longest = end;
            for (i64 e = succ_ptr[o]; e < succ_ptr[o + 1]; e++) {
                double t_e = end + delay[e];
                if (t_e > cp[succ_ids[e]]) cp[succ_ids[e]] = t_e;
            }
        }
        free(cp);
        if (most > limit || longest > limit) {
            *makespan = INFINITY;
            status = 0;
            goto out;
        }
    }
    /* 5. the events */
    S.n = n;
    S.grp = grp;
    S.succ_ptr = succ_ptr;
    S.succ_ids = succ_ids;
    S.cmem_ptr = cmem_ptr;
    S.cmem = ncls < n ? cmem : NULL;
    S.size = size;
    S.lat = lat;
    S.delay = delay;
    S.solo = solo;
    S.solo_time = solo_time;
    S.missing = malloc(sizeof(i64) * (size_t)(ncls ? ncls : 1));
    S.ready = calloc((size_t)n, sizeof(double));
    S.end = malloc(sizeof(double) * (size_t)n);
    S.stack_o = malloc(sizeof(i64) * (size_t)n);
    S.stack_t = malloc(sizeof(double) * (size_t)n);
    S.act.v = malloc(sizeof(ent_t) * (size_t)n);
    S.dep.v = malloc(sizeof(ent_t) * (size_t)(ng + 1));
    S.dep.pos = malloc(sizeof(i64) * (size_t)(ng + 1));
    S.g_rate = calloc((size_t)ng + 1, sizeof(double));
    S.g_v = calloc((size_t)ng + 1, sizeof(double));
    S.g_t = calloc((size_t)ng + 1, sizeof(double));
    S.g_n = calloc((size_t)ng + 1, sizeof(i64));
    S.g_fin = calloc((size_t)ng + 1, sizeof(heap_t));
    ent_t *fin_v = malloc(sizeof(ent_t) * (size_t)n);
    i64 *gcount = calloc((size_t)ng + 1, sizeof(i64));
    if (!S.missing || !S.ready || !S.end || !S.stack_o || !S.stack_t || !S.act.v || !S.dep.v || !S.dep.pos ||
        !S.g_rate || !S.g_v || !S.g_t || !S.g_n || !S.g_fin || !fin_v || !gcount) {
        free(fin_v); free(gcount);
        goto out;
    }
    /* each queue's departures heap: a slice of one buffer, as large as its members */
    for (Py_ssize_t i = 0; i < n; i++)
        if (grp[i] >= 0) {
            gcount[grp[i]]++;
            S.g_rate[grp[i]] = rate[i];
        }
    {
        Py_ssize_t at = 0;
        for (Py_ssize_t g = 0; g < ng; g++) {
            S.g_fin[g].v = fin_v + at;
            at += gcount[g];
        }
    }
    for (Py_ssize_t g = 0; g <= ng; g++) S.dep.pos[g] = -1;
    for (Py_ssize_t i = 0; i < n; i++) S.end[i] = NAN;
    for (Py_ssize_t c = 0; c < ncls; c++) S.missing[c] = A->dep_ptr[crep[c] + 1] - A->dep_ptr[crep[c]];
    /* reference: _Dag.start_roots. The roots' activations are known up front: sorted once and read in order
     * beside the heap, which then holds only the activations the events make (half the ops or more are roots
     * in fast's one-group shapes) */
    ent_t *roots = malloc(sizeof(ent_t) * (size_t)n);
    if (!roots) {
        free(fin_v); free(gcount);
        goto out;
    }
    Py_ssize_t n_roots = 0, next_root = 0;
    for (Py_ssize_t x = 0; x < n; x++) {
        if (A->dep_ptr[x + 1] != A->dep_ptr[x]) continue;
        if (solo[x])
            finish(&S, x, lat[x] + solo_time[x], 0.0);
        else
            roots[n_roots++] = (ent_t){lat[x], x};
    }
    qsort(roots, (size_t)n_roots, sizeof(ent_t), cmp_ent);
    int pruned = 0;
    while (S.done < n) {
        /* the next activation: the earlier of the next root and the heap's top ((time, op) order) */
        const ent_t *a = NULL;
        int is_root = next_root < n_roots && (!S.act.n || LESS(roots[next_root], S.act.v[0]));
        if (is_root)
            a = &roots[next_root];
        else if (S.act.n)
            a = &S.act.v[0];
        int have_a = a != NULL, have_d = S.dep.n > 0;
        if (!have_a && !have_d) {
            status = -3;
            break;
        }
        /* (time, kind, id): an activation (kind 1) before a departure (kind 2) at the same time */
        int act = have_a && (!have_d || a->t <= S.dep.v[0].t);
        double now = act ? a->t : S.dep.v[0].t;
        if (now > A->above || S.past) {
            pruned = 1;
            break;
        }
        if (act) {
            double t = a->t;
            i64 x = a->x;
            if (is_root)
                next_root++;
            else
                pop_top(&S.act);
            arrive(&S, x, t);
        } else {
            double t = S.dep.v[0].t;
            i64 g = S.dep.v[0].x;
            depart(&S, g, t); /* its entry, the top, moved or removed there */
        }
    }
    free(fin_v); free(gcount); free(roots);
    if (pruned) {
        *makespan = INFINITY;
        status = 0;
    } else if (S.done >= n) {
        double mk = -INFINITY;
        int any = 0;
        for (Py_ssize_t i = 0; i < n; i++)
            if (!isnan(S.end[i]) && (!any || S.end[i] > mk)) {
                mk = S.end[i];
                any = 1;
            }
        *makespan = any ? mk : NAN;
        status = 0;
    }
out:
    free(cls); free(crep); free(cmem_ptr); free(cmem); free(ctab);
    free(succ_ptr); free(succ_ids); free(slot); free(fillp); free(size); free(lat); free(delay); free(msg);
    free(sync); free(solo); free(load); free(eff); free(rate); free(solo_time); free(qkey); free(grp); free(ukey);
    free(hkey); free(hslot); free(htot);
    free(S.missing); free(S.ready); free(S.end); free(S.stack_o); free(S.stack_t); free(S.act.v);
    free(S.dep.v); free(S.dep.pos); free(S.left); free(S.g_rate); free(S.g_v); free(S.g_t); free(S.g_n);
    free(S.g_fin);
    return status;
}

/* ------------------------------------------------------------------------------------------------ Python */
static PyObject *py_estimate(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer bsrc, bdst, bcnt, bstg, bdp, bdi, bpb, bpa, bprx, bcap, bsw;
    args_t A;
    memset(&A, 0, sizeof(A));
    PyObject *iobj;
    long long nranks;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*dLy*ny*y*y*y*ddddOd", &bsrc, &bdst, &bcnt, &bstg, &bdp, &bdi,
                          &A.unit, &nranks, &bpb, &A.k, &bpa, &bprx, &bcap, &bsw, &A.alpha_s, &A.stage_s, &A.eager,
                          &A.fill_bytes, &iobj, &A.above))
        return NULL;
    PyObject *res = NULL;
    A.nranks = (i64)nranks;
    A.n = bsrc.len / (Py_ssize_t)sizeof(i64);
    A.m = bdi.len / (Py_ssize_t)sizeof(i64);
    A.nl = bcap.len / (Py_ssize_t)sizeof(double);
    A.src = bsrc.buf;
    A.dst = bdst.buf;
    A.cnt = bcnt.buf;
    A.stage = bstg.buf;
    A.dep_ptr = bdp.buf;
    A.dep_ids = bdi.buf;
    A.pbind = bpb.buf;
    A.palpha = bpa.buf;
    A.prx = bprx.buf;
    A.cap = bcap.buf;
    A.rx_switch = bsw.buf;
    Py_ssize_t n = A.n, np2 = (Py_ssize_t)(A.nranks * A.nranks);
    int ok = A.n > 0 && A.k > 0 && A.nranks > 0 && bdst.len == bsrc.len && bcnt.len == bsrc.len &&
             bstg.len == bsrc.len && bdp.len == (n + 1) * (Py_ssize_t)sizeof(i64) &&
             bpb.len == np2 * A.k * (Py_ssize_t)sizeof(i64) && bpa.len == np2 * (Py_ssize_t)sizeof(double) &&
             bprx.len == np2 * (Py_ssize_t)sizeof(i64) && bsw.len == A.nl * (Py_ssize_t)sizeof(i64) &&
             A.dep_ptr[0] == 0 && A.dep_ptr[n] == A.m;
    /* the pointers first (ascending from 0 to m: every list within dep_ids), then the ids without a branch per
     * edge (an id in [0, i) is below i as an unsigned number; a negative one is not) */
    for (Py_ssize_t i = 0; ok && i < n; i++)
        ok = A.src[i] >= 0 && A.src[i] < A.nranks && A.dst[i] >= 0 && A.dst[i] < A.nranks && A.cnt[i] >= 0 &&
             A.stage[i] >= 0 && A.dep_ptr[i] <= A.dep_ptr[i + 1];
    for (Py_ssize_t i = 0; ok && i < n; i++) {
        int bad = 0;
        for (i64 e = A.dep_ptr[i]; e < A.dep_ptr[i + 1]; e++) bad |= (u64)A.dep_ids[e] >= (u64)i;
        ok = !bad;
    }
    ok = ok && binds_ok(A.pbind, np2 * A.k, A.nl);
    for (Py_ssize_t x = 0; ok && x < np2; x++) ok = A.prx[x] >= -1 && A.prx[x] < A.nl;
    if (ok && iobj != Py_None) {
        A.incast = 1;
        ok = PyArg_ParseTuple(iobj, "ddddd", &A.in.buffer_bytes, &A.in.window_bytes, &A.in.dt_alpha,
                              &A.in.retransmit, &A.in.fanin_loss);
        for (Py_ssize_t x = 0; ok && x < np2; x++) ok = A.prx[x] < 0 || A.rx_switch[A.prx[x]] >= 0;
        if (!ok) PyErr_Clear();
    }
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "estimate: bad arguments");
    } else {
        double mk = NAN;
        int st;
        Py_BEGIN_ALLOW_THREADS
        st = run(&A, &mk);
        Py_END_ALLOW_THREADS
        if (st == -1)
            PyErr_NoMemory();
        else if (st == -3)
            PyErr_SetString(PyExc_ArithmeticError, "estimate: stalled (a dependency cycle?)");
        else
            res = PyFloat_FromDouble(mk);
    }
    Py_buffer *all[] = {&bsrc, &bdst, &bcnt, &bstg, &bdp, &bdi, &bpb, &bpa, &bprx, &bcap, &bsw};
    for (size_t q = 0; q < sizeof(all) / sizeof(all[0]); q++) PyBuffer_Release(all[q]);
    return res;
}

/* link_floor(src, dst, cnt, unit, nranks, pair_bind, k, cap) -> float: a2acc.analysis.estimate.link_bound's
 * floor (the most loaded binding link's bytes over its capacity), its loads summed in the reference's order (op
 * by op, each op's links in route order: np.bincount over the ravelled bindings), so the same float */
static PyObject *py_link_floor(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer bsrc, bdst, bcnt, bpb, bcap;
    double unit;
    long long nranks, k;
    if (!PyArg_ParseTuple(args, "y*y*y*dLy*Ly*", &bsrc, &bdst, &bcnt, &unit, &nranks, &bpb, &k, &bcap)) return NULL;
    Py_ssize_t n = bsrc.len / (Py_ssize_t)sizeof(i64), nl = bcap.len / (Py_ssize_t)sizeof(double);
    const i64 *src = bsrc.buf, *dst = bdst.buf, *cnt = bcnt.buf, *pb = bpb.buf;
    const double *cap = bcap.buf;
    int ok = nranks > 0 && k > 0 && bsrc.len % 8 == 0 && bdst.len == bsrc.len && bcnt.len == bsrc.len &&
             bpb.len == (Py_ssize_t)(nranks * nranks * k) * (Py_ssize_t)sizeof(i64) && bcap.len % 8 == 0;
    for (Py_ssize_t i = 0; ok && i < n; i++) ok = src[i] >= 0 && src[i] < nranks && dst[i] >= 0 && dst[i] < nranks;
    ok = ok && binds_ok(pb, (Py_ssize_t)(nranks * nranks * k), nl);
    double *load = ok ? calloc((size_t)nl + 1, sizeof(double)) : NULL;
    PyObject *res = NULL;
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "link_floor: bad arguments");
    } else if (!load) {
        PyErr_NoMemory();
    } else {
        add_loads(n, src, dst, cnt, unit, (i64)nranks, pb, (Py_ssize_t)k, load);
        double most = 0.0; /* the padding slot (nl) has no capacity limit: load / inf = 0 */
        for (Py_ssize_t l = 0; l < nl; l++) {
            double v = load[l] / cap[l];
            if (v > most) most = v;
        }
        res = PyFloat_FromDouble(most);
    }
    free(load);
    PyBuffer_Release(&bsrc); PyBuffer_Release(&bdst); PyBuffer_Release(&bcnt); PyBuffer_Release(&bpb);
    PyBuffer_Release(&bcap);
    return res;
}

static PyMethodDef METHODS[] = {
    {"estimate", py_estimate, METH_VARARGS, "the ranking estimate of one Program's op columns (seconds)"},
    {"link_floor", py_link_floor, METH_VARARGS, "the busiest binding link's time of op columns (seconds)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_estimate", NULL, -1, METHODS, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__estimate(void) { return PyModule_Create(&MODULE); }
