/*
 * a2acc._xmlinterp: compiled fast path of the MSCCL XML check (a2acc/backends/msccl_xml/{reader,interp}.py).
 *
 * check(text, dialect, counts) -> None | (ngpus, nchannels, nchunksperloop, proto, coll, max_tbs, max_steps)
 *   text   : the XML text
 *   dialect: "nccl" or "rccl"
 *   counts : None (the standard all-to-all postcondition) or bytes of N*N int64 chunk counts (the manifest's
 *            all-to-all-v layout, row = sender)
 *
 * A tuple means: the pure-Python reference (strict reader, static rules, execution at FIFO capacity K=1,
 * races, postcondition) reports no error and no note for this text, so its verdict is "ok". None means "not
 * decided here": the text is outside the shape this core handles (anything but the exact text a2acc's writer
 * emits for an out-of-place alltoall with s/r/cpy/nop steps), or the core met anything the reference would
 * report (a broken static rule, a race it cannot rule out, a deadlock, a wrong chunk, ...). The caller then
 * runs the reference, which produces the exact messages. So the core never decides a failure and never
 * needs to reproduce a message; it only has to be right when it says "ok".
 *
 * The execution is the reference's: the same worklist order (every tb queued in (rank, tb id) order, a
 * blocked tb re-queued when the one event it waits on happens, waiters woken in registration order), the
 * same flag rule (a wait on (tb b, step t) is released once b completed a hasdep step >= t; only b's latest
 * such step matters), FIFOs per connection with capacity 1. Happens-before uses the reference's rank-local
 * clocks (one entry per tb of the own rank, merged through released flags); an access the local clock cannot
 * order is returned undecided (the reference then searches its event log for a path through other ranks).
 * Memory is linear: per chunk its value and last writer/reader, per tb one rank-local clock and one flag.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef long long i64;

/* splitmix64's finaliser: every key bit reaches the low bits the hash tables mask */
static uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ULL;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

enum { T_S = 0, T_R = 1, T_CPY = 2, T_NOP = 3 };
#define MAX_STEPS 64
#define MAX_COUNT 71
#define MAX_TBS_RCCL 64
#define MAX_DEP_TB 127
#define MAX_TBS_PER_CHANNEL 32
#define MAX_NODES 4096
#define MAX_OFFSET 32767
#define MAX_INTERP_CHUNKS (1 << 20)
#define MAX_INTERP_GPUS 4096

typedef struct {
    int s, type, srcbuf, srcoff, dstbuf, dstoff, cnt, depid, deps, hasdep;
} step_t;

typedef struct {
    int id, send, recv, chan, first_step, nsteps;
} tb_t;

typedef struct {
    int id, i_chunks, o_chunks, s_chunks, first_tb, ntbs;
} gpu_t;

typedef struct {
    step_t *steps;
    size_t nsteps, cap_steps;
    tb_t *tbs;
    size_t ntbs, cap_tbs;
    gpu_t *gpus;
    size_t ngpus_seen, cap_gpus;
    char proto[16], coll[16];
    i64 nchannels, nchunks, ngpus, inplace, outofplace;
} algo_t;

/* ------------------------------------------------------------------ canonical text */
typedef struct {
    const char *p, *end;
} cur_t;

static int lit(cur_t *c, const char *s) {
    size_t n = strlen(s);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, s, n) != 0) return 0;
    c->p += n;
    return 1;
}

/* a decimal integer as the reference reader accepts it without complaint: -?(0|[1-9][0-9]*) */
static int num(cur_t *c, i64 *out) {
    const char *p = c->p;
    int neg = 0;
    if (p < c->end && *p == '-') { neg = 1; p++; }
    if (p >= c->end || *p < '0' || *p > '9') return 0;
    if (*p == '0' && p + 1 < c->end && p[1] >= '0' && p[1] <= '9') return 0;
    i64 v = 0;
    int digits = 0;
    while (p < c->end && *p >= '0' && *p <= '9') {
        if (++digits > 15) return 0;
        v = v * 10 + (*p - '0');
        p++;
    }
    c->p = p;
    *out = neg ? -v : v;
    return 1;
}

static int num_attr(cur_t *c, const char *pre, i64 *out) {
    return lit(c, pre) && num(c, out) && lit(c, "\"");
}

static int int_attr(cur_t *c, const char *pre, int *out) {
    i64 v;
    if (!num_attr(c, pre, &v) || v < -1000000000LL || v > 1000000000LL) return 0;
    *out = (int)v;
    return 1;
}

/* a word value (name, proto, coll): [A-Za-z0-9_.+-]*, copied when out is given */
static int word_attr(cur_t *c, const char *pre, char *out, size_t cap) {
    if (!lit(c, pre)) return 0;
    const char *p = c->p;
    while (p < c->end && *p != '"') {
        char ch = *p;
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' ||
              ch == '.' || ch == '+' || ch == '-'))
            return 0;
        p++;
    }
    if (p >= c->end) return 0;
    size_t n = (size_t)(p - c->p);
    if (out) {
        if (n >= cap) return 0;
        memcpy(out, c->p, n);
        out[n] = 0;
    }
    c->p = p + 1;
    return 1;
}

static int buf_attr(cur_t *c, const char *pre, int *out) {
    if (!lit(c, pre) || c->end - c->p < 2 || c->p[1] != '"') return 0;
    switch (c->p[0]) {
    case 'i': *out = 0; break;
    case 'o': *out = 1; break;
    case 's': *out = 2; break;
    default: return 0;
    }
    c->p += 2;
    return 1;
}

static int type_attr(cur_t *c, int *out) {
    if (!lit(c, " type=\"")) return 0;
    if (lit(c, "s\"")) *out = T_S;
    else if (lit(c, "r\"")) *out = T_R;
    else if (lit(c, "cpy\"")) *out = T_CPY;
    else if (lit(c, "nop\"")) *out = T_NOP;
    else return 0;
    return 1;
}

#define GROW(ptr, n, cap, type)                                                                              \
    do {                                                                                                     \
        if ((n) == (cap)) {                                                                                  \
            size_t nc = (cap) ? 2 * (cap) : 256;                                                             \
            type *np_ = (type *)realloc((ptr), nc * sizeof(type));                                           \
            if (!np_) return -1;                                                                             \
            (ptr) = np_;                                                                                     \
            (cap) = nc;                                                                                      \
        }                                                                                                    \
    } while (0)

/* 1: parsed; 0: not the canonical text; -1: out of memory */
static int parse(const char *text, Py_ssize_t len, algo_t *a) {
    cur_t c = {text, text + len};
    i64 minb, maxb;
    if (!(lit(&c, "<algo") && word_attr(&c, " name=\"", NULL, 0) && word_attr(&c, " proto=\"", a->proto, 16) &&
          num_attr(&c, " nchannels=\"", &a->nchannels) && num_attr(&c, " nchunksperloop=\"", &a->nchunks) &&
          num_attr(&c, " ngpus=\"", &a->ngpus) && word_attr(&c, " coll=\"", a->coll, 16) &&
          num_attr(&c, " inplace=\"", &a->inplace) && num_attr(&c, " outofplace=\"", &a->outofplace) &&
          num_attr(&c, " minBytes=\"", &minb) && num_attr(&c, " maxBytes=\"", &maxb) && lit(&c, ">\n")))
        return 0;
    while (lit(&c, "  <gpu")) {
        GROW(a->gpus, a->ngpus_seen, a->cap_gpus, gpu_t);
        gpu_t *g = &a->gpus[a->ngpus_seen++];
        if (!(int_attr(&c, " id=\"", &g->id) && int_attr(&c, " i_chunks=\"", &g->i_chunks) &&
              int_attr(&c, " o_chunks=\"", &g->o_chunks) && int_attr(&c, " s_chunks=\"", &g->s_chunks) &&
              lit(&c, ">\n")))
            return 0;
        g->first_tb = (int)a->ntbs;
        g->ntbs = 0;
        while (lit(&c, "    <tb")) {
            GROW(a->tbs, a->ntbs, a->cap_tbs, tb_t);
            tb_t *t = &a->tbs[a->ntbs++];
            g->ntbs++;
            if (!(int_attr(&c, " id=\"", &t->id) && int_attr(&c, " send=\"", &t->send) &&
                  int_attr(&c, " recv=\"", &t->recv) && int_attr(&c, " chan=\"", &t->chan) && lit(&c, ">\n")))
                return 0;
            t->first_step = (int)a->nsteps;
            t->nsteps = 0;
            while (lit(&c, "      <step")) {
                GROW(a->steps, a->nsteps, a->cap_steps, step_t);
                step_t *s = &a->steps[a->nsteps++];
                t->nsteps++;
                if (!(int_attr(&c, " s=\"", &s->s) && type_attr(&c, &s->type) &&
                      buf_attr(&c, " srcbuf=\"", &s->srcbuf) && int_attr(&c, " srcoff=\"", &s->srcoff) &&
                      buf_attr(&c, " dstbuf=\"", &s->dstbuf) && int_attr(&c, " dstoff=\"", &s->dstoff) &&
                      int_attr(&c, " cnt=\"", &s->cnt) && int_attr(&c, " depid=\"", &s->depid) &&
                      int_attr(&c, " deps=\"", &s->deps) && int_attr(&c, " hasdep=\"", &s->hasdep) &&
                      lit(&c, "/>\n")))
                    return 0;
            }
            if (!lit(&c, "    </tb>\n")) return 0;
        }
        if (!lit(&c, "  </gpu>\n")) return 0;
    }
    if (!lit(&c, "</algo>\n") || c.p != c.end) return 0;
    return 1;
}

/* ------------------------------------------------------------------ static rules (all must hold) */
static int static_ok(const algo_t *a, int rccl) {
    i64 n = a->ngpus, nch = a->nchannels, C = a->nchunks;
    if (strcmp(a->proto, "Simple") && strcmp(a->proto, "LL") && strcmp(a->proto, "LL128")) return 0;
    if (strcmp(a->coll, "alltoall") || a->inplace != 0 || a->outofplace != 1) return 0;
    if (n < 1 || n > MAX_INTERP_GPUS || (i64)a->ngpus_seen != n) return 0;
    if (nch < 1 || nch > (rccl ? 128 : 32)) return 0;
    if (C < 0 || C > MAX_INTERP_CHUNKS || C % n || n * C >= (1LL << 31)) return 0;
    int ok = 1;
    char *seen_s = (char *)calloc((size_t)(n * nch), 1), *seen_r = (char *)calloc((size_t)(n * nch), 1);
    int *per_s = (int *)calloc((size_t)nch, sizeof(int)), *per_r = (int *)calloc((size_t)nch, sizeof(int));
    char *target = NULL;
    if (!seen_s || !seen_r || !per_s || !per_r) { ok = 0; goto done; }
    for (i64 gi = 0; gi < n && ok; gi++) {
        const gpu_t *g = &a->gpus[gi];
        if (g->id != gi) { ok = 0; break; }
        if (rccl && g->ntbs > MAX_TBS_RCCL) { ok = 0; break; }
        if ((g->i_chunks != 0 && g->i_chunks != C) || (g->o_chunks != 0 && g->o_chunks != C)) { ok = 0; break; }
        if (g->s_chunks < 0 || g->s_chunks > MAX_OFFSET + 1) { ok = 0; break; }
        i64 nsteps = 0;
        for (int k = 0; k < g->ntbs; k++) nsteps += a->tbs[g->first_tb + k].nsteps;
        if (1 + n + g->ntbs + nsteps > MAX_NODES) { ok = 0; break; }
        memset(per_s, 0, (size_t)nch * sizeof(int));
        memset(per_r, 0, (size_t)nch * sizeof(int));
        free(target);
        target = (char *)calloc((size_t)(nsteps + 1), 1); /* per step of this gpu: is a dependency target */
        if (!target) { ok = 0; break; }
        for (int k = 0; k < g->ntbs && ok; k++) {
            const tb_t *t = &a->tbs[g->first_tb + k];
            if (t->id != k || t->send == gi || t->recv == gi) { ok = 0; break; }
            if (t->send < -1 || t->send >= n || t->recv < -1 || t->recv >= n) { ok = 0; break; }
            if (t->chan < 0 || t->chan >= nch) { ok = 0; break; }
            if (t->send >= 0) {
                char *sl = &seen_s[(i64)t->send * nch + t->chan];
                if (*sl) { ok = 0; break; }
                *sl = 1;
                per_s[t->chan]++;
            }
            if (t->recv >= 0) {
                char *sl = &seen_r[(i64)t->recv * nch + t->chan];
                if (*sl) { ok = 0; break; }
                *sl = 1;
                per_r[t->chan]++;
            }
            if (t->nsteps > MAX_STEPS) { ok = 0; break; }
            for (int j = 0; j < t->nsteps; j++) {
                const step_t *st = &a->steps[t->first_step + j];
                if (st->s != j || (st->hasdep != 0 && st->hasdep != 1)) { ok = 0; break; }
                if (st->type == T_S && t->send < 0) { ok = 0; break; }
                if (st->type == T_R && t->recv < 0) { ok = 0; break; }
                if (st->type == T_NOP) {
                    if (st->hasdep || st->depid < 0 || j + 1 >= t->nsteps) { ok = 0; break; }
                    const step_t *nx = st + 1;
                    if (nx->type != T_NOP && nx->depid < 0) { ok = 0; break; }
                } else {
                    if (st->cnt < 1 || st->cnt > MAX_COUNT) { ok = 0; break; }
                    i64 caps[3] = {C, C, g->s_chunks};
                    int reads = st->type == T_S || st->type == T_CPY, writes = st->type == T_R || st->type == T_CPY;
                    if (reads && (st->srcoff < 0 || (i64)st->srcoff + st->cnt > caps[st->srcbuf])) { ok = 0; break; }
                    if (writes && (st->dstoff < 0 || (i64)st->dstoff + st->cnt > caps[st->dstbuf])) { ok = 0; break; }
                }
                if (st->depid >= 0) {
                    if (st->depid == t->id || st->depid >= g->ntbs || st->depid > MAX_DEP_TB) { ok = 0; break; }
                    const tb_t *tt = &a->tbs[g->first_tb + st->depid];
                    if (st->deps < 0 || st->deps >= tt->nsteps) { ok = 0; break; }
                    const step_t *ts = &a->steps[tt->first_step + st->deps];
                    if (ts->type == T_NOP || ts->hasdep != 1) { ok = 0; break; }
                }
            }
        }
        for (i64 ch = 0; ch < nch && ok; ch++)
            if (per_s[ch] > MAX_TBS_PER_CHANNEL || per_r[ch] > MAX_TBS_PER_CHANNEL) ok = 0;
        for (int k = 0; k < g->ntbs; k++) { /* reset the (peer, chan) marks of this gpu */
            const tb_t *t = &a->tbs[g->first_tb + k];
            if (t->send >= 0 && t->send < n && t->chan >= 0 && t->chan < nch) seen_s[(i64)t->send * nch + t->chan] = 0;
            if (t->recv >= 0 && t->recv < n && t->chan >= 0 && t->chan < nch) seen_r[(i64)t->recv * nch + t->chan] = 0;
        }
    }
done:
    free(seen_s);
    free(seen_r);
    free(per_s);
    free(per_r);
    free(target);
    return ok;
}

/* ------------------------------------------------------------------ execution */
/* one chunk of one rank's buffer, every field stored + 1 so that zeroed memory is the initial state: the
   value (an input chunk id; 0: never written), the local tb index and time of the last writer and of the last
   reader (0: none), and the extra readers since the last write (pool index + 1; 0: none). One 16-byte record
   per chunk keeps an access to one cache line. */
typedef struct {
    int32_t val, extra;
    int16_t wp, rp;
    uint8_t wt, rt, pad0, pad1;
} chunk_t;

typedef struct {
    const algo_t *a;
    int P;              /* tbs (processes) */
    int *rank, *base;   /* per pid: rank, pid of the rank's tb 0 */
    int *pc, *now;
    int *clock;         /* per pid: width(rank) entries at clock_off[pid] */
    i64 *clock_off;
    int *flag_s;        /* latest completed hasdep step (-1 none) and its clock (at the same offsets) */
    int *flag_clock;
    int *out_conn;      /* pid -> its own connection id (= pid) when it sends, else -1 */
    int *in_conn;       /* pid -> the sending pid of the connection it receives from (-1: none, waits forever) */
    /* FIFO per connection (id = sending pid), capacity 1 */
    int *fifo_n, *fifo_cnt, *fifo_vals; /* vals: MAX_COUNT per connection */
    /* waiter lists: event e in [0, 3P): flag q, data conn, room conn; linked through next_w */
    int *head, *tail, *next_w;
    int *work, wh, wt, *queued;
    /* memory: per rank 3 buffers; values and access history per chunk */
    i64 *buf_off;        /* per (rank, buffer): offset into the chunk arrays */
    chunk_t *ck;
    int *ex_next, *ex_pid, *ex_t, ex_n, ex_cap;
    i64 cap_i;
    int fail;            /* 1: undecided (anything the reference would report, or out of memory) */
} m_t;

static void wake(m_t *m, int e) {
    int q = m->head[e];
    m->head[e] = m->tail[e] = -1;
    while (q >= 0) {
        int nx = m->next_w[q];
        m->next_w[q] = -1;
        if (!m->queued[q]) {
            m->queued[q] = 1;
            m->work[m->wt] = q;
            m->wt = (m->wt + 1) % (m->P + 1);
        }
        q = nx;
    }
}

static void wait_on(m_t *m, int e, int pid) {
    m->next_w[pid] = -1;
    if (m->tail[e] < 0) m->head[e] = pid;
    else m->next_w[m->tail[e]] = pid;
    m->tail[e] = pid;
}

static int ex_push(m_t *m, i64 ch, int q, int t) {
    if (m->ex_n == m->ex_cap) {
        int nc = m->ex_cap ? 2 * m->ex_cap : 1024;
        int *a1 = (int *)realloc(m->ex_next, (size_t)nc * sizeof(int));
        if (!a1) return 0;
        m->ex_next = a1;
        int *a2 = (int *)realloc(m->ex_pid, (size_t)nc * sizeof(int));
        if (!a2) return 0;
        m->ex_pid = a2;
        int *a3 = (int *)realloc(m->ex_t, (size_t)nc * sizeof(int));
        if (!a3) return 0;
        m->ex_t = a3;
        m->ex_cap = nc;
    }
    int i = m->ex_n++;
    m->ex_pid[i] = q;
    m->ex_t[i] = t;
    m->ex_next[i] = m->ck[ch].extra - 1;
    m->ck[ch].extra = i + 1;
    return 1;
}

/* a read or write of buffer b[off..off+cnt) of pid's rank: undecided on any access the local clock cannot
   order after the last write (any access) or after the reads since it (a write) */
static void access_(m_t *m, int pid, int b, int off, int cnt, int write) {
    int r = m->rank[pid], me = pid - m->base[pid];
    const int *vc = m->clock + m->clock_off[pid];
    i64 lo = m->buf_off[r * 3 + b] + off, hi = lo + cnt;
    int now = m->now[pid];
    chunk_t *ck = m->ck;
    for (i64 ch = lo; ch < hi; ch++) {
        int w = ck[ch].wp - 1;
        if (w >= 0 && w != me && vc[w] < ck[ch].wt) { m->fail = 1; return; }
    }
    if (write) {
        for (i64 ch = lo; ch < hi; ch++) {
            int q = ck[ch].rp - 1;
            if (q >= 0 && q != me && vc[q] < ck[ch].rt) { m->fail = 1; return; }
            for (int e = ck[ch].extra - 1; e >= 0; e = m->ex_next[e])
                if (m->ex_pid[e] != me && vc[m->ex_pid[e]] < m->ex_t[e]) { m->fail = 1; return; }
            ck[ch].extra = 0;
            ck[ch].wp = (int16_t)(me + 1);
            ck[ch].wt = (uint8_t)now;
            ck[ch].rp = 0;
        }
    } else {
        for (i64 ch = lo; ch < hi; ch++) {
            int q = ck[ch].rp - 1;
            if (q >= 0 && q != me && !ex_push(m, ch, q, ck[ch].rt)) { m->fail = 1; return; }
            ck = m->ck;
            ck[ch].rp = (int16_t)(me + 1);
            ck[ch].rt = (uint8_t)now;
        }
    }
}

static int deps_met(m_t *m, int pid, const tb_t *t, int k) {
    const step_t *steps = m->a->steps + t->first_step;
    int j0 = k;
    while (j0 > 0 && steps[j0 - 1].type == T_NOP) j0--;
    int base = m->base[pid];
    for (int j = j0; j <= k; j++) {
        if (steps[j].depid < 0) continue;
        int q = base + steps[j].depid;
        if (m->flag_s[q] < steps[j].deps) {
            wait_on(m, q, pid);
            return 0;
        }
    }
    int w = m->a->gpus[m->rank[pid]].ntbs;
    int *vc = m->clock + m->clock_off[pid];
    for (int j = j0; j <= k; j++) {
        if (steps[j].depid < 0) continue;
        const int *fc = m->flag_clock + m->clock_off[base + steps[j].depid];
        for (int i = 0; i < w; i++)
            if (fc[i] > vc[i]) vc[i] = fc[i];
    }
    return 1;
}

static void advance(m_t *m, int pid) {
    const algo_t *a = m->a;
    const tb_t *t = &a->tbs[pid];
    const step_t *steps = a->steps + t->first_step;
    int P = m->P;
    while (m->pc[pid] < t->nsteps && !m->fail) {
        int k = m->pc[pid];
        const step_t *st = &steps[k];
        if (st->type == T_NOP) { m->pc[pid]++; continue; }
        if (!deps_met(m, pid, t, k)) return;
        int in = m->in_conn[pid], out = m->out_conn[pid];
        if (st->type == T_R) {
            if (in < 0) { wait_on(m, P + P, pid); return; } /* no sender: waits forever (a deadlock) */
            if (!m->fifo_n[in]) { wait_on(m, P + in, pid); return; }
        }
        if (st->type == T_S && m->fifo_n[out]) { wait_on(m, 2 * P + 1 + out, pid); return; }
        /* execute */
        int r = m->rank[pid];
        m->now[pid]++;
        if (m->now[pid] > 255) { m->fail = 1; return; }
        m->clock[m->clock_off[pid] + pid - m->base[pid]] = m->now[pid];
        if (st->type == T_R) {
            m->fifo_n[in] = 0;
            wake(m, 2 * P + 1 + in);
            if (m->fifo_cnt[in] != st->cnt) { m->fail = 1; return; }
            access_(m, pid, st->dstbuf, st->dstoff, st->cnt, 1);
            if (m->fail) return;
            chunk_t *dst = m->ck + m->buf_off[r * 3 + st->dstbuf] + st->dstoff;
            const int *v = m->fifo_vals + (i64)in * MAX_COUNT;
            for (int j = 0; j < st->cnt; j++) dst[j].val = v[j];
        } else {
            access_(m, pid, st->srcbuf, st->srcoff, st->cnt, 0);
            if (m->fail) return;
            const chunk_t *src = m->ck + m->buf_off[r * 3 + st->srcbuf] + st->srcoff;
            int *v = m->fifo_vals + (i64)(st->type == T_S ? out : P) * MAX_COUNT; /* slot P: a copy's values */
            for (int j = 0; j < st->cnt; j++) {
                if (src[j].val == 0) { m->fail = 1; return; } /* reads an uninitialised chunk */
                v[j] = src[j].val;
            }
            if (st->type == T_S) {
                m->fifo_n[out] = 1;
                m->fifo_cnt[out] = st->cnt;
                wake(m, P + out);
            } else {
                access_(m, pid, st->dstbuf, st->dstoff, st->cnt, 1);
                if (m->fail) return;
                chunk_t *dst = m->ck + m->buf_off[r * 3 + st->dstbuf] + st->dstoff;
                for (int j = 0; j < st->cnt; j++) dst[j].val = v[j];
            }
        }
        /* complete */
        if (st->hasdep) {
            int w = a->gpus[r].ntbs;
            memcpy(m->flag_clock + m->clock_off[pid], m->clock + m->clock_off[pid], (size_t)w * sizeof(int));
            m->flag_s[pid] = st->s;
            wake(m, pid);
        }
        m->pc[pid]++;
    }
}

/* hash of connections (sender rank, receiver rank, chan) -> sending pid */
static i64 conn_key(i64 s, i64 d, i64 c, i64 n, i64 nch) { return (s * n + d) * nch + c; }

static int run(const algo_t *a, const i64 *counts) {
    m_t mm;
    m_t *m = &mm;
    memset(m, 0, sizeof(mm));
    m->a = a;
    int P = m->P = (int)a->ntbs;
    i64 n = a->ngpus, nch = a->nchannels, C = a->nchunks;
    m->cap_i = C;
    int ok = 0;
    i64 *row_acc = NULL;
    size_t hsz = 16;
    while (hsz < (size_t)P * 2 + 2) hsz <<= 1;
    i64 *hkey = (i64 *)malloc(hsz * sizeof(i64));
    int *hval = (int *)malloc(hsz * sizeof(int));
    m->rank = (int *)malloc((size_t)P * sizeof(int) + 1);
    m->base = (int *)malloc((size_t)P * sizeof(int) + 1);
    m->pc = (int *)calloc((size_t)P + 1, sizeof(int));
    m->now = (int *)calloc((size_t)P + 1, sizeof(int));
    m->clock_off = (i64 *)malloc(((size_t)P + 1) * sizeof(i64));
    m->flag_s = (int *)malloc(((size_t)P + 1) * sizeof(int));
    m->out_conn = (int *)malloc(((size_t)P + 1) * sizeof(int));
    m->in_conn = (int *)malloc(((size_t)P + 1) * sizeof(int));
    m->fifo_n = (int *)calloc((size_t)P + 1, sizeof(int));
    m->fifo_cnt = (int *)calloc((size_t)P + 1, sizeof(int));
    m->fifo_vals = (int *)malloc(((size_t)P + 1) * MAX_COUNT * sizeof(int)); /* + slot P for copies */
    m->head = (int *)malloc(((size_t)3 * P + 2) * sizeof(int));
    m->tail = (int *)malloc(((size_t)3 * P + 2) * sizeof(int));
    m->next_w = (int *)malloc(((size_t)P + 1) * sizeof(int));
    m->work = (int *)malloc(((size_t)P + 1) * sizeof(int));
    m->queued = (int *)calloc((size_t)P + 1, sizeof(int));
    m->buf_off = (i64 *)malloc((size_t)(n * 3 + 1) * sizeof(i64));
    if (!hkey || !hval || !m->rank || !m->base || !m->pc || !m->now || !m->clock_off || !m->flag_s ||
        !m->out_conn || !m->in_conn || !m->fifo_n || !m->fifo_cnt || !m->fifo_vals || !m->head || !m->tail ||
        !m->next_w || !m->work || !m->queued || !m->buf_off)
        goto out;
    /* processes, clocks, connections */
    i64 width_total = 0;
    for (i64 r = 0; r < n; r++) {
        const gpu_t *g = &a->gpus[r];
        for (int k = 0; k < g->ntbs; k++) {
            int pid = g->first_tb + k;
            m->rank[pid] = (int)r;
            m->base[pid] = g->first_tb;
            m->clock_off[pid] = width_total;
            width_total += g->ntbs;
        }
    }
    m->clock = (int *)calloc((size_t)width_total + 1, sizeof(int));
    m->flag_clock = (int *)calloc((size_t)width_total + 1, sizeof(int));
    if (!m->clock || !m->flag_clock) goto out;
    for (size_t i = 0; i < hsz; i++) hkey[i] = -1;
    for (int pid = 0; pid < P; pid++) {
        const tb_t *t = &a->tbs[pid];
        m->flag_s[pid] = -1;
        m->next_w[pid] = -1;
        m->out_conn[pid] = t->send >= 0 ? pid : -1;
        if (t->send >= 0) {
            i64 key = conn_key(m->rank[pid], t->send, t->chan, n, nch);
            size_t h = (size_t)mix64((uint64_t)key) & (hsz - 1);
            while (hkey[h] >= 0) h = (h + 1) & (hsz - 1);
            hkey[h] = key;
            hval[h] = pid;
        }
    }
    for (int pid = 0; pid < P; pid++) {
        const tb_t *t = &a->tbs[pid];
        m->in_conn[pid] = -1;
        if (t->recv < 0) continue;
        i64 key = conn_key(t->recv, m->rank[pid], t->chan, n, nch);
        size_t h = (size_t)mix64((uint64_t)key) & (hsz - 1);
        while (hkey[h] >= 0) {
            if (hkey[h] == key) { m->in_conn[pid] = hval[h]; break; }
            h = (h + 1) & (hsz - 1);
        }
    }
    for (int e = 0; e < 3 * P + 2; e++) m->head[e] = m->tail[e] = -1;
    /* memory: i (initialised with the input chunk ids), o, s */
    i64 total = 0;
    for (i64 r = 0; r < n; r++) {
        m->buf_off[r * 3 + 0] = total;
        total += C;
        m->buf_off[r * 3 + 1] = total;
        total += C;
        m->buf_off[r * 3 + 2] = total;
        total += a->gpus[r].s_chunks;
    }
    m->ck = (chunk_t *)calloc((size_t)total + 1, sizeof(chunk_t));
    if (!m->ck) goto out;
    for (i64 r = 0; r < n; r++) {
        if (a->gpus[r].ntbs > 32000) goto out;
        chunk_t *in = m->ck + m->buf_off[r * 3];
        for (i64 j = 0; j < C; j++) in[j].val = (int32_t)(r * C + j + 1);
    }
    /* worklist: every tb queued in pid order */
    for (int pid = 0; pid < P; pid++) {
        m->work[pid] = pid;
        m->queued[pid] = 1;
    }
    m->wh = 0;
    m->wt = P % (P + 1);
    while (m->wh != m->wt && !m->fail) {
        int pid = m->work[m->wh];
        m->wh = (m->wh + 1) % (P + 1);
        m->queued[pid] = 0;
        advance(m, pid);
    }
    if (m->fail) goto out;
    for (int pid = 0; pid < P; pid++)
        if (m->pc[pid] < a->tbs[pid].nsteps || m->fifo_n[pid]) goto out; /* deadlock, or a message left */
    /* postcondition */
    row_acc = (i64 *)calloc((size_t)n + 1, sizeof(i64));
    if (!row_acc) goto out;
    {
        i64 per = C / n;
        for (i64 r = 0; r < n; r++) {
            const chunk_t *o = m->ck + m->buf_off[r * 3 + 1];
            if (counts == NULL) {
                for (i64 s = 0; s < n; s++)
                    for (i64 p = 0; p < per; p++)
                        if (o[s * per + p].val != s * C + r * per + p + 1) goto out;
            } else {
                /* out_off[r][s] = sum of counts[s'][r] for s' < s; in_off[s][r] = sum of counts[s][d] for d < r
                   (row_acc[s] holds it while r grows) */
                i64 at = 0;
                for (i64 s = 0; s < n; s++) {
                    i64 cnt = counts[s * n + r], in_off = row_acc[s];
                    if (cnt < 0 || at + cnt > C) goto out;
                    for (i64 j = 0; j < cnt; j++)
                        if (o[at + j].val != s * C + in_off + j + 1) goto out;
                    at += cnt;
                    row_acc[s] += cnt;
                }
            }
        }
    }
    ok = 1;
out:
    free(row_acc);
    free(hkey);
    free(hval);
    free(m->rank);
    free(m->base);
    free(m->pc);
    free(m->now);
    free(m->clock);
    free(m->clock_off);
    free(m->flag_s);
    free(m->flag_clock);
    free(m->out_conn);
    free(m->in_conn);
    free(m->fifo_n);
    free(m->fifo_cnt);
    free(m->fifo_vals);
    free(m->head);
    free(m->tail);
    free(m->next_w);
    free(m->work);
    free(m->queued);
    free(m->buf_off);
    free(m->ck);
    free(m->ex_next);
    free(m->ex_pid);
    free(m->ex_t);
    return ok;
}

static PyObject *py_check(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *text_obj, *counts_obj;
    const char *dialect;
    if (!PyArg_ParseTuple(args, "UsO", &text_obj, &dialect, &counts_obj)) return NULL;
    Py_ssize_t len;
    const char *text = PyUnicode_AsUTF8AndSize(text_obj, &len);
    if (!text) return NULL;
    Py_buffer cb;
    int have_counts = counts_obj != Py_None;
    if (have_counts && PyObject_GetBuffer(counts_obj, &cb, PyBUF_SIMPLE) < 0) return NULL;
    algo_t a;
    memset(&a, 0, sizeof(a));
    int rccl = strcmp(dialect, "rccl") == 0;
    int ok = 0, max_tbs = 0, max_steps = 0;
    Py_BEGIN_ALLOW_THREADS
    int pr = parse(text, len, &a);
    if (pr == 1 && static_ok(&a, rccl)) {
        int counts_ok = !have_counts || cb.len == (Py_ssize_t)(a.ngpus * a.ngpus * (i64)sizeof(i64));
        if (counts_ok) ok = run(&a, have_counts ? (const i64 *)cb.buf : NULL);
        for (size_t g = 0; g < a.ngpus_seen; g++)
            if (a.gpus[g].ntbs > max_tbs) max_tbs = a.gpus[g].ntbs;
        for (size_t t = 0; t < a.ntbs; t++)
            if (a.tbs[t].nsteps > max_steps) max_steps = a.tbs[t].nsteps;
    }
    Py_END_ALLOW_THREADS
    if (have_counts) PyBuffer_Release(&cb);
    PyObject *res;
    if (ok)
        res = Py_BuildValue("(LLLssii)", a.ngpus, a.nchannels, a.nchunks, a.proto, a.coll, max_tbs, max_steps);
    else {
        Py_INCREF(Py_None);
        res = Py_None;
    }
    free(a.steps);
    free(a.tbs);
    free(a.gpus);
    return res;
}

/* ==================================================================================================
 * lower(): the compiled MSCCL XML lowering, a transcription of
 * a2acc/backends/msccl_xml/writer.py (passes 1-8 for one tb layout, then the text of to_xml) that returns the
 * exact text, or "refused" where the reference raises LoweringError (the caller then runs the reference for
 * the message), or "undecided" on anything unexpected. tests/backends/test_msccl_native.py checks the texts
 * are byte-identical on random Programs and options.
 */

enum { R_P = 0, R_S = 1, R_R = 2, R_C = 3 };
enum { L_OK = 0, L_REFUSED = 1, L_UNDECIDED = 2 };

typedef struct {
    int tb, op, level, kind, peer, sbuf, soff, dbuf, doff, cnt, first, pos, index, is_target, targ_off, ntarg;
} piece_t;

typedef struct {
    int rank, role, peer, chan, j;
    int first_use, cost, id, first_piece;
    int *pieces, np, cap;
} ltb_t;

typedef struct {
    /* input */
    i64 n, nops;
    const i64 *src_rank, *src_buf, *src_off, *dst_rank, *dst_buf, *dst_off, *cnt, *dep_ptr, *dep_ids;
    int instances, max_cnt, max_channels, rccl, combined, n_groups;
    /* tbs: hash key -> index */
    ltb_t *tbs;
    int ntbs, cap_tbs, nfirst;
    int *fp_tbs, nfp, cap_fp; /* tbs in the order of their first piece (the reference's dict order) */
    i64 why[5];               /* a refusal: code and values for the reference's message (see py_lower) */
    i64 *hkey;
    int *hval;
    size_t hsz;
    piece_t *pieces;
    int npieces, cap_pieces;
    int *targ;
    int ntarg, cap_targ;
    int *level, *last_src, *last_dst;
    int oom;
} low_t;

static i64 tb_key(const low_t *L, int rank, int role, int peer, int chan, int j) {
    return ((((i64)rank * 4 + role) * (L->n + 1) + (peer + 1)) * 65536 + chan) * 65536 + j;
}

static int hash_grow(low_t *L);

/* the tb of a key, created (untouched) when missing; -1 on out of memory */
static int tb_get(low_t *L, int rank, int role, int peer, int chan, int j) {
    if (chan < 0 || chan >= 65535 || j < 0 || j >= 65535) { L->oom = 1; return -1; } /* outside the key space */
    i64 key = tb_key(L, rank, role, peer, chan, j);
    size_t h = (size_t)mix64((uint64_t)key) & (L->hsz - 1);
    while (L->hkey[h] >= 0) {
        if (L->hkey[h] == key) return L->hval[h];
        h = (h + 1) & (L->hsz - 1);
    }
    if (L->ntbs == L->cap_tbs) {
        int nc = L->cap_tbs ? 2 * L->cap_tbs : 1024;
        ltb_t *nt = (ltb_t *)realloc(L->tbs, (size_t)nc * sizeof(ltb_t));
        if (!nt) { L->oom = 1; return -1; }
        L->tbs = nt;
        L->cap_tbs = nc;
    }
    int idx = L->ntbs++;
    ltb_t *t = &L->tbs[idx];
    t->rank = rank; t->role = role; t->peer = peer; t->chan = chan; t->j = j;
    t->first_use = -1; t->cost = 0; t->id = -1; t->first_piece = -1; t->pieces = NULL; t->np = 0; t->cap = 0;
    L->hkey[h] = key;
    L->hval[h] = idx;
    if ((size_t)L->ntbs * 2 > L->hsz && !hash_grow(L)) { L->oom = 1; return -1; }
    return idx;
}

static int hash_grow(low_t *L) {
    size_t nsz = L->hsz * 2;
    i64 *nk = (i64 *)malloc(nsz * sizeof(i64));
    int *nv = (int *)malloc(nsz * sizeof(int));
    if (!nk || !nv) { free(nk); free(nv); return 0; }
    for (size_t i = 0; i < nsz; i++) nk[i] = -1;
    for (size_t i = 0; i < L->hsz; i++) {
        if (L->hkey[i] < 0) continue;
        size_t h = (size_t)mix64((uint64_t)L->hkey[i]) & (nsz - 1);
        while (nk[h] >= 0) h = (h + 1) & (nsz - 1);
        nk[h] = L->hkey[i];
        nv[h] = L->hval[i];
    }
    free(L->hkey);
    free(L->hval);
    L->hkey = nk;
    L->hval = nv;
    L->hsz = nsz;
    return 1;
}

static void touch(low_t *L, int tb) {
    if (L->tbs[tb].first_use < 0) L->tbs[tb].first_use = L->nfirst++;
}

static int channel(const low_t *L, int src, int dst, int inst, int spill) {
    int n = (int)L->n;
    int dist = ((dst - src) % n + n) % n;
    int group;
    if (L->combined) { /* one group for both directions of a pair: the shorter way round, 16 per side */
        int k = dist < n - dist ? dist : n - dist;
        group = (k - 1) / 16;
    } else
        group = (dist - 1) / 32;
    return group + L->n_groups * (inst + L->instances * spill);
}

/* the sending and the receiving tb of connection src -> dst on chan */
static int conn_tbs(low_t *L, int src, int dst, int chan, int *ks, int *kr) {
    if (L->combined) {
        *ks = tb_get(L, src, R_P, dst, chan, 0);
        *kr = tb_get(L, dst, R_P, src, chan, 0);
    } else {
        *ks = tb_get(L, src, R_S, dst, chan, 0);
        *kr = tb_get(L, dst, R_R, src, chan, 0);
    }
    return *ks >= 0 && *kr >= 0;
}

static int add_piece(low_t *L, int tb, const piece_t *p, int nops) {
    touch(L, tb);
    ltb_t *t = &L->tbs[tb];
    if (t->np == 0) {
        if (L->nfp == L->cap_fp) {
            int nc = L->cap_fp ? 2 * L->cap_fp : 1024;
            int *nf = (int *)realloc(L->fp_tbs, (size_t)nc * sizeof(int));
            if (!nf) return 0;
            L->fp_tbs = nf;
            L->cap_fp = nc;
        }
        t->first_piece = L->nfp;
        L->fp_tbs[L->nfp++] = tb;
    }
    if (t->np == t->cap) {
        int nc = t->cap ? 2 * t->cap : 8;
        int *np_ = (int *)realloc(t->pieces, (size_t)nc * sizeof(int));
        if (!np_) return 0;
        t->pieces = np_;
        t->cap = nc;
    }
    if (L->npieces == L->cap_pieces) {
        int nc = L->cap_pieces ? 2 * L->cap_pieces : 4096;
        piece_t *pp = (piece_t *)realloc(L->pieces, (size_t)nc * sizeof(piece_t));
        if (!pp) return 0;
        L->pieces = pp;
        L->cap_pieces = nc;
    }
    int idx = L->npieces++;
    L->pieces[idx] = *p;
    L->pieces[idx].tb = tb;
    t->pieces[t->np++] = idx;
    t->cost += 1 + nops;
    return 1;
}

static int in_list(const int *a, int n, int x) {
    for (int i = 0; i < n; i++)
        if (a[i] == x) return 1;
    return 0;
}

static int nops_for(const int *deps, int nd, int tb) {
    int k = nd - in_list(deps, nd, tb) - 1;
    return k > 0 ? k : 0;
}

/* the tbs on rank that hold the last piece of one of op's dependencies (distinct) */
static int dep_tbs(const low_t *L, int op, int rank, int *out, int cap) {
    int nd = 0;
    for (i64 k = L->dep_ptr[op]; k < L->dep_ptr[op + 1]; k++) {
        i64 d = L->dep_ids[k];
        int tb = -1;
        if (L->src_rank[d] == rank) tb = L->last_src[d];
        else if (L->dst_rank[d] == rank) tb = L->last_dst[d];
        if (tb >= 0 && !in_list(out, nd, tb)) {
            if (nd == cap) return -1;
            out[nd++] = tb;
        }
    }
    return nd;
}

static void split_counts(int total, int parts, int *out, int *nout) {
    if (parts > total) parts = total;
    if (parts < 1) parts = 1;
    int base = total / parts, extra = total % parts;
    for (int i = 0; i < parts; i++) out[i] = base + (i < extra ? 1 : 0);
    *nout = parts;
}

#define DEP_CAP 4096

/* passes 2-6 for one layout; L_OK, L_REFUSED (the reference raises) or L_UNDECIDED */
static int low_place(low_t *L) {
    i64 nops = L->nops;
    int *order = NULL, *cntlvl = NULL, *placed = NULL, *deps_s = NULL, *deps_d = NULL, *parts = NULL, *cuts = NULL;
    int rc = L_UNDECIDED;
    /* levels and the (level, id) order */
    int maxl = 0;
    for (i64 i = 0; i < nops; i++) {
        int l = 0;
        for (i64 k = L->dep_ptr[i]; k < L->dep_ptr[i + 1]; k++) {
            i64 d = L->dep_ids[k];
            if (d < 0 || d >= i) return L_UNDECIDED;
            if (L->level[d] + 1 > l) l = L->level[d] + 1;
        }
        L->level[i] = l;
        if (l > maxl) maxl = l;
    }
    order = (int *)malloc((size_t)(nops + 1) * sizeof(int));
    cntlvl = (int *)calloc((size_t)maxl + 2, sizeof(int));
    placed = (int *)malloc(DEP_CAP * sizeof(int));
    deps_s = (int *)malloc(DEP_CAP * sizeof(int));
    deps_d = (int *)malloc(DEP_CAP * sizeof(int));
    parts = (int *)malloc(((size_t)L->instances + 1) * sizeof(int));
    cuts = (int *)malloc(65536 * sizeof(int));
    if (!order || !cntlvl || !placed || !deps_s || !deps_d || !parts || !cuts) goto out;
    for (i64 i = 0; i < nops; i++) cntlvl[L->level[i] + 1]++;
    for (int l = 0; l <= maxl; l++) cntlvl[l + 1] += cntlvl[l];
    for (i64 i = 0; i < nops; i++) order[cntlvl[L->level[i]]++] = (int)i;
    /* pass 3a: reserve the first-channel tbs in op order */
    for (i64 i = 0; i < nops; i++) {
        int s = (int)L->src_rank[i], d = (int)L->dst_rank[i];
        if (s == d) continue;
        int m = L->instances < L->cnt[i] ? L->instances : (int)L->cnt[i];
        for (int inst = 0; inst < m; inst++) {
            int ks, kr;
            if (!conn_tbs(L, s, d, channel(L, s, d, inst, 0), &ks, &kr)) goto out;
            touch(L, ks);
            touch(L, kr);
        }
    }
    /* pass 3b: place in level order */
    for (i64 oi = 0; oi < nops; oi++) {
        int op = order[oi];
        int s = (int)L->src_rank[op], d = (int)L->dst_rank[op], total = (int)L->cnt[op];
        int local = s == d;
        int npl = 0, nparts;
        if (total < 1 || total > 1 << 24) goto out;
        split_counts(total, local ? 1 : (L->instances < total ? L->instances : total), parts, &nparts);
        int nds = dep_tbs(L, op, s, deps_s, DEP_CAP);
        int ndd = local ? nds : dep_tbs(L, op, d, deps_d, DEP_CAP);
        if (nds < 0 || ndd < 0) goto out;
        if (local) memcpy(deps_d, deps_s, (size_t)nds * sizeof(int));
        int off = 0;
        piece_t pc;
        memset(&pc, 0, sizeof(pc));
        pc.op = op;
        pc.level = L->level[op];
        pc.sbuf = (int)L->src_buf[op];
        pc.dbuf = (int)L->dst_buf[op];
        if (pc.sbuf < 0 || pc.sbuf > 2 || pc.dbuf < 0 || pc.dbuf > 2) goto out;
        pc.pos = pc.index = -1;
        for (int inst = 0; inst < nparts; inst++) {
            int part = parts[inst], ncut;
            int want = (part + L->max_cnt - 1) / L->max_cnt;
            if (want > 65536) goto out;
            split_counts(part, want, cuts, &ncut);
            for (int ci = 0; ci < ncut; ci++) {
                int c = cuts[ci];
                pc.soff = (int)L->src_off[op] + off;
                pc.doff = (int)L->dst_off[op] + off;
                pc.cnt = c;
                if (local) {
                    int j = 0, key, here, nops_;
                    for (;;) {
                        key = tb_get(L, s, R_C, -1, 0, j);
                        if (key < 0) goto out;
                        here = !in_list(placed, npl, key);
                        nops_ = here ? nops_for(deps_s, nds, key) : 0;
                        if (L->tbs[key].cost + 1 + nops_ <= MAX_STEPS) break;
                        j++;
                    }
                    pc.kind = T_CPY;
                    pc.peer = -1;
                    pc.first = here;
                    if (!add_piece(L, key, &pc, nops_)) goto out;
                    if (here) {
                        if (npl == DEP_CAP) goto out;
                        placed[npl++] = key;
                    }
                    L->last_src[op] = L->last_dst[op] = key;
                } else {
                    int spill = 0, ch = channel(L, s, d, inst, 0), ks, kr, fs, fr, ns, nr;
                    for (;;) {
                        if (!conn_tbs(L, s, d, ch, &ks, &kr)) goto out;
                        fs = !in_list(placed, npl, ks);
                        fr = !in_list(placed, npl, kr);
                        ns = fs ? nops_for(deps_s, nds, ks) : 0;
                        nr = fr ? nops_for(deps_d, ndd, kr) : 0;
                        if (L->tbs[ks].cost + 1 + ns <= MAX_STEPS && L->tbs[kr].cost + 1 + nr <= MAX_STEPS) break;
                        spill++;
                        ch = channel(L, s, d, inst, spill);
                        if (ch >= L->max_channels) {
                            L->why[0] = 1; L->why[1] = s; L->why[2] = d;
                            rc = L_REFUSED;
                            goto out;
                        }
                    }
                    pc.kind = T_S;
                    pc.peer = d;
                    pc.first = fs;
                    if (!add_piece(L, ks, &pc, ns)) goto out;
                    if (fs) {
                        if (npl == DEP_CAP) goto out;
                        placed[npl++] = ks;
                    }
                    pc.kind = T_R;
                    pc.peer = s;
                    pc.first = fr;
                    if (!add_piece(L, kr, &pc, nr)) goto out;
                    if (fr && !in_list(placed, npl, kr)) {
                        if (npl == DEP_CAP) goto out;
                        placed[npl++] = kr;
                    }
                    L->last_src[op] = ks;
                    L->last_dst[op] = kr;
                }
                off += c;
            }
        }
    }
    rc = L_OK;
out:
    free(order);
    free(cntlvl);
    free(placed);
    free(deps_s);
    free(deps_d);
    free(parts);
    free(cuts);
    if (L->oom) rc = L_UNDECIDED;
    return rc;
}

/* combined tbs: per level, alternate sends and receives (send first), each in placement order */
static int low_interleave(low_t *L) {
    int *tmp = NULL, cap = 0;
    for (int t = 0; t < L->ntbs; t++) {
        ltb_t *tb = &L->tbs[t];
        if (tb->role != R_P || tb->np < 2) continue;
        if (tb->np > cap) {
            free(tmp);
            cap = tb->np;
            tmp = (int *)malloc((size_t)cap * sizeof(int));
            if (!tmp) return 0;
        }
        int k = 0, a = 0;
        while (a < tb->np) {
            int lvl = L->pieces[tb->pieces[a]].level, b = a;
            while (b < tb->np && L->pieces[tb->pieces[b]].level == lvl) b++;
            /* levels are non-decreasing along a tb (placement in level order): [a, b) is one level */
            int si = a, ri = a;
            for (;;) {
                while (si < b && L->pieces[tb->pieces[si]].kind != T_S) si++;
                while (ri < b && L->pieces[tb->pieces[ri]].kind == T_S) ri++;
                if (si >= b && ri >= b) break;
                if (si < b) tmp[k++] = tb->pieces[si++];
                if (ri < b) tmp[k++] = tb->pieces[ri++];
            }
            a = b;
        }
        memcpy(tb->pieces, tmp, (size_t)tb->np * sizeof(int));
    }
    free(tmp);
    return 1;
}

/* tb ids per rank: order of first use, copy tbs last; returns the per-rank lists (rank_ptr, rank_tbs) */
static int low_number(low_t *L, int *rank_ptr, int *rank_tbs, int *rank_order) {
    int n = (int)L->n;
    /* tbs with pieces, sorted by (is copy, first use): a counting pass over first-use slots */
    int *by_use = (int *)malloc(((size_t)L->nfirst + 1) * sizeof(int));
    if (!by_use) return 0;
    for (int i = 0; i < L->nfirst; i++) by_use[i] = -1;
    for (int t = 0; t < L->ntbs; t++)
        if (L->tbs[t].np > 0) by_use[L->tbs[t].first_use] = t;
    for (int r = 0; r <= n; r++) rank_ptr[r] = 0;
    for (int t = 0; t < L->ntbs; t++)
        if (L->tbs[t].np > 0) rank_ptr[L->tbs[t].rank + 1]++;
    for (int r = 0; r < n; r++) rank_ptr[r + 1] += rank_ptr[r];
    int *fill = (int *)malloc(((size_t)n + 1) * sizeof(int));
    if (!fill) { free(by_use); return 0; }
    memcpy(fill, rank_ptr, (size_t)n * sizeof(int));
    int nro = 0;
    for (int r = 0; r < n; r++) rank_order[r] = -1;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < L->nfirst; i++) {
            int t = by_use[i];
            if (t < 0 || (L->tbs[t].role == R_C) != pass) continue;
            int r = L->tbs[t].rank;
            if (fill[r] == rank_ptr[r]) rank_order[nro++] = r;
            L->tbs[t].id = fill[r] - rank_ptr[r];
            rank_tbs[fill[r]++] = t;
        }
    free(fill);
    free(by_use);
    return 1;
}

typedef struct {
    int tb, piece, next;
} onnode_t;

/* pass 5: targets, step indices (nops included), hasdep targets */
static int low_resolve(low_t *L, int *nsteps_of) {
    i64 nops = L->nops;
    int *head = (int *)malloc(((size_t)nops + 1) * sizeof(int));
    int *tail = (int *)malloc(((size_t)nops + 1) * sizeof(int));
    onnode_t *pool = (onnode_t *)malloc(((size_t)L->npieces + 1) * sizeof(onnode_t));
    int npool = 0, ok = 0;
    int tk[DEP_CAP], tp[DEP_CAP];
    if (!head || !tail || !pool) goto out;
    for (i64 i = 0; i < nops; i++) head[i] = tail[i] = -1;
    /* per op, its tbs in the order the reference's dict meets them (first-piece order), each with the op's
       latest piece there */
    for (int f = 0; f < L->nfp; f++) {
        int t = L->fp_tbs[f];
        ltb_t *tb = &L->tbs[t];
        for (int i = 0; i < tb->np; i++) {
            piece_t *p = &L->pieces[tb->pieces[i]];
            p->pos = i;
            int e = head[p->op];
            while (e >= 0 && pool[e].tb != t) e = pool[e].next;
            if (e >= 0) pool[e].piece = tb->pieces[i];
            else {
                pool[npool].tb = t;
                pool[npool].piece = tb->pieces[i];
                pool[npool].next = -1;
                if (tail[p->op] >= 0) pool[tail[p->op]].next = npool;
                else head[p->op] = npool;
                tail[p->op] = npool++;
            }
        }
    }
    for (int t = 0; t < L->ntbs; t++) {
        ltb_t *tb = &L->tbs[t];
        int idx = 0;
        for (int i = 0; i < tb->np; i++) {
            piece_t *p = &L->pieces[tb->pieces[i]];
            int nt = 0;
            if (p->first) {
                for (i64 k = L->dep_ptr[p->op]; k < L->dep_ptr[p->op + 1]; k++) {
                    for (int e = head[L->dep_ids[k]]; e >= 0; e = pool[e].next) {
                        int ot = pool[e].tb;
                        if (ot == t || L->tbs[ot].rank != tb->rank) continue;
                        int j = 0;
                        while (j < nt && tk[j] != ot) j++;
                        if (j == nt) {
                            if (nt == DEP_CAP) goto out;
                            tk[nt] = ot;
                            tp[nt++] = pool[e].piece;
                        } else if (L->pieces[pool[e].piece].pos > L->pieces[tp[j]].pos)
                            tp[j] = pool[e].piece;
                    }
                }
            }
            if (L->ntarg + nt > L->cap_targ) {
                int nc = L->cap_targ ? 2 * L->cap_targ : 4096;
                while (nc < L->ntarg + nt) nc *= 2;
                int *nt_ = (int *)realloc(L->targ, (size_t)nc * sizeof(int));
                if (!nt_) goto out;
                L->targ = nt_;
                L->cap_targ = nc;
            }
            p->targ_off = L->ntarg;
            p->ntarg = nt;
            memcpy(L->targ + L->ntarg, tp, (size_t)nt * sizeof(int));
            L->ntarg += nt;
            p->index = idx + (nt > 1 ? nt - 1 : 0);
            idx = p->index + 1;
        }
        nsteps_of[t] = idx;
    }
    for (int i = 0; i < L->npieces; i++)
        for (int k = 0; k < L->pieces[i].ntarg; k++) L->pieces[L->targ[L->pieces[i].targ_off + k]].is_target = 1;
    ok = 1;
out:
    free(head);
    free(tail);
    free(pool);
    return ok;
}

/* pass 6: 1 when every executor limit holds; else 0 with L->why set to the first violation in the order the
   reference checks them (its dicts' insertion orders): RCCL's tbs per rank (ranks in order of first
   appearance in tb numbering order), steps per tb (first-piece order), dependency-target ids (first-piece
   order, piece order, target order), tbs per (rank, channel, role) (rank, then first use in id order) */
static int low_limits(low_t *L, const int *rank_order, const int *rank_ptr, const int *rank_tbs,
                      const int *nsteps_of) {
    int n = (int)L->n;
    if (L->rccl)
        for (int k = 0; k < n; k++) {
            int r = rank_order[k];
            if (r < 0) break;
            if (rank_ptr[r + 1] - rank_ptr[r] > MAX_TBS_RCCL) {
                L->why[0] = 2; L->why[1] = r; L->why[2] = rank_ptr[r + 1] - rank_ptr[r];
                return 0;
            }
        }
    for (int f = 0; f < L->nfp; f++) {
        int t = L->fp_tbs[f];
        if (nsteps_of[t] > MAX_STEPS) {
            L->why[0] = 3; L->why[1] = L->tbs[t].rank; L->why[2] = L->tbs[t].id; L->why[3] = nsteps_of[t];
            return 0;
        }
    }
    for (int f = 0; f < L->nfp; f++) {
        const ltb_t *tb = &L->tbs[L->fp_tbs[f]];
        for (int i = 0; i < tb->np; i++) {
            const piece_t *p = &L->pieces[tb->pieces[i]];
            for (int k = 0; k < p->ntarg; k++) {
                int id = L->tbs[L->pieces[L->targ[p->targ_off + k]].tb].id;
                if (id > MAX_DEP_TB) {
                    L->why[0] = 4; L->why[1] = id;
                    return 0;
                }
            }
        }
    }
    int maxch = 0;
    for (int t = 0; t < L->ntbs; t++)
        if (L->tbs[t].np > 0 && L->tbs[t].chan > maxch) maxch = L->tbs[t].chan;
    /* per rank: counts per (chan, role) and the keys in order of first use */
    int *cnt = (int *)calloc(2 * ((size_t)maxch + 1), sizeof(int));
    int *keys = (int *)malloc(2 * ((size_t)maxch + 1) * sizeof(int));
    int ok = cnt && keys;
    for (int r = 0; r < n && ok; r++) {
        int nk = 0;
        for (int i = rank_ptr[r]; i < rank_ptr[r + 1]; i++) {
            const ltb_t *t = &L->tbs[rank_tbs[i]];
            if (t->role == R_S || t->role == R_P) {
                int k = 2 * t->chan;
                if (cnt[k]++ == 0) keys[nk++] = k;
            }
            if (t->role == R_R || t->role == R_P) {
                int k = 2 * t->chan + 1;
                if (cnt[k]++ == 0) keys[nk++] = k;
            }
        }
        for (int i = 0; i < nk && ok; i++)
            if (cnt[keys[i]] > MAX_TBS_PER_CHANNEL) {
                L->why[0] = 5; L->why[1] = r; L->why[2] = keys[i] / 2; L->why[3] = cnt[keys[i]]; L->why[4] = keys[i] % 2;
                ok = 0;
            }
        for (int i = 0; i < nk; i++) cnt[keys[i]] = 0;
    }
    if (!cnt || !keys) L->oom = 1;
    free(cnt);
    free(keys);
    return ok;
}

/* ------------------------------------------------------------------ text */
typedef struct {
    char *buf;
    size_t len, cap;
    int oom;
} sbuf_t;

static void sb_need(sbuf_t *b, size_t more) {
    if (b->oom || b->len + more <= b->cap) return;
    size_t nc = b->cap ? b->cap : 1 << 16;
    while (nc < b->len + more) nc *= 2;
    char *nb = (char *)realloc(b->buf, nc);
    if (!nb) { b->oom = 1; return; }
    b->buf = nb;
    b->cap = nc;
}

static void sb_str(sbuf_t *b, const char *s, size_t n) {
    sb_need(b, n);
    if (b->oom) return;
    memcpy(b->buf + b->len, s, n);
    b->len += n;
}

#define SB_LIT(b, s) sb_str((b), (s), sizeof(s) - 1)

static void sb_int(sbuf_t *b, i64 v) {
    char tmp[24];
    int k = 0, neg = v < 0;
    unsigned long long u = neg ? (unsigned long long)(-(v + 1)) + 1 : (unsigned long long)v;
    do { tmp[k++] = (char)('0' + u % 10); u /= 10; } while (u);
    sb_need(b, (size_t)k + 1);
    if (b->oom) return;
    if (neg) b->buf[b->len++] = '-';
    while (k) b->buf[b->len++] = tmp[--k];
}

static const char *BUFS = "ios";

static void sb_step(sbuf_t *b, int s, const char *type, char sb_, i64 so, char db, i64 doff, i64 cnt, i64 depid,
                    i64 deps, int hasdep) {
    SB_LIT(b, "      <step s=\"");
    sb_int(b, s);
    SB_LIT(b, "\" type=\"");
    sb_str(b, type, strlen(type));
    SB_LIT(b, "\" srcbuf=\"");
    sb_str(b, &sb_, 1);
    SB_LIT(b, "\" srcoff=\"");
    sb_int(b, so);
    SB_LIT(b, "\" dstbuf=\"");
    sb_str(b, &db, 1);
    SB_LIT(b, "\" dstoff=\"");
    sb_int(b, doff);
    SB_LIT(b, "\" cnt=\"");
    sb_int(b, cnt);
    SB_LIT(b, "\" depid=\"");
    sb_int(b, depid);
    SB_LIT(b, "\" deps=\"");
    sb_int(b, deps);
    SB_LIT(b, "\" hasdep=\"");
    sb_int(b, hasdep);
    SB_LIT(b, "\"/>\n");
}

/* the whole lowering for one layout; L_OK with the text in out */
/* channel groups per instance: every rank has at most 32 tbs of a role per channel (split: peers by distance
   (d - s) mod N, 32 a group; combined: pairs by the shorter distance, 16 each way a group) */
static int n_groups_of(i64 n, int combined) {
    i64 g = combined ? ((n / 2) + 15) / 16 : (n - 1 + 31) / 32;
    return g < 1 ? 1 : (int)g;
}

static int low_one(low_t *L, int combined, const char *name, const char *proto, i64 C, const i64 *scratch, i64 minb,
                   i64 maxb, sbuf_t *out, int *stats) {
    int n = (int)L->n, rc = L_UNDECIDED;
    int *rank_ptr = NULL, *rank_tbs = NULL, *nsteps_of = NULL, *rank_order = NULL;
    /* fresh state */
    for (int t = 0; t < L->ntbs; t++) free(L->tbs[t].pieces);
    L->ntbs = 0;
    L->nfirst = 0;
    L->npieces = 0;
    L->ntarg = 0;
    L->nfp = 0;
    L->combined = combined;
    L->n_groups = n_groups_of(L->n, combined);
    memset(L->why, 0, sizeof(L->why));
    for (size_t i = 0; i < L->hsz; i++) L->hkey[i] = -1;
    for (i64 i = 0; i < L->nops; i++) L->last_src[i] = L->last_dst[i] = -1;
    rc = low_place(L);
    if (rc != L_OK) goto out;
    rc = L_UNDECIDED;
    if (!low_interleave(L)) goto out;
    rank_ptr = (int *)malloc(((size_t)n + 1) * sizeof(int));
    rank_tbs = (int *)malloc(((size_t)L->ntbs + 1) * sizeof(int));
    nsteps_of = (int *)calloc((size_t)L->ntbs + 1, sizeof(int));
    rank_order = (int *)malloc(((size_t)n + 1) * sizeof(int));
    if (!rank_ptr || !rank_tbs || !nsteps_of || !rank_order) goto out;
    if (!low_number(L, rank_ptr, rank_tbs, rank_order)) goto out;
    if (!low_resolve(L, nsteps_of)) goto out;
    if (!low_limits(L, rank_order, rank_ptr, rank_tbs, nsteps_of)) {
        rc = L->oom ? L_UNDECIDED : L_REFUSED;
        goto out;
    }
    for (int r = 0; r < n; r++) { /* the parser's node pool per rank */
        i64 nodes = 1 + n + (rank_ptr[r + 1] - rank_ptr[r]);
        for (int i = rank_ptr[r]; i < rank_ptr[r + 1]; i++) nodes += nsteps_of[rank_tbs[i]];
        if (nodes > MAX_NODES) {
            L->why[0] = 6; L->why[1] = r; L->why[2] = nodes;
            rc = L_REFUSED;
            goto out;
        }
    }
    int nch = 0, max_tbs = 0, max_steps = 0;
    for (int t = 0; t < L->ntbs; t++)
        if (L->tbs[t].np > 0) {
            if (L->tbs[t].chan + 1 > nch) nch = L->tbs[t].chan + 1;
            if (nsteps_of[t] > max_steps) max_steps = nsteps_of[t];
        }
    if (nch < 1) nch = 1;
    for (int r = 0; r < n; r++)
        if (rank_ptr[r + 1] - rank_ptr[r] > max_tbs) max_tbs = rank_ptr[r + 1] - rank_ptr[r];
    stats[0] = nch;
    stats[1] = max_tbs;
    stats[2] = max_steps;
    out->len = 0;
    SB_LIT(out, "<algo name=\"");
    sb_str(out, name, strlen(name));
    SB_LIT(out, "\" proto=\"");
    sb_str(out, proto, strlen(proto));
    SB_LIT(out, "\" nchannels=\"");
    sb_int(out, nch);
    SB_LIT(out, "\" nchunksperloop=\"");
    sb_int(out, C);
    SB_LIT(out, "\" ngpus=\"");
    sb_int(out, n);
    SB_LIT(out, "\" coll=\"alltoall\" inplace=\"0\" outofplace=\"1\" minBytes=\"");
    sb_int(out, minb);
    SB_LIT(out, "\" maxBytes=\"");
    sb_int(out, maxb);
    SB_LIT(out, "\">\n");
    i64 pairs_cap = 0;
    i64 *pairs = NULL;
    for (int r = 0; r < n; r++) {
        SB_LIT(out, "  <gpu id=\"");
        sb_int(out, r);
        SB_LIT(out, "\" i_chunks=\"");
        sb_int(out, C);
        SB_LIT(out, "\" o_chunks=\"");
        sb_int(out, C);
        SB_LIT(out, "\" s_chunks=\"");
        sb_int(out, scratch[r]);
        SB_LIT(out, "\">\n");
        for (int i = rank_ptr[r]; i < rank_ptr[r + 1]; i++) {
            const ltb_t *t = &L->tbs[rank_tbs[i]];
            SB_LIT(out, "    <tb id=\"");
            sb_int(out, t->id);
            SB_LIT(out, "\" send=\"");
            sb_int(out, (t->role == R_S || t->role == R_P) ? t->peer : -1);
            SB_LIT(out, "\" recv=\"");
            sb_int(out, (t->role == R_R || t->role == R_P) ? t->peer : -1);
            SB_LIT(out, "\" chan=\"");
            sb_int(out, t->role == R_C ? 0 : t->chan);
            SB_LIT(out, "\">\n");
            int k = 0;
            for (int pi = 0; pi < t->np; pi++) {
                const piece_t *p = &L->pieces[t->pieces[pi]];
                int nt = p->ntarg;
                if (nt > pairs_cap) {
                    free(pairs);
                    pairs_cap = nt * 2;
                    pairs = (i64 *)malloc((size_t)pairs_cap * sizeof(i64));
                    if (!pairs) { out->oom = 1; goto text_done; }
                }
                for (int q = 0; q < nt; q++) {
                    const piece_t *tp = &L->pieces[L->targ[p->targ_off + q]];
                    pairs[q] = (i64)L->tbs[tp->tb].id * (1LL << 32) + tp->index;
                }
                for (int a = 1; a < nt; a++) { /* insertion sort: (tb id, step index) */
                    i64 v = pairs[a];
                    int b = a - 1;
                    while (b >= 0 && pairs[b] > v) { pairs[b + 1] = pairs[b]; b--; }
                    pairs[b + 1] = v;
                }
                for (int q = 0; q + 1 < nt; q++)
                    sb_step(out, k++, "nop", 'i', -1, 'o', -1, 0, pairs[q] >> 32, pairs[q] & 0xffffffffLL, 0);
                i64 dtb = nt ? pairs[nt - 1] >> 32 : -1, dst = nt ? pairs[nt - 1] & 0xffffffffLL : -1;
                const char *kind = p->kind == T_S ? "s" : (p->kind == T_R ? "r" : "cpy");
                sb_step(out, k++, kind, BUFS[p->sbuf], p->soff, BUFS[p->dbuf], p->doff, p->cnt, dtb, dst, p->is_target);
            }
            SB_LIT(out, "    </tb>\n");
        }
        SB_LIT(out, "  </gpu>\n");
    }
    SB_LIT(out, "</algo>\n");
text_done:
    free(pairs);
    rc = out->oom ? L_UNDECIDED : L_OK;
out:
    free(rank_ptr);
    free(rank_tbs);
    free(nsteps_of);
    free(rank_order);
    return rc;
}

/* lower(n, C, scratch, src_rank, src_buf, src_off, dst_rank, dst_buf, dst_off, cnt, dep_ptr, dep_ids,
         layout, dialect, instances, max_cnt, max_channels, name, proto, min_bytes, max_bytes)
   -> None | (text, nchannels, max_tbs, max_steps); layout: 0 auto, 1 split, 2 combined */
static PyObject *py_lower(PyObject *self, PyObject *args) {
    (void)self;
    i64 n, C, minb, maxb;
    int layout, rccl, instances, max_cnt, max_channels;
    const char *name, *proto;
    PyObject *objs[10];
    if (!PyArg_ParseTuple(args, "LLOOOOOOOOOOiiiiissLL", &n, &C, &objs[0], &objs[1], &objs[2], &objs[3], &objs[4],
                          &objs[5], &objs[6], &objs[7], &objs[8], &objs[9], &layout, &rccl, &instances, &max_cnt,
                          &max_channels, &name, &proto, &minb, &maxb))
        return NULL;
    Py_buffer bufs[10];
    int got = 0;
    for (; got < 10; got++)
        if (PyObject_GetBuffer(objs[got], &bufs[got], PyBUF_SIMPLE) < 0) break;
    if (got < 10) {
        for (int i = 0; i < got; i++) PyBuffer_Release(&bufs[i]);
        return NULL;
    }
    i64 nops = bufs[7].len / (Py_ssize_t)sizeof(i64);
    int sizes_ok = n >= 1 && n < 60000 && bufs[0].len == n * (i64)sizeof(i64) && nops < (1LL << 30) &&
                   bufs[8].len == (nops + 1) * (i64)sizeof(i64) && instances >= 1 && max_cnt >= 1 &&
                   instances < (1 << 20);
    for (int i = 1; i < 7; i++) sizes_ok = sizes_ok && bufs[i].len == nops * (i64)sizeof(i64);
    PyObject *res = NULL;
    sbuf_t out = {NULL, 0, 0, 0};
    int stats[3] = {0, 0, 0}, rc = L_UNDECIDED, last_combined = 0;
    low_t L;
    memset(&L, 0, sizeof(L));
    if (sizes_ok) {
        L.n = n;
        L.nops = nops;
        L.src_rank = (const i64 *)bufs[1].buf;
        L.src_buf = (const i64 *)bufs[2].buf;
        L.src_off = (const i64 *)bufs[3].buf;
        L.dst_rank = (const i64 *)bufs[4].buf;
        L.dst_buf = (const i64 *)bufs[5].buf;
        L.dst_off = (const i64 *)bufs[6].buf;
        L.cnt = (const i64 *)bufs[7].buf;
        L.dep_ptr = (const i64 *)bufs[8].buf;
        L.dep_ids = (const i64 *)bufs[9].buf;
        L.instances = instances;
        L.max_cnt = max_cnt;
        L.max_channels = max_channels;
        L.rccl = rccl;
        const i64 *scratch = (const i64 *)bufs[0].buf;
        i64 max_scr = 0;
        for (i64 r = 0; r < n; r++)
            if (scratch[r] > max_scr) max_scr = scratch[r];
        for (i64 i = 0; i < nops && sizes_ok; i++)
            if (L.src_rank[i] < 0 || L.src_rank[i] >= n || L.dst_rank[i] < 0 || L.dst_rank[i] >= n ||
                L.dep_ptr[i] > L.dep_ptr[i + 1] || L.src_off[i] < 0 || L.dst_off[i] < 0 || L.src_off[i] > (1 << 30) ||
                L.dst_off[i] > (1 << 30))
                sizes_ok = 0;
        if (sizes_ok && L.dep_ptr[0] == 0 && L.dep_ptr[nops] * (i64)sizeof(i64) == bufs[9].len) {
            Py_BEGIN_ALLOW_THREADS
            if (C - 1 > MAX_OFFSET || max_scr - 1 > MAX_OFFSET) rc = L_UNDECIDED; /* the reference's first check */
            else {
                L.hsz = 4096;
                L.hkey = (i64 *)malloc(L.hsz * sizeof(i64));
                L.hval = (int *)malloc(L.hsz * sizeof(int));
                L.level = (int *)malloc(((size_t)nops + 1) * sizeof(int));
                L.last_src = (int *)malloc(((size_t)nops + 1) * sizeof(int));
                L.last_dst = (int *)malloc(((size_t)nops + 1) * sizeof(int));
                if (L.hkey && L.hval && L.level && L.last_src && L.last_dst) {
                    int first = layout == 2 ? 1 : 0, last = layout == 1 ? 0 : 1;
                    for (int comb = first; comb <= last; comb++) {
                        last_combined = comb;
                        rc = low_one(&L, comb, name, proto, C, scratch, minb, maxb, &out, stats);
                        if (rc != L_REFUSED) break;
                    }
                }
            }
            Py_END_ALLOW_THREADS
        }
    }
    for (int i = 0; i < 10; i++) PyBuffer_Release(&bufs[i]);
    if (rc == L_OK && !out.oom) {
        PyObject *text = PyUnicode_DecodeUTF8(out.buf, (Py_ssize_t)out.len, "strict");
        res = text ? Py_BuildValue("(Niii)", text, stats[0], stats[1], stats[2]) : NULL;
    } else if (rc == L_REFUSED) {
        res = Py_BuildValue("(iLLLLLi)", 0, L.why[0], L.why[1], L.why[2], L.why[3], L.why[4], last_combined);
    } else {
        Py_INCREF(Py_None);
        res = Py_None;
    }
    free(out.buf);
    for (int t = 0; t < L.ntbs; t++) free(L.tbs[t].pieces);
    free(L.tbs);
    free(L.hkey);
    free(L.hval);
    free(L.pieces);
    free(L.targ);
    free(L.level);
    free(L.last_src);
    free(L.last_dst);
    free(L.fp_tbs);
    return res;
}

static PyMethodDef methods[] = {
    {"check", py_check, METH_VARARGS,
     "check(text, dialect, counts) -> None (undecided) or (ngpus, nchannels, C, proto, coll, max_tbs, max_steps)"},
    {"lower", py_lower, METH_VARARGS, "the exact MSCCL XML text of a Program, or None (see xmllower.inc)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_xmlinterp", NULL, -1, methods};

PyMODINIT_FUNC PyInit__xmlinterp(void) { return PyModule_Create(&module); }
