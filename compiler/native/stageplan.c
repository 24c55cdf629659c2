/*
 * a2acc._stageplan: compiled core of FAST's stage planning (see a2acc/planners/birkhoff.py and fast.py).
 *
 * stage_plan(counts, N, m, method, balance, unit, b_inter, b_intra, alpha)
 *   counts : bytes-like, N*N int64 chunk counts (row = sender)
 *   method : 0 = bottleneck matching (default), 1 = Kuhn (FAST's method)
 *   balance: 0 = auto, 1 = always, 2 = never
 * returns (server_matrix: bytes of n*n int64, balanced: bytes of n*n uint8, line_sum, padded: bytes,
 *          [(weight, (perm...)), ...])
 * stage_plan_bytes(bytes_matrix, N, m, method, balance, target_chunks, align, b_inter, b_intra, alpha)
 *   quantises like a2acc.passes.quantize (choose_unit + quantize) and returns (unit, <stage_plan result>)
 *
 * It is an exact transcription of the pure-Python reference (same iteration orders, same floating-point
 * expressions), so both give identical plans; tests/planners/test_native.py checks that on random matrices.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef long long i64;

/* ------------------------------------------------------------------ Hopcroft-Karp (warm start) */
typedef struct {
    int n;
    int *adj;     /* n*n, row-major, first deg[i] entries valid */
    int *deg;
    int *match_r, *match_c, *dist;
} hk_t;

static const int HK_INF = 1 << 30;

static int hk_dfs(hk_t *h, int i) {
    for (int t = 0; t < h->deg[i]; t++) {
        int j = h->adj[i * h->n + t];
        int k = h->match_c[j];
        if (k < 0 || (h->dist[k] == h->dist[i] + 1 && hk_dfs(h, k))) {
            h->match_r[i] = j;
            h->match_c[j] = i;
            return 1;
        }
    }
    h->dist[i] = HK_INF;
    return 0;
}

static int hk_run(hk_t *h, int *queue) {
    int n = h->n, size = 0;
    for (int i = 0; i < n; i++) size += h->match_r[i] >= 0;
    for (;;) {
        int qn = 0, head = 0, found = 0;
        for (int i = 0; i < n; i++) {
            if (h->match_r[i] < 0) { h->dist[i] = 0; queue[qn++] = i; }
            else h->dist[i] = HK_INF;
        }
        while (head < qn) {
            int i = queue[head++];
            for (int t = 0; t < h->deg[i]; t++) {
                int j = h->adj[i * n + t];
                int k = h->match_c[j];
                if (k < 0) found = 1;
                else if (h->dist[k] == HK_INF) { h->dist[k] = h->dist[i] + 1; queue[qn++] = k; }
            }
        }
        if (!found) return size;
        for (int i = 0; i < n; i++)
            if (h->match_r[i] < 0 && hk_dfs(h, i)) size++;
    }
}

static int cmp_i64(const void *a, const void *b) {
    i64 x = *(const i64 *)a, y = *(const i64 *)b;
    return (x > y) - (x < y);
}

/* perfect matching maximising the smallest entry; warm = previous perm or NULL; result in out */
static int bottleneck(const i64 *p, int n, const int *warm, int *out, hk_t *h, int *queue, i64 *vals, i64 *prev) {
    int nv = 0;
    for (int x = 0; x < n * n; x++) if (p[x] > 0) vals[nv++] = p[x];
    qsort(vals, nv, sizeof(i64), cmp_i64);
    int u = 0;
    for (int x = 0; x < nv; x++) if (u == 0 || vals[x] != vals[u - 1]) vals[u++] = vals[x];
    int have = 0;
    /* attempt(tau) */
#define ATTEMPT(TAU, OK) do { \
        i64 tau_ = (TAU); \
        for (int i = 0; i < n; i++) { \
            h->deg[i] = 0; \
            for (int j = 0; j < n; j++) if (p[i * n + j] > 0 && p[i * n + j] >= tau_) h->adj[i * n + h->deg[i]++] = j; \
            h->match_r[i] = -1; h->match_c[i] = -1; \
        } \
        for (int i = 0; i < n; i++) { \
            int j = warm ? warm[i] : -1; \
            if (j >= 0 && p[i * n + j] >= tau_ && h->match_c[j] < 0) { h->match_r[i] = j; h->match_c[j] = i; } \
        } \
        (OK) = hk_run(h, queue) == n; \
    } while (0)
    int ok;
    /* upper bound: every row and column keeps an entry >= the bottleneck; never above the previous stage's */
    i64 ub = -1;
    for (int i = 0; i < n; i++) {
        i64 rm = 0, cm = 0;
        for (int j = 0; j < n; j++) {
            if (p[i * n + j] > rm) rm = p[i * n + j];
            if (p[j * n + i] > cm) cm = p[j * n + i];
        }
        if (ub < 0 || rm < ub) ub = rm;
        if (cm < ub) ub = cm;
    }
    if (*prev > 0 && *prev < ub) ub = *prev;
    int hi = -1;
    while (hi + 1 < u && vals[hi + 1] <= ub) hi++;
    if (hi < 0) return -1;
    int fail = hi + 1, step = 1, idx = hi;
    for (;;) {  /* gallop downwards from the bound */
        ATTEMPT(vals[idx], ok);
        if (ok) { memcpy(out, h->match_r, sizeof(int) * n); *prev = vals[idx]; have = 1; break; }
        if (idx == 0) return -1;
        fail = idx;
        idx = idx - step < 0 ? 0 : idx - step;
        step *= 2;
    }
    int lo = idx + 1, top = fail - 1;
    while (lo <= top) {
        int mid = (lo + top) / 2;
        ATTEMPT(vals[mid], ok);
        if (ok) { memcpy(out, h->match_r, sizeof(int) * n); *prev = vals[mid]; lo = mid + 1; }
        else top = mid - 1;
    }
#undef ATTEMPT
    return have ? 0 : -1;
}

static int kuhn_try(const i64 *p, int n, int i, int *seen, int *match_c) {
    for (int j = 0; j < n; j++) {
        if (p[i * n + j] <= 0 || seen[j]) continue;
        seen[j] = 1;
        if (match_c[j] < 0 || kuhn_try(p, n, match_c[j], seen, match_c)) { match_c[j] = i; return 1; }
    }
    return 0;
}

static void kuhn(const i64 *p, int n, int *out, int *seen, int *match_c) {
    for (int j = 0; j < n; j++) match_c[j] = -1;
    for (int i = 0; i < n; i++) {
        memset(seen, 0, sizeof(int) * n);
        kuhn_try(p, n, i, seen, match_c);
    }
    for (int i = 0; i < n; i++) out[i] = -1;
    for (int j = 0; j < n; j++) if (match_c[j] >= 0) out[match_c[j]] = j;
}

/* order[0..n) = indices sorted by (-key, index): a stable insertion sort, as Python's sorted(key=(-x, k)) */
static void order_desc(int *order, const i64 *key, int n) {
    for (int k = 0; k < n; k++) order[k] = k;
    for (int a = 1; a < n; a++) {
        int v = order[a], b = a - 1;
        while (b >= 0 && key[order[b]] < key[v]) { order[b + 1] = order[b]; b--; }
        order[b + 1] = v;
    }
}

/* ------------------------------------------------------------------ padding (same order as Python) */
static i64 pad(i64 *p, int n, int *order_r, int *order_c, i64 *r, i64 *c) {
    i64 big = 0;
    for (int i = 0; i < n; i++) {
        i64 rs = 0, cs = 0;
        for (int j = 0; j < n; j++) { rs += p[i * n + j]; cs += p[j * n + i]; }
        r[i] = rs; c[i] = cs;
        if (rs > big) big = rs;
        if (cs > big) big = cs;
    }
    for (int i = 0; i < n; i++) { r[i] = big - r[i]; c[i] = big - c[i]; }
    for (int i = 0; i < n; i++) {
        i64 x = r[i] < c[i] ? r[i] : c[i];
        if (x) { p[i * n + i] += x; r[i] -= x; c[i] -= x; }
    }
    for (int pass = 0; pass < 2; pass++) {
        /* rows sorted by (-r, index), computed once per pass */
        order_desc(order_r, r, n);
        for (int ii = 0; ii < n; ii++) {
            int i = order_r[ii];
            if (r[i] == 0) continue;
            order_desc(order_c, c, n);
            for (int jj = 0; jj < n; jj++) {
                int j = order_c[jj];
                if (r[i] == 0) break;
                if (c[j] == 0 || (pass == 0 && p[i * n + j] == 0)) continue;
                i64 x = r[i] < c[j] ? r[i] : c[j];
                p[i * n + j] += x; r[i] -= x; c[j] -= x;
            }
        }
    }
    return big;
}

/* ------------------------------------------------------------------ entry point */
static PyObject *plan_counts(const i64 *C, int N, int m, int method, int balance, i64 unit, double b_inter,
                             double b_intra, double alpha, Py_buffer *buf);

static PyObject *stage_plan(PyObject *self, PyObject *args) {
    Py_buffer buf;
    int N, m, method, balance;
    i64 unit;
    double b_inter, b_intra, alpha;
    if (!PyArg_ParseTuple(args, "y*iiiiLddd", &buf, &N, &m, &method, &balance, &unit, &b_inter, &b_intra, &alpha))
        return NULL;
    if (m < 1 || N % m != 0 || buf.len != (Py_ssize_t)N * N * 8) {
        PyBuffer_Release(&buf);
        PyErr_SetString(PyExc_ValueError, "stage_plan: counts must be N*N int64 with N a multiple of m");
        return NULL;
    }
    return plan_counts((const i64 *)buf.buf, N, m, method, balance, unit, b_inter, b_intra, alpha, &buf);
}

/* bytes in: unit = ceil(max line sum / target) rounded up to align (a2acc.passes.quantize.choose_unit),
   counts = ceil(bytes / unit); returns (unit, <stage_plan result>) */
static PyObject *stage_plan_bytes(PyObject *self, PyObject *args) {
    Py_buffer buf;
    int N, m, method, balance;
    i64 target, align;
    double b_inter, b_intra, alpha;
    if (!PyArg_ParseTuple(args, "y*iiiiLLddd", &buf, &N, &m, &method, &balance, &target, &align, &b_inter, &b_intra,
                          &alpha))
        return NULL;
    if (m < 1 || N % m != 0 || buf.len != (Py_ssize_t)N * N * 8 || target < 1 || align < 1) {
        PyBuffer_Release(&buf);
        PyErr_SetString(PyExc_ValueError, "stage_plan_bytes: bad arguments");
        return NULL;
    }
    const i64 *B = (const i64 *)buf.buf;
    i64 peak = 0;
    for (int i = 0; i < N; i++) {
        i64 rs = 0, cs = 0;
        for (int j = 0; j < N; j++) { rs += B[(size_t)i * N + j]; cs += B[(size_t)j * N + i]; }
        if (rs > peak) peak = rs;
        if (cs > peak) peak = cs;
    }
    i64 unit = align;
    if (peak > 0) {
        unit = (peak + target - 1) / target;
        unit = (unit + align - 1) / align * align;
    }
    i64 *C = malloc(sizeof(i64) * (size_t)N * N);
    for (size_t x = 0; x < (size_t)N * N; x++) C[x] = (B[x] + unit - 1) / unit;
    PyBuffer_Release(&buf);
    PyObject *res = plan_counts(C, N, m, method, balance, unit, b_inter, b_intra, alpha, NULL);
    free(C);
    if (!res) return NULL;
    return Py_BuildValue("(LN)", unit, res);
}

static PyObject *plan_counts(const i64 *C, int N, int m, int method, int balance, i64 unit, double b_inter,
                             double b_intra, double alpha, Py_buffer *buf) {
    int n = N / m;
    i64 *S = calloc((size_t)n * n, sizeof(i64));
    unsigned char *bal = calloc((size_t)n * n, 1);
    i64 *load = malloc(sizeof(i64) * m), *share = malloc(sizeof(i64) * m);
    int *order = malloc(sizeof(int) * m);
    for (int A = 0; A < n; A++) for (int B = 0; B < n; B++) {
        if (A == B) continue;
        i64 total = 0, maxload = 0;
        for (int i = 0; i < m; i++) {
            i64 s = 0;
            const i64 *row = C + (size_t)(A * m + i) * N + B * m;
            for (int j = 0; j < m; j++) s += row[j];
            load[i] = s; total += s;
            if (s > maxload) maxload = s;
        }
        if (total == 0) continue;
        i64 base = total / m, extra = total % m;
        order_desc(order, load, m);
        for (int k = 0; k < m; k++) share[k] = base;
        for (int k = 0; k < extra; k++) share[order[k]] += 1;
        i64 maxshare = 0, moved_max = 0;
        for (int k = 0; k < m; k++) {
            if (share[k] > maxshare) maxshare = share[k];
            i64 d = load[k] > share[k] ? load[k] - share[k] : share[k] - load[k];
            if (d > moved_max) moved_max = d;
        }
        i64 excess = maxload - maxshare;
        int do_bal = 0;
        if (balance == 1) do_bal = 1;
        else if (balance == 0 && excess > 0 && b_inter > 0) {
            double saved = (double)(excess * unit) / (b_inter * 1e9);
            double cost = b_intra > 0 ? alpha + (double)(moved_max * unit) / (b_intra * 1e9) : 1.0 / 0.0;
            do_bal = saved > cost;
        }
        if (do_bal && excess > 0) { bal[A * n + B] = 1; S[A * n + B] = maxshare; }
        else S[A * n + B] = maxload;
    }
    if (buf) PyBuffer_Release(buf);
    free(load); free(share); free(order);

    i64 *P = malloc(sizeof(i64) * n * n);
    memcpy(P, S, sizeof(i64) * n * n);
    int *orr = malloc(sizeof(int) * n), *orc = malloc(sizeof(int) * n);
    i64 *rr = malloc(sizeof(i64) * n), *cc = malloc(sizeof(i64) * n);
    i64 big = n > 1 ? pad(P, n, orr, orc, rr, cc) : 0;
    PyObject *padded = PyBytes_FromStringAndSize((const char *)P, sizeof(i64) * n * n);
    PyObject *stages = PyList_New(0);
    hk_t h = {n, malloc(sizeof(int) * n * n), malloc(sizeof(int) * n), malloc(sizeof(int) * n),
              malloc(sizeof(int) * n), malloc(sizeof(int) * n)};
    int *queue = malloc(sizeof(int) * (n + 1) * (n + 1));
    i64 *vals = malloc(sizeof(i64) * n * n);
    int *perm = malloc(sizeof(int) * n), *warm = malloc(sizeof(int) * n);
    int have_warm = 0, err = 0;
    i64 prev = 0;
    i64 remaining = n > 1 ? big : 0;
    while (remaining > 0) {
        if (method == 1) kuhn(P, n, perm, h.dist, h.match_c);
        else if (bottleneck(P, n, have_warm ? warm : NULL, perm, &h, queue, vals, &prev) != 0) { err = 1; break; }
        i64 w = -1;
        for (int i = 0; i < n; i++) {
            if (perm[i] < 0) { err = 1; break; }
            i64 x = P[i * n + perm[i]];
            if (w < 0 || x < w) w = x;
        }
        if (err || w <= 0) { err = 1; break; }
        PyObject *pt = PyTuple_New(n);
        for (int i = 0; i < n; i++) { P[i * n + perm[i]] -= w; PyTuple_SET_ITEM(pt, i, PyLong_FromLong(perm[i])); }
        remaining -= w;
        PyObject *st = Py_BuildValue("(LN)", w, pt);
        PyList_Append(stages, st);
        Py_DECREF(st);
        memcpy(warm, perm, sizeof(int) * n);
        have_warm = 1;
    }
    PyObject *res = NULL;
    if (err) PyErr_SetString(PyExc_RuntimeError, "stage_plan: no perfect matching on a padded matrix");
    else res = Py_BuildValue("(y#y#LNN)", (const char *)S, (Py_ssize_t)(sizeof(i64) * n * n), (const char *)bal,
                             (Py_ssize_t)(n * n), big, padded, stages);
    if (!res) { Py_XDECREF(padded); Py_XDECREF(stages); }
    free(S); free(bal); free(P); free(orr); free(orc); free(rr); free(cc);
    free(h.adj); free(h.deg); free(h.match_r); free(h.match_c); free(h.dist); free(queue); free(vals);
    free(perm); free(warm);
    return res;
}

/* ------------------------------------------------------------------ FAST Program emission
 * Two entry points that emit the ops of a2acc/planners/fast.py exactly as its pure-Python reference does
 * (same op order, scratch offsets and dependency lists); tests/planners/test_fast_native.py compares the two.
 * An op list is returned as (rows, ndeps, dep_ids): bytes of K*8 int64 (src_rank, src_buf, src_off, dst_rank,
 * dst_buf, dst_off, cnt, stage), K int64 dependency counts and the concatenated, per-op sorted unique ids.
 *
 * fast_prepare(counts, in_off, out_off, N, m, balanced, base)
 *   intra-server ops, then the balancing ops of every (A, B) tile; base = id of the first op.
 *   returns (ops, scratch, moved_chunks, pieces, queue_ptr, biggest, own, whole)
 *   scratch: N int64 (chunks used per rank); pieces: P*8 int64 rows (src, dst, off, cnt, rank, buf, at, dep) of
 *   every GPU's bundle in send order, queue q = (A*n + B)*m + i owning pieces[queue_ptr[q]:queue_ptr[q+1]];
 *   biggest: n*n int64, the largest bundle of each server pair (equals the stage plan's server matrix);
 *   own/whole: n*n*m int64 per queue, chunks of the GPU's own input and all chunks.
 * fast_steps(pieces, queue_ptr, out_off, N, m, perms, caps, group_ptr, groups, scratch, ends, split,
 *            head_rows, head_ndeps, head_ids)
 *   the network steps (perms/caps: S*n int64 each; GPU r's NIC group is groups[group_ptr[r]:group_ptr[r+1]];
 *   ends: S int64, a group's last step; split: forwarded pieces of a queue's share first, aligned ones after),
 *   after the head: fast_prepare's ops (with base 0), as it returned them, copied first (the steps' ids follow
 *   theirs), so the result is the whole shape in one block (its columns read in place, no concatenation).
 *   returns ((columns, ids, dep_ptr), scratch, real_steps, leftover_pieces): the ops' fields field-major (8
 *   columns of K ops), their dependency ids and offsets (K + 1 int64)
 */
typedef struct { i64 src, dst, off, cnt, rank, buf, at, dep; } piece_t;
typedef struct { i64 *v; size_t n, cap; } vec_t;
typedef struct { piece_t *v; size_t n, cap; } pvec_t;

static int vec_reserve(vec_t *a, size_t extra) {
    if (a->n + extra <= a->cap) return 0;
    size_t cap = a->cap ? a->cap : 64;
    while (cap < a->n + extra) cap *= 2;
    i64 *v = realloc(a->v, cap * sizeof(i64));
    if (!v) return -1;
    a->v = v;
    a->cap = cap;
    return 0;
}

static int vec_push(vec_t *a, i64 x) {
    if (vec_reserve(a, 1)) return -1;
    a->v[a->n++] = x;
    return 0;
}

static inline int pvec_push(pvec_t *a, piece_t p) {
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 16;
        piece_t *v = realloc(a->v, cap * sizeof(piece_t));
        if (!v) return -1;
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = p;
    return 0;
}

/* the emitted ops: 8 fields per op, per-op dependency counts, concatenated (sorted, unique) dependency ids */
typedef struct { vec_t ops, ndeps, deps; i64 next; } emit_t;

/* an op whose nd dependency ids are already written after e->deps' end (room reserved) */
static inline int emit_row(emit_t *e, i64 sr, i64 sb, i64 so, i64 dr, i64 db, i64 dof, i64 cnt, i64 stage,
                           size_t nd) {
    if (vec_reserve(&e->ops, 8) || vec_push(&e->ndeps, (i64)nd)) return -1;
    i64 *o = e->ops.v + e->ops.n;
    o[0] = sr; o[1] = sb; o[2] = so; o[3] = dr; o[4] = db; o[5] = dof; o[6] = cnt; o[7] = stage;
    e->ops.n += 8;
    e->deps.n += nd;
    e->next++;
    return 0;
}

static inline int emit_op(emit_t *e, i64 sr, i64 sb, i64 so, i64 dr, i64 db, i64 dof, i64 cnt, i64 stage,
                   const i64 *deps, size_t nd) {
    if (vec_reserve(&e->deps, nd)) return -1;
    for (size_t k = 0; k < nd; k++) e->deps.v[e->deps.n + k] = deps[k];
    return emit_row(e, sr, sb, so, dr, db, dof, cnt, stage, nd);
}

/* a buffer for "y#" (a NULL pointer would give None instead of empty bytes) */
static const char *nz(const void *p) { return p ? (const char *)p : ""; }

static PyObject *emit_result(emit_t *e) {
    return Py_BuildValue("(y#y#y#)", nz(e->ops.v), (Py_ssize_t)(e->ops.n * sizeof(i64)), nz(e->ndeps.v),
                         (Py_ssize_t)(e->ndeps.n * sizeof(i64)), nz(e->deps.v), (Py_ssize_t)(e->deps.n * sizeof(i64)));
}

static void emit_free(emit_t *e) { free(e->ops.v); free(e->ndeps.v); free(e->deps.v); }

/* the ops field-major: 8 columns of K (src_rank ... stage), what the Program's table and a search's pricing
 * read, so neither transposes nor gathers them; the dependency ids and their K + 1 offsets */
static PyObject *emit_result_columns(emit_t *e) {
    size_t k = e->ops.n / 8;
    PyObject *cols = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(e->ops.n * sizeof(i64)));
    if (!cols) return NULL;
    i64 *c = (i64 *)PyBytes_AS_STRING(cols);
    for (size_t i = 0; i < k; i++) {
        const i64 *r = e->ops.v + 8 * i;
        c[i] = r[0]; c[k + i] = r[1]; c[2 * k + i] = r[2]; c[3 * k + i] = r[3];
        c[4 * k + i] = r[4]; c[5 * k + i] = r[5]; c[6 * k + i] = r[6]; c[7 * k + i] = r[7];
    }
    PyObject *ptr = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)((k + 1) * sizeof(i64)));
    if (!ptr) {
        Py_DECREF(cols);
        return NULL;
    }
    i64 *p = (i64 *)PyBytes_AS_STRING(ptr);
    p[0] = 0;
    for (size_t i = 0; i < k; i++) p[i + 1] = p[i] + e->ndeps.v[i];
    return Py_BuildValue("(Ny#N)", cols, nz(e->deps.v), (Py_ssize_t)(e->deps.n * sizeof(i64)), ptr);
}

/* bundle order (fast._order_bundle): own input first, data for other GPUs first, then dst, src, off */
static inline int bundle_before(const piece_t *p, const piece_t *q, i64 aligned) {
    int a = p->dep >= 0, b = q->dep >= 0;
    if (a != b) return a < b;
    a = p->dst == aligned; b = q->dst == aligned;
    if (a != b) return a < b;
    if (p->dst != q->dst) return p->dst < q->dst;
    if (p->src != q->src) return p->src < q->src;
    return p->off < q->off;
}

/* stable insertion sort (Python's sorted() is stable; bundles are short) */
static void sort_bundle(piece_t *v, size_t k, i64 aligned) {
    for (size_t x = 1; x < k; x++) {
        piece_t p = v[x];
        size_t y = x;
        while (y > 0 && bundle_before(&p, &v[y - 1], aligned)) { v[y] = v[y - 1]; y--; }
        v[y] = p;
    }
}

static void row_remove(pvec_t *row, size_t k) {
    memmove(row->v + k, row->v + k + 1, (row->n - k - 1) * sizeof(piece_t));
    row->n--;
}

/* fast._balance_tile's take(): up to want chunks from row i (pieces to pred first, or, with pred < 0, data
   for other GPUs first and then the aligned GPU's); the pieces of a surplus row have distinct destinations */
static int take(pvec_t *row, i64 aligned, i64 pred, i64 want, pvec_t *out, i64 *cand) {
    size_t nc = 0;
    out->n = 0;
    for (size_t k = 0; k < row->n; k++)
        if ((pred < 0 && row->v[k].dst != aligned) || row->v[k].dst == pred) cand[nc++] = row->v[k].dst;
    if (pred < 0)
        for (size_t k = 0; k < row->n; k++)
            if (row->v[k].dst == aligned) cand[nc++] = row->v[k].dst;
    for (size_t c = 0; c < nc; c++) {
        if (want == 0) break;
        size_t k = 0;
        while (k < row->n && row->v[k].dst != cand[c]) k++;
        if (k == row->n) return -2;
        piece_t p = row->v[k];
        if (p.cnt > want) {
            piece_t head = p;
            head.cnt = want;
            row->v[k].off += want;
            row->v[k].at += want;
            row->v[k].cnt -= want;
            p = head;
        } else {
            row_remove(row, k);
        }
        if (pvec_push(out, p)) return -1;
        want -= p.cnt;
    }
    return 0;
}

static PyObject *fast_prepare(PyObject *self, PyObject *args) {
    Py_buffer bc, bi, bo, bb;
    int N, m;
    long long base;
    if (!PyArg_ParseTuple(args, "y*y*y*iiy*L", &bc, &bi, &bo, &N, &m, &bb, &base)) return NULL;
    PyObject *res = NULL;
    int n = m >= 1 ? N / m : 0;
    if (m < 1 || N % m != 0 || bc.len != (Py_ssize_t)N * N * 8 || bi.len != bc.len || bo.len != bc.len ||
        bb.len != (Py_ssize_t)n * n) {
        PyErr_SetString(PyExc_ValueError, "fast_prepare: bad arguments");
        PyBuffer_Release(&bc); PyBuffer_Release(&bi); PyBuffer_Release(&bo); PyBuffer_Release(&bb);
        return NULL;
    }
    const i64 *C = bc.buf, *IN = bi.buf, *OUT = bo.buf;
    const unsigned char *BAL = bb.buf;
    emit_t e = {{0}, {0}, {0}, base};
    i64 *scratch = calloc((size_t)N, sizeof(i64));
    i64 *big = calloc((size_t)n * n + 1, sizeof(i64));
    i64 *own = calloc((size_t)n * n * m + 1, sizeof(i64)), *whole = calloc((size_t)n * n * m + 1, sizeof(i64));
    pvec_t *rows = calloc((size_t)m, sizeof(pvec_t));
    pvec_t got = {0}, all = {0};
    vec_t qptr = {0};
    i64 *load = malloc(sizeof(i64) * m), *share = malloc(sizeof(i64) * m), *cand = malloc(sizeof(i64) * (2 * m));
    int *order = malloc(sizeof(int) * m);
    i64 moved = 0;
    int err = !scratch || !big || !own || !whole || !rows || !load || !share || !cand || !order;
    /* intra-server part and self copies: no dependencies, stage 0 */
    for (int a = 0; a < n && !err; a++)
        for (int i = 0; i < m && !err; i++)
            for (int j = 0; j < m && !err; j++) {
                size_t s = (size_t)a * m + i, d = (size_t)a * m + j;
                i64 c = C[s * N + d];
                if (c) err = emit_op(&e, (i64)s, 0, IN[s * N + d], (i64)d, 1, OUT[d * N + s], c, 0, NULL, 0) != 0;
            }
    err = err || vec_push(&qptr, 0) != 0;
    for (int a = 0; a < n && !err; a++)
        for (int b = 0; b < n && !err; b++) {
            i64 total = 0;
            for (int i = 0; i < m && !err; i++) {
                size_t s = (size_t)a * m + i;
                rows[i].n = 0;
                load[i] = 0;
                for (int j = 0; j < m && !err && a != b; j++) {
                    size_t d = (size_t)b * m + j;
                    i64 c = C[s * N + d];
                    if (c) {
                        piece_t p = {(i64)s, (i64)d, 0, c, (i64)s, 0, IN[s * N + d], -1};
                        err = pvec_push(&rows[i], p) != 0;
                        load[i] += c;
                    }
                }
                total += load[i];
            }
            if (!err && total > 0 && BAL[(size_t)a * n + b]) {
                /* tile_shares: equal shares, the remainders to the most loaded GPUs (order by -load, index) */
                i64 q = total / m, extra = total % m;
                for (int k = 0; k < m; k++) { order[k] = k; share[k] = q; }
                for (int x = 1; x < m; x++) {
                    int v = order[x], y = x - 1;
                    while (y >= 0 && load[order[y]] < load[v]) { order[y + 1] = order[y]; y--; }
                    order[y + 1] = v;
                }
                for (i64 k = 0; k < extra; k++) share[order[k]] += 1;
                /* _balance_tile: deficit GPUs j (load < share) in index order, each filled from the surplus GPUs
                   i (load > share) in index order; pass 0 takes data destined to GPU j of B, pass 1 any data.
                   load[] tracks the moves, so a filled deficit or drained surplus drops out (need 0 in Python) */
                for (int pass = 0; pass < 2 && !err; pass++)
                    for (int j = 0; j < m && !err; j++) {
                        if (load[j] >= share[j]) continue;
                        for (int i = 0; i < m && !err; i++) {
                            if (load[i] <= share[i]) continue;
                            i64 dj = share[j] - load[j], si = load[i] - share[i];
                            i64 need = dj < si ? dj : si;
                            if (need <= 0) continue;
                            i64 pred = pass == 0 ? (i64)b * m + j : -1;
                            if (take(&rows[i], (i64)b * m + i, pred, need, &got, cand)) { err = 1; break; }
                            for (size_t g = 0; g < got.n && !err; g++) {
                                piece_t p = got.v[g];
                                i64 dst_rank = (i64)a * m + j, off = scratch[dst_rank], oid = e.next;
                                scratch[dst_rank] += p.cnt;
                                err = emit_op(&e, p.rank, p.buf, p.at, dst_rank, 2, off, p.cnt, 0, &p.dep,
                                              p.dep >= 0 ? 1 : 0) != 0;
                                piece_t moved_piece = {p.src, p.dst, p.off, p.cnt, dst_rank, 2, off, oid};
                                err = err || pvec_push(&rows[j], moved_piece) != 0;
                                load[j] += p.cnt;
                                load[i] -= p.cnt;
                                moved += p.cnt;
                            }
                        }
                    }
            }
            for (int i = 0; i < m && !err; i++) {
                i64 sum = 0;
                for (size_t k = 0; k < rows[i].n; k++) sum += rows[i].v[k].cnt;
                if (sum > big[(size_t)a * n + b]) big[(size_t)a * n + b] = sum;
                sort_bundle(rows[i].v, rows[i].n, (i64)b * m + i);
                size_t q = ((size_t)a * n + b) * m + i;
                for (size_t k = 0; k < rows[i].n && !err; k++) {
                    whole[q] += rows[i].v[k].cnt;
                    if (rows[i].v[k].dep < 0) own[q] += rows[i].v[k].cnt;
                    err = pvec_push(&all, rows[i].v[k]) != 0;
                }
                err = err || vec_push(&qptr, (i64)all.n) != 0;
            }
        }
    if (err) {
        PyErr_SetString(PyExc_MemoryError, "fast_prepare: out of memory or inconsistent tile");
    } else {
        PyObject *ops = emit_result(&e);
        if (ops)
            res = Py_BuildValue("(Ny#Ly#y#y#y#y#)", ops, (const char *)scratch, (Py_ssize_t)(N * sizeof(i64)), moved,
                                nz(all.v), (Py_ssize_t)(all.n * sizeof(piece_t)), nz(qptr.v),
                                (Py_ssize_t)(qptr.n * sizeof(i64)), nz(big), (Py_ssize_t)((size_t)n * n * sizeof(i64)),
                                nz(own), (Py_ssize_t)((size_t)n * n * m * sizeof(i64)), nz(whole),
                                (Py_ssize_t)((size_t)n * n * m * sizeof(i64)));
    }
    emit_free(&e);
    for (int i = 0; rows && i < m; i++) free(rows[i].v);
    free(rows); free(got.v); free(all.v); free(qptr.v); free(scratch); free(big); free(own); free(whole); free(load); free(share);
    free(cand); free(order);
    PyBuffer_Release(&bc); PyBuffer_Release(&bi); PyBuffer_Release(&bo); PyBuffer_Release(&bb);
    return res;
}

/* acc = acc | v for strictly increasing lists (every op-id list here is: ops are appended in id order); tmp is
   scratch space, swapped with acc */
static int merge_into(vec_t *acc, vec_t *tmp, const i64 *v, size_t k) {
    if (k == 0) return 0;
    if (vec_reserve(tmp, acc->n + k)) return -1;
    size_t x = 0, y = 0, w = 0;
    const i64 *a = acc->v;
    while (x < acc->n && y < k) {
        if (a[x] < v[y]) tmp->v[w++] = a[x++];
        else if (v[y] < a[x]) tmp->v[w++] = v[y++];
        else { tmp->v[w++] = a[x++]; y++; }
    }
    while (x < acc->n) tmp->v[w++] = a[x++];
    while (y < k) tmp->v[w++] = v[y++];
    tmp->n = w;
    vec_t t = *acc; *acc = *tmp; *tmp = t;
    return 0;
}

/* one piece of a queue as a transfer (and, when it lands on the wrong GPU, a forward over the scale-up fabric);
 * its dependencies: wait, the piece's balancing op and, for split queues' aligned pieces, the queue's transfers
 * that need a forward (extra, ascending and above every other id). Returns the transfer's id in *oid. */
static int emit_piece(emit_t *e, piece_t p, i64 d_rank, i64 stage_no, const vec_t *wait, const vec_t *extra,
                      const i64 *OUT, i64 N, i64 *scratch, i64 *oid) {
    /* the transfer's dependency list merged straight into the output (one copy per edge, not two) */
    if (vec_reserve(&e->deps, wait->n + 1 + (extra ? extra->n : 0))) return -1;
    i64 *d = e->deps.v + e->deps.n;
    size_t nd = 0, x = 0;
    if (p.dep >= 0) {
        while (x < wait->n && wait->v[x] < p.dep) d[nd++] = wait->v[x++];
        if (x == wait->n || wait->v[x] != p.dep) d[nd++] = p.dep;
    }
    memcpy(d + nd, wait->v + x, sizeof(i64) * (wait->n - x));
    nd += wait->n - x;
    if (extra) {
        memcpy(d + nd, extra->v, sizeof(i64) * extra->n);
        nd += extra->n;
    }
    i64 out_at = OUT[(size_t)p.dst * N + (size_t)p.src] + p.off;
    *oid = e->next;
    int aligned = p.dst == d_rank;
    i64 land = aligned ? out_at : scratch[d_rank];
    if (emit_row(e, p.rank, p.buf, p.at, d_rank, aligned ? 1 : 2, land, p.cnt, stage_no, nd)) return -1;
    if (aligned) return 0;
    scratch[d_rank] += p.cnt;
    return emit_op(e, d_rank, 2, land, p.dst, 1, out_at, p.cnt, stage_no, oid, 1);
}

static PyObject *fast_steps(PyObject *self, PyObject *args) {
    Py_buffer bp, bq, bo, bperm, bcap, bgp, bg, bs, bend, bhr, bhn, bhi;
    int N, m, split;
    /* ends[st] != 0: step st closes a group; steps of one group run concurrently (they wait only for the sends
     * and receives of the groups before), so a group is one network step of several permutations. split != 0:
     * each queue's share of a step sends the pieces needing a forward first and its aligned pieces after them */
    if (!PyArg_ParseTuple(args, "y*y*y*iiy*y*y*y*y*y*py*y*y*", &bp, &bq, &bo, &N, &m, &bperm, &bcap, &bgp, &bg, &bs,
                          &bend, &split, &bhr, &bhn, &bhi))
        return NULL;
    PyObject *res = NULL;
    int n = m >= 1 ? N / m : 0;
    size_t Q = (size_t)n * n * m, S = n ? (size_t)bperm.len / (8 * (size_t)n) : 0;
    const i64 *qp = bq.buf, *OUT = bo.buf, *perms = bperm.buf, *caps = bcap.buf, *gp = bgp.buf, *grp = bg.buf;
    int ok = m >= 1 && N % m == 0 && bp.len % sizeof(piece_t) == 0 && bq.len == (Py_ssize_t)((Q + 1) * 8) &&
             bo.len == (Py_ssize_t)N * N * 8 && bcap.len == bperm.len && (n == 0 || bperm.len % (8 * n) == 0) &&
             bgp.len == (Py_ssize_t)(N + 1) * 8 && bs.len == (Py_ssize_t)N * 8;
    if (ok) ok = qp[Q] * (Py_ssize_t)sizeof(piece_t) == bp.len && gp[N] * 8 == bg.len && bend.len == (Py_ssize_t)S * 8;
    /* the head: its dependency counts summing to its ids; the steps' ops are numbered after it */
    const i64 *hn = bhn.buf;
    Py_ssize_t hops = bhn.len / 8, hids = 0;
    ok = ok && bhr.len == hops * 64 && bhn.len % 8 == 0 && bhi.len % 8 == 0;
    for (Py_ssize_t x = 0; ok && x < hops; x++) {
        ok = hn[x] >= 0;
        hids += hn[x];
    }
    ok = ok && hids * 8 == bhi.len;
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "fast_steps: bad arguments");
        PyBuffer_Release(&bp); PyBuffer_Release(&bq); PyBuffer_Release(&bo); PyBuffer_Release(&bperm);
        PyBuffer_Release(&bcap); PyBuffer_Release(&bgp); PyBuffer_Release(&bg); PyBuffer_Release(&bs);
        PyBuffer_Release(&bend); PyBuffer_Release(&bhr); PyBuffer_Release(&bhn); PyBuffer_Release(&bhi);
        return NULL;
    }
    const i64 *ends = bend.buf;
    emit_t e = {{0}, {0}, {0}, (i64)hops};
    size_t npieces = (size_t)(bp.len / sizeof(piece_t));
    piece_t *pc = malloc(sizeof(piece_t) * (npieces + 1));
    i64 *head = malloc(sizeof(i64) * (Q + 1));
    i64 *scratch = malloc(sizeof(i64) * ((size_t)N + 1));
    vec_t *last_send = calloc((size_t)N, sizeof(vec_t)), *last_recv = calloc((size_t)N, sizeof(vec_t));
    vec_t *sent = calloc((size_t)N, sizeof(vec_t)), *recvd = calloc((size_t)N, sizeof(vec_t));
    vec_t wait = {0}, tmp = {0}, fwd = {0};
    pvec_t took = {0};
    i64 real = 0, left = 0;
    int err = !pc || !head || !scratch || !last_send || !last_recv || !sent || !recvd;
    /* room for the usual output (a transfer and a forward per piece, a few dependencies each): no regrowth */
    err = err || vec_reserve(&e.ops, 16 * npieces + 8 * (size_t)hops + 64) ||
          vec_reserve(&e.ndeps, 2 * npieces + (size_t)hops + 8) || vec_reserve(&e.deps, 16 * npieces + (size_t)hids + 64);
    if (!err) {
        memcpy(e.ops.v, bhr.buf, (size_t)bhr.len);
        e.ops.n = 8 * (size_t)hops;
        memcpy(e.ndeps.v, bhn.buf, (size_t)bhn.len);
        e.ndeps.n = (size_t)hops;
        memcpy(e.deps.v, bhi.buf, (size_t)bhi.len);
        e.deps.n = (size_t)hids;
        memcpy(pc, bp.buf, (size_t)bp.len);
        for (size_t q = 0; q < Q; q++) head[q] = qp[q];
        memcpy(scratch, bs.buf, (size_t)N * sizeof(i64));
    }
    i64 stage_no = 1;
    int any = 0;
    for (size_t st = 0; st < S && !err; st++) {
        if (st == 0 || ends[st - 1]) { /* a group starts: it waits for what the groups before sent and received */
            any = 0;
            for (int r = 0; r < N; r++) { sent[r].n = 0; recvd[r].n = 0; }
        }
        for (int a = 0; a < n && !err; a++) {
            i64 bb = perms[st * n + a];
            if (bb == a) continue;
            if (bb < 0 || bb >= n) { err = 2; break; }
            for (int i = 0; i < m && !err; i++) {
                size_t q = ((size_t)a * n + (size_t)bb) * m + i;
                i64 cap = caps[st * n + a];
                i64 s_rank = (i64)a * m + i, d_rank = bb * m + i;
                if (cap <= 0 || head[q] >= qp[q + 1]) continue;
                /* what every transfer of this queue waits for: the NIC group's previous sends and receives */
                wait.n = 0;
                for (i64 g = gp[s_rank]; g < gp[s_rank + 1] && !err; g++)
                    err = merge_into(&wait, &tmp, last_send[grp[g]].v, last_send[grp[g]].n) != 0;
                for (i64 g = gp[d_rank]; g < gp[d_rank + 1] && !err; g++)
                    err = merge_into(&wait, &tmp, last_recv[grp[g]].v, last_recv[grp[g]].n) != 0;
                if (err) break;
                took.n = 0;
                while (cap > 0 && head[q] < qp[q + 1] && !err) {
                    piece_t p = pc[head[q]];
                    if (p.cnt > cap) {
                        pc[head[q]].off += cap;
                        pc[head[q]].at += cap;
                        pc[head[q]].cnt -= cap;
                        p.cnt = cap;
                    } else {
                        head[q]++;
                    }
                    cap -= p.cnt;
                    err = pvec_push(&took, p) != 0;
                }
                /* without split one pass in send order; with it, forwarded pieces first, then the aligned ones
                 * after every forwarded transfer of the queue */
                fwd.n = 0;
                for (int pass = 0; pass < (split ? 2 : 1) && !err; pass++) {
                    for (size_t k = 0; k < took.n && !err; k++) {
                        piece_t p = took.v[k];
                        int aligned = p.dst == d_rank;
                        if (split && aligned != pass) continue;
                        i64 oid;
                        err = emit_piece(&e, p, d_rank, stage_no, &wait, split && pass ? &fwd : NULL, OUT, N,
                                         scratch, &oid) != 0;
                        if (split && !aligned) err = err || vec_push(&fwd, oid) != 0;
                        err = err || vec_push(&sent[s_rank], oid) != 0 || vec_push(&recvd[d_rank], oid) != 0;
                        any = 1;
                    }
                }
            }
        }
        if (err) break;
        if (!ends[st]) continue;
        real += any;
        stage_no++;
        for (int r = 0; r < N && !err; r++) {
            if (sent[r].n) {
                vec_t t = last_send[r]; last_send[r] = sent[r]; sent[r] = t;
            }
            if (recvd[r].n) {
                vec_t t = last_recv[r]; last_recv[r] = recvd[r]; recvd[r] = t;
            }
        }
    }
    for (size_t q = 0; q < Q && !err; q++) left += qp[q + 1] - head[q];
    if (err) {
        PyErr_SetString(err == 2 ? PyExc_ValueError : PyExc_MemoryError,
                        err == 2 ? "fast_steps: permutation entry out of range" : "fast_steps: out of memory");
    } else {
        PyObject *ops = emit_result_columns(&e);
        if (ops)
            res = Py_BuildValue("(Ny#LL)", ops, (const char *)scratch, (Py_ssize_t)(N * sizeof(i64)), real, left);
    }
    emit_free(&e);
    for (int r = 0; r < N; r++) {
        if (last_send) free(last_send[r].v);
        if (last_recv) free(last_recv[r].v);
        if (sent) free(sent[r].v);
        if (recvd) free(recvd[r].v);
    }
    free(last_send); free(last_recv); free(sent); free(recvd); free(wait.v); free(tmp.v);
    free(fwd.v); free(took.v);
    free(pc); free(head); free(scratch);
    PyBuffer_Release(&bp); PyBuffer_Release(&bq); PyBuffer_Release(&bo); PyBuffer_Release(&bperm);
    PyBuffer_Release(&bcap); PyBuffer_Release(&bgp); PyBuffer_Release(&bg); PyBuffer_Release(&bs);
    PyBuffer_Release(&bend); PyBuffer_Release(&bhr); PyBuffer_Release(&bhn); PyBuffer_Release(&bhi);
    return res;
}

static PyMethodDef methods[] = {
    {"stage_plan", stage_plan, METH_VARARGS, "FAST stage plan: server matrix, balancing flags, Birkhoff stages."},
    {"stage_plan_bytes", stage_plan_bytes, METH_VARARGS, "stage_plan from a byte matrix (quantised inside)."},
    {"fast_prepare", fast_prepare, METH_VARARGS, "FAST ops: intra-server part, balancing; the bundles to send."},
    {"fast_steps", fast_steps, METH_VARARGS, "FAST ops: network steps and pipelined redistribution."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_stageplan", "Compiled FAST stage planning core.", -1, methods};

PyMODINIT_FUNC PyInit__stageplan(void) { return PyModule_Create(&module); }
