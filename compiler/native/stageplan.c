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

static PyMethodDef methods[] = {
    {"stage_plan", stage_plan, METH_VARARGS, "FAST stage plan: server matrix, balancing flags, Birkhoff stages."},
    {"stage_plan_bytes", stage_plan_bytes, METH_VARARGS, "stage_plan from a byte matrix (quantised inside)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_stageplan", "Compiled FAST stage planning core.", -1, methods};

PyMODINIT_FUNC PyInit__stageplan(void) { return PyModule_Create(&module); }
