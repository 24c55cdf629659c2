/*
 * a2acc._mscclpp_lower: the compiled MSCCL++ lowering, a transcription of a2acc/backends/mscclpp/{lower,schedule,
 * assemble,pack,emit_json}.py (their passes in the same order) that writes the exact JSON text; the Python modules
 * stay the reference it is tested against (tests/backends/test_mscclpp_native.py: byte-identical texts and the
 * same refusals on hypothesis-generated Programs and options, every layout, protocol and output mode).
 *
 * lower(n, C, unit, scratch, node, src_rank, src_buf, src_off, dst_rank, dst_buf, dst_off, cnt, dep_ptr, dep_ids,
 *       level, name, ll, layout, direct, deps_all, max_threadblocks, nthreads, min_bytes, max_bytes)
 *   -> ("ok", text, threadblocks, ops_per_tb, lanes, semaphores, signals, iterations, ordering, unroutable)
 *    | ("refused", message)   where the reference raises LoweringError (the message is the reference's)
 *    | None                   undecided (sizes or values outside this core's range): the caller runs the reference
 *
 * Keys (the reference's 4-tuples (1, level, id, phase), or (1, level, phase, id) for the packed layout) are packed
 * into one u64 with the same order; every iteration the reference does over a dict in insertion order is done in
 * that order here (lanes by their first put, data needs by the first append, wires by creation), and every sort
 * the reference relies on for stability breaks ties the same way.
 */
#include "mscclpp_common.h"

static int cmp_u64(const void *a, const void *b) {
    u64 x = *(const u64 *)a, y = *(const u64 *)b;
    return x < y ? -1 : x > y;
}

typedef u64 lkey_t;
#define LKEY(a, lvl, x) (((u64)(a) << 58) | ((u64)(lvl) << 36) | (u64)(x))
#define KEY_START LKEY(0, 0, 0)
#define KEY_END_WAIT LKEY(2, 0, 0)
#define KEY_END_ACK LKEY(2, 0, 1)
#define KEY_END_ACKWAIT LKEY(2, 0, 2)
enum { PH_W0 = 0, PH_REL1, PH_ACQ1, PH_SIG2, PH_WAIT2, PH_REL2, PH_ACQ2, PH_READY, PH_OP, PH_SIG, PH_SW, PH_SC };
enum { EV_PUT, EV_COPY, EV_SCOPY, EV_UPKT, EV_SIG, EV_WAIT, EV_REL, EV_ACQ };
/* a thread block's key: role (the reference's sort order: c < k < p < r < s), peer, index */
enum { RO_C = 1, RO_K = 2, RO_P = 3, RO_R = 4, RO_S = 5 };
typedef i64 tbk_t;
#define TBK(role, peer, idx) (((i64)(role) << 44) | ((i64)((peer) + 1) << 22) | (i64)(idx))
#define TBK_ROLE(k) ((int)((k) >> 44))
#define TBK_PEER(k) ((int)(((k) >> 22) & ((1 << 22) - 1)) - 1)
#define TBK_IDX(k) ((int)((k) & ((1 << 22) - 1)))
#define MAX_LANES 64
#define MAX_ITERATIONS 200
#define MAX_PAIR_LANES 16
#define PK_FILL 58.0
#define PK_MIN_FILL 40.0
#define PK_FILL_STEP 2.0

typedef struct {
    lkey_t key;
    int seq, kind, ref; /* ref: op id (data events) or wire id (sync events) */
} ev_t;

typedef struct {
    int rank;
    tbk_t tk;
    ev_t *ev;
    int nev, cap;
} agent_t;

typedef struct {
    lkey_t key, need; /* a signal and the smallest key that needs it */
} lsig_t;

typedef struct {
    int chan; /* 1 channel, 0 semaphore */
    int src, dst; /* agents */
    tbk_t src_end, dst_end;
    lsig_t *sig;
    int nsig, cap;
    int sem_id;
} wire_t;

/* a generic open-addressing map u64 -> int (value -1 absent) */
typedef struct {
    u64 *k;
    int *v;
    size_t cap, n;
} umap_t;

static uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ULL;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

static int umap_init(umap_t *m, size_t want) {
    m->cap = 64;
    while (m->cap < 2 * want + 8) m->cap *= 2;
    m->k = (u64 *)malloc(m->cap * sizeof(u64));
    m->v = (int *)malloc(m->cap * sizeof(int));
    m->n = 0;
    if (!m->k || !m->v) return 0;
    for (size_t i = 0; i < m->cap; i++) m->v[i] = -1;
    return 1;
}

static void umap_free(umap_t *m) {
    free(m->k);
    free(m->v);
    m->k = NULL;
    m->v = NULL;
}

/* values: >= 0 stored, -1 empty slot (ends a probe), -2 deleted (a probe goes on) */
static int umap_get(const umap_t *m, u64 key) {
    size_t i = mix64(key) & (m->cap - 1);
    while (m->v[i] != -1) {
        if (m->k[i] == key) return m->v[i] < 0 ? -1 : m->v[i];
        i = (i + 1) & (m->cap - 1);
    }
    return -1;
}

static void umap_del(umap_t *m, u64 key) {
    size_t i = mix64(key) & (m->cap - 1);
    while (m->v[i] != -1) {
        if (m->k[i] == key) {
            m->v[i] = -2;
            return;
        }
        i = (i + 1) & (m->cap - 1);
    }
}

static int umap_put(umap_t *m, u64 key, int val) {
    if (2 * (m->n + 1) > m->cap) {
        umap_t g;
        g.cap = m->cap * 2;
        g.k = (u64 *)malloc(g.cap * sizeof(u64));
        g.v = (int *)malloc(g.cap * sizeof(int));
        g.n = 0;
        if (!g.k || !g.v) return 0;
        for (size_t i = 0; i < g.cap; i++) g.v[i] = -1;
        for (size_t i = 0; i < m->cap; i++)
            if (m->v[i] != -1) {
                size_t j = mix64(m->k[i]) & (g.cap - 1);
                while (g.v[j] >= 0) j = (j + 1) & (g.cap - 1);
                g.k[j] = m->k[i];
                g.v[j] = m->v[i];
                g.n++;
            }
        umap_free(m);
        *m = g;
    }
    size_t i = mix64(key) & (m->cap - 1);
    while (m->v[i] != -1) {
        if (m->k[i] == key) {
            m->v[i] = val;
            return 1;
        }
        i = (i + 1) & (m->cap - 1);
    }
    m->k[i] = key;
    m->v[i] = val;
    m->n++;
    return 1;
}

/* the Program and the options, and what every attempt shares (lower.py's Prepared) */
typedef struct {
    int n, nops;
    const i64 *src_rank, *src_buf, *src_off, *dst_rank, *dst_buf, *dst_off, *cnt, *dep_ptr, *dep_ids, *level;
    const i64 *scratch0, *node;
    i64 C, unit;
    int ll, layout, direct, deps_all, max_tbs, nthreads;
    i64 min_bytes, max_bytes;
    const char *name;
    /* prepared */
    int *order;          /* op ids in key order */
    int *staged;         /* per op: staging offset, -1 none */
    i64 *scratch;        /* per rank: scratch chunks with staging */
    int *need_ptr, *need_y;
    uint8_t *need_w;     /* per need: 1 "write", 0 "read" */
    int ordering, unroutable0;
    int *conn_first, *conn_n, *conn_ops; /* connections in insertion order: ops per (s, d) */
    int nconn;
    umap_t conn_of;      /* (s, d) -> connection index */
    int *local_first, *local_n, *local_ops; /* per rank */
    char *err;           /* refusal message */
} pre_t;

static lkey_t ek(const pre_t *R, int oid, int ph) {
    u64 lvl = (u64)R->level[oid];
    u64 x = R->layout == 2 ? (((u64)ph << 32) | (u64)oid) : (((u64)oid << 4) | (u64)ph);
    return LKEY(1, lvl, x);
}

static int is_local(const pre_t *R, int oid) { return R->src_rank[oid] == R->dst_rank[oid]; }

static int ctype_pair(const pre_t *R, int a, int b) { return R->node[a] == R->node[b] ? CT_MEM : CT_PORT; }

static char *fmt(const char *f, ...) {
    char *s = (char *)malloc(1024);
    if (!s) return NULL;
    va_list ap;
    va_start(ap, f);
    vsnprintf(s, 1024, f, ap);
    va_end(ap);
    return s;
}

/* ------------------------------------------------------------------ prepare (lower.py) */
typedef struct {
    i64 lo, hi;
    int oid;
} iv_t;

static int cmp_iv(const void *a, const void *b) {
    const iv_t *x = (const iv_t *)a, *y = (const iv_t *)b;
    if (x->lo != y->lo) return x->lo < y->lo ? -1 : 1;
    if (x->hi != y->hi) return x->hi < y->hi ? -1 : 1;
    return x->oid < y->oid ? -1 : x->oid > y->oid;
}

typedef struct {
    int x, y;
    uint8_t w;
} needrec_t;

static int cmp_need(const void *a, const void *b) {
    const needrec_t *p = (const needrec_t *)a, *q = (const needrec_t *)b;
    if (p->x != q->x) return p->x < q->x ? -1 : 1;
    if (p->y != q->y) return p->y < q->y ? -1 : 1;
    return 0;
}

static const i64 *g_level; /* for the key-order sort (qsort has no context) */
static int cmp_key_order(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    if (g_level[x] != g_level[y]) return g_level[x] < g_level[y] ? -1 : 1;
    return x < y ? -1 : x > y;
}

static int stage(pre_t *R) {
    int n = R->n;
    R->staged = (int *)malloc(((size_t)R->nops + 1) * sizeof(int));
    R->scratch = (i64 *)malloc((size_t)n * sizeof(i64));
    if (!R->staged || !R->scratch) return 0;
    for (int r = 0; r < n; r++) R->scratch[r] = R->scratch0[r];
    for (int i = 0; i < R->nops; i++) {
        R->staged[i] = -1;
        if (is_local(R, i)) continue;
        int s = (int)R->src_rank[i], d = (int)R->dst_rank[i];
        if (R->ll && R->node[s] != R->node[d]) {
            R->err = fmt("protocol=LL needs memory channels, but rank %d -> %d crosses servers (LL over port channels "
                         "is not lowered): use protocol=Simple", s, d);
            return 0;
        }
        if (R->ll || (R->dst_buf[i] == B_O && !R->direct)) {
            R->staged[i] = (int)R->scratch[d];
            R->scratch[d] += R->cnt[i];
        }
    }
    i64 top_chunk = R->max_bytes / R->C > R->unit ? R->max_bytes / R->C : R->unit;
    i64 mx = R->C, mx1 = R->C;
    for (int r = 0; r < n; r++) {
        i64 sm = R->scratch[r] * (R->ll ? 2 : 1);
        if (sm > mx) mx = sm;
        if (R->scratch[r] > mx1) mx1 = R->scratch[r];
    }
    u64 top = (u64)mx * (u64)top_chunk;
    if (top > MAX_U32) {
        R->err = fmt("byte offsets up to %llu exceed the executor's uint32 offsets: %lld chunks of %lld B; chunks of at "
                     "most %llu B would fit (a finer layout, or less scratch)",
                     top, mx1, top_chunk, MAX_U32 / (u64)mx);
        return 0;
    }
    return 1;
}

/* walk back over the writes (sorted by start, with the running maximum of their ends) overlapping [lo, hi) */
static int overlapping(const iv_t *ws, const i64 *pmax, int nw, i64 lo, i64 hi, needrec_t **out, size_t *n,
                       size_t *cap, int oid, int reader) {
    int a = 0, b = nw; /* bisect_left(starts, hi) */
    while (a < b) {
        int m = (a + b) / 2;
        if (ws[m].lo < hi) a = m + 1;
        else b = m;
    }
    for (int i = a - 1; i >= 0 && pmax[i] > lo; i--) {
        if (ws[i].hi <= lo) continue;
        int other = ws[i].oid;
        if (other == oid) continue;
        if (*n >= *cap) {
            size_t nc = *cap ? *cap * 2 : 1024;
            needrec_t *nn = (needrec_t *)realloc(*out, nc * sizeof(needrec_t));
            if (!nn) return 0;
            *out = nn;
            *cap = nc;
        }
        needrec_t *rec = &(*out)[(*n)++];
        if (!reader) { /* two writes: the later needs the earlier written */
            rec->x = other > oid ? other : oid;
            rec->y = other > oid ? oid : other;
            rec->w = 1;
        } else if (other < oid) { /* the reader comes after the writer: it needs the write */
            rec->x = oid, rec->y = other, rec->w = 1;
        } else { /* the writer comes after: it needs the read done */
            rec->x = other, rec->y = oid, rec->w = 0;
        }
    }
    return 1;
}

static int find_needs(pre_t *R) {
    int nops = R->nops, n = R->n;
    /* group writes and reads by (rank, buffer): counting sort */
    int nk = n * 3;
    int *wc = (int *)calloc((size_t)nk + 1, sizeof(int)), *rc = (int *)calloc((size_t)nk + 1, sizeof(int));
    iv_t *ws = (iv_t *)malloc(((size_t)nops + 1) * sizeof(iv_t)), *rs = (iv_t *)malloc(((size_t)nops + 1) * sizeof(iv_t));
    i64 *pmax = (i64 *)malloc(((size_t)nops + 1) * sizeof(i64));
    if (!wc || !rc || !ws || !rs || !pmax) return 0;
    for (int i = 0; i < nops; i++) {
        wc[R->dst_rank[i] * 3 + R->dst_buf[i] + 1]++;
        rc[R->src_rank[i] * 3 + R->src_buf[i] + 1]++;
    }
    for (int k = 0; k < nk; k++) wc[k + 1] += wc[k], rc[k + 1] += rc[k];
    int *wp = (int *)malloc(((size_t)nk + 1) * sizeof(int)), *rp = (int *)malloc(((size_t)nk + 1) * sizeof(int));
    if (!wp || !rp) return 0;
    memcpy(wp, wc, ((size_t)nk + 1) * sizeof(int));
    memcpy(rp, rc, ((size_t)nk + 1) * sizeof(int));
    for (int i = 0; i < nops; i++) {
        iv_t w = {R->dst_off[i], R->dst_off[i] + R->cnt[i], i}, rd = {R->src_off[i], R->src_off[i] + R->cnt[i], i};
        ws[wp[R->dst_rank[i] * 3 + R->dst_buf[i]]++] = w;
        rs[rp[R->src_rank[i] * 3 + R->src_buf[i]]++] = rd; /* reads stay in op order */
    }
    free(wp);
    free(rp);
    needrec_t *recs = NULL;
    size_t nrec = 0, caprec = 0;
    for (int k = 0; k < nk; k++) {
        iv_t *w = ws + wc[k];
        int nw = wc[k + 1] - wc[k];
        if (!nw) continue;
        qsort(w, (size_t)nw, sizeof(iv_t), cmp_iv);
        i64 *pm = pmax + wc[k];
        for (int i = 0; i < nw; i++) pm[i] = i && pm[i - 1] > w[i].hi ? pm[i - 1] : w[i].hi;
        for (int i = 0; i < nw; i++)
            if (!overlapping(w, pm, nw, w[i].lo, w[i].hi, &recs, &nrec, &caprec, w[i].oid, 0)) return 0;
        for (int i = rc[k]; i < rc[k + 1]; i++)
            if (!overlapping(w, pm, nw, rs[i].lo, rs[i].hi, &recs, &nrec, &caprec, rs[i].oid, 1)) return 0;
    }
    free(wc);
    free(rc);
    free(ws);
    free(rs);
    free(pmax);
    /* merge: one record per (x, y), "write" when any says so; then the dependencies no shared bytes order */
    qsort(recs, nrec, sizeof(needrec_t), cmp_need);
    size_t m = 0;
    for (size_t i = 0; i < nrec; i++) {
        if (m && recs[m - 1].x == recs[i].x && recs[m - 1].y == recs[i].y) {
            recs[m - 1].w |= recs[i].w;
            continue;
        }
        recs[m++] = recs[i];
    }
    nrec = m;
    size_t base = nrec;
    R->ordering = 0;
    R->unroutable0 = 0;
    size_t pos = 0;
    for (int x = 0; x < nops; x++) {
        size_t lo = pos, tail = nrec;
        while (pos < base && recs[pos].x == x) pos++;
        for (i64 j = R->dep_ptr[x]; j < R->dep_ptr[x + 1]; j++) {
            int d = (int)R->dep_ids[j];
            size_t a = lo, b = pos;
            int found = 0;
            while (a < b) {
                size_t mid = (a + b) / 2;
                if (recs[mid].y == d) {
                    found = 1;
                    break;
                }
                if (recs[mid].y < d) a = mid + 1;
                else b = mid;
            }
            for (size_t t = tail; t < nrec && !found; t++) found = recs[t].y == d; /* added just before */
            if (found) continue;
            R->ordering++;
            if (!R->deps_all) continue;
            i64 xs = R->src_rank[x], xd = R->dst_rank[x], ys = R->src_rank[d], yd = R->dst_rank[d];
            if (xs == ys || xs == yd || xd == ys || xd == yd) {
                if (nrec >= caprec) {
                    size_t nc = caprec ? caprec * 2 : 1024;
                    needrec_t *nn = (needrec_t *)realloc(recs, nc * sizeof(needrec_t));
                    if (!nn) return 0;
                    recs = nn;
                    caprec = nc;
                }
                recs[nrec].x = x, recs[nrec].y = d, recs[nrec].w = 1;
                nrec++;
            } else
                R->unroutable0++;
        }
    }
    if (nrec > base) { /* a dependency listed twice adds its record once */
        qsort(recs, nrec, sizeof(needrec_t), cmp_need);
        m = 0;
        for (size_t i = 0; i < nrec; i++) {
            if (m && recs[m - 1].x == recs[i].x && recs[m - 1].y == recs[i].y) {
                recs[m - 1].w |= recs[i].w;
                continue;
            }
            recs[m++] = recs[i];
        }
        nrec = m;
    }
    R->need_ptr = (int *)calloc((size_t)nops + 1, sizeof(int));
    R->need_y = (int *)malloc((nrec + 1) * sizeof(int));
    R->need_w = (uint8_t *)malloc(nrec + 1);
    if (!R->need_ptr || !R->need_y || !R->need_w) return 0;
    for (size_t i = 0; i < nrec; i++) {
        R->need_ptr[recs[i].x + 1]++;
        R->need_y[i] = recs[i].y;
        R->need_w[i] = recs[i].w;
    }
    for (int x = 0; x < nops; x++) R->need_ptr[x + 1] += R->need_ptr[x];
    free(recs);
    return 1;
}

static int connections(pre_t *R) {
    int nops = R->nops, n = R->n;
    R->order = (int *)malloc(((size_t)nops + 1) * sizeof(int));
    if (!R->order || !umap_init(&R->conn_of, 1024)) return 0;
    for (int i = 0; i < nops; i++) R->order[i] = i;
    g_level = R->level;
    qsort(R->order, (size_t)nops, sizeof(int), cmp_key_order);
    R->conn_first = (int *)malloc(((size_t)nops + 1) * sizeof(int));
    R->conn_n = (int *)calloc((size_t)nops + 1, sizeof(int));
    R->conn_ops = (int *)malloc(((size_t)nops + 1) * sizeof(int));
    R->local_first = (int *)malloc(((size_t)n + 1) * sizeof(int));
    R->local_n = (int *)calloc((size_t)n + 1, sizeof(int));
    R->local_ops = (int *)malloc(((size_t)nops + 1) * sizeof(int));
    int *cidx = (int *)malloc(((size_t)nops + 1) * sizeof(int));
    if (!R->conn_first || !R->conn_n || !R->conn_ops || !R->local_first || !R->local_n || !R->local_ops || !cidx)
        return 0;
    R->nconn = 0;
    for (int k = 0; k < nops; k++) { /* connections numbered in key order of their first op */
        int i = R->order[k];
        if (is_local(R, i)) {
            R->local_n[R->src_rank[i]]++;
            cidx[i] = -1;
            continue;
        }
        u64 key = (u64)R->src_rank[i] * (u64)n + (u64)R->dst_rank[i];
        int c = umap_get(&R->conn_of, key);
        if (c < 0) {
            c = R->nconn++;
            if (!umap_put(&R->conn_of, key, c)) return 0;
        }
        R->conn_n[c]++;
        cidx[i] = c;
    }
    int off = 0;
    for (int c = 0; c < R->nconn; c++) R->conn_first[c] = off, off += R->conn_n[c], R->conn_n[c] = 0;
    off = 0;
    for (int r = 0; r < n; r++) R->local_first[r] = off, off += R->local_n[r], R->local_n[r] = 0;
    for (int k = 0; k < nops; k++) {
        int i = R->order[k];
        if (cidx[i] < 0) {
            int r = (int)R->src_rank[i];
            R->local_ops[R->local_first[r] + R->local_n[r]++] = i;
        } else {
            int c = cidx[i];
            R->conn_ops[R->conn_first[c] + R->conn_n[c]++] = i;
        }
    }
    free(cidx);
    return 1;
}

/* ------------------------------------------------------------------ one attempt (schedule.py) */
typedef struct {
    int kind; /* 0 fwdwait, 1 sem1, 2 sem2, 3 sig */
    int sr;
    tbk_t st;
    int dr;
    tbk_t dt;
    int lane, idx;
    tbk_t se, de;
} hop_t;

typedef struct {
    lkey_t wkey;
    int j;
} dneed_t;

typedef struct {
    int s, d, k;
    int *puts;
    int nputs, cap;
    dneed_t *dn;
    int ndn, capdn;
    int dn_stamp; /* first append to its data needs: the reference's dict order */
} lane_t;

typedef struct {
    /* wire table: exact keys (src rank, src end, dst rank, dst end) */
    int *slot;
    size_t cap;
} wmap_t;

typedef struct {
    pre_t *R;
    int combined, packed;
    const int *conn_lanes; /* per connection: lanes asked for */
    const int *ncopy;      /* per rank */
    umap_t *groups;        /* packed: (rank, lane end) -> thread block; NULL otherwise */
    int *lane_k, *copy_idx, *used, *put_index, *lane_of;
    lane_t *lanes;
    int nlanes, caplanes, dn_next;
    umap_t lane_id; /* (s, d, k) -> lane */
    umap_t agent_of;
    agent_t *agents;
    int nagents, capagents;
    wire_t *wires;
    int nwires, capwires;
    wmap_t wm;
    int seq, unroutable;
    char *err;
} sch_t;

static u64 akey(int r, tbk_t tk) { return ((u64)r << 47) | (u64)tk; }

static int agent(sch_t *S, int r, tbk_t tk) {
    u64 k = akey(r, tk);
    int a = umap_get(&S->agent_of, k);
    if (a >= 0) return a;
    if (S->nagents >= S->capagents) {
        int nc = S->capagents ? S->capagents * 2 : 1024;
        agent_t *na = (agent_t *)realloc(S->agents, (size_t)nc * sizeof(agent_t));
        if (!na) return -1;
        S->agents = na;
        S->capagents = nc;
    }
    a = S->nagents++;
    memset(&S->agents[a], 0, sizeof(agent_t));
    S->agents[a].rank = r;
    S->agents[a].tk = tk;
    if (!umap_put(&S->agent_of, k, a)) return -1;
    return a;
}

static int event(sch_t *S, int a, lkey_t key, int kind, int ref) {
    if (a < 0) return 0;
    agent_t *g = &S->agents[a];
    if (g->nev >= g->cap) {
        int nc = g->cap ? g->cap * 2 : 8;
        ev_t *ne = (ev_t *)realloc(g->ev, (size_t)nc * sizeof(ev_t));
        if (!ne) return 0;
        g->ev = ne;
        g->cap = nc;
    }
    S->seq++;
    g->ev[g->nev].key = key;
    g->ev[g->nev].seq = S->seq;
    g->ev[g->nev].kind = kind;
    g->ev[g->nev].ref = ref;
    g->nev++;
    return 1;
}

static tbk_t send_end(const sch_t *S, int lane) {
    const lane_t *L = &S->lanes[lane];
    return S->combined ? TBK(RO_P, L->d, L->k) : TBK(RO_S, L->d, L->k);
}

static tbk_t recv_end(const sch_t *S, int lane) {
    const lane_t *L = &S->lanes[lane];
    return S->combined ? TBK(RO_P, L->s, L->k) : TBK(RO_R, L->s, L->k);
}

static tbk_t phys(const sch_t *S, int r, tbk_t end) {
    if (!S->groups) return end;
    int g = umap_get(S->groups, akey(r, end));
    return TBK(RO_K, g, 0);
}

static tbk_t send_tb(const sch_t *S, int lane) { return phys(S, S->lanes[lane].s, send_end(S, lane)); }
static tbk_t recv_tb(const sch_t *S, int lane) { return phys(S, S->lanes[lane].d, recv_end(S, lane)); }

static u64 wkey_hash(int sr, tbk_t se, int dr, tbk_t de) {
    return mix64(mix64(akey(sr, se)) ^ (akey(dr, de) * 0x9E3779B97F4A7C15ULL));
}

static int wire(sch_t *S, int chan, int sr, tbk_t st, int dr, tbk_t dt, tbk_t se, tbk_t de) {
    if (2 * ((size_t)S->nwires + 1) > S->wm.cap) {
        size_t nc = S->wm.cap ? S->wm.cap * 2 : 4096;
        int *ns = (int *)malloc(nc * sizeof(int));
        if (!ns) return -1;
        for (size_t i = 0; i < nc; i++) ns[i] = -1;
        for (int w = 0; w < S->nwires; w++) {
            const wire_t *W = &S->wires[w];
            size_t i = wkey_hash(S->agents[W->src].rank, W->src_end, S->agents[W->dst].rank, W->dst_end) & (nc - 1);
            while (ns[i] >= 0) i = (i + 1) & (nc - 1);
            ns[i] = w;
        }
        free(S->wm.slot);
        S->wm.slot = ns;
        S->wm.cap = nc;
    }
    size_t i = wkey_hash(sr, se, dr, de) & (S->wm.cap - 1);
    while (S->wm.slot[i] >= 0) {
        const wire_t *W = &S->wires[S->wm.slot[i]];
        if (W->src_end == se && W->dst_end == de && S->agents[W->src].rank == sr && S->agents[W->dst].rank == dr)
            return S->wm.slot[i];
        i = (i + 1) & (S->wm.cap - 1);
    }
    if (S->nwires >= S->capwires) {
        int nc = S->capwires ? S->capwires * 2 : 1024;
        wire_t *nw = (wire_t *)realloc(S->wires, (size_t)nc * sizeof(wire_t));
        if (!nw) return -1;
        S->wires = nw;
        S->capwires = nc;
    }
    int w = S->nwires++;
    wire_t *W = &S->wires[w];
    memset(W, 0, sizeof(*W));
    W->chan = chan;
    W->src = agent(S, sr, st);
    W->dst = agent(S, dr, dt);
    W->src_end = se;
    W->dst_end = de;
    W->sem_id = -1;
    if (W->src < 0 || W->dst < 0) return -1;
    S->wm.slot[i] = w;
    return w;
}

static int signal_on(sch_t *S, int w, lkey_t key, lkey_t need) {
    if (w < 0) return 0;
    if (!(need > key)) {
        S->err = fmt("a wait would precede its signal (an a2acc bug)");
        return 0;
    }
    wire_t *W = &S->wires[w];
    if (W->nsig >= W->cap) {
        int nc = W->cap ? W->cap * 2 : 4;
        lsig_t *ns = (lsig_t *)realloc(W->sig, (size_t)nc * sizeof(lsig_t));
        if (!ns) return 0;
        W->sig = ns;
        W->cap = nc;
    }
    W->sig[W->nsig].key = key;
    W->sig[W->nsig].need = need;
    W->nsig++;
    return 1;
}

static int fwd_wire(sch_t *S, int lane) {
    const lane_t *L = &S->lanes[lane];
    return wire(S, 1, L->s, send_tb(S, lane), L->d, recv_tb(S, lane), send_end(S, lane), recv_end(S, lane));
}

static int rev_wire(sch_t *S, int lane) {
    const lane_t *L = &S->lanes[lane];
    return wire(S, 1, L->d, recv_tb(S, lane), L->s, send_tb(S, lane), recv_end(S, lane), send_end(S, lane));
}

static int add_dneed(sch_t *S, int lane, lkey_t wk, int j) {
    lane_t *L = &S->lanes[lane];
    if (L->ndn >= L->capdn) {
        int nc = L->capdn ? L->capdn * 2 : 4;
        dneed_t *nd = (dneed_t *)realloc(L->dn, (size_t)nc * sizeof(dneed_t));
        if (!nd) return 0;
        L->dn = nd;
        L->capdn = nc;
    }
    if (L->ndn == 0 && L->dn_stamp < 0) L->dn_stamp = S->dn_next++;
    L->dn[L->ndn].wkey = wk;
    L->dn[L->ndn].j = j;
    L->ndn++;
    return 1;
}

/* pass: lanes (assign_lanes) and transfers (place_transfers) */
static int place_transfers(sch_t *S) {
    pre_t *R = S->R;
    int nops = R->nops;
    S->lane_k = (int *)malloc(((size_t)nops + 1) * sizeof(int));
    S->copy_idx = (int *)malloc(((size_t)nops + 1) * sizeof(int));
    S->used = (int *)calloc((size_t)R->nconn + 1, sizeof(int));
    S->put_index = (int *)malloc(((size_t)nops + 1) * sizeof(int));
    S->lane_of = (int *)malloc(((size_t)nops + 1) * sizeof(int));
    if (!S->lane_k || !S->copy_idx || !S->used || !S->put_index || !S->lane_of) return 0;
    for (int c = 0; c < R->nconn; c++) {
        const int *oids = R->conn_ops + R->conn_first[c];
        int len = R->conn_n[c], nl;
        int s = (int)R->src_rank[oids[0]], d = (int)R->dst_rank[oids[0]];
        if (S->combined) {
            int back = umap_get(&R->conn_of, (u64)d * (u64)R->n + (u64)s);
            int a = S->conn_lanes[c], b = back >= 0 ? S->conn_lanes[back] : 1;
            nl = a > b ? a : b;
        } else
            nl = S->conn_lanes[c] < len ? S->conn_lanes[c] : len;
        for (int i = 0; i < len; i++) S->lane_k[oids[i]] = i % nl;
        S->used[c] = nl < len ? nl : len;
    }
    for (int r = 0; r < R->n; r++)
        for (int i = 0; i < R->local_n[r]; i++) S->copy_idx[R->local_ops[R->local_first[r] + i]] = i % S->ncopy[r];
    if (!umap_init(&S->lane_id, 1024)) return 0;
    /* puts in key order; a lane is numbered at its first put (the reference's lane_puts order) */
    for (int k = 0; k < nops; k++) {
        int i = R->order[k];
        if (is_local(R, i)) continue;
        int s = (int)R->src_rank[i], d = (int)R->dst_rank[i], kk = S->lane_k[i];
        u64 lk = ((u64)s * (u64)R->n + (u64)d) * 64 + (u64)kk;
        int lane = umap_get(&S->lane_id, lk);
        if (lane < 0) {
            if (S->nlanes >= S->caplanes) {
                int nc = S->caplanes ? S->caplanes * 2 : 1024;
                lane_t *nl2 = (lane_t *)realloc(S->lanes, (size_t)nc * sizeof(lane_t));
                if (!nl2) return 0;
                S->lanes = nl2;
                S->caplanes = nc;
            }
            lane = S->nlanes++;
            memset(&S->lanes[lane], 0, sizeof(lane_t));
            S->lanes[lane].s = s, S->lanes[lane].d = d, S->lanes[lane].k = kk, S->lanes[lane].dn_stamp = -1;
            if (!umap_put(&S->lane_id, lk, lane)) return 0;
        }
        lane_t *L = &S->lanes[lane];
        if (L->nputs >= L->cap) {
            int nc = L->cap ? L->cap * 2 : 8;
            int *np_ = (int *)realloc(L->puts, (size_t)nc * sizeof(int));
            if (!np_) return 0;
            L->puts = np_;
            L->cap = nc;
        }
        S->put_index[i] = L->nputs;
        L->puts[L->nputs++] = i;
        S->lane_of[i] = lane;
    }
    for (int k = 0; k < nops; k++) {
        int i = R->order[k];
        if (is_local(R, i)) continue;
        int lane = S->lane_of[i];
        if (!event(S, agent(S, (int)R->src_rank[i], send_tb(S, lane)), ek(R, i, PH_OP), EV_PUT, i)) return 0;
        if (R->ll && !event(S, agent(S, (int)R->dst_rank[i], recv_tb(S, lane)), ek(R, i, PH_SC), EV_UPKT, i)) return 0;
    }
    for (int r = 0; r < R->n; r++)
        for (int j = 0; j < R->local_n[r]; j++) {
            int i = R->local_ops[R->local_first[r] + j];
            if (!event(S, agent(S, r, TBK(RO_C, -1, S->copy_idx[i])), ek(R, i, PH_OP), EV_COPY, i)) return 0;
        }
    for (int k = 0; k < nops; k++) {
        int i = R->order[k];
        if (is_local(R, i) || R->staged[i] < 0 || R->ll) continue;
        int lane = S->lane_of[i];
        if (!add_dneed(S, lane, ek(R, i, PH_SW), S->put_index[i])) return 0;
        if (!event(S, agent(S, (int)R->dst_rank[i], recv_tb(S, lane)), ek(R, i, PH_SC), EV_SCOPY, i)) return 0;
    }
    return 1;
}

/* pass: the ready handshake, the end-of-launch data wait, the port acknowledgement */
static int place_handshakes(sch_t *S) {
    pre_t *R = S->R;
    for (int lane = 0; lane < S->nlanes; lane++) {
        lane_t *L = &S->lanes[lane];
        if (!signal_on(S, rev_wire(S, lane), KEY_START, ek(R, L->puts[0], PH_READY))) return 0;
        if (!R->ll) {
            if (!add_dneed(S, lane, KEY_END_WAIT, L->nputs - 1)) return 0;
            if (ctype_pair(R, L->s, L->d) == CT_PORT && !signal_on(S, rev_wire(S, lane), KEY_END_ACK, KEY_END_ACKWAIT))
                return 0;
        }
    }
    return 1;
}

/* pass: routes (route_needs, known, route, hop) */
typedef struct {
    int fwd; /* 1: "fwd" (after the receiver's wait for y's data signal), 0: "op" */
    int q;
    tbk_t t;
    int y;
} point_t;

static void tb_of(const sch_t *S, int x, int *e, tbk_t *xt) {
    const pre_t *R = S->R;
    *e = (int)R->src_rank[x];
    *xt = is_local(R, x) ? TBK(RO_C, -1, S->copy_idx[x]) : send_tb(S, S->lane_of[x]);
}

static int known(const sch_t *S, int y, int write, point_t *pts) {
    const pre_t *R = S->R;
    if (is_local(R, y)) {
        pts[0].fwd = 0, pts[0].q = (int)R->src_rank[y], pts[0].t = TBK(RO_C, -1, S->copy_idx[y]), pts[0].y = y;
        return 1;
    }
    int lane = S->lane_of[y], n = 0;
    int s = (int)R->src_rank[y], d = (int)R->dst_rank[y];
    if (!write && (R->ll || ctype_pair(R, s, d) == CT_MEM)) {
        pts[n].fwd = 0, pts[n].q = s, pts[n].t = send_tb(S, lane), pts[n].y = y;
        n++;
    }
    pts[n].fwd = !R->ll, pts[n].q = d, pts[n].t = recv_tb(S, lane), pts[n].y = y;
    return n + 1;
}

/* the lanes between q and e: those of connection q->e, then of e->q, each by lane index */
static int route(const sch_t *S, const point_t *pt, int e, tbk_t xt, hop_t *hops) {
    const pre_t *R = S->R;
    int nh = 0;
    if (pt->fwd) {
        memset(&hops[nh], 0, sizeof(hop_t));
        hops[nh].kind = 0;
        hops[nh].lane = S->lane_of[pt->y];
        hops[nh].idx = S->put_index[pt->y];
        nh++;
    }
    if (pt->q == e) {
        if (pt->t != xt) {
            memset(&hops[nh], 0, sizeof(hop_t));
            hops[nh].kind = 1, hops[nh].sr = pt->q, hops[nh].st = pt->t, hops[nh].dr = pt->q, hops[nh].dt = xt;
            hops[nh].se = pt->t, hops[nh].de = xt;
            nh++;
        }
        return nh;
    }
    int best = -1;
    tbk_t bu = 0, bv = 0, beu = 0, bev = 0;
    for (int dir = 0; dir < 2; dir++) {
        int a = dir ? e : pt->q, b = dir ? pt->q : e;
        int c = umap_get(&R->conn_of, (u64)a * (u64)R->n + (u64)b);
        if (c < 0) continue;
        for (int k = 0; k < S->used[c]; k++) {
            int lane = umap_get(&S->lane_id, ((u64)a * (u64)R->n + (u64)b) * 64 + (u64)k);
            if (lane < 0) continue;
            tbk_t u, v, eu, evv;
            if (!dir) u = send_tb(S, lane), v = recv_tb(S, lane), eu = send_end(S, lane), evv = recv_end(S, lane);
            else u = recv_tb(S, lane), v = send_tb(S, lane), eu = recv_end(S, lane), evv = send_end(S, lane);
            int cost = (u != pt->t) + (v != xt);
            if (best < 0 || cost < best) best = cost, bu = u, bv = v, beu = eu, bev = evv;
        }
    }
    if (best < 0) return -1;
    if (bu != pt->t) {
        memset(&hops[nh], 0, sizeof(hop_t));
        hops[nh].kind = 1, hops[nh].sr = pt->q, hops[nh].st = pt->t, hops[nh].dr = pt->q, hops[nh].dt = bu;
        hops[nh].se = pt->t, hops[nh].de = bu;
        nh++;
    }
    memset(&hops[nh], 0, sizeof(hop_t));
    hops[nh].kind = 3, hops[nh].sr = pt->q, hops[nh].st = bu, hops[nh].dr = e, hops[nh].dt = bv;
    hops[nh].se = beu, hops[nh].de = bev;
    nh++;
    if (bv != xt) {
        memset(&hops[nh], 0, sizeof(hop_t));
        hops[nh].kind = 2, hops[nh].sr = e, hops[nh].st = bv, hops[nh].dr = e, hops[nh].dt = xt;
        hops[nh].se = bv, hops[nh].de = xt;
        nh++;
    }
    return nh;
}

static int hop_eq(const hop_t *a, const hop_t *b) {
    return a->kind == b->kind && a->sr == b->sr && a->st == b->st && a->dr == b->dr && a->dt == b->dt &&
           a->lane == b->lane && a->idx == b->idx && a->se == b->se && a->de == b->de;
}

static int do_hop(sch_t *S, int x, const hop_t *h) {
    pre_t *R = S->R;
    if (h->kind == 0) return add_dneed(S, h->lane, ek(R, x, PH_W0), h->idx);
    if (h->kind == 1 || h->kind == 2) {
        int rel = h->kind == 1 ? PH_REL1 : PH_REL2, acq = h->kind == 1 ? PH_ACQ1 : PH_ACQ2;
        return signal_on(S, wire(S, 0, h->sr, h->st, h->dr, h->dt, h->st, h->dt), ek(R, x, rel), ek(R, x, acq));
    }
    return signal_on(S, wire(S, 1, h->sr, h->st, h->dr, h->dt, h->se, h->de), ek(R, x, PH_SIG2), ek(R, x, PH_WAIT2));
}

static int route_needs(sch_t *S) {
    pre_t *R = S->R;
    hop_t *done = NULL;
    int ndone = 0, capdone = 0;
    for (int x = 0; x < R->nops; x++) {
        if (R->need_ptr[x] == R->need_ptr[x + 1]) continue;
        int e;
        tbk_t xt;
        tb_of(S, x, &e, &xt);
        ndone = 0;
        for (int j = R->need_ptr[x]; j < R->need_ptr[x + 1]; j++) {
            point_t pts[2];
            int np_ = known(S, R->need_y[j], R->need_w[j], pts);
            hop_t best[4], cand[4];
            int nbest = -1;
            for (int p = 0; p < np_; p++) {
                int nh = route(S, &pts[p], e, xt, cand);
                if (nh >= 0 && (nbest < 0 || nh < nbest)) {
                    nbest = nh;
                    memcpy(best, cand, sizeof(hop_t) * (size_t)nh);
                }
            }
            if (nbest < 0) {
                if (R->deps_all) {
                    S->unroutable++;
                    continue;
                }
                S->err = fmt("no route orders op %d before op %d (an a2acc bug)", R->need_y[j], x);
                free(done);
                return 0;
            }
            for (int h = 0; h < nbest; h++) {
                int seen = 0;
                for (int m = 0; m < ndone && !seen; m++) seen = hop_eq(&done[m], &best[h]);
                if (seen) continue;
                if (ndone >= capdone) {
                    capdone = capdone ? capdone * 2 : 16;
                    hop_t *nd = (hop_t *)realloc(done, (size_t)capdone * sizeof(hop_t));
                    if (!nd) return 0;
                    done = nd;
                }
                done[ndone++] = best[h];
                if (!do_hop(S, x, &best[h])) {
                    free(done);
                    return 0;
                }
            }
        }
    }
    free(done);
    return 1;
}

/* pass: data signals (interval stabbing per lane, in the order lanes first got a data need) */
static int cmp_dn_desc_j(const void *a, const void *b) {
    const dneed_t *x = (const dneed_t *)a, *y = (const dneed_t *)b;
    return x->j > y->j ? -1 : x->j < y->j; /* stable via the index tie-break below */
}

typedef struct {
    dneed_t d;
    int i;
} dni_t;

static int cmp_dni(const void *a, const void *b) {
    const dni_t *x = (const dni_t *)a, *y = (const dni_t *)b;
    if (x->d.j != y->d.j) return x->d.j > y->d.j ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

static int place_data_signals(sch_t *S) {
    pre_t *R = S->R;
    int *order = (int *)malloc(((size_t)S->nlanes + 1) * sizeof(int));
    if (!order) return 0;
    int no = 0;
    for (int l = 0; l < S->nlanes; l++)
        if (S->lanes[l].dn_stamp >= 0) order[no++] = l;
    /* lanes by stamp: the stamps are 0..no-1 */
    int *by = (int *)malloc(((size_t)no + 1) * sizeof(int));
    if (!by) return 0;
    for (int i = 0; i < no; i++) by[S->lanes[order[i]].dn_stamp] = order[i];
    for (int oi = 0; oi < no; oi++) {
        int lane = by[oi];
        lane_t *L = &S->lanes[lane];
        lkey_t *sig = (lkey_t *)malloc((size_t)L->nputs * sizeof(lkey_t));
        dni_t *nd = (dni_t *)malloc((size_t)L->ndn * sizeof(dni_t));
        int *chosen = (int *)malloc(((size_t)L->nputs + 1) * sizeof(int));
        lkey_t *minneed = (lkey_t *)malloc(((size_t)L->nputs + 1) * sizeof(lkey_t));
        if (!sig || !nd || !chosen || !minneed) return 0;
        for (int j = 0; j < L->nputs; j++) sig[j] = ek(R, L->puts[j], PH_SIG), minneed[j] = ~0ULL;
        for (int i = 0; i < L->ndn; i++) nd[i].d = L->dn[i], nd[i].i = i;
        qsort(nd, (size_t)L->ndn, sizeof(dni_t), cmp_dni);
        int nch = 0;
        for (int i = 0; i < L->ndn; i++) {
            lkey_t wk = nd[i].d.wkey;
            int j = nd[i].d.j;
            int a = 0, b = L->nputs; /* bisect_left(sig, wk) - 1 */
            while (a < b) {
                int m = (a + b) / 2;
                if (sig[m] < wk) a = m + 1;
                else b = m;
            }
            int jmax = a - 1;
            if (jmax < j) {
                S->err = fmt("a wait needs a later put (an a2acc bug)");
                return 0;
            }
            a = 0, b = nch; /* bisect_left(chosen, j) */
            while (a < b) {
                int m = (a + b) / 2;
                if (chosen[m] < j) a = m + 1;
                else b = m;
            }
            if (a < nch && chosen[a] <= jmax) {
                if (wk < minneed[chosen[a]]) minneed[chosen[a]] = wk;
            } else {
                memmove(chosen + a + 1, chosen + a, (size_t)(nch - a) * sizeof(int));
                chosen[a] = j;
                nch++;
                if (wk < minneed[j]) minneed[j] = wk;
            }
        }
        int w = fwd_wire(S, lane);
        for (int c = 0; c < nch; c++)
            if (!signal_on(S, w, sig[chosen[c]], minneed[chosen[c]])) return 0;
        free(sig), free(nd), free(chosen), free(minneed);
    }
    free(order);
    free(by);
    return 1;
}

/* pass: waits (place_waits; packed: coalesce_signals first) */
static int cmp_sig(const void *a, const void *b) {
    const lsig_t *x = (const lsig_t *)a, *y = (const lsig_t *)b;
    return x->key < y->key ? -1 : x->key > y->key;
}

static void wait_keys(const wire_t *W, lkey_t *out) {
    for (int m = 0; m < W->nsig; m++) out[m] = W->sig[m].need;
    for (int m = W->nsig - 2; m >= 0; m--)
        if (out[m + 1] < out[m]) out[m] = out[m + 1];
}


static int coalesce(sch_t *S) {
    /* per agent: the keys of its data events and of its (future) waits */
    int na = S->nagents;
    int *cnt = (int *)calloc((size_t)na + 1, sizeof(int));
    if (!cnt) return 0;
    for (int w = 0; w < S->nwires; w++) {
        wire_t *W = &S->wires[w];
        qsort(W->sig, (size_t)W->nsig, sizeof(lsig_t), cmp_sig); /* keys are distinct on a wire */
        cnt[W->dst] += W->nsig;
    }
    i64 *off = (i64 *)malloc(((size_t)na + 1) * sizeof(i64));
    if (!off) return 0;
    i64 tot = 0;
    for (int a = 0; a < na; a++) off[a] = tot, tot += S->agents[a].nev + cnt[a];
    off[na] = tot;
    lkey_t *keys = (lkey_t *)malloc(((size_t)tot + 1) * sizeof(lkey_t));
    int *fill = (int *)calloc((size_t)na + 1, sizeof(int));
    lkey_t *tmp = NULL;
    int captmp = 0;
    if (!keys || !fill) return 0;
    for (int a = 0; a < na; a++)
        for (int i = 0; i < S->agents[a].nev; i++) keys[off[a] + fill[a]++] = S->agents[a].ev[i].key;
    for (int w = 0; w < S->nwires; w++) {
        wire_t *W = &S->wires[w];
        if (W->nsig > captmp) {
            captmp = W->nsig * 2;
            free(tmp);
            tmp = (lkey_t *)malloc((size_t)captmp * sizeof(lkey_t));
            if (!tmp) return 0;
        }
        wait_keys(W, tmp);
        for (int m = 0; m < W->nsig; m++) keys[off[W->dst] + fill[W->dst]++] = tmp[m];
    }
    for (int a = 0; a < na; a++) qsort(keys + off[a], (size_t)fill[a], sizeof(lkey_t), cmp_u64);
    for (int w = 0; w < S->nwires; w++) {
        wire_t *W = &S->wires[w];
        const lkey_t *k = keys + off[W->src];
        int nk = fill[W->src], kept = 0;
        for (int m = 0; m < W->nsig; m++) {
            if (kept) {
                lkey_t prev = W->sig[kept - 1].key, sk = W->sig[m].key;
                int a = 0, b = nk; /* bisect_right(k, prev) */
                while (a < b) {
                    int mid = (a + b) / 2;
                    if (k[mid] <= prev) a = mid + 1;
                    else b = mid;
                }
                int c = 0, d = nk; /* bisect_left(k, sk) */
                while (c < d) {
                    int mid = (c + d) / 2;
                    if (k[mid] < sk) c = mid + 1;
                    else d = mid;
                }
                if (a == c) {
                    if (W->sig[m].need < W->sig[kept - 1].need) W->sig[kept - 1].need = W->sig[m].need;
                    continue;
                }
            }
            W->sig[kept++] = W->sig[m];
        }
        W->nsig = kept;
    }
    free(cnt), free(off), free(keys), free(fill), free(tmp);
    return 1;
}

static int place_waits(sch_t *S) {
    if (S->packed && !coalesce(S)) return 0;
    lkey_t *tmp = NULL;
    int captmp = 0;
    for (int w = 0; w < S->nwires; w++) {
        wire_t *W = &S->wires[w];
        qsort(W->sig, (size_t)W->nsig, sizeof(lsig_t), cmp_sig);
        if (W->nsig > captmp) {
            captmp = W->nsig * 2;
            free(tmp);
            tmp = (lkey_t *)malloc((size_t)captmp * sizeof(lkey_t));
            if (!tmp) return 0;
        }
        wait_keys(W, tmp);
        for (int m = 0; m < W->nsig; m++) {
            if (!event(S, W->src, W->sig[m].key, W->chan ? EV_SIG : EV_REL, w)) return 0;
            if (!event(S, W->dst, tmp[m], W->chan ? EV_WAIT : EV_ACQ, w)) return 0;
        }
    }
    free(tmp);
    return 1;
}

/* ------------------------------------------------------------------ assembly (assemble.py) */
typedef struct {
    int rank, buf, lo, hi, write;
} lacc_t;

typedef struct {
    /* the plan being built: ops per thread block in a pool, as the checker's op_t/ref_t */
    op_t *ops;
    size_t nops, cap_ops;
    ref_t *refs;
    size_t nrefs, cap_refs;
    int32_t *ints;
    size_t nints, cap_ints;
} pool_t;

static int pool_op(pool_t *P, op_t o) {
    GROW(P->ops, P->nops, P->cap_ops, op_t);
    P->ops[P->nops++] = o;
    return 1;
}

static int pool_ref(pool_t *P, ref_t r) {
    GROW(P->refs, P->nrefs, P->cap_refs, ref_t);
    P->refs[P->nrefs++] = r;
    return 1;
}

static int pool_int(pool_t *P, int32_t v) {
    GROW(P->ints, P->nints, P->cap_ints, int32_t);
    P->ints[P->nints++] = v;
    return 1;
}

/* per rank: its thread blocks (keys in id order), every lane end's channel (type, global id), per type peers */
typedef struct {
    tbk_t *tbs;
    int ntbs, cap;
    int *peers[3];
    int npeers[3], cappeers[3];
    /* remote buffers in first use: (rank, buf, channel type) */
    int *rb_rank, *rb_buf, *rb_ct;
    int nrb, caprb;
    int nsem;
} rankasm_t;

typedef struct {
    int r;
    int ct_fixed, gid_fixed; /* split/combined lane thread block: its one channel; ct_fixed 0: none */
    int packed;
    int table[3][MAX_CHANNELS_PER_TB * 4];
    int ntable[3];
    int type_order[3], ntypes; /* channel types in first use */
    int refs[3][64];
    int nrefs[3];
    int ref_order[3], nreftypes;
    size_t op0; /* first op in the pool */
    lacc_t *pend;
    int npend, cappend;
    int data_since, wait_since, multi_since;
    int nsig;
} tbw_t;

typedef struct {
    sch_t *S;
    rankasm_t *ra;
    umap_t chan_of; /* (rank, lane end) -> type << 24 | global id */
    pool_t pool;
    /* per thread block of the plan, in rank and id order */
    size_t *tb_op0, *tb_nops;
    int *tb_rank;
    int ntb_total, cap_tb;
    /* tables per thread block */
    int (*tb_table)[3][MAX_CHANNELS_PER_TB * 4];
    int (*tb_ntable)[3];
    int (*tb_type_order)[3];
    int *tb_ntypes;
    int (*tb_refs)[3][64];
    int (*tb_nrefs)[3];
    int (*tb_ref_order)[3];
    int *tb_nreftypes;
    int *tb_counts;
    int over, max_ops, nsig, lanes, sems, max_tbs_rank;
    int over_rank, over_count; /* the first thread block over the limit (rank), its count */
    tbk_t over_tk;
} asm_t;

static int ct_of_end(asm_t *A, int r, tbk_t end, int *gid) {
    int v = umap_get(&A->chan_of, akey(r, end));
    if (v < 0) return -1;
    *gid = v & 0xffffff;
    return v >> 24;
}

static int tbw_chan(asm_t *A, tbw_t *W, tbk_t end, int *ct) {
    int gid;
    *ct = ct_of_end(A, W->r, end, &gid);
    if (!W->packed) return 0;
    int t = *ct;
    for (int i = 0; i < W->ntable[t]; i++)
        if (W->table[t][i] == gid) return i;
    if (W->ntable[t] == 0) W->type_order[W->ntypes++] = t;
    if (W->ntable[t] >= MAX_CHANNELS_PER_TB * 4) return -1;
    W->table[t][W->ntable[t]++] = gid;
    return W->ntable[t] - 1;
}

static int tbw_rbuf(asm_t *A, tbw_t *W, int rank, int buf, int ct) {
    rankasm_t *R = &A->ra[W->r];
    int g = -1;
    for (int i = 0; i < R->nrb; i++)
        if (R->rb_rank[i] == rank && R->rb_buf[i] == buf && R->rb_ct[i] == ct) {
            g = i;
            break;
        }
    if (g < 0) {
        if (R->nrb >= R->caprb) {
            int nc = R->caprb ? R->caprb * 2 : 16;
            R->rb_rank = (int *)realloc(R->rb_rank, (size_t)nc * sizeof(int));
            R->rb_buf = (int *)realloc(R->rb_buf, (size_t)nc * sizeof(int));
            R->rb_ct = (int *)realloc(R->rb_ct, (size_t)nc * sizeof(int));
            if (!R->rb_rank || !R->rb_buf || !R->rb_ct) return -1;
            R->caprb = nc;
        }
        g = R->nrb++;
        R->rb_rank[g] = rank, R->rb_buf[g] = buf, R->rb_ct[g] = ct;
    }
    for (int i = 0; i < W->nrefs[ct]; i++)
        if (W->refs[ct][i] == g) return i;
    if (W->nrefs[ct] == 0) W->ref_order[W->nreftypes++] = ct;
    if (W->nrefs[ct] >= 64) return -1;
    W->refs[ct][W->nrefs[ct]++] = g;
    return W->nrefs[ct] - 1;
}

static int tbw_nop(asm_t *A, tbw_t *W) {
    size_t n = A->pool.nops - W->op0;
    if (!n || A->pool.ops[A->pool.nops - 1].kind != OP_NOP) {
        op_t o;
        memset(&o, 0, sizeof(o));
        o.kind = OP_NOP;
        if (!pool_op(&A->pool, o)) return 0;
    }
    W->npend = 0;
    W->data_since = W->wait_since = W->multi_since = 0;
    return 1;
}

static int overlap(const lacc_t *a, const lacc_t *b) {
    return a->rank == b->rank && a->buf == b->buf && a->lo < b->hi && b->lo < a->hi && (a->write || b->write);
}

static int tbw_pend(tbw_t *W, const lacc_t *a) {
    if (W->npend >= W->cappend) {
        int nc = W->cappend ? W->cappend * 2 : 64;
        lacc_t *np_ = (lacc_t *)realloc(W->pend, (size_t)nc * sizeof(lacc_t));
        if (!np_) return 0;
        W->pend = np_;
        W->cappend = nc;
    }
    W->pend[W->npend++] = *a;
    return 1;
}

static int tbw_data(asm_t *A, tbw_t *W, const lacc_t *acc, int n) {
    int hit = W->wait_since || W->multi_since;
    for (int i = 0; i < n && !hit; i++)
        for (int j = 0; j < W->npend && !hit; j++) hit = overlap(&acc[i], &W->pend[j]);
    if (hit && !tbw_nop(A, W)) return 0;
    for (int i = 0; i < n; i++)
        if (!tbw_pend(W, &acc[i])) return 0;
    W->data_since = 1;
    return 1;
}

static int tbw_publish(asm_t *A, tbw_t *W, int items) {
    if (W->data_since || W->multi_since || (W->wait_since && items > 1)) return tbw_nop(A, W);
    return 1;
}

static const op_t *last_op(asm_t *A, tbw_t *W) {
    return A->pool.nops > W->op0 ? &A->pool.ops[A->pool.nops - 1] : NULL;
}

/* is the last operation a put the DSL would fuse nxt into (same first-source size)? */
static int last_fuses(asm_t *A, tbw_t *W, int kind_put, int kind_ppkt, int size) {
    const op_t *o = last_op(A, W);
    if (!o || !((kind_put && o->kind == OP_PUT) || (kind_ppkt && o->kind == OP_PPKT))) return 0;
    return o->nsrc > 0 && A->pool.refs[o->ref].size == size;
}

typedef struct {
    lkey_t key;
    int seq, kind, ref;
} sev_t;

static int cmp_ev(const void *a, const void *b) {
    const ev_t *x = (const ev_t *)a, *y = (const ev_t *)b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* a put's source and (remote) destination as the reference's Put: (type, index, size) */
static void put_refs(const sch_t *S, int oid, ref_t *src, int *dbuf, int *doff) {
    const pre_t *R = S->R;
    src->buf = (int32_t)R->src_buf[oid];
    src->index = (int32_t)R->src_off[oid];
    src->size = (int32_t)R->cnt[oid];
    if (R->staged[oid] >= 0) *dbuf = B_S, *doff = R->staged[oid];
    else *dbuf = (int)R->dst_buf[oid], *doff = (int)R->dst_off[oid];
}

static int tbw_put(asm_t *A, tbw_t *W, const ev_t *evs, int nev, int i) {
    sch_t *S = A->S;
    const pre_t *R = S->R;
    int group[MAX_CHANNELS_PER_OP], ng = 1;
    group[0] = evs[i].ref;
    ref_t s0;
    int db, dof, gid;
    put_refs(S, group[0], &s0, &db, &dof);
    int ct = ct_of_end(A, W->r, send_end(S, S->lane_of[group[0]]), &gid);
    int j = i + 1;
    while (j < nev && evs[j].kind == EV_PUT && ng < MAX_CHANNELS_PER_OP) {
        ref_t s2;
        int db2, do2, g2;
        put_refs(S, evs[j].ref, &s2, &db2, &do2);
        if (s2.buf != s0.buf || s2.size != s0.size) break;
        if (ct_of_end(A, W->r, send_end(S, S->lane_of[evs[j].ref]), &g2) != ct) break;
        group[ng++] = evs[j].ref;
        j++;
    }
    lacc_t acc[2 * MAX_CHANNELS_PER_OP];
    for (int g = 0; g < ng; g++) {
        ref_t s;
        int b, o;
        put_refs(S, group[g], &s, &b, &o);
        acc[g].rank = W->r, acc[g].buf = s.buf, acc[g].lo = s.index, acc[g].hi = s.index + s.size, acc[g].write = 0;
        lacc_t *d = &acc[ng + g];
        d->rank = (int)R->dst_rank[group[g]], d->buf = b, d->lo = o, d->hi = o + s.size, d->write = 1;
    }
    if (ct == CT_PORT) {
        if ((W->data_since || W->multi_since || (W->wait_since && ng > 1)) && !tbw_nop(A, W)) return -1;
        if (last_fuses(A, W, 1, 0, s0.size) && !R->ll && !tbw_nop(A, W)) return -1;
    } else {
        if (!tbw_data(A, W, acc, 2 * ng)) return -1;
        if (last_fuses(A, W, 1, 1, s0.size)) {
            if (!tbw_nop(A, W)) return -1;
            for (int k = 0; k < 2 * ng; k++)
                if (!tbw_pend(W, &acc[k])) return -1;
            W->data_since = 1;
        }
    }
    op_t o;
    memset(&o, 0, sizeof(o));
    o.kind = R->ll ? OP_PPKT : OP_PUT;
    o.ct = (uint8_t)ct;
    o.nsrc = o.ndst = (uint8_t)ng;
    o.ref = (uint32_t)A->pool.nrefs;
    int ids[MAX_CHANNELS_PER_OP];
    ref_t dsts[MAX_CHANNELS_PER_OP];
    for (int g = 0; g < ng; g++) { /* the DSL registers the remote buffer, then the channel */
        ref_t s;
        int b, off, t2;
        put_refs(S, group[g], &s, &b, &off);
        int rb = tbw_rbuf(A, W, (int)R->dst_rank[group[g]], b, ct);
        if (rb < 0) return -1;
        dsts[g].buf = REMOTE + rb, dsts[g].index = off, dsts[g].size = s.size;
        ids[g] = tbw_chan(A, W, send_end(S, S->lane_of[group[g]]), &t2);
        if (ids[g] < 0) return -1;
        if (!pool_ref(&A->pool, s)) return -1;
    }
    for (int g = 0; g < ng; g++)
        if (!pool_ref(&A->pool, dsts[g])) return -1;
    o.ids = (uint32_t)A->pool.nints;
    if (ct == CT_PORT) {
        o.nids = (uint8_t)ng;
        for (int g = 0; g < ng; g++)
            if (!pool_int(&A->pool, ids[g])) return -1;
    }
    if (!pool_op(&A->pool, o)) return -1;
    if (ct == CT_PORT && ng > 1) W->multi_since = 1;
    return j;
}

static int tbw_copy(asm_t *A, tbw_t *W, const ev_t *e) {
    const pre_t *R = A->S->R;
    int oid = e->ref;
    ref_t src, dst;
    if (e->kind == EV_COPY) {
        src.buf = (int32_t)R->src_buf[oid], src.index = (int32_t)R->src_off[oid];
        dst.buf = (int32_t)R->dst_buf[oid], dst.index = (int32_t)R->dst_off[oid];
    } else {
        src.buf = B_S, src.index = R->staged[oid];
        dst.buf = (int32_t)R->dst_buf[oid], dst.index = (int32_t)R->dst_off[oid];
    }
    src.size = dst.size = (int32_t)R->cnt[oid];
    lacc_t acc[2] = {{W->r, src.buf, src.index, src.index + src.size, 0},
                     {W->r, dst.buf, dst.index, dst.index + dst.size, 1}};
    if (!tbw_data(A, W, acc, 2)) return 0;
    op_t o;
    memset(&o, 0, sizeof(o));
    o.kind = e->kind == EV_UPKT ? OP_UPKT : OP_COPY;
    o.nsrc = o.ndst = 1;
    o.ref = (uint32_t)A->pool.nrefs;
    return pool_ref(&A->pool, src) && pool_ref(&A->pool, dst) && pool_op(&A->pool, o);
}

static int tbw_sync(asm_t *A, tbw_t *W, const ev_t *evs, int nev, int i) {
    sch_t *S = A->S;
    const ev_t *e = &evs[i];
    int sig = e->kind == EV_SIG;
    const wire_t *w0 = &S->wires[e->ref];
    int t, t2;
    int idx = tbw_chan(A, W, sig ? w0->src_end : w0->dst_end, &t);
    if (idx < 0) return -1;
    int ids[MAX_CHANNELS_PER_OP], n = 1;
    ids[0] = idx;
    int j = i + 1;
    while (W->packed && j < nev && evs[j].kind == e->kind && n < MAX_CHANNELS_PER_OP) {
        const wire_t *w = &S->wires[evs[j].ref];
        int idx2 = tbw_chan(A, W, sig ? w->src_end : w->dst_end, &t2);
        if (idx2 < 0) return -1;
        int dup = 0;
        for (int m = 0; m < n; m++) dup |= ids[m] == idx2;
        if (t2 != t || dup) break;
        ids[n++] = idx2;
        j++;
    }
    if (sig) {
        if (!tbw_publish(A, W, n)) return -1;
        W->nsig += n;
    } else if (W->multi_since && !tbw_nop(A, W))
        return -1;
    const op_t *prev = last_op(A, W);
    int kind = sig ? OP_SIGNAL : OP_WAIT;
    if (prev && prev->kind == kind && prev->ct == t) {
        int inter = 0;
        for (int a = 0; a < prev->nids; a++)
            for (int b = 0; b < n; b++) inter |= A->pool.ints[prev->ids + a] == ids[b];
        if (!inter && !tbw_nop(A, W)) return -1;
    }
    for (int a = 1; a < n; a++) /* channel ids ascending (the DSL lists a fused set so) */
        for (int b = a; b > 0 && ids[b - 1] > ids[b]; b--) {
            int tmp = ids[b];
            ids[b] = ids[b - 1];
            ids[b - 1] = tmp;
        }
    op_t o;
    memset(&o, 0, sizeof(o));
    o.kind = (uint8_t)kind;
    o.ct = (uint8_t)t;
    o.nids = (uint8_t)n;
    o.ids = (uint32_t)A->pool.nints;
    for (int a = 0; a < n; a++)
        if (!pool_int(&A->pool, ids[a])) return -1;
    if (!pool_op(&A->pool, o)) return -1;
    if (!sig) {
        W->wait_since = 1;
        if (n > 1) W->multi_since = 1;
    }
    return j;
}

static int tbw_sem(asm_t *A, tbw_t *W, const ev_t *evs, int nev, int i) {
    sch_t *S = A->S;
    const ev_t *e = &evs[i];
    int ids[MAX_SEMAPHORES_PER_OP], n = 1;
    ids[0] = S->wires[e->ref].sem_id;
    int j = i + 1;
    while (j < nev && evs[j].kind == e->kind && n < MAX_SEMAPHORES_PER_OP) {
        int s2 = S->wires[evs[j].ref].sem_id, dup = 0;
        for (int m = 0; m < n; m++) dup |= ids[m] == s2;
        if (dup) break;
        ids[n++] = s2;
        j++;
    }
    int rel = e->kind == EV_REL;
    if (rel) {
        if (!tbw_publish(A, W, n)) return -1;
    } else if (W->multi_since && !tbw_nop(A, W))
        return -1;
    int kind = rel ? OP_REL : OP_ACQ;
    const op_t *prev = last_op(A, W);
    if (prev && prev->kind == kind && !tbw_nop(A, W)) return -1; /* the DSL fuses adjacent ones without a limit */
    op_t o;
    memset(&o, 0, sizeof(o));
    o.kind = (uint8_t)kind;
    o.nids = (uint8_t)n;
    o.ids = (uint32_t)A->pool.nints;
    for (int a = 0; a < n; a++)
        if (!pool_int(&A->pool, ids[a])) return -1;
    if (!pool_op(&A->pool, o)) return -1;
    if (!rel) {
        W->wait_since = 1;
        if (n > 1) W->multi_since = 1;
    }
    return j;
}

static int tbw_write(asm_t *A, tbw_t *W, ev_t *evs, int nev) {
    qsort(evs, (size_t)nev, sizeof(ev_t), cmp_ev);
    int i = 0;
    while (i < nev) {
        int k = evs[i].kind, nx;
        if (k == EV_PUT) nx = tbw_put(A, W, evs, nev, i);
        else if (k == EV_COPY || k == EV_SCOPY || k == EV_UPKT) nx = tbw_copy(A, W, &evs[i]) ? i + 1 : -1;
        else if (k == EV_SIG || k == EV_WAIT) nx = tbw_sync(A, W, evs, nev, i);
        else nx = tbw_sem(A, W, evs, nev, i);
        if (nx < 0) return 0;
        i = nx;
    }
    return 1;
}

/* thread blocks, channels, semaphores; every thread block written (assemble) */
static int assemble_plan(asm_t *A) {
    sch_t *S = A->S;
    pre_t *R = S->R;
    int n = R->n;
    A->ra = (rankasm_t *)calloc((size_t)n, sizeof(rankasm_t));
    if (!A->ra || !umap_init(&A->chan_of, 4096)) return 0;
    int nchan_ends = 0;
    for (int r = 0; r < n; r++) {
        rankasm_t *RA = &A->ra[r];
        for (int p = 0; p < n; p++) {
            if (p == r) continue;
            int a = r < p ? r : p, b = r < p ? p : r;
            int cab = umap_get(&R->conn_of, (u64)a * (u64)n + (u64)b), cba = umap_get(&R->conn_of, (u64)b * (u64)n + (u64)a);
            int uab = cab >= 0 ? S->used[cab] : 0, uba = cba >= 0 ? S->used[cba] : 0;
            if (!uab && !uba) continue;
            int t = ctype_pair(R, r, p);
            tbk_t ends[2 * MAX_LANES + 2];
            int ne = 0;
            if (S->combined) {
                int nl = uab > uba ? uab : uba;
                for (int k = 0; k < nl; k++) ends[ne++] = TBK(RO_P, p, k);
            } else {
                for (int dir = 0; dir < 2; dir++) {
                    int s = dir ? b : a, d = dir ? a : b, u = dir ? uba : uab;
                    for (int k = 0; k < u; k++) ends[ne++] = s == r ? TBK(RO_S, d, k) : TBK(RO_R, s, k);
                }
            }
            for (int i = 0; i < ne; i++) {
                if (RA->npeers[t] >= RA->cappeers[t]) {
                    int nc = RA->cappeers[t] ? RA->cappeers[t] * 2 : 16;
                    RA->peers[t] = (int *)realloc(RA->peers[t], (size_t)nc * sizeof(int));
                    if (!RA->peers[t]) return 0;
                    RA->cappeers[t] = nc;
                }
                if (!umap_put(&A->chan_of, akey(r, ends[i]), (t << 24) | RA->npeers[t])) return 0;
                RA->peers[t][RA->npeers[t]++] = p;
                nchan_ends++;
                if (!S->groups) {
                    if (RA->ntbs >= RA->cap) {
                        int nc = RA->cap ? RA->cap * 2 : 16;
                        RA->tbs = (tbk_t *)realloc(RA->tbs, (size_t)nc * sizeof(tbk_t));
                        if (!RA->tbs) return 0;
                        RA->cap = nc;
                    }
                    RA->tbs[RA->ntbs++] = ends[i];
                }
            }
        }
    }
    if (S->groups) { /* packed thread blocks 0..count-1 of every rank */
        int *count = (int *)calloc((size_t)n, sizeof(int));
        if (!count) return 0;
        for (size_t i = 0; i < S->groups->cap; i++)
            if (S->groups->v[i] >= 0) {
                int r = (int)(S->groups->k[i] >> 47);
                if (S->groups->v[i] + 1 > count[r]) count[r] = S->groups->v[i] + 1;
            }
        for (int r = 0; r < n; r++) {
            A->ra[r].tbs = (tbk_t *)malloc(((size_t)count[r] + 1) * sizeof(tbk_t));
            if (!A->ra[r].tbs) return 0;
            A->ra[r].cap = count[r] + 1;
            for (int g = 0; g < count[r]; g++) A->ra[r].tbs[A->ra[r].ntbs++] = TBK(RO_K, g, 0);
        }
        free(count);
    }
    /* copy thread blocks, by index */
    for (int r = 0; r < n; r++) {
        int nc = S->ncopy[r], *has = (int *)calloc((size_t)nc + 1, sizeof(int));
        if (!has) return 0;
        for (int j = 0; j < R->local_n[r]; j++) has[S->copy_idx[R->local_ops[R->local_first[r] + j]]] = 1;
        for (int c = 0; c < nc; c++) {
            if (!has[c]) continue;
            rankasm_t *RA = &A->ra[r];
            if (RA->ntbs >= RA->cap) {
                int nc2 = RA->cap ? RA->cap * 2 : 16;
                RA->tbs = (tbk_t *)realloc(RA->tbs, (size_t)nc2 * sizeof(tbk_t));
                if (!RA->tbs) return 0;
                RA->cap = nc2;
            }
            RA->tbs[RA->ntbs++] = TBK(RO_C, -1, c);
        }
        free(has);
    }
    A->lanes = nchan_ends / 2;
    for (int w = 0; w < S->nwires; w++) /* semaphores: per rank, in wire order */
        if (!S->wires[w].chan) S->wires[w].sem_id = A->ra[S->agents[S->wires[w].src].rank].nsem++;
    int total = 0;
    for (int r = 0; r < n; r++) total += A->ra[r].ntbs;
    A->ntb_total = total;
    A->tb_op0 = (size_t *)malloc(((size_t)total + 1) * sizeof(size_t));
    A->tb_nops = (size_t *)malloc(((size_t)total + 1) * sizeof(size_t));
    A->tb_rank = (int *)malloc(((size_t)total + 1) * sizeof(int));
    A->tb_table = malloc(((size_t)total + 1) * sizeof(*A->tb_table));
    A->tb_ntable = malloc(((size_t)total + 1) * sizeof(*A->tb_ntable));
    A->tb_type_order = malloc(((size_t)total + 1) * sizeof(*A->tb_type_order));
    A->tb_ntypes = (int *)malloc(((size_t)total + 1) * sizeof(int));
    A->tb_refs = malloc(((size_t)total + 1) * sizeof(*A->tb_refs));
    A->tb_nrefs = malloc(((size_t)total + 1) * sizeof(*A->tb_nrefs));
    A->tb_ref_order = malloc(((size_t)total + 1) * sizeof(*A->tb_ref_order));
    A->tb_nreftypes = (int *)malloc(((size_t)total + 1) * sizeof(int));
    A->tb_counts = (int *)malloc(((size_t)total + 1) * sizeof(int));
    if (!A->tb_op0 || !A->tb_nops || !A->tb_rank || !A->tb_table || !A->tb_ntable || !A->tb_type_order ||
        !A->tb_ntypes || !A->tb_refs || !A->tb_nrefs || !A->tb_ref_order || !A->tb_nreftypes || !A->tb_counts)
        return 0;
    int ti = 0;
    tbw_t W;
    memset(&W, 0, sizeof(W));
    A->over = 0;
    A->max_ops = 0;
    A->over_rank = -1;
    for (int r = 0; r < n; r++) {
        rankasm_t *RA = &A->ra[r];
        if (RA->ntbs > A->max_tbs_rank) A->max_tbs_rank = RA->ntbs;
        for (int k = 0; k < RA->ntbs; k++, ti++) {
            tbk_t tk = RA->tbs[k];
            lacc_t *keep = W.pend;
            int keepcap = W.cappend;
            memset(&W, 0, sizeof(W));
            W.pend = keep, W.cappend = keepcap;
            W.r = r;
            W.packed = S->groups != NULL && TBK_ROLE(tk) == RO_K;
            if (!S->groups && TBK_ROLE(tk) != RO_C) W.ct_fixed = ct_of_end(A, r, tk, &W.gid_fixed);
            W.op0 = A->pool.nops;
            int a = umap_get(&S->agent_of, akey(r, tk));
            if (a >= 0 && !tbw_write(A, &W, S->agents[a].ev, S->agents[a].nev)) return 0;
            A->nsig += W.nsig;
            A->tb_op0[ti] = W.op0;
            A->tb_nops[ti] = A->pool.nops - W.op0;
            A->tb_rank[ti] = r;
            memcpy(A->tb_table[ti], W.table, sizeof(W.table));
            memcpy(A->tb_ntable[ti], W.ntable, sizeof(W.ntable));
            memcpy(A->tb_type_order[ti], W.type_order, sizeof(W.type_order));
            A->tb_ntypes[ti] = W.ntypes;
            if (!W.packed && W.ct_fixed > 0) { /* the one channel of a lane thread block */
                A->tb_ntypes[ti] = 1;
                A->tb_type_order[ti][0] = W.ct_fixed;
                A->tb_ntable[ti][W.ct_fixed] = 1;
                A->tb_table[ti][W.ct_fixed][0] = W.gid_fixed;
            }
            memcpy(A->tb_refs[ti], W.refs, sizeof(W.refs));
            memcpy(A->tb_nrefs[ti], W.nrefs, sizeof(W.nrefs));
            memcpy(A->tb_ref_order[ti], W.ref_order, sizeof(W.ref_order));
            A->tb_nreftypes[ti] = W.nreftypes;
            int c = (int)A->tb_nops[ti];
            A->tb_counts[ti] = c;
            if (c > A->max_ops) A->max_ops = c;
            if (c > MAX_OPS_PER_TB) {
                if (!A->over) A->over_rank = r, A->over_tk = tk, A->over_count = c;
                A->over++;
            }
        }
    }
    free(W.pend);
    for (int r = 0; r < n; r++) A->sems += A->ra[r].nsem;
    return 1;
}

/* ------------------------------------------------------------------ the JSON text (emit_json.py) */
typedef struct {
    char *s;
    size_t n, cap;
    int oom;
} sb_t;

static void sb_put(sb_t *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 1 << 16;
        while (nc < b->n + n + 1) nc *= 2;
        char *ns = (char *)realloc(b->s, nc);
        if (!ns) {
            b->oom = 1;
            return;
        }
        b->s = ns;
        b->cap = nc;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
}

static void sb_str(sb_t *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_int(sb_t *b, i64 v) {
    char t[32];
    int k = snprintf(t, sizeof(t), "%lld", v);
    sb_put(b, t, (size_t)k);
}

static const char *CT_NAME[3] = {"none", "memory", "port"};
static const char *BUF_NAME[3] = {"i", "o", "s"};
static const char *LOP_NAME[] = {"nop", "signal", "wait", "put", "copy", "sem_acquire", "sem_release", "ppkt", "upkt"};

static void sb_ints(sb_t *b, const int32_t *v, int n) {
    sb_str(b, "[");
    for (int i = 0; i < n; i++) {
        if (i) sb_str(b, ", ");
        sb_int(b, v[i]);
    }
    sb_str(b, "]");
}

/* A thread block's per-channel-type id lists, in ``order`` (``n`` types): ``{"TYPE_KEY": "memory", "IDS_KEY":
 * [...]}, ...``; type t's ids are ``rows + t * stride``, ``counts[t]`` of them (its channels, or its remote
 * buffer references). */
static void sb_typed_ids(sb_t *b, const char *type_key, const char *ids_key, const int *order, int n,
                         const int32_t *rows, size_t stride, const int *counts) {
    for (int m = 0; m < n; m++) {
        int t = order[m];
        if (m) sb_str(b, ", ");
        sb_str(b, "{\"");
        sb_str(b, type_key);
        sb_str(b, "\": \"");
        sb_str(b, CT_NAME[t]);
        sb_str(b, "\", \"");
        sb_str(b, ids_key);
        sb_str(b, "\": ");
        sb_ints(b, rows + (size_t)t * stride, counts[t]);
        sb_str(b, "}");
    }
}

static void sb_ref(sb_t *b, const ref_t *r) {
    if (r->buf >= REMOTE) {
        sb_str(b, "{\"buffer_id\": ");
        sb_int(b, r->buf - REMOTE);
    } else {
        sb_str(b, "{\"type\": \"");
        sb_str(b, BUF_NAME[r->buf]);
        sb_str(b, "\"");
    }
    sb_str(b, ", \"index\": ");
    sb_int(b, r->index);
    sb_str(b, ", \"size\": ");
    sb_int(b, r->size);
    sb_str(b, "}");
}

static void sb_op(sb_t *b, const pool_t *P, const op_t *o) {
    sb_str(b, "{\"name\": \"");
    sb_str(b, LOP_NAME[o->kind]);
    sb_str(b, "\"");
    if (o->nsrc || o->kind == OP_PUT || o->kind == OP_COPY || o->kind == OP_PPKT || o->kind == OP_UPKT) {
        sb_str(b, ", \"src_buff\": [");
        for (int i = 0; i < o->nsrc; i++) {
            if (i) sb_str(b, ", ");
            sb_ref(b, &P->refs[o->ref + i]);
        }
        sb_str(b, "], \"dst_buff\": [");
        for (int i = 0; i < o->ndst; i++) {
            if (i) sb_str(b, ", ");
            sb_ref(b, &P->refs[o->ref + o->nsrc + i]);
        }
        sb_str(b, "]");
    }
    int sem = o->kind == OP_ACQ || o->kind == OP_REL;
    if (o->nids && !sem) {
        sb_str(b, ", \"channel_ids\": ");
        sb_ints(b, P->ints + o->ids, o->nids);
    }
    if (o->ct) {
        sb_str(b, ", \"channel_type\": \"");
        sb_str(b, CT_NAME[o->ct]);
        sb_str(b, "\"");
    }
    if (sem) {
        sb_str(b, ", \"semaphore_ids\": ");
        sb_ints(b, P->ints + o->ids, o->nids);
    }
    sb_str(b, "}");
}

static void emit_text(asm_t *A, sb_t *b) {
    sch_t *S = A->S;
    pre_t *R = S->R;
    int n = R->n;
    sb_str(b, "{\n  \"name\": \"");
    sb_str(b, R->name);
    sb_str(b, "\",\n  \"collective\": \"alltoall\",\n  \"protocol\": \"");
    sb_str(b, R->ll ? "LL" : "Simple");
    sb_str(b, "\",\n  \"inplace\": false,\n  \"reuse_resources\": false,\n  \"gpus\": [\n");
    int ti = 0;
    for (int r = 0; r < n; r++) {
        rankasm_t *RA = &A->ra[r];
        sb_str(b, "    {\"id\": ");
        sb_int(b, r);
        sb_str(b, ", \"input_chunks\": ");
        sb_int(b, R->C);
        sb_str(b, ", \"output_chunks\": ");
        sb_int(b, R->C);
        sb_str(b, ", \"scratch_chunks\": ");
        sb_int(b, R->scratch[r]);
        sb_str(b, ",\n      \"threadblocks\": [\n");
        for (int k = 0; k < RA->ntbs; k++, ti++) {
            sb_str(b, "        {\"id\": ");
            sb_int(b, k);
            sb_str(b, ", \"channels\": [");
            sb_typed_ids(b, "channel_type", "channel_ids", A->tb_type_order[ti], A->tb_ntypes[ti],
                         A->tb_table[ti][0], MAX_CHANNELS_PER_TB * 4, A->tb_ntable[ti]);
            sb_str(b, "], \"remote_buffer_refs\": [");
            sb_typed_ids(b, "access_channel_type", "remote_buffer_ids", A->tb_ref_order[ti], A->tb_nreftypes[ti],
                         A->tb_refs[ti][0], 64, A->tb_nrefs[ti]);
            sb_str(b, "], \"ops\": [\n");
            for (size_t i = 0; i < A->tb_nops[ti]; i++) {
                sb_str(b, "          ");
                sb_op(b, &A->pool, &A->pool.ops[A->tb_op0[ti] + i]);
                sb_str(b, i + 1 < A->tb_nops[ti] ? ",\n" : "\n");
            }
            sb_str(b, k + 1 < RA->ntbs ? "        ]},\n" : "        ]}\n");
        }
        sb_str(b, "      ],\n      \"channels\": [");
        int first = 1;
        for (int t = CT_MEM; t <= CT_PORT; t++) {
            if (!RA->npeers[t]) continue;
            if (!first) sb_str(b, ", ");
            first = 0;
            sb_str(b, "{\"channel_type\": \"");
            sb_str(b, CT_NAME[t]);
            sb_str(b, "\", \"connected_to\": ");
            sb_ints(b, RA->peers[t], RA->npeers[t]);
            sb_str(b, "}");
        }
        sb_str(b, "],\n      \"remote_buffers\": [");
        for (int i = 0; i < RA->nrb; i++) {
            if (i) sb_str(b, ", ");
            sb_str(b, "{\"rank\": ");
            sb_int(b, RA->rb_rank[i]);
            sb_str(b, ", \"type\": \"");
            sb_str(b, BUF_NAME[RA->rb_buf[i]]);
            sb_str(b, "\", \"access_channel_types\": [\"");
            sb_str(b, CT_NAME[RA->rb_ct[i]]);
            sb_str(b, "\"]}");
        }
        sb_str(b, "],\n      \"semaphores\": [");
        for (int i = 0; i < RA->nsem; i++) sb_str(b, i ? ", {\"init_value\": 0}" : "{\"init_value\": 0}");
        sb_str(b, r + 1 < n ? "]},\n" : "]}\n");
    }
    sb_str(b, "  ],\n  \"num_threads_per_block\": ");
    sb_int(b, R->nthreads);
    sb_str(b, ",\n  \"use_double_scratch_buffer\": false,\n  \"buffer_alignment\": 16,\n  \"min_message_size\": ");
    sb_int(b, R->min_bytes);
    sb_str(b, ",\n  \"max_message_size\": ");
    sb_int(b, R->max_bytes);
    sb_str(b, "\n}\n");
}

/* ------------------------------------------------------------------ the packed layout (pack.py) */
typedef struct {
    pre_t *R;
    int npairs;
    int *pa, *pb, *nl; /* pairs (a < b), sorted */
    umap_t pair_of;    /* a * n + b -> pair */
    umap_t wkey;       /* (rank, end) -> weight slot */
    double *w;
    int nw, capw;
    umap_t groups;     /* (rank, end) -> group */
    double **load;     /* per rank: per group */
    int *nload;
    double *fill;
} pk_t;

static double *weight_slot(pk_t *K, int r, tbk_t end, int create) {
    int s = umap_get(&K->wkey, akey(r, end));
    if (s < 0) {
        if (!create) return NULL;
        if (K->nw >= K->capw) {
            int nc = K->capw ? K->capw * 2 : 4096;
            double *nw = (double *)realloc(K->w, (size_t)nc * sizeof(double));
            if (!nw) return NULL;
            K->w = nw;
            K->capw = nc;
        }
        s = K->nw++;
        K->w[s] = 1.0;
        if (!umap_put(&K->wkey, akey(r, end), s)) return NULL;
    }
    return &K->w[s];
}

static double weight_get(pk_t *K, int r, tbk_t end, double dflt) {
    double *p = weight_slot(K, r, end, 0);
    return p ? *p : dflt;
}

static int load_add(pk_t *K, int r, int g, double v) {
    if (g >= K->nload[r]) {
        int nc = g + 8;
        double *nl = (double *)realloc(K->load[r], (size_t)nc * sizeof(double));
        if (!nl) return 0;
        for (int i = K->nload[r]; i < nc; i++) nl[i] = 0.0;
        K->load[r] = nl;
        K->nload[r] = nc;
    }
    K->load[r][g] = K->load[r][g] + v;
    return 1;
}

static int most_ops(const pre_t *R, int a, int b) {
    int x = umap_get(&R->conn_of, (u64)a * (u64)R->n + (u64)b), y = umap_get(&R->conn_of, (u64)b * (u64)R->n + (u64)a);
    int lx = x >= 0 ? R->conn_n[x] : 0, ly = y >= 0 ? R->conn_n[y] : 0;
    return lx > ly ? lx : ly;
}

/* a rank's lane ends, sorted by (peer, lane) */
static int rank_ends(pk_t *K, int r, tbk_t **out, int *n) {
    int cnt = 0;
    for (int p = 0; p < K->npairs; p++)
        if (K->pa[p] == r || K->pb[p] == r) cnt += K->nl[p];
    tbk_t *e = (tbk_t *)malloc(((size_t)cnt + 1) * sizeof(tbk_t));
    if (!e) return 0;
    int m = 0;
    for (int p = 0; p < K->npairs; p++) {
        if (K->pa[p] != r && K->pb[p] != r) continue;
        int peer = K->pa[p] == r ? K->pb[p] : K->pa[p];
        for (int k = 0; k < K->nl[p]; k++) e[m++] = TBK(RO_P, peer, k);
    }
    qsort(e, (size_t)m, sizeof(tbk_t), cmp_u64); /* same role: (peer, k) order */
    *out = e;
    *n = m;
    return 1;
}

static int rank_group_ends(pk_t *K, int r, tbk_t **out, int *n) { /* the rank's assigned ends, sorted */
    return rank_ends(K, r, out, n);
}

static int pk_singletons(pk_t *K) {
    umap_free(&K->groups);
    if (!umap_init(&K->groups, 4096)) return 0;
    for (int r = 0; r < K->R->n; r++) {
        free(K->load[r]);
        K->load[r] = NULL;
        K->nload[r] = 0;
        tbk_t *e;
        int m;
        if (!rank_ends(K, r, &e, &m)) return 0;
        for (int g = 0; g < m; g++) {
            if (!umap_put(&K->groups, akey(r, e[g]), g)) return 0;
            if (!load_add(K, r, g, weight_get(K, r, e[g], 1.0))) return 0;
        }
        free(e);
    }
    return 1;
}

static int cmp_pair(const void *a, const void *b) {
    const int *x = (const int *)a, *y = (const int *)b;
    if (x[0] != y[0]) return x[0] < y[0] ? -1 : 1;
    return x[1] < y[1] ? -1 : x[1] > y[1];
}

static int pk_start(pk_t *K) {
    pre_t *R = K->R;
    int n = R->n;
    int *tmp = (int *)malloc(((size_t)R->nconn * 3 + 1) * sizeof(int));
    if (!tmp || !umap_init(&K->pair_of, 1024) || !umap_init(&K->wkey, 4096) || !umap_init(&K->groups, 16)) return 0;
    int np_ = 0;
    for (int c = 0; c < R->nconn; c++) {
        int o = R->conn_ops[R->conn_first[c]];
        int s = (int)R->src_rank[o], d = (int)R->dst_rank[o];
        int a = s < d ? s : d, b = s < d ? d : s, len = R->conn_n[c];
        int want = (len * 5 + 55) / 56;
        if (len < want) want = len;
        if (want < 1) want = 1;
        u64 key = (u64)a * (u64)n + (u64)b;
        int p = umap_get(&K->pair_of, key);
        if (p < 0) {
            p = np_++;
            tmp[3 * p] = a, tmp[3 * p + 1] = b, tmp[3 * p + 2] = 1;
            if (!umap_put(&K->pair_of, key, p)) return 0;
        }
        if (want > tmp[3 * p + 2]) tmp[3 * p + 2] = want;
    }
    qsort(tmp, (size_t)np_, 3 * sizeof(int), cmp_pair);
    K->npairs = np_;
    K->pa = (int *)malloc(((size_t)np_ + 1) * sizeof(int));
    K->pb = (int *)malloc(((size_t)np_ + 1) * sizeof(int));
    K->nl = (int *)malloc(((size_t)np_ + 1) * sizeof(int));
    K->load = (double **)calloc((size_t)n, sizeof(double *));
    K->nload = (int *)calloc((size_t)n, sizeof(int));
    K->fill = (double *)malloc((size_t)n * sizeof(double));
    if (!K->pa || !K->pb || !K->nl || !K->load || !K->nload || !K->fill) return 0;
    umap_free(&K->pair_of);
    if (!umap_init(&K->pair_of, (size_t)np_ + 16)) return 0;
    for (int p = 0; p < np_; p++) {
        K->pa[p] = tmp[3 * p], K->pb[p] = tmp[3 * p + 1], K->nl[p] = tmp[3 * p + 2];
        if (!umap_put(&K->pair_of, (u64)K->pa[p] * (u64)n + (u64)K->pb[p], p)) return 0;
    }
    for (int r = 0; r < n; r++) K->fill[r] = PK_FILL;
    free(tmp);
    return pk_singletons(K);
}

/* the Schedule's lanes per connection */
static void pk_conn_lanes(pk_t *K, int *lanes) {
    pre_t *R = K->R;
    for (int c = 0; c < R->nconn; c++) {
        int o = R->conn_ops[R->conn_first[c]];
        int s = (int)R->src_rank[o], d = (int)R->dst_rank[o];
        int a = s < d ? s : d, b = s < d ? d : s;
        lanes[c] = K->nl[umap_get(&K->pair_of, (u64)a * (u64)R->n + (u64)b)];
    }
}

/* the dense assignment (thread blocks renumbered 0.. per rank) into dst */
static int pk_dense(pk_t *K, umap_t *dst) {
    if (!umap_init(dst, K->groups.n + 16)) return 0;
    for (int r = 0; r < K->R->n; r++) {
        tbk_t *e;
        int m;
        if (!rank_group_ends(K, r, &e, &m)) return 0;
        int maxg = -1;
        for (int i = 0; i < m; i++) {
            int g = umap_get(&K->groups, akey(r, e[i]));
            if (g > maxg) maxg = g;
        }
        int *ren = (int *)malloc(((size_t)maxg + 2) * sizeof(int));
        if (!ren) return 0;
        for (int g = 0; g <= maxg; g++) ren[g] = -1;
        for (int i = 0; i < m; i++) {
            int g = umap_get(&K->groups, akey(r, e[i]));
            if (g >= 0) ren[g] = 0;
        }
        int next = 0;
        for (int g = 0; g <= maxg; g++)
            if (ren[g] >= 0) ren[g] = next++;
        for (int i = 0; i < m; i++) {
            int g = umap_get(&K->groups, akey(r, e[i]));
            if (g >= 0 && !umap_put(dst, akey(r, e[i]), ren[g])) return 0;
        }
        free(ren);
        free(e);
    }
    return 1;
}

/* the lane end an event uses (0: none) */
static int end_of_event(const sch_t *S, const ev_t *e, tbk_t *end) {
    if (e->kind == EV_COPY) return 0;
    if (e->kind == EV_PUT) return *end = send_end(S, S->lane_of[e->ref]), 1;
    if (e->kind == EV_SCOPY || e->kind == EV_UPKT) return *end = recv_end(S, S->lane_of[e->ref]), 1;
    const wire_t *w = &S->wires[e->ref];
    if (!w->chan) return 0;
    *end = e->kind == EV_SIG ? w->src_end : w->dst_end;
    return 1;
}

/* counts: thread block -> operations of the attempt, as (rank, tb) -> count */
static int pk_measure(pk_t *K, const sch_t *S, const umap_t *counts) {
    umap_t ev_of, tbev;
    if (!umap_init(&ev_of, 4096) || !umap_init(&tbev, 4096)) return 0;
    int *evc = NULL, nev = 0, capev = 0;
    int *tbc = NULL, ntb = 0, captb = 0;
    tbk_t *ev_end = NULL;
    int *ev_rank = NULL;
    for (int a = 0; a < S->nagents; a++) {
        const agent_t *g = &S->agents[a];
        for (int i = 0; i < g->nev; i++) {
            tbk_t end;
            if (!end_of_event(S, &g->ev[i], &end)) continue;
            u64 k = akey(g->rank, end);
            int slot = umap_get(&ev_of, k);
            if (slot < 0) {
                if (nev >= capev) {
                    capev = capev ? capev * 2 : 4096;
                    evc = (int *)realloc(evc, (size_t)capev * sizeof(int));
                    ev_end = (tbk_t *)realloc(ev_end, (size_t)capev * sizeof(tbk_t));
                    ev_rank = (int *)realloc(ev_rank, (size_t)capev * sizeof(int));
                    if (!evc || !ev_end || !ev_rank) return 0;
                }
                slot = nev++;
                evc[slot] = 0, ev_end[slot] = end, ev_rank[slot] = g->rank;
                if (!umap_put(&ev_of, k, slot)) return 0;
            }
            evc[slot]++;
            u64 tk = akey(g->rank, g->tk);
            int ts = umap_get(&tbev, tk);
            if (ts < 0) {
                if (ntb >= captb) {
                    captb = captb ? captb * 2 : 1024;
                    tbc = (int *)realloc(tbc, (size_t)captb * sizeof(int));
                    if (!tbc) return 0;
                }
                ts = ntb++;
                tbc[ts] = 0;
                if (!umap_put(&tbev, tk, ts)) return 0;
            }
            tbc[ts]++;
        }
    }
    for (int i = 0; i < nev; i++) {
        int r = ev_rank[i];
        tbk_t tb = phys(S, r, ev_end[i]);
        int ts = umap_get(&tbev, akey(r, tb));
        int te = ts >= 0 ? tbc[ts] : 0;
        int c = umap_get(counts, akey(r, tb));
        double *w = weight_slot(K, r, ev_end[i], 1);
        if (!w) return 0;
        *w = (double)((i64)(c < 0 ? 0 : c) * evc[i]) / (double)(te > 1 ? te : 1);
    }
    free(evc), free(ev_end), free(ev_rank), free(tbc);
    umap_free(&ev_of);
    umap_free(&tbev);
    for (int r = 0; r < K->R->n; r++) { /* loads re-summed in sorted order */
        free(K->load[r]);
        K->load[r] = NULL;
        K->nload[r] = 0;
        tbk_t *e;
        int m;
        if (!rank_group_ends(K, r, &e, &m)) return 0;
        for (int i = 0; i < m; i++) {
            int g = umap_get(&K->groups, akey(r, e[i]));
            if (g >= 0 && !load_add(K, r, g, weight_get(K, r, e[i], 0.0))) return 0;
        }
        free(e);
    }
    return 1;
}

typedef struct {
    double w;
    tbk_t end;
} wend_t;

static int cmp_wend_desc(const void *a, const void *b) { /* (-weight, peer, k) */
    const wend_t *x = (const wend_t *)a, *y = (const wend_t *)b;
    if (x->w != y->w) return x->w > y->w ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static int cmp_wend_asc(const void *a, const void *b) { /* (weight, peer, k) */
    const wend_t *x = (const wend_t *)a, *y = (const wend_t *)b;
    if (x->w != y->w) return x->w < y->w ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* place the ends of rank r (todo) first-fit by decreasing weight into its thread blocks */
static int pk_first_fit(pk_t *K, int r, const tbk_t *todo, int ntodo) {
    pre_t *R = K->R;
    tbk_t *e;
    int m;
    if (!rank_group_ends(K, r, &e, &m)) return 0;
    /* members per group, ends in sorted order */
    int maxg = -1;
    for (int i = 0; i < m; i++) {
        int g = umap_get(&K->groups, akey(r, e[i]));
        if (g > maxg) maxg = g;
    }
    int capg = maxg + 2 + ntodo;
    int *cnt_mem = (int *)calloc((size_t)capg, sizeof(int)), *cnt_port = (int *)calloc((size_t)capg, sizeof(int));
    int *present = (int *)calloc((size_t)capg, sizeof(int));
    /* peers per group: small lists */
    int **gpeers = (int **)calloc((size_t)capg, sizeof(int *));
    int *ngp = (int *)calloc((size_t)capg, sizeof(int)), *capgp = (int *)calloc((size_t)capg, sizeof(int));
    if (!cnt_mem || !cnt_port || !present || !gpeers || !ngp || !capgp) return 0;
#define GADD(g, peer, t)                                                                       \
    do {                                                                                       \
        present[g] = 1;                                                                        \
        if ((t) == CT_MEM) cnt_mem[g]++;                                                       \
        else cnt_port[g]++;                                                                    \
        if (ngp[g] >= capgp[g]) {                                                              \
            capgp[g] = capgp[g] ? capgp[g] * 2 : 8;                                            \
            gpeers[g] = (int *)realloc(gpeers[g], (size_t)capgp[g] * sizeof(int));             \
            if (!gpeers[g]) return 0;                                                          \
        }                                                                                      \
        gpeers[g][ngp[g]++] = (peer);                                                          \
    } while (0)
    for (int i = 0; i < m; i++) {
        int g = umap_get(&K->groups, akey(r, e[i]));
        if (g >= 0) GADD(g, TBK_PEER(e[i]), ctype_pair(R, r, TBK_PEER(e[i])));
    }
    wend_t *ord = (wend_t *)malloc(((size_t)ntodo + 1) * sizeof(wend_t));
    if (!ord) return 0;
    for (int i = 0; i < ntodo; i++) ord[i].w = weight_get(K, r, todo[i], 1.0), ord[i].end = todo[i];
    qsort(ord, (size_t)ntodo, sizeof(wend_t), cmp_wend_desc);
    double fill = K->fill[r];
    for (int i = 0; i < ntodo; i++) {
        double w = ord[i].w;
        int peer = TBK_PEER(ord[i].end), t = ctype_pair(R, r, peer), chosen = -1, top = -1;
        for (int g = 0; g < capg; g++) {
            if (!present[g]) continue;
            top = g;
            if (chosen >= 0) continue;
            double ld = g < K->nload[r] ? K->load[r][g] : 0.0;
            int nt = t == CT_MEM ? cnt_mem[g] : cnt_port[g], same = 0;
            for (int j = 0; j < ngp[g] && !same; j++) same = gpeers[g][j] == peer;
            if (ld + w <= fill && nt < MAX_CHANNELS_PER_TB && !same) chosen = g;
        }
        if (chosen < 0) chosen = top + 1;
        if (chosen >= capg) return 0;
        GADD(chosen, peer, t);
        if (!umap_put(&K->groups, akey(r, ord[i].end), chosen) || !load_add(K, r, chosen, w)) return 0;
    }
#undef GADD
    for (int g = 0; g < capg; g++) free(gpeers[g]);
    free(gpeers), free(ngp), free(capgp), free(cnt_mem), free(cnt_port), free(present), free(ord), free(e);
    return 1;
}

static int pk_group_count(pk_t *K, int r) {
    tbk_t *e;
    int m, maxg = -1, n = 0;
    if (!rank_group_ends(K, r, &e, &m)) return -1;
    for (int i = 0; i < m; i++) {
        int g = umap_get(&K->groups, akey(r, e[i]));
        if (g > maxg) maxg = g;
    }
    char *seen = (char *)calloc((size_t)maxg + 2, 1);
    if (!seen) return -1;
    for (int i = 0; i < m; i++) {
        int g = umap_get(&K->groups, akey(r, e[i]));
        if (g >= 0 && !seen[g]) seen[g] = 1, n++;
    }
    free(seen);
    free(e);
    return n;
}

/* attempt counts as (rank, tb) sorted: ranks ascending, thread blocks by key */
typedef struct {
    int r;
    tbk_t tk;
    int c;
} cnt_t;

static int cmp_cnt(const void *a, const void *b) {
    const cnt_t *x = (const cnt_t *)a, *y = (const cnt_t *)b;
    if (x->r != y->r) return x->r < y->r ? -1 : 1;
    return x->tk < y->tk ? -1 : x->tk > y->tk;
}

static int pk_split_heavy(pk_t *K, const sch_t *S, const umap_t *counts, const cnt_t *cl, int ncl, int *changed) {
    if (!pk_measure(K, S, counts)) return 0;
    *changed = 0;
    pre_t *R = K->R;
    for (int i = 0; i < ncl; i++) {
        if (cl[i].c <= MAX_OPS_PER_TB || TBK_ROLE(cl[i].tk) != RO_K) continue;
        int r = cl[i].r, g = TBK_PEER(cl[i].tk);
        tbk_t *e;
        int m;
        if (!rank_group_ends(K, r, &e, &m)) return 0;
        tbk_t end = 0;
        int found = 0;
        for (int j = 0; j < m && !found; j++)
            if (umap_get(&K->groups, akey(r, e[j])) == g) end = e[j], found = 1;
        free(e);
        if (!found) continue;
        int p = TBK_PEER(end), a = r < p ? r : p, b = r < p ? p : r;
        int pi = umap_get(&K->pair_of, (u64)a * (u64)R->n + (u64)b);
        int nl = K->nl[pi], most = most_ops(R, a, b);
        int want = nl + 1, need = (cl[i].c * nl + 57) / 58;
        if (need > want) want = need;
        if (most < want) want = most;
        if (MAX_PAIR_LANES < want) want = MAX_PAIR_LANES;
        if (want > nl) K->nl[pi] = want, *changed = 1;
    }
    if (*changed) return pk_singletons(K);
    return 1;
}

static int pk_repack(pk_t *K, const sch_t *S, const umap_t *counts, const char *ranks, int *changed) {
    if (!pk_measure(K, S, counts)) return 0;
    int n = K->R->n, all = 1, any = 0;
    int *before = (int *)malloc((size_t)n * sizeof(int));
    if (!before) return 0;
    for (int r = 0; r < n; r++) {
        if (!ranks[r]) continue;
        any = 1;
        before[r] = pk_group_count(K, r);
        tbk_t *e;
        int m;
        if (!rank_group_ends(K, r, &e, &m)) return 0;
        for (int i = 0; i < m; i++) umap_del(&K->groups, akey(r, e[i]));
        free(K->load[r]);
        K->load[r] = NULL;
        K->nload[r] = 0;
        if (!pk_first_fit(K, r, e, m)) return 0;
        free(e);
        if (pk_group_count(K, r) >= before[r]) all = 0;
    }
    free(before);
    *changed = any && all;
    return 1;
}

static int pk_more_lanes(pk_t *K, int r, tbk_t end, int *changed) {
    pre_t *R = K->R;
    int p = TBK_PEER(end), a = r < p ? r : p, b = r < p ? p : r;
    int pi = umap_get(&K->pair_of, (u64)a * (u64)R->n + (u64)b);
    int nl = K->nl[pi], most = most_ops(R, a, b);
    int lim = most < MAX_PAIR_LANES ? most : MAX_PAIR_LANES;
    *changed = 0;
    if (nl >= lim) return 1;
    K->nl[pi] = nl + 1;
    for (int side = 0; side < 2; side++) {
        int q = side ? b : a, pp = side ? a : b;
        double total = 0.0;
        for (int k = 0; k < nl; k++) {
            tbk_t ek2 = TBK(RO_P, pp, k);
            double *wp = weight_slot(K, q, ek2, 0);
            double w = 0.0;
            if (wp) {
                w = *wp;
                umap_del(&K->wkey, akey(q, ek2));
            }
            total += w;
            int g = umap_get(&K->groups, akey(q, ek2));
            if (g >= 0) {
                umap_del(&K->groups, akey(q, ek2));
                if (!load_add(K, q, g, -w)) return 0;
            }
        }
        tbk_t todo[MAX_PAIR_LANES + 1];
        for (int k = 0; k <= nl; k++) {
            todo[k] = TBK(RO_P, pp, k);
            double *wp = weight_slot(K, q, todo[k], 1);
            if (!wp) return 0;
            *wp = total / (double)(nl + 1);
        }
        (void)todo;
    }
    for (int side = 0; side < 2; side++) { /* _first_fit over both ranks, in rank order */
        int q = side ? b : a, pp = side ? a : b;
        tbk_t todo[MAX_PAIR_LANES + 1];
        for (int k = 0; k <= nl; k++) todo[k] = TBK(RO_P, pp, k);
        if (!pk_first_fit(K, q, todo, nl + 1)) return 0;
    }
    *changed = 1;
    return 1;
}

static int pk_repair(pk_t *K, const sch_t *S, const umap_t *counts, const cnt_t *cl, int ncl, int *changed) {
    if (!pk_measure(K, S, counts)) return 0;
    int n = K->R->n;
    *changed = 0;
    tbk_t **moved = (tbk_t **)calloc((size_t)n, sizeof(tbk_t *));
    int *nmoved = (int *)calloc((size_t)n, sizeof(int)), *capm = (int *)calloc((size_t)n, sizeof(int));
    if (!moved || !nmoved || !capm) return 0;
    for (int i = 0; i < ncl; i++) {
        if (cl[i].c <= MAX_OPS_PER_TB || TBK_ROLE(cl[i].tk) != RO_K) continue;
        int r = cl[i].r, g = TBK_PEER(cl[i].tk);
        double fill = K->fill[r] - PK_FILL_STEP;
        if (fill < PK_MIN_FILL) fill = PK_MIN_FILL;
        K->fill[r] = fill;
        tbk_t *e;
        int m;
        if (!rank_group_ends(K, r, &e, &m)) return 0;
        wend_t *mem = (wend_t *)malloc(((size_t)m + 1) * sizeof(wend_t));
        if (!mem) return 0;
        int nm = 0;
        for (int j = 0; j < m; j++)
            if (umap_get(&K->groups, akey(r, e[j])) == g) mem[nm].w = weight_get(K, r, e[j], 0.0), mem[nm++].end = e[j];
        free(e);
        qsort(mem, (size_t)nm, sizeof(wend_t), cmp_wend_asc);
        if (nm == 1) {
            int ch;
            if (!pk_more_lanes(K, r, mem[0].end, &ch)) return 0;
            *changed |= ch;
            free(mem);
            continue;
        }
        int head = 0;
        while (nm - head > 1 && (g < K->nload[r] ? K->load[r][g] : 0.0) > fill) {
            tbk_t end = mem[head++].end;
            umap_del(&K->groups, akey(r, end));
            if (!load_add(K, r, g, -weight_get(K, r, end, 0.0))) return 0;
            if (nmoved[r] >= capm[r]) {
                capm[r] = capm[r] ? capm[r] * 2 : 8;
                moved[r] = (tbk_t *)realloc(moved[r], (size_t)capm[r] * sizeof(tbk_t));
                if (!moved[r]) return 0;
            }
            moved[r][nmoved[r]++] = end;
            *changed = 1;
        }
        free(mem);
    }
    for (int r = 0; r < n; r++) {
        if (nmoved[r] && !pk_first_fit(K, r, moved[r], nmoved[r])) return 0;
        free(moved[r]);
    }
    free(moved), free(nmoved), free(capm);
    return 1;
}

/* ------------------------------------------------------------------ attempts (lower.py) */
static void free_sch(sch_t *S) {
    for (int a = 0; a < S->nagents; a++) free(S->agents[a].ev);
    free(S->agents);
    for (int l = 0; l < S->nlanes; l++) free(S->lanes[l].puts), free(S->lanes[l].dn);
    free(S->lanes);
    for (int w = 0; w < S->nwires; w++) free(S->wires[w].sig);
    free(S->wires);
    free(S->wm.slot);
    free(S->lane_k), free(S->copy_idx), free(S->used), free(S->put_index), free(S->lane_of);
    umap_free(&S->lane_id);
    umap_free(&S->agent_of);
    free(S->err);
    memset(S, 0, sizeof(*S));
}

static void free_asm(asm_t *A) {
    if (A->ra && A->S)
        for (int r = 0; r < A->S->R->n; r++) {
            rankasm_t *RA = &A->ra[r];
            free(RA->tbs), free(RA->peers[0]), free(RA->peers[1]), free(RA->peers[2]);
            free(RA->rb_rank), free(RA->rb_buf), free(RA->rb_ct);
        }
    free(A->ra);
    umap_free(&A->chan_of);
    free(A->pool.ops), free(A->pool.refs), free(A->pool.ints);
    free(A->tb_op0), free(A->tb_nops), free(A->tb_rank), free(A->tb_table), free(A->tb_ntable);
    free(A->tb_type_order), free(A->tb_ntypes), free(A->tb_refs), free(A->tb_nrefs), free(A->tb_ref_order);
    free(A->tb_nreftypes), free(A->tb_counts);
    memset(A, 0, sizeof(*A));
}

/* one attempt: the schedule passes and the assembly. 1 done, 0 error (R->err or memory) */
static int attempt(pre_t *R, sch_t *S, asm_t *A, const int *conn_lanes, const int *ncopy, umap_t *groups) {
    memset(S, 0, sizeof(*S));
    memset(A, 0, sizeof(*A));
    S->R = R;
    S->combined = R->layout != 0;
    S->packed = R->layout == 2;
    S->conn_lanes = conn_lanes;
    S->ncopy = ncopy;
    S->groups = groups;
    if (!umap_init(&S->agent_of, 4096)) return 0;
    int ok = place_transfers(S) && place_handshakes(S) && route_needs(S) && place_data_signals(S) && place_waits(S);
    if (!ok) {
        if (S->err && !R->err) R->err = S->err, S->err = NULL;
        return 0;
    }
    A->S = S;
    return assemble_plan(A);
}

static char *too_many(const pre_t *R, const asm_t *A) {
    for (int r = 0; r < R->n; r++)
        if (A->ra[r].ntbs > R->max_tbs)
            return fmt("rank %d needs %d thread blocks but max_threadblocks is %d (all thread blocks must be "
                       "co-resident: keep them within the SMs/CUs); tb_layout=combined halves the lane thread blocks, "
                       "tb_layout=packed puts several peers in one, and a coarser layout (a larger --max-padding) or "
                       "fewer stages needs fewer lanes",
                       r, A->ra[r].ntbs, R->max_tbs);
    return NULL;
}

/* counts of the attempt: (rank, tb) -> operations, and the list sorted by (rank, tb key) */
static int attempt_counts(const asm_t *A, umap_t *counts, cnt_t **list, int *n) {
    if (!umap_init(counts, (size_t)A->ntb_total + 16)) return 0;
    *list = (cnt_t *)malloc(((size_t)A->ntb_total + 1) * sizeof(cnt_t));
    if (!*list) return 0;
    int ti = 0;
    for (int r = 0; r < A->S->R->n; r++)
        for (int k = 0; k < A->ra[r].ntbs; k++, ti++) {
            if (!umap_put(counts, akey(r, A->ra[r].tbs[k]), A->tb_counts[ti])) return 0;
            (*list)[ti].r = r, (*list)[ti].tk = A->ra[r].tbs[k], (*list)[ti].c = A->tb_counts[ti];
        }
    *n = ti;
    qsort(*list, (size_t)ti, sizeof(cnt_t), cmp_cnt);
    return 1;
}

/* the split / combined attempts: more lanes (or copy thread blocks) for every thread block over the limit.
   1: A holds the plan; 0: refused (R->err) or error */
static int attempts_plain(pre_t *R, sch_t *S, asm_t *A, int *iters) {
    int n = R->n;
    int *lanes = (int *)malloc(((size_t)R->nconn + 1) * sizeof(int)), *ncopy = (int *)malloc((size_t)n * sizeof(int));
    if (!lanes || !ncopy) return 0;
    for (int c = 0; c < R->nconn; c++) {
        int len = R->conn_n[c], l = (len * 5 + 55) / 56;
        if (l > len) l = len;
        lanes[c] = l < 1 ? 1 : l;
    }
    for (int r = 0; r < n; r++) {
        int c = (R->local_n[r] * 3 + 55) / 56;
        ncopy[r] = c < 1 ? 1 : c;
    }
    for (int it = 1; it <= MAX_ITERATIONS; it++) {
        if (!attempt(R, S, A, lanes, ncopy, NULL)) return 0;
        char *ref = too_many(R, A);
        if (ref) {
            R->err = ref;
            return 0;
        }
        if (!A->over) {
            *iters = it;
            free(lanes), free(ncopy);
            return 1;
        }
        /* _grow: over thread blocks in (rank, id) order */
        int grew = 0, ti = 0;
        for (int r = 0; r < n; r++)
            for (int k = 0; k < A->ra[r].ntbs; k++, ti++) {
                if (A->tb_counts[ti] <= MAX_OPS_PER_TB) continue;
                tbk_t tk = A->ra[r].tbs[k];
                int role = TBK_ROLE(tk), peer = TBK_PEER(tk);
                if (role == RO_C) {
                    ncopy[r]++;
                    grew = 1;
                    continue;
                }
                int conns[2][2], nc = 0;
                if (role == RO_P) conns[0][0] = r, conns[0][1] = peer, conns[1][0] = peer, conns[1][1] = r, nc = 2;
                else if (role == RO_S) conns[0][0] = r, conns[0][1] = peer, nc = 1;
                else conns[0][0] = peer, conns[0][1] = r, nc = 1;
                for (int j = 0; j < nc; j++) {
                    int c = umap_get(&R->conn_of, (u64)conns[j][0] * (u64)n + (u64)conns[j][1]);
                    if (c < 0) continue;
                    int lim = R->conn_n[c] < MAX_LANES ? R->conn_n[c] : MAX_LANES;
                    if (lanes[c] < lim) lanes[c]++, grew = 1;
                }
                if (!grew) {
                    R->err = fmt("rank %d: a thread block needs %d operations (the executor allows %d) even with one "
                                 "transfer per lane: an op has too many dependencies to route; deps=data or a coarser "
                                 "layout (a larger --max-padding, fewer stages) would fit",
                                 r, A->tb_counts[ti], MAX_OPS_PER_TB);
                    return 0;
                }
            }
        if (!grew) break;
        free_asm(A);
        free_sch(S);
    }
    R->err = fmt("no thread block layout within %d operations found", MAX_OPS_PER_TB);
    return 0;
}

static int attempts_packed(pre_t *R, sch_t *S, asm_t *A, int *iters) {
    int n = R->n;
    pk_t K;
    memset(&K, 0, sizeof(K));
    K.R = R;
    int *lanes = (int *)malloc(((size_t)R->nconn + 1) * sizeof(int)), *ncopy = (int *)malloc((size_t)n * sizeof(int));
    char *crowded = (char *)calloc((size_t)n, 1);
    if (!lanes || !ncopy || !crowded || !pk_start(&K)) return 0;
    for (int r = 0; r < n; r++) {
        int c = (R->local_n[r] * 3 + 55) / 56;
        ncopy[r] = c < 1 ? 1 : c;
    }
    int measuring = 1;
    char *refusal = NULL;
    for (int it = 1; it <= MAX_ITERATIONS; it++) {
        umap_t dense;
        pk_conn_lanes(&K, lanes);
        if (!pk_dense(&K, &dense)) return 0;
        int ok = attempt(R, S, A, lanes, ncopy, &dense);
        if (!ok) {
            umap_free(&dense);
            return 0;
        }
        free(refusal);
        refusal = too_many(R, A);
        if (!refusal && !A->over) {
            *iters = it;
            /* the plan refers to the groups map: keep it alive with the schedule */
            S->groups = NULL;
            umap_free(&dense);
            return 1;
        }
        int grew = 0, ti = 0;
        for (int r = 0; r < n; r++)
            for (int k = 0; k < A->ra[r].ntbs; k++, ti++)
                if (A->tb_counts[ti] > MAX_OPS_PER_TB && TBK_ROLE(A->ra[r].tbs[k]) == RO_C) ncopy[r]++, grew = 1;
        umap_t counts;
        cnt_t *cl;
        int ncl, ch = 0;
        if (!attempt_counts(A, &counts, &cl, &ncl)) return 0;
        if (measuring) {
            if (!pk_split_heavy(&K, S, &counts, cl, ncl, &ch)) return 0;
            if (ch) {
                umap_free(&counts), free(cl), umap_free(&dense), free_asm(A), free_sch(S);
                continue;
            }
            measuring = 0;
            memset(crowded, 1, (size_t)n);
            if (!pk_repack(&K, S, &counts, crowded, &ch)) return 0;
            grew = 1;
        } else if (A->over) {
            if (!pk_repair(&K, S, &counts, cl, ncl, &ch)) return 0;
            grew |= ch;
        } else {
            for (int r = 0; r < n; r++) crowded[r] = A->ra[r].ntbs > R->max_tbs;
            if (!pk_repack(&K, S, &counts, crowded, &ch)) return 0;
            grew |= ch;
        }
        umap_free(&counts), free(cl), umap_free(&dense);
        if (!grew) break;
        free_asm(A);
        free_sch(S);
    }
    R->err = refusal ? refusal : fmt("no packed thread block layout within %d operations found", MAX_OPS_PER_TB);
    return 0;
}

static void free_pre(pre_t *R) {
    free(R->order), free(R->staged), free(R->scratch), free(R->need_ptr), free(R->need_y), free(R->need_w);
    free(R->conn_first), free(R->conn_n), free(R->conn_ops), free(R->local_first), free(R->local_n);
    free(R->local_ops), free(R->err);
    umap_free(&R->conn_of);
}

/* lower(n, C, unit, scratch, node, src_rank, src_buf, src_off, dst_rank, dst_buf, dst_off, cnt, dep_ptr, dep_ids,
         level, name, ll, layout, direct, deps_all, max_tbs, nthreads, min_bytes, max_bytes)
   -> ("ok", text, threadblocks, ops_per_tb, lanes, semaphores, signals, iterations, ordering, unroutable)
    | ("refused", message) | None */
static PyObject *py_lower(PyObject *self, PyObject *args) {
    (void)self;
    long long n, C, unit, min_bytes, max_bytes;
    PyObject *objs[12];
    const char *name;
    int ll, layout, direct, deps_all, max_tbs, nthreads;
    if (!PyArg_ParseTuple(args, "LLLOOOOOOOOOOOOsiiiiiiLL", &n, &C, &unit, &objs[0], &objs[1], &objs[2], &objs[3],
                          &objs[4], &objs[5], &objs[6], &objs[7], &objs[8], &objs[9], &objs[10], &objs[11], &name, &ll,
                          &layout, &direct, &deps_all, &max_tbs, &nthreads, &min_bytes, &max_bytes))
        return NULL;
    Py_buffer bufs[12];
    int got = 0;
    for (; got < 12; got++)
        if (PyObject_GetBuffer(objs[got], &bufs[got], PyBUF_SIMPLE) < 0) break;
    if (got < 12) {
        for (int i = 0; i < got; i++) PyBuffer_Release(&bufs[i]);
        return NULL;
    }
    i64 nops = bufs[2].len / (Py_ssize_t)sizeof(i64);
    int sane = n >= 1 && n <= 4096 && C >= 1 && unit >= 1 && nops >= 1 && nops < (1 << 27) && layout >= 0 &&
               layout <= 2 && bufs[0].len == n * 8 && bufs[1].len == n * 8 && bufs[9].len == (nops + 1) * 8 &&
               bufs[12 - 1].len == nops * 8;
    for (int i = 3; i <= 8 && sane; i++) sane = bufs[i].len == nops * 8;
    pre_t R;
    memset(&R, 0, sizeof(R));
    sch_t S;
    asm_t A;
    memset(&S, 0, sizeof(S));
    memset(&A, 0, sizeof(A));
    int rc = 0, iters = 0;
    sb_t text = {NULL, 0, 0, 0};
    if (sane) {
        R.n = (int)n, R.nops = (int)nops, R.C = C, R.unit = unit;
        R.scratch0 = (const i64 *)bufs[0].buf, R.node = (const i64 *)bufs[1].buf;
        R.src_rank = (const i64 *)bufs[2].buf, R.src_buf = (const i64 *)bufs[3].buf, R.src_off = (const i64 *)bufs[4].buf;
        R.dst_rank = (const i64 *)bufs[5].buf, R.dst_buf = (const i64 *)bufs[6].buf, R.dst_off = (const i64 *)bufs[7].buf;
        R.cnt = (const i64 *)bufs[8].buf, R.dep_ptr = (const i64 *)bufs[9].buf, R.dep_ids = (const i64 *)bufs[10].buf;
        R.level = (const i64 *)bufs[11].buf;
        R.name = name, R.ll = ll, R.layout = layout, R.direct = direct, R.deps_all = deps_all;
        R.max_tbs = max_tbs, R.nthreads = nthreads, R.min_bytes = min_bytes, R.max_bytes = max_bytes;
        for (i64 i = 0; i < nops && sane; i++)
            sane = R.src_rank[i] >= 0 && R.src_rank[i] < n && R.dst_rank[i] >= 0 && R.dst_rank[i] < n &&
                   R.src_buf[i] >= 0 && R.src_buf[i] < 3 && R.dst_buf[i] >= 0 && R.dst_buf[i] < 3 &&
                   R.src_off[i] >= 0 && R.src_off[i] < (1LL << 30) && R.dst_off[i] >= 0 &&
                   R.dst_off[i] < (1LL << 30) && R.cnt[i] >= 1 && R.cnt[i] < (1LL << 30) && R.level[i] >= 0 &&
                   R.level[i] < (1LL << 21) && R.dep_ptr[i] <= R.dep_ptr[i + 1];
        sane = sane && R.dep_ptr[0] == 0 && R.dep_ptr[nops] * 8 == bufs[10].len;
    }
    if (sane) {
        Py_BEGIN_ALLOW_THREADS
        if (stage(&R) && find_needs(&R) && connections(&R)) {
            rc = layout == 2 ? attempts_packed(&R, &S, &A, &iters) : attempts_plain(&R, &S, &A, &iters);
            if (rc) emit_text(&A, &text);
        }
        Py_END_ALLOW_THREADS
    }
    for (int i = 0; i < 12; i++) PyBuffer_Release(&bufs[i]);
    PyObject *res;
    if (rc && !text.oom) {
        res = Py_BuildValue("(ss#iiiiiiii)", "ok", text.s, (Py_ssize_t)text.n, A.max_tbs_rank, A.max_ops, A.lanes,
                            A.sems, A.nsig, iters, R.ordering, R.unroutable0 + S.unroutable);
    } else if (R.err) {
        res = Py_BuildValue("(ss)", "refused", R.err);
    } else {
        Py_INCREF(Py_None);
        res = Py_None;
    }
    free(text.s);
    free_asm(&A);
    free_sch(&S);
    free_pre(&R);
    return res;
}


static PyMethodDef methods[] = {
    {"lower", py_lower, METH_VARARGS, "the exact JSON text of the MSCCL++ lowering of a Program, a refusal, or None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_mscclpp_lower", NULL, -1, methods};

PyMODINIT_FUNC PyInit__mscclpp_lower(void) { return PyModule_Create(&module); }
