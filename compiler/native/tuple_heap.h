/*
 * A binary min-heap of (t, kind, x, ver) entries, ordered as Python orders such tuples (t, then kind, then x,
 * then ver): what the compiled cores that follow a Python heapq loop pop in the reference's order. A 2-tuple
 * (t, x) of the reference is an entry with kind and ver 0. Shared by fastsim.c (events, route-group
 * departures) and listsched.c (events, waiting ops, departures).
 */
#ifndef A2ACC_TUPLE_HEAP_H
#define A2ACC_TUPLE_HEAP_H

#include <stdint.h>
#include <stdlib.h>

typedef struct {
    double t;
    int kind;
    int64_t x, ver;
} tent_t;

typedef struct {
    tent_t *v;
    Py_ssize_t n, cap;
} theap_t;

static int tent_less(const tent_t *a, const tent_t *b) {
    if (a->t != b->t) return a->t < b->t;
    if (a->kind != b->kind) return a->kind < b->kind;
    if (a->x != b->x) return a->x < b->x;
    return a->ver < b->ver;
}

/* 0, or -1 when out of memory (the heap is unchanged) */
static int theap_push(theap_t *h, tent_t e) {
    if (h->n == h->cap) {
        Py_ssize_t nc = h->cap ? 2 * h->cap : 8;
        tent_t *nv = realloc(h->v, sizeof(tent_t) * (size_t)nc);
        if (!nv) return -1;
        h->v = nv;
        h->cap = nc;
    }
    Py_ssize_t i = h->n++;
    while (i > 0) {
        Py_ssize_t p = (i - 1) / 2;
        if (!tent_less(&e, &h->v[p])) break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = e;
    return 0;
}

/* the smallest entry (the heap must not be empty) */
static tent_t theap_pop(theap_t *h) {
    tent_t top = h->v[0], last = h->v[--h->n];
    Py_ssize_t i = 0, n = h->n;
    for (;;) {
        Py_ssize_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && tent_less(&h->v[c + 1], &h->v[c])) c++;
        if (!tent_less(&h->v[c], &last)) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (n) h->v[i] = last;
    return top;
}

#endif
