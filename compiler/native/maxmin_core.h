/*
 * Max-min fair rates by local-bottleneck progressive filling, in plain C: shared by the max-min core
 * (maxmin.c, a2acc.analysis.fastsim.max_min) and the fast simulator's event loop (fastsim.c), so both run one
 * arithmetic. The Python reference is a2acc.analysis.fastsim.max_min_py; the operations follow it one by one
 * (sums in flow order, the same comparisons), so the rates are the same floats.
 *
 * Each round: count flows per link (weighted), share = remaining / count; a flow's fair share is the smallest
 * share on its links; a link on which every crossing flow has its minimum there is a local bottleneck and fixes
 * all its flows at that share.
 *
 * Only the links the rows name are touched (listed once at the start): a round costs O(flows x k + links used),
 * not O(all links), and the values of the links no row names are never read, so the rates are the same floats.
 */
#ifndef A2ACC_MAXMIN_CORE_H
#define A2ACC_MAXMIN_CORE_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

/* rows: int64 [nf * k], each in [0, ncap] (ncap: the "no link" column); cap: [ncap]; w: [nf] or NULL (a row of
 * weight w stands for w identical flows). Writes nf rates into rate. Returns 0, -1 when out of memory, -2 when a
 * flow has no binding link. */
static int maxmin_core(const int64_t *rows0, Py_ssize_t nf, Py_ssize_t k, const double *cap, Py_ssize_t ncap,
                       const double *w0, double *rate) {
    Py_ssize_t nl = ncap + 1, pad = ncap;
    size_t nfa = (size_t)(nf ? nf : 1);
    double *rem = malloc(sizeof(double) * (size_t)nl), *cnt = malloc(sizeof(double) * (size_t)nl);
    double *share = malloc(sizeof(double) * (size_t)nl), *fmin = malloc(sizeof(double) * nfa);
    int64_t *notmin = malloc(sizeof(int64_t) * (size_t)nl);
    Py_ssize_t *idx = malloc(sizeof(Py_ssize_t) * nfa);
    unsigned char *fix = malloc(nfa);
    /* the links the rows name (the pad included), each once: used[0..nu) */
    Py_ssize_t *used = malloc(sizeof(Py_ssize_t) * (size_t)nl);
    unsigned char *seen = calloc((size_t)nl, 1);
    int status = 0;
    if (!rem || !cnt || !share || !fmin || !notmin || !idx || !fix || !used || !seen) {
        status = -1;
        goto out;
    }
    Py_ssize_t nu = 0;
    used[nu++] = pad;
    seen[pad] = 1;
    for (Py_ssize_t x = 0; x < nf * k; x++) {
        int64_t l = rows0[x];
        if (!seen[l]) { seen[l] = 1; used[nu++] = (Py_ssize_t)l; }
    }
    for (Py_ssize_t f = 0; f < nf; f++) rate[f] = 0.0;
    for (Py_ssize_t u = 0; u < nu; u++) rem[used[u]] = used[u] == pad ? INFINITY : cap[used[u]];
    Py_ssize_t live = nf;
    for (Py_ssize_t i = 0; i < nf; i++) idx[i] = i;
    while (live > 0) {
        for (Py_ssize_t u = 0; u < nu; u++) { cnt[used[u]] = 0.0; notmin[used[u]] = 0; }
        for (Py_ssize_t a = 0; a < live; a++) {
            Py_ssize_t f = idx[a];
            double wf = w0 ? w0[f] : 1.0;
            for (Py_ssize_t j = 0; j < k; j++) cnt[rows0[f * k + j]] += wf;
        }
        cnt[pad] = 0.0;
        for (Py_ssize_t u = 0; u < nu; u++) {
            Py_ssize_t l = used[u];
            share[l] = cnt[l] == 0.0 ? INFINITY : rem[l] / (cnt[l] > 1.0 ? cnt[l] : 1.0);
        }
        for (Py_ssize_t a = 0; a < live; a++) {
            const int64_t *r = rows0 + idx[a] * k;
            double mn = share[r[0]];
            for (Py_ssize_t j = 1; j < k; j++) mn = share[r[j]] < mn ? share[r[j]] : mn;
            if (!isfinite(mn)) {
                status = -2;
                goto out;
            }
            fmin[a] = mn;
            double lim = mn * (1 + 1e-12);
            for (Py_ssize_t j = 0; j < k; j++)
                if (!(share[r[j]] <= lim)) notmin[r[j]]++;
        }
        for (Py_ssize_t a = 0; a < live; a++) {
            const int64_t *r = rows0 + idx[a] * k;
            fix[a] = 0;
            for (Py_ssize_t j = 0; j < k && !fix[a]; j++) fix[a] = notmin[r[j]] == 0 && cnt[r[j]] > 0.0;
        }
        for (Py_ssize_t a = 0; a < live; a++)
            if (fix[a]) rate[idx[a]] = fmin[a];
        /* rem -= bincount(rows[fix], weights=repeat(r * w, k)): accumulate in flow order first */
        for (Py_ssize_t u = 0; u < nu; u++) cnt[used[u]] = 0.0;
        for (Py_ssize_t a = 0; a < live; a++) {
            if (!fix[a]) continue;
            Py_ssize_t f = idx[a];
            double spent = w0 ? fmin[a] * w0[f] : fmin[a];
            for (Py_ssize_t j = 0; j < k; j++) cnt[rows0[f * k + j]] += spent;
        }
        for (Py_ssize_t u = 0; u < nu; u++) {
            Py_ssize_t l = used[u];
            rem[l] -= cnt[l];
            if (rem[l] < 0.0) rem[l] = 0.0;
        }
        Py_ssize_t keep = 0;
        for (Py_ssize_t a = 0; a < live; a++)
            if (!fix[a]) idx[keep++] = idx[a];
        if (keep == live) {
            status = -2;
            goto out;
        }
        live = keep;
    }
out:
    free(rem); free(cnt); free(share); free(fmin); free(notmin); free(idx); free(fix); free(used); free(seen);
    return status;
}

#endif
