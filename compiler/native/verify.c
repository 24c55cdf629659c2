/*
 * a2acc._verify: compiled core of the Program verifier (the reference is a2acc/ir/verify.py).
 *
 * verify(nranks, nops, counts, scratch, src_rank, src_buf, src_off, dst_rank, dst_buf, dst_off, cnt,
 *        dep_ptr, dep_ids, max_errors, out_content, out_writer)
 *   counts          : N*N int64 chunk counts (row = sender); scratch: N int64 scratch sizes
 *   op columns      : int64 arrays of one length (a2acc.ir.program.OpTable), dependencies in CSR form
 *   out_content     : writable int32 buffer, one entry per output chunk (rank-major): the symbolic content
 *   out_writer      : writable int32 buffer of the same length: the op that last wrote each output chunk
 * returns None when the Program breaks a structural or order rule (the caller then runs the reference, which
 * words those reports), else (errors, chunks_moved, depth, races, postcondition_failed) with errors a list of
 * (kind, x, y, rank, buf, a, b): kind 0 uninitialised read by op x of chunks [a, b); 1 op x reads what op y
 * wrote, unordered; 2 ops x and y both write, unordered; 3 op x overwrites what op y reads, unordered.
 *
 * levels(dep_ptr, dep_ids) -> bytes of n int64: longest dependency path to each op (ops in id order).
 * op_lines(...), op_tuples(Op, ...): the plan JSON's op rows and the Op views, straight from the columns
 *   (a2acc.ir.serial and a2acc.ir.program.OpTable.to_ops; their Python code is the reference).
 *
 * Symbolic execution is the reference's, step for step and in the same order (so the reports are identical):
 * ops run in id order; per scratch/output chunk we keep its content (the global id of the input chunk it
 * holds), its last writer, its last reader and the earlier readers since the last write (a pooled list).
 *
 * Happens-before ("is op a ordered before op b"), asked only for a < b while b is the op being executed,
 * is answered exactly by these tests in turn, each sound:
 *   1. a is a direct dependency of b (marked when b starts: O(deps of b));
 *   2. depth(a) >= depth(b) -> no path (every edge raises the longest-path depth by at least one);
 *   3. interval labels (one DFS post-order over the successor graph, built on the first query that 1 and 2
 *      do not settle): if a reaches b then post(b) <= post(a) and low(a) <= low(b), where low is the smallest
 *      post-order number reachable (in an acyclic graph every DFS finishes a descendant before its ancestor,
 *      whatever the visiting order); a label of b outside a's interval proves there is no path;
 *   4. a backward search from b over dependencies, visiting only ops x with x > a, depth(x) > depth(a) and a
 *      label inside a's interval: every op on a path from a to b passes all three tests, so the search finds
 *      a exactly when a path exists.
 * Memory is linear: O(ops + dependencies) for depths, marks, labels and the search stack (the labels and the
 * successor lists they are computed from only once a query needs them), 12 bytes per scratch/output chunk
 * (content, writer, reader; 4 more once some chunk has two readers since its last write); nothing per pair of
 * ops or per op and rank (no vector clocks). Planner programs settle almost every query at step 1 (a reader
 * depends on the writer it reads); the search runs for transitive orderings. Time is O(ops + dependencies +
 * chunks moved) plus the searches, each bounded by the ops between a and b that pass the three filters.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef long long i64;
typedef int32_t i32;

/* ------------------------------------------------------------------ growable int32 list */
typedef struct {
    i32 *v;
    Py_ssize_t n, cap;
} ilist_t;

static int il_push(ilist_t *l, i32 x) {
    if (l->n == l->cap) {
        Py_ssize_t cap = l->cap ? 2 * l->cap : 64;
        i32 *v = (i32 *)realloc(l->v, (size_t)cap * sizeof(i32));
        if (!v) return -1;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = x;
    return 0;
}

static int cmp_i32(const void *a, const void *b) {
    i32 x = *(const i32 *)a, y = *(const i32 *)b;
    return (x > y) - (x < y);
}

/* ------------------------------------------------------------------ happens-before */
typedef struct {
    Py_ssize_t n;
    const i64 *ptr, *dep;
    i32 *depth;  /* longest path + 1 (the reference's depth) of every op executed so far */
    i32 *dmark;  /* dmark[d] == b: d is a direct dependency of op b */
    i32 *visit;
    i32 epoch;
    i32 *stack;
    i32 *post, *low; /* interval labels, NULL until needed */
} hb_t;

static int hb_label(hb_t *h) {
    Py_ssize_t n = h->n;
    i64 e = n ? h->ptr[n] : 0;
    i64 *sptr = (i64 *)calloc((size_t)n + 1, sizeof(i64));
    i32 *sids = (i32 *)malloc((size_t)(e ? e : 1) * sizeof(i32));
    i64 *it = (i64 *)malloc((size_t)(n ? n : 1) * sizeof(i64));
    char *seen = (char *)calloc((size_t)(n ? n : 1), 1);
    h->post = (i32 *)malloc((size_t)(n ? n : 1) * sizeof(i32));
    h->low = (i32 *)malloc((size_t)(n ? n : 1) * sizeof(i32));
    if (!sptr || !sids || !it || !seen || !h->post || !h->low) {
        free(sptr); free(sids); free(it); free(seen);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        for (i64 k = h->ptr[i]; k < h->ptr[i + 1]; k++) sptr[h->dep[k] + 1]++;
    for (Py_ssize_t i = 0; i < n; i++) sptr[i + 1] += sptr[i];
    for (Py_ssize_t i = 0; i < n; i++) it[i] = sptr[i];
    for (Py_ssize_t i = 0; i < n; i++)
        for (i64 k = h->ptr[i]; k < h->ptr[i + 1]; k++) sids[it[h->dep[k]]++] = (i32)i;
    i32 counter = 0;
    i32 *stk = h->stack;
    for (Py_ssize_t r = 0; r < n; r++) {
        if (seen[r]) continue;
        Py_ssize_t sp = 0;
        stk[sp++] = (i32)r;
        seen[r] = 1;
        it[r] = sptr[r];
        h->low[r] = INT32_MAX;
        while (sp > 0) {
            i32 u = stk[sp - 1];
            if (it[u] < sptr[u + 1]) {
                i32 v = sids[it[u]++];
                if (!seen[v]) {
                    seen[v] = 1;
                    it[v] = sptr[v];
                    h->low[v] = INT32_MAX;
                    stk[sp++] = v;
                } else if (h->low[v] < h->low[u]) {
                    h->low[u] = h->low[v]; /* v is finished: the graph is acyclic */
                }
            } else {
                h->post[u] = counter++;
                if (h->post[u] < h->low[u]) h->low[u] = h->post[u];
                sp--;
                if (sp > 0 && h->low[u] < h->low[stk[sp - 1]]) h->low[stk[sp - 1]] = h->low[u];
            }
        }
    }
    free(sptr); free(sids); free(it); free(seen);
    return 0;
}

/* 1 if a path of dependencies leads from a to b, 0 if not, -1 on memory exhaustion */
static int hb_before(hb_t *h, i32 a, i32 b) {
    if (a >= b) return 0;
    if (h->dmark[a] == b) return 1;
    if (h->depth[a] >= h->depth[b]) return 0;
    if (!h->post && hb_label(h) < 0) return -1;
    i32 pa = h->post[a], la = h->low[a], da = h->depth[a];
    if (!(la <= h->low[b] && h->post[b] <= pa)) return 0;
    if (h->epoch == INT32_MAX) {
        memset(h->visit, 0, (size_t)h->n * sizeof(i32));
        h->epoch = 0;
    }
    i32 ep = ++h->epoch;
    Py_ssize_t sp = 0;
    h->stack[sp++] = b;
    while (sp > 0) {
        i32 x = h->stack[--sp];
        for (i64 k = h->ptr[x]; k < h->ptr[x + 1]; k++) {
            i32 d = (i32)h->dep[k];
            if (d == a) return 1;
            if (d > a && h->depth[d] > da && h->visit[d] != ep && la <= h->low[d] && h->post[d] <= pa) {
                h->visit[d] = ep;
                h->stack[sp++] = d;
            }
        }
    }
    return 0;
}

/* ------------------------------------------------------------------ sets of distinct op ids */
typedef struct {
    i32 *seen; /* seen[x] == ep: x is in the set */
    i32 ep, prev;
    ilist_t ids;
} idset_t;

static void ids_clear(idset_t *t, Py_ssize_t nops) {
    if (t->ep == INT32_MAX) {
        memset(t->seen, 0, (size_t)nops * sizeof(i32));
        t->ep = 0;
    }
    t->ep++;
    t->prev = -1;
    t->ids.n = 0;
}

static int ids_add_new(idset_t *t, i32 x) {
    t->prev = x;
    if (x < 0 || t->seen[x] == t->ep) return 0;
    t->seen[x] = t->ep;
    return il_push(&t->ids, x);
}

/* add x >= 0 unless present (runs of one value, the usual case, cost one compare: forced inline, it runs
   for every chunk moved) */
#if defined(__GNUC__)
__attribute__((always_inline))
#endif
static inline int ids_add(idset_t *t, i32 x) {
    if (x == t->prev) return 0;
    return ids_add_new(t, x);
}

static void ids_sort(idset_t *t) {
    if (t->ids.n > 1) qsort(t->ids.v, (size_t)t->ids.n, sizeof(i32), cmp_i32);
}

/* ------------------------------------------------------------------ verifier state */
typedef struct {
    hb_t hb;
    i32 *out_c, *scr_c;     /* content: global input chunk id (fits: fewer than 2^31 input chunks), -1 empty */
    i32 *out_w, *scr_w;     /* last writer */
    i32 *rd;                /* last reader (output chunks first, then scratch) */
    i32 *ex;                /* head of the earlier-readers list of each chunk (-1: none); NULL until a chunk
                               has two readers since its last write (planner programs rarely do) */
    i64 nchunks;
    i32 *pool_op, *pool_next;
    Py_ssize_t pool_n, pool_cap;
    i32 pool_free;
    idset_t ws, rs;         /* distinct writers / readers of the range at hand */
    PyObject *errors;
    i64 races;
} st_t;

static int pool_push(st_t *s, i64 chunk, i32 op) {
    i32 k;
    if (!s->ex) {
        s->ex = (i32 *)malloc((size_t)(s->nchunks ? s->nchunks : 1) * sizeof(i32));
        if (!s->ex) return -1;
        memset(s->ex, 0xff, (size_t)s->nchunks * sizeof(i32));
    }
    if (s->pool_free >= 0) {
        k = s->pool_free;
        s->pool_free = s->pool_next[k];
    } else {
        if (s->pool_n == s->pool_cap) {
            Py_ssize_t cap = s->pool_cap ? 2 * s->pool_cap : 1024;
            if (cap > INT32_MAX) return -1;
            i32 *a = (i32 *)realloc(s->pool_op, (size_t)cap * sizeof(i32));
            if (!a) return -1;
            s->pool_op = a;
            i32 *b = (i32 *)realloc(s->pool_next, (size_t)cap * sizeof(i32));
            if (!b) return -1;
            s->pool_next = b;
            s->pool_cap = cap;
        }
        k = (i32)s->pool_n++;
    }
    s->pool_op[k] = op;
    s->pool_next[k] = s->ex[chunk];
    s->ex[chunk] = k;
    return 0;
}

static int add_error(st_t *s, int kind, i64 x, i64 y, i64 rank, i64 buf, i64 a, i64 b) {
    PyObject *t = Py_BuildValue("(iLLLLLL)", kind, x, y, rank, buf, a, b);
    if (!t) return -1;
    int rc = PyList_Append(s->errors, t);
    Py_DECREF(t);
    return rc;
}

static int get_col(PyObject *obj, Py_buffer *view, Py_ssize_t want, const char *what, int writable, Py_ssize_t item) {
    if (PyObject_GetBuffer(obj, view, writable ? PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS : PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    if (view->len != want * item) {
        PyErr_Format(PyExc_ValueError, "%s: %zd bytes, expected %zd", what, view->len, want * item);
        PyBuffer_Release(view);
        view->obj = NULL;
        return -1;
    }
    return 0;
}

/* The per-chunk state is the verifier's largest allocation; fresh pages for it cost more than the symbolic
   execution itself on small plans (page faults, zeroing by the kernel). A block of up to CHUNK_CACHE_MAX int32 is
   kept for the next call; bigger ones, and a call re-entered while the block is in use (the GIL is held
   throughout, but error reporting can run Python code), use malloc/free as before. */
#define CHUNK_CACHE_MAX ((size_t)1 << 22)
static i32 *chunk_cache;
static size_t chunk_cache_n;
static int chunk_cache_busy;

static i32 *chunk_state_get(size_t n) {
    if (n > CHUNK_CACHE_MAX || chunk_cache_busy) return (i32 *)malloc(n * sizeof(i32));
    if (n > chunk_cache_n) {
        free(chunk_cache);
        chunk_cache_n = 0;
        chunk_cache = (i32 *)malloc(n * sizeof(i32));
        if (!chunk_cache) return NULL;
        chunk_cache_n = n;
    }
    chunk_cache_busy = 1;
    return chunk_cache;
}

static void chunk_state_put(i32 *p) {
    if (p && p == chunk_cache) chunk_cache_busy = 0;
    else free(p);
}

#define NCOL 11

static PyObject *py_verify(PyObject *self, PyObject *args) {
    (void)self;
    Py_ssize_t n, nops;
    PyObject *o[NCOL], *o_outc, *o_outw;
    int max_errors;
    /* o: counts, scratch, src_rank, src_buf, src_off, dst_rank, dst_buf, dst_off, cnt, dep_ptr, dep_ids */
    if (!PyArg_ParseTuple(args, "nnOOOOOOOOOOOiOO", &n, &nops, &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6],
                          &o[7], &o[8], &o[9], &o[10], &max_errors, &o_outc, &o_outw))
        return NULL;
    if (n < 1 || nops < 0 || nops >= INT32_MAX) Py_RETURN_NONE;
    Py_buffer v[NCOL + 2];
    memset(v, 0, sizeof(v));
    PyObject *result = NULL;
    st_t s;
    memset(&s, 0, sizeof(s));
    s.pool_free = -1;
    i64 *cap_in = NULL, *cap_out = NULL, *in_base = NULL, *obase = NULL, *sbase = NULL, *colacc = NULL;
    if (get_col(o[0], &v[0], n * n, "counts", 0, 8) < 0) goto done;
    if (get_col(o[1], &v[1], n, "scratch", 0, 8) < 0) goto done;
    for (int k = 2; k < 9; k++)
        if (get_col(o[k], &v[k], nops, "op column", 0, 8) < 0) goto done;
    if (get_col(o[9], &v[9], nops + 1, "dep_ptr", 0, 8) < 0) goto done;
    if (PyObject_GetBuffer(o[10], &v[10], PyBUF_C_CONTIGUOUS) < 0) goto done;
    {
        const i64 *counts = (const i64 *)v[0].buf, *scr = (const i64 *)v[1].buf;
        const i64 *sr = (const i64 *)v[2].buf, *sb = (const i64 *)v[3].buf, *so = (const i64 *)v[4].buf;
        const i64 *dr = (const i64 *)v[5].buf, *db = (const i64 *)v[6].buf, *dof = (const i64 *)v[7].buf;
        const i64 *cnt = (const i64 *)v[8].buf, *ptr = (const i64 *)v[9].buf, *dep = (const i64 *)v[10].buf;
        i64 ndep = v[10].len / 8;
        cap_in = (i64 *)calloc((size_t)n, sizeof(i64));
        cap_out = (i64 *)calloc((size_t)n, sizeof(i64));
        in_base = (i64 *)calloc((size_t)n, sizeof(i64));
        obase = (i64 *)calloc((size_t)n + 1, sizeof(i64));
        sbase = (i64 *)calloc((size_t)n + 1, sizeof(i64));
        colacc = (i64 *)calloc((size_t)n, sizeof(i64));
        if (!cap_in || !cap_out || !in_base || !obase || !sbase || !colacc) { PyErr_NoMemory(); goto done; }
        for (Py_ssize_t r = 0; r < n; r++)
            for (Py_ssize_t d = 0; d < n; d++) {
                cap_in[r] += counts[r * n + d];
                cap_out[d] += counts[r * n + d];
            }
        for (Py_ssize_t r = 0; r < n; r++) {
            if (scr[r] < 0 || cap_in[r] < 0 || cap_out[r] < 0) {
                result = Py_None;
                Py_INCREF(result);
                goto done;
            }
            if (r) in_base[r] = in_base[r - 1] + cap_in[r - 1];
            obase[r + 1] = obase[r] + cap_out[r];
            sbase[r + 1] = sbase[r] + scr[r];
        }
        i64 tot_out = obase[n], tot_scr = sbase[n];
        if (in_base[n - 1] + cap_in[n - 1] >= INT32_MAX) { /* content ids would not fit 32 bits */
            result = Py_None;
            Py_INCREF(result);
            goto done;
        }
        if (get_col(o_outc, &v[11], tot_out, "out_content", 1, 4) < 0) goto done;
        if (get_col(o_outw, &v[12], tot_out, "out_writer", 1, 4) < 0) goto done;
        /* ---- structural and order rules: any break -> the reference reports it */
        if (ptr[0] != 0 || ptr[nops] != ndep) {
            result = Py_None;
            Py_INCREF(result);
            goto done;
        }
        for (Py_ssize_t i = 0; i < nops; i++) {
            i64 c = cnt[i];
            int ok = c >= 1 && sr[i] >= 0 && sr[i] < n && dr[i] >= 0 && dr[i] < n && sb[i] >= 0 && sb[i] <= 2 &&
                     db[i] >= 1 && db[i] <= 2 && so[i] >= 0 && dof[i] >= 0 && ptr[i + 1] >= ptr[i];
            if (ok) {
                i64 cs = sb[i] == 0 ? cap_in[sr[i]] : sb[i] == 1 ? cap_out[sr[i]] : scr[sr[i]];
                i64 cd = db[i] == 1 ? cap_out[dr[i]] : scr[dr[i]];
                ok = so[i] <= cs - c && dof[i] <= cd - c;
            }
            for (i64 k = ptr[i]; ok && k < ptr[i + 1]; k++) ok = dep[k] >= 0 && dep[k] < i;
            if (!ok) {
                result = Py_None;
                Py_INCREF(result);
                goto done;
            }
        }
        /* ---- state */
        Py_ssize_t nn = nops ? nops : 1;
        i64 tot = tot_out + tot_scr;
        s.hb.n = nops;
        s.hb.ptr = ptr;
        s.hb.dep = dep;
        s.hb.depth = (i32 *)calloc((size_t)nn, sizeof(i32));
        s.hb.dmark = (i32 *)malloc((size_t)nn * sizeof(i32));
        s.hb.visit = (i32 *)calloc((size_t)nn, sizeof(i32));
        s.hb.stack = (i32 *)malloc((size_t)nn * sizeof(i32));
        s.ws.seen = (i32 *)calloc((size_t)nn, sizeof(i32));
        s.rs.seen = (i32 *)calloc((size_t)nn, sizeof(i32));
        s.out_c = (i32 *)v[11].buf;
        s.out_w = (i32 *)v[12].buf;
        /* content and writer of every scratch chunk, reader of every chunk: one block, reused across calls
           when small (see chunk_state_get) */
        i32 *block = chunk_state_get((size_t)(2 * tot_scr + tot + 1));
        s.scr_c = block;
        s.scr_w = block ? block + tot_scr : NULL;
        s.rd = block ? block + 2 * tot_scr : NULL;
        s.nchunks = tot;
        s.errors = PyList_New(0);
        if (!s.hb.depth || !s.hb.dmark || !s.hb.visit || !s.hb.stack || !s.ws.seen || !s.rs.seen || !s.scr_c || !s.scr_w || !s.rd ||
            !s.errors) {
            PyErr_NoMemory();
            goto done;
        }
        for (Py_ssize_t i = 0; i < nops; i++) s.hb.dmark[i] = -1;
        /* all bytes 0xff: -1 in every int32/int64 entry (empty content, no writer, no reader) */
        memset(s.out_c, 0xff, (size_t)tot_out * sizeof(i32));
        memset(s.out_w, 0xff, (size_t)tot_out * sizeof(i32));
        memset(s.scr_c, 0xff, (size_t)tot_scr * sizeof(i32));
        memset(s.scr_w, 0xff, (size_t)tot_scr * sizeof(i32));
        memset(s.rd, 0xff, (size_t)tot * sizeof(i32));
        i64 moved = 0;
        i32 maxdepth = 0;
        for (Py_ssize_t i = 0; i < nops; i++) {
            if (PyList_GET_SIZE(s.errors) >= max_errors) break;
            i32 oid = (i32)i, dmax = 0;
            for (i64 k = ptr[i]; k < ptr[i + 1]; k++) {
                i32 d = (i32)dep[k];
                s.hb.dmark[d] = oid;
                if (s.hb.depth[d] > dmax) dmax = s.hb.depth[d];
            }
            s.hb.depth[i] = dmax + 1;
            if (dmax + 1 > maxdepth) maxdepth = dmax + 1;
            i64 c = cnt[i];
            moved += c;
            i64 r = sr[i], b = sb[i], off = so[i];
            i32 *src_c = NULL;
            if (b != 0) {
                /* read: initialised? ordered after its writers? then record the reader */
                i64 sidx = (b == 1 ? obase[r] : tot_out + sbase[r]) + off; /* reader/extra index */
                src_c = b == 1 ? s.out_c + obase[r] + off : s.scr_c + sbase[r] + off;
                i32 *src_w = b == 1 ? s.out_w + obase[r] + off : s.scr_w + sbase[r] + off;
                i32 *rd = s.rd + sidx;
                i64 first = -1, last = -1;
                ids_clear(&s.ws, nops);
                for (i64 k = 0; k < c; k++) {
                    if (src_c[k] < 0) {
                        if (first < 0) first = k;
                        last = k;
                    }
                    if (ids_add(&s.ws, src_w[k]) < 0) { PyErr_NoMemory(); goto done; }
                    if (rd[k] >= 0 && pool_push(&s, sidx + k, rd[k]) < 0) { PyErr_NoMemory(); goto done; }
                    rd[k] = oid;
                }
                if (first >= 0 && add_error(&s, 0, oid, 0, r, b, off + first, off + last + 1) < 0) goto done;
                ids_sort(&s.ws);
                for (Py_ssize_t t = 0; t < s.ws.ids.n; t++) {
                    int hb = hb_before(&s.hb, s.ws.ids.v[t], oid);
                    if (hb < 0) { PyErr_NoMemory(); goto done; }
                    if (!hb) {
                        s.races++;
                        if (add_error(&s, 1, oid, s.ws.ids.v[t], r, b, off, off + c) < 0) goto done;
                    }
                }
            }
            /* write: ordered after the previous writers and after the readers of the old value */
            i64 wr = dr[i], wb = db[i], woff = dof[i];
            i64 widx = (wb == 1 ? obase[wr] : tot_out + sbase[wr]) + woff;
            i32 *dst_c = wb == 1 ? s.out_c + obase[wr] + woff : s.scr_c + sbase[wr] + woff;
            i32 *dst_w = wb == 1 ? s.out_w + obase[wr] + woff : s.scr_w + sbase[wr] + woff;
            i32 *rd = s.rd + widx;
            i32 *ex = s.ex ? s.ex + widx : NULL;
            ids_clear(&s.ws, nops);
            ids_clear(&s.rs, nops);
            s.rs.seen[oid] = s.rs.ep; /* the op's own read of an overlapping range is no race */
            for (i64 k = 0; k < c; k++) {
                if (ids_add(&s.ws, dst_w[k]) < 0) { PyErr_NoMemory(); goto done; }
                dst_w[k] = oid;
                if (ids_add(&s.rs, rd[k]) < 0) { PyErr_NoMemory(); goto done; }
                rd[k] = -1;
                i32 e = ex ? ex[k] : -1;
                if (e >= 0) {
                    while (e >= 0) {
                        i32 nx = s.pool_next[e];
                        if (ids_add(&s.rs, s.pool_op[e]) < 0) { PyErr_NoMemory(); goto done; }
                        s.pool_next[e] = s.pool_free;
                        s.pool_free = e;
                        e = nx;
                    }
                    ex[k] = -1;
                }
            }
            ids_sort(&s.ws);
            for (Py_ssize_t t = 0; t < s.ws.ids.n; t++) {
                int hb = hb_before(&s.hb, s.ws.ids.v[t], oid);
                if (hb < 0) { PyErr_NoMemory(); goto done; }
                if (!hb) {
                    s.races++;
                    if (add_error(&s, 2, s.ws.ids.v[t], oid, wr, wb, woff, woff + c) < 0) goto done;
                }
            }
            ids_sort(&s.rs);
            for (Py_ssize_t t = 0; t < s.rs.ids.n; t++) {
                int hb = hb_before(&s.hb, s.rs.ids.v[t], oid);
                if (hb < 0) { PyErr_NoMemory(); goto done; }
                if (!hb) {
                    s.races++;
                    if (add_error(&s, 3, oid, s.rs.ids.v[t], wr, wb, woff, woff + c) < 0) goto done;
                }
            }
            if (b == 0) {
                i32 g = (i32)(in_base[r] + off);
                for (i64 k = 0; k < c; k++) dst_c[k] = g + (i32)k;
            } else {
                memmove(dst_c, src_c, (size_t)c * sizeof(i32));
            }
        }
        /* ---- postcondition: output chunk colacc[d] + k of rank d must hold input chunk rowacc + k of rank s */
        int post_bad = 0;
        for (Py_ssize_t sx = 0; sx < n && !post_bad; sx++) {
            i64 rowacc = in_base[sx];
            for (Py_ssize_t d = 0; d < n; d++) {
                i64 c = counts[sx * n + d];
                const i32 *got = s.out_c + obase[d] + colacc[d];
                for (i64 k = 0; k < c; k++)
                    if (got[k] != rowacc + k) { post_bad = 1; break; }
                colacc[d] += c;
                rowacc += c;
            }
        }
        result = Py_BuildValue("(OLiLO)", s.errors, moved, (int)maxdepth, s.races, post_bad ? Py_True : Py_False);
    }
done:
    for (int k = 0; k < NCOL + 2; k++)
        if (v[k].obj) PyBuffer_Release(&v[k]);
    free(cap_in); free(cap_out); free(in_base); free(obase); free(sbase); free(colacc);
    free(s.hb.depth); free(s.hb.dmark); free(s.hb.visit); free(s.hb.stack); free(s.hb.post); free(s.hb.low);
    chunk_state_put(s.scr_c);
    free(s.ex); free(s.pool_op); free(s.pool_next);
    free(s.ws.seen); free(s.rs.seen); free(s.ws.ids.v); free(s.rs.ids.v);
    Py_XDECREF(s.errors);
    return result;
}

static PyObject *py_levels(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer vp, vd;
    if (!PyArg_ParseTuple(args, "y*y*", &vp, &vd)) return NULL;
    Py_ssize_t n = vp.len / 8 - 1;
    const i64 *ptr = (const i64 *)vp.buf, *dep = (const i64 *)vd.buf;
    i64 ndep = vd.len / 8;
    PyObject *out = PyBytes_FromStringAndSize(NULL, (n > 0 ? n : 0) * 8);
    if (out) {
        i64 *lvl = (i64 *)PyBytes_AS_STRING(out);
        for (Py_ssize_t i = 0; i < n; i++) {
            i64 m = -1;
            for (i64 k = ptr[i]; k < ptr[i + 1]; k++) {
                i64 d = dep[k];
                if (d < 0 || d >= i || k >= ndep) {
                    Py_DECREF(out);
                    out = NULL;
                    PyErr_SetString(PyExc_ValueError, "levels: a dependency is not an earlier op");
                    goto fin;
                }
                if (lvl[d] > m) m = lvl[d];
            }
            lvl[i] = m + 1;
        }
    }
fin:
    PyBuffer_Release(&vp);
    PyBuffer_Release(&vd);
    return out;
}

/* ------------------------------------------------------------------ column helpers of a2acc.ir.program/serial */
typedef struct {
    char *p;
    size_t n, cap;
} sbuf_t;

static int sb_room(sbuf_t *b, size_t need) {
    if (b->n + need <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 1 << 16;
    while (cap < b->n + need) cap *= 2;
    char *p = (char *)realloc(b->p, cap);
    if (!p) return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

static void sb_int(sbuf_t *b, i64 x) { /* room checked by the caller: at most 20 characters */
    char tmp[24];
    int k = 0;
    unsigned long long u = x < 0 ? 0ULL - (unsigned long long)x : (unsigned long long)x;
    do { tmp[k++] = (char)('0' + u % 10); u /= 10; } while (u);
    if (x < 0) b->p[b->n++] = '-';
    while (k) b->p[b->n++] = tmp[--k];
}

/* parse (nops, src_rank, src_buf, src_off, dst_rank, dst_buf, dst_off, cnt, stage, link, dep_ptr, dep_ids, links) */
typedef struct {
    Py_buffer v[11];
    const i64 *col[8], *ptr, *dep;
    const unsigned char *link;
    Py_ssize_t nops, nlinks;
    PyObject *links;
} cols_t;

static void cols_release(cols_t *c) {
    for (int k = 0; k < 11; k++)
        if (c->v[k].obj) PyBuffer_Release(&c->v[k]);
}

static int cols_get(PyObject *args, cols_t *c) {
    PyObject *o[11];
    memset(c, 0, sizeof(*c));
    if (!PyArg_ParseTuple(args, "nOOOOOOOOOOOO!", &c->nops, &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &o[7],
                          &o[8], &o[9], &o[10], &PyTuple_Type, &c->links))
        return -1;
    for (int k = 0; k < 8; k++) {
        if (get_col(o[k], &c->v[k], c->nops, "op column", 0, 8) < 0) return -1;
        c->col[k] = (const i64 *)c->v[k].buf;
    }
    if (get_col(o[8], &c->v[8], c->nops, "link", 0, 1) < 0) return -1;
    if (get_col(o[9], &c->v[9], c->nops + 1, "dep_ptr", 0, 8) < 0) return -1;
    if (PyObject_GetBuffer(o[10], &c->v[10], PyBUF_C_CONTIGUOUS) < 0) return -1;
    c->link = (const unsigned char *)c->v[8].buf;
    c->ptr = (const i64 *)c->v[9].buf;
    c->dep = (const i64 *)c->v[10].buf;
    c->nlinks = PyTuple_GET_SIZE(c->links);
    i64 ndep = c->v[10].len / 8;
    for (Py_ssize_t i = 0; i < c->nops; i++)
        if (c->ptr[i] < 0 || c->ptr[i + 1] < c->ptr[i] || c->ptr[i + 1] > ndep || c->link[i] >= c->nlinks) {
            PyErr_SetString(PyExc_ValueError, "dependency pointers or link codes out of range");
            return -1;
        }
    if (c->nops >= 0 && c->ptr[0] != 0) {
        PyErr_SetString(PyExc_ValueError, "dep_ptr must start at 0");
        return -1;
    }
    return 0;
}

/* the op rows of the plan JSON, "[id,sr,\"b\",so,dr,\"b\",do,cnt,[deps],stage,link]" joined by ",\n", with
   links the JSON-encoded (ASCII) labels; None when a buffer is not 0, 1 or 2 (the caller's Python path
   words that) */
static PyObject *py_op_lines(PyObject *self, PyObject *args) {
    (void)self;
    cols_t c;
    PyObject *result = NULL;
    sbuf_t b = {NULL, 0, 0};
    const char **lk = NULL;
    Py_ssize_t *lklen = NULL;
    static const char letters[3] = {'i', 'o', 's'};
    if (cols_get(args, &c) < 0) goto done;
    lk = (const char **)calloc((size_t)(c.nlinks ? c.nlinks : 1), sizeof(char *));
    lklen = (Py_ssize_t *)calloc((size_t)(c.nlinks ? c.nlinks : 1), sizeof(Py_ssize_t));
    if (!lk || !lklen) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t k = 0; k < c.nlinks; k++) {
        lk[k] = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(c.links, k), &lklen[k]);
        if (!lk[k]) goto done;
    }
    for (Py_ssize_t i = 0; i < c.nops; i++)
        if (c.col[1][i] < 0 || c.col[1][i] > 2 || c.col[4][i] < 0 || c.col[4][i] > 2) {
            result = Py_None;
            Py_INCREF(result);
            goto done;
        }
    for (Py_ssize_t i = 0; i < c.nops; i++) {
        i64 nd = c.ptr[i + 1] - c.ptr[i];
        if (sb_room(&b, (size_t)(8 * 21 + 16 + (size_t)lklen[c.link[i]] + (size_t)nd * 21 + 4)) < 0) {
            PyErr_NoMemory();
            goto done;
        }
        if (i) { b.p[b.n++] = ','; b.p[b.n++] = '\n'; }
        b.p[b.n++] = '[';
        sb_int(&b, (i64)i);
        for (int k = 0; k < 7; k++) {
            b.p[b.n++] = ',';
            if (k == 1 || k == 4) {
                b.p[b.n++] = '"';
                b.p[b.n++] = letters[c.col[k][i]];
                b.p[b.n++] = '"';
            } else {
                sb_int(&b, c.col[k][i]);
            }
        }
        b.p[b.n++] = ',';
        b.p[b.n++] = '[';
        for (i64 k = c.ptr[i]; k < c.ptr[i + 1]; k++) {
            if (k > c.ptr[i]) b.p[b.n++] = ',';
            sb_int(&b, c.dep[k]);
        }
        b.p[b.n++] = ']';
        b.p[b.n++] = ',';
        sb_int(&b, c.col[7][i]);
        b.p[b.n++] = ',';
        memcpy(b.p + b.n, lk[c.link[i]], (size_t)lklen[c.link[i]]);
        b.n += (size_t)lklen[c.link[i]];
        b.p[b.n++] = ']';
    }
    result = PyUnicode_DecodeUTF8(b.p ? b.p : "", (Py_ssize_t)b.n, "strict");
done:
    cols_release(&c);
    free(lk);
    free(lklen);
    free(b.p);
    return result;
}

/* a tuple of op_type instances (a NamedTuple class: id, src_rank, src_buf, src_off, dst_rank, dst_buf, dst_off,
   cnt, deps, stage, link), built straight from the columns */
static PyObject *py_op_tuples(PyObject *self, PyObject *args) {
    (void)self;
    PyTypeObject *op_type;
    PyObject *rest;
    Py_ssize_t na = PyTuple_GET_SIZE(args);
    if (na < 1 || !PyType_Check(PyTuple_GET_ITEM(args, 0)) ||
        !PyType_IsSubtype((PyTypeObject *)PyTuple_GET_ITEM(args, 0), &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "op_tuples(op_type, ...): op_type must be a tuple subclass");
        return NULL;
    }
    op_type = (PyTypeObject *)PyTuple_GET_ITEM(args, 0);
    rest = PyTuple_GetSlice(args, 1, na);
    if (!rest) return NULL;
    cols_t c;
    int rc = cols_get(rest, &c);
    Py_DECREF(rest);
    PyObject *out = NULL;
    if (rc < 0) goto done;
    out = PyTuple_New(c.nops);
    if (!out) goto done;
    for (Py_ssize_t i = 0; i < c.nops; i++) {
        PyObject *op = op_type->tp_alloc(op_type, 11);
        if (!op) goto fail;
        PyTuple_SET_ITEM(out, i, op);
        PyObject *deps = PyTuple_New((Py_ssize_t)(c.ptr[i + 1] - c.ptr[i]));
        if (!deps) goto fail;
        PyTuple_SET_ITEM(op, 8, deps);
        for (i64 k = c.ptr[i]; k < c.ptr[i + 1]; k++) {
            PyObject *d = PyLong_FromLongLong(c.dep[k]);
            if (!d) goto fail;
            PyTuple_SET_ITEM(deps, (Py_ssize_t)(k - c.ptr[i]), d);
        }
        PyObject *x = PyLong_FromSsize_t(i);
        if (!x) goto fail;
        PyTuple_SET_ITEM(op, 0, x);
        for (int k = 0; k < 7; k++) {
            x = PyLong_FromLongLong(c.col[k][i]);
            if (!x) goto fail;
            PyTuple_SET_ITEM(op, 1 + k, x);
        }
        x = PyLong_FromLongLong(c.col[7][i]);
        if (!x) goto fail;
        PyTuple_SET_ITEM(op, 9, x);
        x = PyTuple_GET_ITEM(c.links, c.link[i]);
        Py_INCREF(x);
        PyTuple_SET_ITEM(op, 10, x);
        /* ints and str only: no reference cycle can run through these tuples, so the cyclic GC need not
           track them (it would untrack them itself on its next pass, after traversing them) */
        PyObject_GC_UnTrack(deps);
        PyObject_GC_UnTrack(op);
    }
    goto done;
fail:
    Py_CLEAR(out);
done:
    cols_release(&c);
    return out;
}

static PyMethodDef methods[] = {
    {"verify", py_verify, METH_VARARGS, "symbolic execution and race checks of a Program's op columns"},
    {"levels", py_levels, METH_VARARGS, "longest dependency path to each op (CSR dependencies)"},
    {"op_lines", py_op_lines, METH_VARARGS, "the op rows of the plan JSON"},
    {"op_tuples", py_op_tuples, METH_VARARGS, "Op NamedTuples from the op columns"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moddef = {
    PyModuleDef_HEAD_INIT, "_verify", "compiled core of a2acc.ir.verify", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__verify(void) { return PyModule_Create(&moddef); }
