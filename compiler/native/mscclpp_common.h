/*
 * What the two MSCCL++ cores share (mscclpp.c: the checker; mscclpp_lower.c: the lowering): the executor's
 * limits as mscclpp's execution_common.hpp states them, and the compact op form both keep in a pool (op kinds,
 * channel types, buffers, buffer references). One definition, so the lowering cannot emit what the checker
 * reads differently.
 */
#ifndef A2ACC_MSCCLPP_COMMON_H
#define A2ACC_MSCCLPP_COMMON_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef long long i64;
typedef unsigned long long u64;

#define MAX_OPS_PER_TB 64
#define MAX_CHANNELS_PER_TB 16
#define MAX_CHANNELS_PER_OP 8
#define MAX_REFS_PER_OP 10
#define MAX_SEMAPHORES_PER_OP 16
#define MAX_U32 4294967295ULL

enum { OP_NOP, OP_SIGNAL, OP_WAIT, OP_PUT, OP_COPY, OP_ACQ, OP_REL, OP_PPKT, OP_UPKT };
enum { CT_NONE = 0, CT_MEM = 1, CT_PORT = 2 };
enum { B_I = 0, B_O = 1, B_S = 2 };
#define REMOTE 16 /* ref.buf >= REMOTE: remote, thread-block-local remote buffer index buf - REMOTE */

typedef struct {
    int32_t buf, index, size;
} ref_t;

typedef struct {
    uint8_t kind, ct, nsrc, ndst, nids;
    uint32_t ref; /* first of nsrc + ndst refs in the pool */
    uint32_t ids; /* first of nids ids (channel or semaphore) in the pool */
} op_t;

/* Grows a pool to hold element n (doubling, from 1024); the enclosing function returns 0 when out of memory. */
#define GROW(arr, n, cap, type)                                                                     \
    do {                                                                                            \
        if ((n) >= (cap)) {                                                                         \
            size_t nc = (cap) ? (size_t)(cap) * 2 : 1024;                                           \
            type *np_ = (type *)realloc((arr), nc * sizeof(type));                                 \
            if (!np_) return 0;                                                                     \
            (arr) = np_;                                                                            \
            (cap) = nc;                                                                             \
        }                                                                                           \
    } while (0)

#endif
