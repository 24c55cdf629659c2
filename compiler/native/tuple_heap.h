/*
 * Binary min-heaps ordered as Python orders tuples, for the compiled cores that follow a Python heapq loop
 * and must pop in the reference's order. Shared by fastsim.c (events, route-group departures) and listsched.c
 * (events; its per-link heaps of ready ops and departures use the 16-byte (t, x) entries).
 *
 * - tent_t / theap_t: (t, kind, x, ver) entries, ordered by t, then kind, then x, then ver. A 2-tuple (t, x) of
 *   the reference is an entry with kind and ver 0.
 * - kent_t / kheap_t: (t, x) entries, ordered by t, then x: the reference's 2-tuples in half the bytes.
 *
 * name_push(h, e): 0, or -1 when out of memory (the heap is unchanged); name_pop(h): the smallest entry (the
 * heap must not be empty).
 */
#ifndef A2ACC_TUPLE_HEAP_H
#define A2ACC_TUPLE_HEAP_H

#include <stdint.h>
#include <stdlib.h>

#define A2ACC_DEFINE_HEAP(heap_t, ent_t, less, push, pop)                          \
    typedef struct {                                                               \
        ent_t *v;                                                                  \
        Py_ssize_t n, cap;                                                         \
    } heap_t;                                                                      \
                                                                                   \
    static int push(heap_t *h, ent_t e) {                                          \
        if (h->n == h->cap) {                                                      \
            Py_ssize_t nc = h->cap ? 2 * h->cap : 8;                               \
            ent_t *nv = realloc(h->v, sizeof(ent_t) * (size_t)nc);                 \
            if (!nv) return -1;                                                    \
            h->v = nv;                                                             \
            h->cap = nc;                                                           \
        }                                                                          \
        Py_ssize_t i = h->n++;                                                     \
        while (i > 0) {                                                            \
            Py_ssize_t p = (i - 1) / 2;                                            \
            if (!less(&e, &h->v[p])) break;                                        \
            h->v[i] = h->v[p];                                                     \
            i = p;                                                                 \
        }                                                                          \
        h->v[i] = e;                                                               \
        return 0;                                                                  \
    }                                                                              \
                                                                                   \
    static ent_t pop(heap_t *h) {                                                  \
        ent_t top = h->v[0], last = h->v[--h->n];                                  \
        Py_ssize_t i = 0, n = h->n;                                                \
        for (;;) {                                                                 \
            Py_ssize_t c = 2 * i + 1;                                              \
            if (c >= n) break;                                                     \
            if (c + 1 < n && less(&h->v[c + 1], &h->v[c])) c++;                    \
            if (!less(&h->v[c], &last)) break;                                     \
            h->v[i] = h->v[c];                                                     \
            i = c;                                                                 \
        }                                                                          \
        if (n) h->v[i] = last;                                                     \
        return top;                                                                \
    }

typedef struct {
    double t;
    int kind;
    int64_t x, ver;
} tent_t;

static int tent_less(const tent_t *a, const tent_t *b) {
    if (a->t != b->t) return a->t < b->t;
    if (a->kind != b->kind) return a->kind < b->kind;
    if (a->x != b->x) return a->x < b->x;
    return a->ver < b->ver;
}

A2ACC_DEFINE_HEAP(theap_t, tent_t, tent_less, theap_push, theap_pop)

typedef struct {
    double t;
    int64_t x;
} kent_t;

static int kent_less(const kent_t *a, const kent_t *b) { return a->t != b->t ? a->t < b->t : a->x < b->x; }

A2ACC_DEFINE_HEAP(kheap_t, kent_t, kent_less, kheap_push, kheap_pop)

#endif
