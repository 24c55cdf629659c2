/*
 * a2acc._mscclpp: compiled fast path of the MSCCL++ check (a2acc/backends/mscclpp/{reader,interp}.py).
 *
 * check(text, counts, chunk_bytes, launches, max_tbs)
 *     -> (ngpus, C, protocol, max_tbs, max_ops, channel_pairs, launches) | (rank, thread blocks) | str
 *   text       : the JSON execution plan text
 *   counts     : None (the standard all-to-all postcondition) or bytes of N*N int64 chunk counts (the manifest's
 *                all-to-all-v layout, row = sender)
 *   chunk_bytes: the manifest's chunk size, or 0 (then the smallest size the plan loads with, as the reference)
 *   launches   : back-to-back launches to execute (2..8)
 *   max_tbs    : thread blocks a rank may have (all must be co-resident); a plan that parses and gives some rank
 *                more is answered, before any other work, with that rank and its count (a pair): the reference's
 *                load check reports exactly that (interp/load.py)
 *
 * A tuple means: the pure-Python reference (strict reader, load checks, intra-thread-block rules, execution of
 * the launches with deadlock, race, cross-launch and postcondition checks, balanced counters) reports no error
 * and no note for this text: its verdict is "ok". A str means "not decided here", with the reason: the text
 * is outside the shape this core handles (anything but the JSON a2acc's emitter writes for an out-of-place
 * alltoall with nop/signal/wait/put/copy/semaphore/LL packet operations on memory and port channels), or the
 * core met anything the reference would report. The caller then runs the reference (when the plan is within
 * its capacity), which writes the messages; so the core never decides a failure, it only has to be right when
 * it says "ok". A str starting with "limit:" is a capacity limit of this core, checked before any work.
 *
 * Execution mirrors a2acc/backends/mscclpp/interp/machine.py: thread blocks, one port proxy and one host (the
 * caller) per rank are agents; a worklist runs each until it blocks; waits take tickets on channel counters,
 * semaphores count, port puts and signals go through the rank's proxy FIFO, LL packets carry the launch's flag;
 * every launch of a rank starts when its previous one ended, the host rewrites the input between launches and
 * reads the output at the end of each (the postcondition). Happens-before uses vector clocks, but an agent's
 * clock covers only the agents that can touch what it touches (its own rank's thread blocks, proxy and host;
 * the thread blocks of other ranks that hold a channel or a remote buffer to its rank; the proxies and hosts of
 * the ranks it is connected to), which keeps memory linear in the plan instead of quadratic in the thread
 * blocks. Every clock entry is a real happens-before fact, so whatever the clocks order is ordered; an access
 * they cannot order against the previous one (an ordering through agents outside the clock, or a real race) is
 * returned undecided, except that a host's end of a launch (which joined every thread block of its rank)
 * orders all that launch's accesses of those thread blocks. With no relaxed operations (undecided here) the
 * reference's data and control clocks are equal, so one clock per agent is kept.
 *
 * Memory. A join of one rank's clock into another's goes through a translation of their shared columns, kept
 * per pair of ranks. When ranks are connected to most others (an all-to-all lowered without relays), nearly
 * every proxy and host is in every clock: then every clock keeps all of them in the same 2n columns after its
 * own (dense mode, chosen when that costs at most half again the memory), which join without a translation, so
 * a translation holds only the few thread-block columns two ranks share (65x8 direct: 3.6 GB of translations
 * before). A clock copied into a signal in flight is kept in 16 bits an entry when every entry fits.
 */
#include "mscclpp_common.h"

#include <stddef.h>

#define MAX_THREADS_PER_BLOCK 1024
#define MAX_GPUS 4096
#define MAX_CELLS (1LL << 24)  /* chunks per buffer this core holds (the reference's MAX_INTERP_CELLS) */
#define MAX_AGENTS (1 << 22)
#define MAX_CLOCK_BYTES (3LL << 30) /* agents x clock width x 4 B: refused as a limit above this */
#define MAX_PENDING_BYTES (2LL << 30)
#define MAX_STEPS_TOTAL 200000000LL

typedef struct {
    int nops;
    uint32_t op0;
    int nch[3];
    uint32_t ch0[3]; /* per channel type: global channel ids (int pool) */
    int nrb[3];
    uint32_t rb0[3]; /* per channel type: global remote buffer ids (int pool) */
} tb_t;

typedef struct {
    int rank, type, access; /* access: bit CT_MEM / CT_PORT */
} rbuf_t;

typedef struct {
    i64 in_c, out_c, scr_c;
    int ntb, tb0;
    int npeer[3];
    uint32_t peer0[3]; /* flattened connected_to per type (int pool) */
    int nrbuf;
    uint32_t rbuf0; /* remote buffers (rbuf pool) */
    int nsem;
    uint32_t sem0; /* semaphore init values (int pool) */
} gpu_t;

typedef struct {
    int n, ll;
    i64 align, nthreads;
    u64 min_msg, max_msg;
    gpu_t *gpus;
    tb_t *tbs;
    int ntbs, cap_tbs;
    op_t *ops;
    size_t nops, cap_ops;
    ref_t *refs;
    size_t nrefs, cap_refs;
    int32_t *ints;
    size_t nints, cap_ints;
    rbuf_t *rbufs;
    size_t nrbufs, cap_rbufs;
    const char *why; /* why undecided */
} plan_t;

/* ------------------------------------------------------------------ growable pools (GROW: mscclpp_common.h) */
static int push_int(plan_t *P, int32_t v) {
    GROW(P->ints, P->nints, P->cap_ints, int32_t);
    P->ints[P->nints++] = v;
    return 1;
}

/* ------------------------------------------------------------------ the JSON text, as emit_json writes it */
typedef struct {
    const char *p, *end;
} cur_t;

static void ws(cur_t *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\n' || *c->p == '\r' || *c->p == '\t')) c->p++;
}

static int ch(cur_t *c, char x) {
    ws(c);
    if (c->p < c->end && *c->p == x) {
        c->p++;
        return 1;
    }
    return 0;
}

static int peek(cur_t *c, char x) {
    ws(c);
    return c->p < c->end && *c->p == x;
}

/* a string without escapes, copied into out (at most cap-1 bytes) */
static int str(cur_t *c, char *out, size_t cap) {
    if (!ch(c, '"')) return 0;
    size_t k = 0;
    while (c->p < c->end && *c->p != '"') {
        if (*c->p == '\\' || (unsigned char)*c->p < 0x20) return 0;
        if (k + 1 < cap) out[k++] = *c->p;
        else if (out) return 0;
        c->p++;
    }
    if (c->p >= c->end) return 0;
    c->p++;
    if (out) out[k] = 0;
    return 1;
}

static int key(cur_t *c, const char *name) {
    char buf[40];
    if (!str(c, buf, sizeof(buf)) || strcmp(buf, name) != 0) return 0;
    return ch(c, ':');
}

/* the next key is name (not consumed otherwise) */
static int next_key(cur_t *c, const char *name) {
    ws(c);
    size_t L = strlen(name);
    return c->end - c->p > (long)(L + 2) && c->p[0] == '"' && memcmp(c->p + 1, name, L) == 0 && c->p[L + 1] == '"';
}

static int u64v(cur_t *c, u64 *v) {
    ws(c);
    const char *s = c->p;
    if (s >= c->end || *s < '0' || *s > '9') return 0;
    if (*s == '0' && s + 1 < c->end && s[1] >= '0' && s[1] <= '9') return 0; /* no leading zeros */
    u64 x = 0;
    while (s < c->end && *s >= '0' && *s <= '9') {
        u64 d = (u64)(*s - '0');
        if (x > (18446744073709551615ULL - d) / 10) return 0;
        x = x * 10 + d;
        s++;
    }
    if (s < c->end && (*s == '.' || *s == 'e' || *s == 'E')) return 0;
    c->p = s;
    *v = x;
    return 1;
}

/* a non-negative integer below 2^31 */
static int nat(cur_t *c, int32_t *v) {
    u64 x;
    if (!u64v(c, &x) || x > 0x7fffffffULL) return 0;
    *v = (int32_t)x;
    return 1;
}

static int boolv(cur_t *c, int *v) {
    ws(c);
    if (c->end - c->p >= 4 && memcmp(c->p, "true", 4) == 0) {
        c->p += 4;
        *v = 1;
        return 1;
    }
    if (c->end - c->p >= 5 && memcmp(c->p, "false", 5) == 0) {
        c->p += 5;
        *v = 0;
        return 1;
    }
    return 0;
}

static int ctype_of(const char *s) {
    if (strcmp(s, "memory") == 0) return CT_MEM;
    if (strcmp(s, "port") == 0) return CT_PORT;
    return -1;
}

/* [int, int, ...] appended to the int pool; count in *n */
static int int_list(cur_t *c, plan_t *P, int *n, int maxn) {
    if (!ch(c, '[')) return 0;
    *n = 0;
    if (ch(c, ']')) return 1;
    do {
        int32_t v;
        if (!nat(c, &v) || !push_int(P, v)) return 0;
        if (++*n > maxn) return 0;
    } while (ch(c, ','));
    return ch(c, ']');
}

/* {"type": "i", "index": 1, "size": 2} or {"buffer_id": 0, "index": 1, "size": 2} */
static int ref(cur_t *c, plan_t *P) {
    ref_t r;
    if (!ch(c, '{')) return 0;
    if (next_key(c, "type")) {
        char t[4];
        if (!key(c, "type") || !str(c, t, sizeof(t))) return 0;
        if (strcmp(t, "i") == 0) r.buf = B_I;
        else if (strcmp(t, "o") == 0) r.buf = B_O;
        else if (strcmp(t, "s") == 0) r.buf = B_S;
        else return 0;
    } else {
        int32_t b;
        if (!key(c, "buffer_id") || !nat(c, &b) || b > 1000) return 0;
        r.buf = REMOTE + b;
    }
    if (!ch(c, ',') || !key(c, "index") || !nat(c, &r.index)) return 0;
    if (!ch(c, ',') || !key(c, "size") || !nat(c, &r.size)) return 0;
    if (!ch(c, '}')) return 0;
    GROW(P->refs, P->nrefs, P->cap_refs, ref_t);
    P->refs[P->nrefs++] = r;
    return 1;
}

static int ref_list(cur_t *c, plan_t *P, uint8_t *n) {
    if (!ch(c, '[')) return 0;
    int k = 0;
    if (!ch(c, ']')) {
        do {
            if (!ref(c, P) || ++k > MAX_REFS_PER_OP) return 0;
        } while (ch(c, ','));
        if (!ch(c, ']')) return 0;
    }
    *n = (uint8_t)k;
    return 1;
}

static const char *OP_NAMES[] = {"nop", "signal", "wait", "put", "copy", "sem_acquire", "sem_release", "ppkt", "upkt"};

/* one operation: "name", then the optional keys in the emitter's order */
static int op(cur_t *c, plan_t *P) {
    char name[16];
    op_t o;
    memset(&o, 0, sizeof(o));
    if (!ch(c, '{') || !key(c, "name") || !str(c, name, sizeof(name))) return 0;
    int kind = -1;
    for (int k = 0; k < 9; k++)
        if (strcmp(name, OP_NAMES[k]) == 0) kind = k;
    if (kind < 0) return 0;
    o.kind = (uint8_t)kind;
    o.ref = (uint32_t)P->nrefs;
    o.ids = (uint32_t)P->nints;
    int nsrc_seen = 0, ndst_seen = 0, ids_seen = 0, ct_seen = 0, sem_seen = 0;
    while (ch(c, ',')) {
        if (next_key(c, "src_buff") && !nsrc_seen && !ndst_seen && !ids_seen && !ct_seen && !sem_seen) {
            if (!key(c, "src_buff") || !ref_list(c, P, &o.nsrc)) return 0;
            nsrc_seen = 1;
        } else if (next_key(c, "dst_buff") && !ndst_seen && !ids_seen && !ct_seen && !sem_seen) {
            if (!nsrc_seen || !key(c, "dst_buff") || !ref_list(c, P, &o.ndst)) return 0;
            ndst_seen = 1;
        } else if (next_key(c, "channel_ids") && !ids_seen && !ct_seen && !sem_seen) {
            int n;
            if (!key(c, "channel_ids") || !int_list(c, P, &n, MAX_CHANNELS_PER_OP)) return 0;
            o.nids = (uint8_t)n;
            ids_seen = 1;
        } else if (next_key(c, "channel_type") && !ct_seen && !sem_seen) {
            char t[16];
            if (!key(c, "channel_type") || !str(c, t, sizeof(t))) return 0;
            int ct = ctype_of(t);
            if (ct < 0) return 0;
            o.ct = (uint8_t)ct;
            ct_seen = 1;
        } else if (next_key(c, "semaphore_ids") && !sem_seen && !ids_seen) {
            int n;
            if (!key(c, "semaphore_ids") || !int_list(c, P, &n, MAX_SEMAPHORES_PER_OP)) return 0;
            o.nids = (uint8_t)n;
            sem_seen = 1;
        } else
            return 0; /* a key this core does not read (pipelines, barriers, groups, reduce_op, ...) */
    }
    if (!ch(c, '}')) return 0;
    /* the fields each kind needs, and nothing else (the reader's rules for the emitted subset) */
    int data = kind == OP_PUT || kind == OP_COPY || kind == OP_PPKT || kind == OP_UPKT;
    if (data != nsrc_seen || data != ndst_seen) return 0;
    if (kind == OP_SIGNAL || kind == OP_WAIT) {
        if (!ids_seen || !ct_seen || o.ct == CT_NONE || o.nids < 1) return 0;
    } else if (kind == OP_ACQ || kind == OP_REL) {
        if (!sem_seen || o.nids < 1 || ct_seen || ids_seen) return 0;
    } else if (kind == OP_NOP) {
        if (ids_seen || ct_seen || sem_seen) return 0;
    } else if (kind == OP_PUT || kind == OP_PPKT) {
        if (!ct_seen || sem_seen || (o.ct == CT_PORT) != ids_seen) return 0;
    } else { /* copy, upkt */
        if (ct_seen || ids_seen || sem_seen) return 0;
    }
    GROW(P->ops, P->nops, P->cap_ops, op_t);
    P->ops[P->nops++] = o;
    return 1;
}

/* {"channel_type": "memory", "channel_ids": [..]} (or access_channel_type / remote_buffer_ids) per type */
static int tb_tables(cur_t *c, plan_t *P, int *n3, uint32_t *first3, const char *tkey, const char *ikey) {
    if (!ch(c, '[')) return 0;
    for (int t = 0; t < 3; t++) n3[t] = 0, first3[t] = 0;
    if (ch(c, ']')) return 1;
    int seen = 0;
    do {
        char t[16];
        int n;
        if (!ch(c, '{') || !key(c, tkey) || !str(c, t, sizeof(t))) return 0;
        int ct = ctype_of(t);
        if (ct < 0 || (seen & (1 << ct))) return 0; /* one entry per type (the emitter's form) */
        seen |= 1 << ct;
        first3[ct] = (uint32_t)P->nints;
        if (!ch(c, ',') || !key(c, ikey) || !int_list(c, P, &n, 64) || !ch(c, '}')) return 0;
        n3[ct] = n;
    } while (ch(c, ','));
    return ch(c, ']');
}

static int threadblock(cur_t *c, plan_t *P, int k) {
    GROW(P->tbs, P->ntbs, P->cap_tbs, tb_t);
    tb_t *tb = &P->tbs[P->ntbs];
    memset(tb, 0, sizeof(*tb));
    int32_t id;
    if (!ch(c, '{') || !key(c, "id") || !nat(c, &id) || id != k) return 0;
    if (!ch(c, ',') || !key(c, "channels")) return 0;
    if (!tb_tables(c, P, tb->nch, tb->ch0, "channel_type", "channel_ids")) return 0;
    if (!ch(c, ',') || !key(c, "remote_buffer_refs")) return 0;
    if (!tb_tables(c, P, tb->nrb, tb->rb0, "access_channel_type", "remote_buffer_ids")) return 0;
    if (!ch(c, ',') || !key(c, "ops") || !ch(c, '[')) return 0;
    tb->op0 = (uint32_t)P->nops;
    if (!ch(c, ']')) {
        do {
            if (!op(c, P)) return 0;
            if (P->nops - tb->op0 > MAX_OPS_PER_TB) return 0;
        } while (ch(c, ','));
        if (!ch(c, ']')) return 0;
    }
    tb->nops = (int)(P->nops - tb->op0);
    if (!ch(c, '}')) return 0;
    P->ntbs++;
    return 1;
}

static int gpu(cur_t *c, plan_t *P, int r) {
    gpu_t *g = &P->gpus[r];
    memset(g, 0, sizeof(*g));
    int32_t id, v;
    if (!ch(c, '{') || !key(c, "id") || !nat(c, &id) || id != r) return 0;
    if (!ch(c, ',') || !key(c, "input_chunks") || !nat(c, &v)) return 0;
    g->in_c = v;
    if (!ch(c, ',') || !key(c, "output_chunks") || !nat(c, &v)) return 0;
    g->out_c = v;
    if (!ch(c, ',') || !key(c, "scratch_chunks") || !nat(c, &v)) return 0;
    g->scr_c = v;
    if (!ch(c, ',') || !key(c, "threadblocks") || !ch(c, '[')) return 0;
    g->tb0 = P->ntbs;
    if (!ch(c, ']')) {
        int k = 0;
        do {
            if (!threadblock(c, P, k++)) return 0;
        } while (ch(c, ','));
        if (!ch(c, ']')) return 0;
    }
    g->ntb = P->ntbs - g->tb0;
    /* "channels": [{"channel_type": ..., "connected_to": [...]}, ...]: one group per type, memory first */
    if (!ch(c, ',') || !key(c, "channels") || !ch(c, '[')) return 0;
    if (!ch(c, ']')) {
        int seen = 0;
        do {
            char t[16];
            int n;
            if (!ch(c, '{') || !key(c, "channel_type") || !str(c, t, sizeof(t))) return 0;
            int ct = ctype_of(t);
            if (ct < 0 || (seen & (1 << ct)) || (ct == CT_MEM && (seen & (1 << CT_PORT)))) return 0;
            seen |= 1 << ct;
            g->peer0[ct] = (uint32_t)P->nints;
            if (!ch(c, ',') || !key(c, "connected_to") || !int_list(c, P, &n, 1 << 20) || !ch(c, '}')) return 0;
            g->npeer[ct] = n;
        } while (ch(c, ','));
        if (!ch(c, ']')) return 0;
    }
    /* "remote_buffers": [{"rank": 1, "type": "s", "access_channel_types": ["memory"]}, ...] */
    if (!ch(c, ',') || !key(c, "remote_buffers") || !ch(c, '[')) return 0;
    g->rbuf0 = (uint32_t)P->nrbufs;
    if (!ch(c, ']')) {
        do {
            rbuf_t b;
            char t[16];
            int32_t rk;
            if (!ch(c, '{') || !key(c, "rank") || !nat(c, &rk)) return 0;
            b.rank = rk;
            if (!ch(c, ',') || !key(c, "type") || !str(c, t, sizeof(t))) return 0;
            if (strcmp(t, "i") == 0) b.type = B_I;
            else if (strcmp(t, "o") == 0) b.type = B_O;
            else if (strcmp(t, "s") == 0) b.type = B_S;
            else return 0;
            if (!ch(c, ',') || !key(c, "access_channel_types") || !ch(c, '[')) return 0;
            b.access = 0;
            if (!ch(c, ']')) {
                do {
                    if (!str(c, t, sizeof(t))) return 0;
                    int ct = ctype_of(t);
                    if (ct < 0) return 0;
                    b.access |= 1 << ct;
                } while (ch(c, ','));
                if (!ch(c, ']')) return 0;
            }
            if (!ch(c, '}')) return 0;
            GROW(P->rbufs, P->nrbufs, P->cap_rbufs, rbuf_t);
            P->rbufs[P->nrbufs++] = b;
        } while (ch(c, ','));
        if (!ch(c, ']')) return 0;
    }
    g->nrbuf = (int)(P->nrbufs - g->rbuf0);
    /* "semaphores": [{"init_value": 0}, ...] */
    if (!ch(c, ',') || !key(c, "semaphores") || !ch(c, '[')) return 0;
    g->sem0 = (uint32_t)P->nints;
    if (!ch(c, ']')) {
        do {
            int32_t v0;
            if (!ch(c, '{') || !key(c, "init_value") || !nat(c, &v0) || !ch(c, '}') || !push_int(P, v0)) return 0;
            g->nsem++;
        } while (ch(c, ','));
        if (!ch(c, ']')) return 0;
    }
    return ch(c, '}');
}

/* 1: parsed; 0: not the emitter's form (undecided) */
static int parse(const char *text, Py_ssize_t len, plan_t *P) {
    cur_t cc = {text, text + len}, *c = &cc;
    char buf[32];
    int b;
    if (!ch(c, '{') || !key(c, "name") || !str(c, NULL, 0)) return 0;
    if (!ch(c, ',') || !key(c, "collective") || !str(c, buf, sizeof(buf)) || strcmp(buf, "alltoall") != 0) return 0;
    if (!ch(c, ',') || !key(c, "protocol") || !str(c, buf, sizeof(buf))) return 0;
    if (strcmp(buf, "Simple") == 0) P->ll = 0;
    else if (strcmp(buf, "LL") == 0) P->ll = 1;
    else return 0;
    if (!ch(c, ',') || !key(c, "inplace") || !boolv(c, &b) || b) return 0;
    if (!ch(c, ',') || !key(c, "reuse_resources") || !boolv(c, &b) || b) return 0;
    if (!ch(c, ',') || !key(c, "gpus") || !ch(c, '[')) return 0;
    /* count the GPUs first (the top-level "id" keys), then parse them into a fixed array */
    int cap = 64, n = 0;
    P->gpus = (gpu_t *)malloc((size_t)cap * sizeof(gpu_t));
    if (!P->gpus) return 0;
    if (!ch(c, ']')) {
        do {
            if (n >= MAX_GPUS) return 0;
            if (n >= cap) {
                cap *= 2;
                gpu_t *ng = (gpu_t *)realloc(P->gpus, (size_t)cap * sizeof(gpu_t));
                if (!ng) return 0;
                P->gpus = ng;
            }
            if (!gpu(c, P, n)) return 0;
            n++;
        } while (ch(c, ','));
        if (!ch(c, ']')) return 0;
    }
    P->n = n;
    u64 v;
    int dbl;
    /* the reference's range (1..2^20): anything else is left to it, which says so */
    if (!ch(c, ',') || !key(c, "num_threads_per_block") || !u64v(c, &v) || v == 0 || v > (1u << 20)) return 0;
    P->nthreads = (i64)v;
    if (!ch(c, ',') || !key(c, "use_double_scratch_buffer") || !boolv(c, &dbl) || dbl) return 0;
    if (!ch(c, ',') || !key(c, "buffer_alignment") || !u64v(c, &v) || v == 0 || v > (1u << 20)) return 0;
    P->align = (i64)v;
    if (!ch(c, ',') || !key(c, "min_message_size") || !u64v(c, &P->min_msg)) return 0;
    if (!ch(c, ',') || !key(c, "max_message_size") || !u64v(c, &P->max_msg)) return 0;
    if (!ch(c, '}')) return 0;
    ws(c);
    return c->p == c->end && n >= 1;
}

/* ------------------------------------------------------------------ load checks (interp/load.py) */
static i64 capacity(const gpu_t *g, int buf) { return buf == B_I ? g->in_c : buf == B_O ? g->out_c : g->scr_c; }

/* (rank, buffer) of a remote reference of an op of channel type ct in thread block tb of rank r; 0 if invalid */
static int resolve_remote(const plan_t *P, int r, const tb_t *tb, int ct, const ref_t *rf, int *rank, int *buf) {
    int b = rf->buf - REMOTE;
    if (ct != CT_MEM && ct != CT_PORT) return 0;
    if (b < 0 || b >= tb->nrb[ct]) return 0;
    int q = P->ints[tb->rb0[ct] + b];
    const gpu_t *g = &P->gpus[r];
    if (q < 0 || q >= g->nrbuf) return 0;
    const rbuf_t *rb = &P->rbufs[g->rbuf0 + q];
    *rank = rb->rank;
    *buf = rb->type;
    return 1;
}

static int ref_ok(const plan_t *P, int r, const tb_t *tb, int ct, const ref_t *rf) {
    int rank = r, buf = rf->buf;
    if (rf->buf >= REMOTE) {
        if (!resolve_remote(P, r, tb, ct, rf, &rank, &buf)) return 0;
    }
    if (rank < 0 || rank >= P->n || rf->size < 1) return 0;
    return (i64)rf->index + rf->size <= capacity(&P->gpus[rank], buf);
}

static int op_ok(const plan_t *P, int r, const tb_t *tb, const op_t *o) {
    const gpu_t *g = &P->gpus[r];
    const int32_t *ids = P->ints + o->ids;
    const ref_t *src = P->refs + o->ref, *dst = src + o->nsrc;
    switch (o->kind) {
    case OP_NOP:
        return 1;
    case OP_SIGNAL:
    case OP_WAIT:
        for (int j = 0; j < o->nids; j++)
            if (ids[j] >= tb->nch[o->ct]) return 0;
        return 1;
    case OP_ACQ:
    case OP_REL:
        for (int j = 0; j < o->nids; j++)
            if (ids[j] >= g->nsem) return 0;
        return 1;
    default:
        break;
    }
    for (int j = 0; j < o->nsrc + o->ndst; j++)
        if (!ref_ok(P, r, tb, o->ct, &src[j])) return 0;
    if (o->kind == OP_PUT || o->kind == OP_PPKT) {
        if (o->nsrc != o->ndst || o->nsrc < 1 || o->ndst > MAX_CHANNELS_PER_OP) return 0;
        for (int j = 0; j < o->nsrc; j++) {
            if (src[j].buf >= REMOTE || dst[j].buf < REMOTE || src[j].size != dst[j].size) return 0;
            if (o->ct == CT_MEM && src[j].buf != src[0].buf) return 0; /* handlePut reads src_buff[0]'s buffer */
        }
        if (o->ct == CT_PORT) {
            if (o->nids != o->ndst) return 0;
            for (int j = 0; j < o->nids; j++)
                if (ids[j] >= tb->nch[CT_PORT]) return 0;
        }
        if (o->kind == OP_PPKT) {
            if (o->ct != CT_MEM) return 0;
            for (int j = 0; j < o->ndst; j++) {
                int rank, buf;
                if (!resolve_remote(P, r, tb, o->ct, &dst[j], &rank, &buf) || buf != B_S) return 0;
            }
        }
        return 1;
    }
    /* copy, upkt */
    if (o->nsrc != 1 || o->ndst != 1 || src[0].buf >= REMOTE || dst[0].buf >= REMOTE) return 0;
    if (src[0].size != dst[0].size) return 0;
    if (o->kind == OP_UPKT && src[0].buf != B_S) return 0;
    return 1;
}

/* static_checks + the pairing notes: 1 when the reference reports no error and no note */
static int static_ok(plan_t *P) {
    if (P->nthreads > MAX_THREADS_PER_BLOCK) return 0;
    if (P->min_msg > P->max_msg || P->align % 4) return 0;
    int n = P->n, packets = 0;
    for (int r = 0; r < n; r++) {
        const gpu_t *g = &P->gpus[r];
        for (int t = CT_MEM; t <= CT_PORT; t++)
            for (int j = 0; j < g->npeer[t]; j++) {
                int p = P->ints[g->peer0[t] + j];
                if (p < 0 || p >= n || p == r) return 0;
            }
        for (int q = 0; q < g->nrbuf; q++) {
            const rbuf_t *b = &P->rbufs[g->rbuf0 + q];
            if (b->rank < 0 || b->rank >= n || b->rank == r) return 0;
        }
        for (int k = 0; k < g->ntb; k++) {
            const tb_t *tb = &P->tbs[g->tb0 + k];
            for (int t = CT_MEM; t <= CT_PORT; t++) {
                if (tb->nch[t] > MAX_CHANNELS_PER_TB || tb->nrb[t] > MAX_CHANNELS_PER_TB) return 0;
                for (int j = 0; j < tb->nch[t]; j++)
                    if (P->ints[tb->ch0[t] + j] >= g->npeer[t]) return 0;
                for (int j = 0; j < tb->nrb[t]; j++) {
                    int q = P->ints[tb->rb0[t] + j];
                    if (q >= g->nrbuf || !(P->rbufs[g->rbuf0 + q].access & (1 << t))) return 0;
                }
            }
            for (int i = 0; i < tb->nops; i++) {
                const op_t *o = &P->ops[tb->op0 + i];
                if (!op_ok(P, r, tb, o)) return 0;
                packets |= o->kind == OP_PPKT || o->kind == OP_UPKT;
            }
        }
    }
    if (packets && !P->ll) return 0;
    /* pairing: r has as many channels of a type to p as p has to r (else a note: unpaired dummy connections) */
    for (int t = CT_MEM; t <= CT_PORT; t++) {
        int *cnt = (int *)calloc((size_t)n, sizeof(int));
        if (!cnt) return 0;
        int ok = 1;
        for (int r = 0; r < n && ok; r++) {
            const gpu_t *g = &P->gpus[r];
            for (int j = 0; j < g->npeer[t]; j++) cnt[P->ints[g->peer0[t] + j]]++;
            for (int j = 0; j < g->npeer[t]; j++) {
                int p = P->ints[g->peer0[t] + j];
                const gpu_t *h = &P->gpus[p];
                int back = 0;
                for (int m = 0; m < h->npeer[t]; m++) back += P->ints[h->peer0[t] + m] == r;
                if (back != cnt[p]) ok = 0;
            }
            for (int j = 0; j < g->npeer[t]; j++) cnt[P->ints[g->peer0[t] + j]] = 0;
        }
        free(cnt);
        if (!ok) return 0;
    }
    return 1;
}

/* choose_sizes + size_checks + layout_checks: the chunk bytes the plan runs with, or 0 when they fail */
static i64 sizes_ok(const plan_t *P, i64 chunk_bytes, const i64 *counts) {
    i64 A = P->align, cb = chunk_bytes;
    const gpu_t *g0 = &P->gpus[0];
    if (cb <= 0) {
        cb = A;
        if (g0->in_c && P->min_msg > (u64)(g0->in_c * cb)) {
            cb = (i64)((P->min_msg + (u64)g0->in_c - 1) / (u64)g0->in_c);
            cb = (cb + A - 1) / A * A;
        }
    }
    if (cb <= 0 || cb > (1LL << 40)) return 0;
    u64 s0 = (u64)g0->in_c * (u64)cb;
    if (s0 < P->min_msg || s0 > P->max_msg) return 0;
    for (int r = 0; r < P->n; r++) {
        const gpu_t *g = &P->gpus[r];
        i64 nin = g->in_c, nout = g->out_c;
        if (nin == 0 || nout == 0) return 0;
        i64 ib = nin * cb, ob = nout * cb;
        if (ib % A || ob % A || (ib / A) % nin || (ob / A) % nout || ib / nin != ob / nout) return 0;
        if ((u64)ib < P->min_msg || (u64)ib > P->max_msg) return 0;
        i64 scr = g->scr_c * (P->ll ? 2 : 1);
        i64 top = nin > nout ? nin : nout;
        if (scr > top) top = scr;
        if ((u64)(top * cb) > MAX_U32) return 0;
        if (nin > MAX_CELLS || nout > MAX_CELLS || scr > MAX_CELLS) return 0;
    }
    if (counts) { /* the manifest's layout: C chunks on every rank, holding every rank's input and output */
        int n = P->n;
        i64 need = 0;
        for (int q = 0; q < n; q++) {
            i64 row = 0, col = 0;
            for (int m = 0; m < n; m++) row += counts[(i64)q * n + m], col += counts[(i64)m * n + q];
            if (row > need) need = row;
            if (col > need) need = col;
        }
        for (int r = 0; r < n; r++)
            if (P->gpus[r].in_c != P->gpus[r].out_c || P->gpus[r].in_c < need) return 0;
    }
    return cb;
}

/* sync_lint (the kernel inserts no __syncthreads between operations): 1 when nothing is flagged */
typedef struct {
    int rank, buf, lo, hi, write;
} acc_t;

static int items(const op_t *o) {
    if (o->kind == OP_SIGNAL || o->kind == OP_WAIT || o->kind == OP_ACQ || o->kind == OP_REL) return o->nids;
    return o->ndst;
}

static int lint_ok(const plan_t *P) {
    acc_t acc[MAX_OPS_PER_TB * 2 * MAX_REFS_PER_OP];
    for (int r = 0; r < P->n; r++) {
        const gpu_t *g = &P->gpus[r];
        for (int k = 0; k < g->ntb; k++) {
            const tb_t *tb = &P->tbs[g->tb0 + k];
            int nacc = 0, data_since = 0, wait_since = 0, wait_items = 0;
            for (int i = 0; i < tb->nops; i++) {
                const op_t *o = &P->ops[tb->op0 + i];
                if (o->kind == OP_NOP) {
                    nacc = data_since = wait_since = wait_items = 0;
                    continue;
                }
                int port = o->ct == CT_PORT;
                int publish = o->kind == OP_SIGNAL || o->kind == OP_REL || (port && (o->kind == OP_PUT || o->kind == OP_PPKT));
                if (publish) {
                    if (data_since) return 0;
                    int nit = items(o);
                    if (port && wait_since && o->ndst > 1 && (o->kind == OP_PUT || o->kind == OP_PPKT)) return 0;
                    if (wait_since && (wait_items > 1 || nit > 1)) return 0;
                }
                int data = o->kind == OP_PUT || o->kind == OP_COPY || o->kind == OP_PPKT || o->kind == OP_UPKT;
                if (data && !port) {
                    if (wait_since) return 0;
                    const ref_t *rf = P->refs + o->ref;
                    int base = nacc;
                    for (int j = 0; j < o->nsrc + o->ndst; j++) {
                        acc_t a;
                        a.write = j >= o->nsrc;
                        a.rank = r;
                        a.buf = rf[j].buf;
                        if (rf[j].buf >= REMOTE && !resolve_remote(P, r, tb, o->ct, &rf[j], &a.rank, &a.buf)) continue;
                        a.lo = rf[j].index;
                        a.hi = rf[j].index + rf[j].size;
                        for (int m = 0; m < base; m++) {
                            const acc_t *b = &acc[m];
                            if (a.rank == b->rank && a.buf == b->buf && a.lo < b->hi && b->lo < a.hi && (a.write || b->write))
                                return 0;
                        }
                        acc[nacc++] = a;
                    }
                    data_since = 1;
                }
                if (o->kind == OP_WAIT || o->kind == OP_ACQ) {
                    wait_since = 1;
                    if (items(o) > wait_items) wait_items = items(o);
                }
            }
        }
    }
    return 1;
}

/* ================================================================== the machine (interp/machine.py) */
typedef struct snap_s {
    int refs;  /* the agent's cache and every pending use hold one */
    int rank;  /* whose columns */
    int agent; /* whose clock it copies (its own entry is given by each use: own) */
    int wide;  /* entries are int32 (else uint16: every entry below 65536, as in most clocks) */
    union {
        int32_t w[1];
        uint16_t h[1];
    } v;
} snap_t;

/* a use of a snapshot: the agent's clock at the time = the shared vector, with its own entry at own */
typedef struct {
    snap_t *s;
    int32_t own;
} pend_t;

typedef struct {
    pend_t *q;
    int head, len, cap;
} fifo_t;

static int fifo_push(fifo_t *f, pend_t s) {
    if (f->head + f->len >= f->cap) {
        if (f->head > 0) {
            memmove(f->q, f->q + f->head, (size_t)f->len * sizeof(pend_t));
            f->head = 0;
        }
        if (f->len >= f->cap) {
            int nc = f->cap ? f->cap * 2 : 4;
            pend_t *nq = (pend_t *)realloc(f->q, (size_t)nc * sizeof(pend_t));
            if (!nq) return 0;
            f->q = nq;
            f->cap = nc;
        }
    }
    f->q[f->head + f->len] = s;
    f->len++;
    return 1;
}

static pend_t fifo_pop(fifo_t *f) {
    pend_t s = f->q[f->head];
    f->head++;
    f->len--;
    if (f->len == 0) f->head = 0;
    return s;
}

typedef struct {
    i64 inbound, expected;
    fifo_t pend;
    int pair;      /* paired end (global index), -1: unpaired */
    int waiter;    /* the one agent that waits on this end, -1 none yet */
    int signaller; /* the one thread block that signals toward this end (through the proxy for port), -1 */
    int blocked;   /* agent blocked on it, -1 */
    int rank;
} chan_t;

typedef struct {
    i64 value, init, expected, consumed;
    fifo_t pend;
    int waiter, signaller, blocked;
} sem_t;

/* a proxy FIFO item: a port put (src -> dst cells) or a signal toward a channel end */
typedef struct {
    int kind; /* 0 put, 1 signal */
    int chan;
    int srank, sbuf, slo, n, drank, dbuf, dlo, launch;
    pend_t snap;
} item_t;

typedef struct {
    uint64_t *val;
    int32_t *wa, *wt, *ra, *rt;
    uint8_t *wl, *rl;
    int32_t *xhead; /* extra readers since the last write: head of a list in the machine's pool, -1 */
    i64 cells;
    /* LL packets (scratch only) */
    uint64_t *pval;
    int32_t *pflag;
    int32_t *psnap;
    i64 npk;
} buf_t;

typedef struct {
    int32_t agent, t, next;
    uint8_t launch;
} xread_t;

typedef struct {
    int32_t *cq, *cr, n;
} map_t;

typedef struct {
    const plan_t *P;
    const i64 *counts; /* the manifest layout (N*N) or NULL */
    int n, ntb, na, launches;
    i64 chunk;
    int *rank_of;   /* per agent */
    int *first_pid; /* per rank, n + 1 */
    /* clock columns: per rank its thread-block columns (hashed), then, in dense mode, one column for every rank's
       proxy and host (the same 2n columns on every rank: a join copies them without a translation) */
    int dense;
    int *S;          /* hashed columns per rank (all of them when not dense) */
    int *W;          /* width per rank: S, plus 2n when dense */
    int32_t **kgid;  /* per rank: agent of each column */
    int32_t **hkey;  /* per rank: open-addressing agent -> column */
    int32_t **hval;
    int *hcap;
    int32_t *clk;    /* all clocks */
    i64 *clk_off;    /* per agent */
    int *own;        /* per agent: its own column */
    map_t *maps;     /* per (q, r) translation, computed on first use; n * n entries when small, else hashed */
    u64 *map_keys;
    int map_cap;
    /* channels, semaphores */
    int *chan_base; /* per rank * 3 + type: first global end */
    chan_t *chans;
    int nchans;
    int *sem_base;
    sem_t *sems;
    /* per thread block */
    int *pc, *launch_of, *done, *state_n;
    int32_t (*tickets)[MAX_SEMAPHORES_PER_OP];
    uint32_t *state_mask;
    int *done_in_launch, *rank_launch, *finished;
    /* proxies */
    item_t **fifo;
    int *fifo_head, *fifo_len, *fifo_cap;
    /* memory */
    buf_t *mem; /* rank * 3 + buffer */
    xread_t *xr;
    int nxr, capxr, xfree;
    int32_t *host_end; /* rank * launches + launch: the host's clock after that launch ended, 0: not yet */
    /* snapshots: per agent the last one (valid while its clock only ticked since), its clock version */
    snap_t **cache;
    uint32_t *ver, *cache_ver;
    /* LL packet snapshots */
    pend_t *psnaps;
    int npsnaps, cap_psnaps;
    int *pkt_blocked_head; /* per rank: agents blocked on packets (list through pkt_next) */
    int *pkt_next;
    /* worklist */
    int *work;
    i64 whead, wlen, wcap;
    uint8_t *queued;
    i64 steps;
    i64 pending_bytes;
    int memo_w[2], memo_r[2], memo_c[2]; /* the last column lookups of ordered() */
    const char *why;
} mach_t;

static int fail(mach_t *M, const char *why) {
    if (!M->why) M->why = why;
    return 0;
}

/* ------------------------------------------------------------------ columns */
static int col_of(const mach_t *M, int r, int agent) {
    if (M->dense && agent >= M->ntb) return M->S[r] + (agent - M->ntb); /* proxies, then hosts */
    int cap = M->hcap[r];
    uint32_t h = (uint32_t)((u64)agent * 0x9E3779B97F4A7C15ULL >> 32) & (uint32_t)(cap - 1);
    for (;;) {
        int32_t k = M->hkey[r][h];
        if (k == agent) return M->hval[r][h];
        if (k < 0) return -1;
        h = (h + 1) & (uint32_t)(cap - 1);
    }
}

static int col_add(mach_t *M, int r, int agent, int32_t *ncols, int32_t *cols) {
    if (col_of(M, r, agent) >= 0) return 1;
    int cap = M->hcap[r];
    uint32_t h = (uint32_t)((u64)agent * 0x9E3779B97F4A7C15ULL >> 32) & (uint32_t)(cap - 1);
    while (M->hkey[r][h] >= 0) h = (h + 1) & (uint32_t)(cap - 1);
    M->hkey[r][h] = agent;
    M->hval[r][h] = *ncols;
    cols[(*ncols)++] = agent;
    return 1;
}

static int proxy_of(const mach_t *M, int r) { return M->ntb + r; }
static int host_of(const mach_t *M, int r) { return M->ntb + M->n + r; }

/* rank r's columns from its list (foreign thread blocks v >= 0, connected ranks -1 - v): its own thread blocks
   and the foreign ones, then (not dense) its own and its connected ranks' proxies and hosts. Returns the thread
   block columns, -1 without memory. */
static int fill_columns(mach_t *M, int r, const int32_t *list, int nlist) {
    int own = M->first_pid[r + 1] - M->first_pid[r] + 2;
    int want = own + 2 * nlist + 4;
    int cap = 16;
    while (cap < 2 * want) cap *= 2;
    free(M->hkey[r]), free(M->hval[r]), free(M->kgid[r]);
    M->hcap[r] = cap;
    M->hkey[r] = (int32_t *)malloc((size_t)cap * sizeof(int32_t));
    M->hval[r] = (int32_t *)malloc((size_t)cap * sizeof(int32_t));
    M->kgid[r] = (int32_t *)malloc((size_t)want * sizeof(int32_t));
    if (!M->hkey[r] || !M->hval[r] || !M->kgid[r]) return -1;
    memset(M->hkey[r], 0xff, (size_t)cap * sizeof(int32_t));
    int32_t *cols = M->kgid[r], nc = 0;
    for (int a = M->first_pid[r]; a < M->first_pid[r + 1]; a++) col_add(M, r, a, &nc, cols);
    for (int i = 0; i < nlist; i++)
        if (list[i] >= 0) col_add(M, r, list[i], &nc, cols);
    int tbcols = nc;
    if (!M->dense) {
        col_add(M, r, proxy_of(M, r), &nc, cols);
        col_add(M, r, host_of(M, r), &nc, cols);
        for (int i = 0; i < nlist; i++)
            if (list[i] < 0) {
                col_add(M, r, proxy_of(M, -1 - list[i]), &nc, cols);
                col_add(M, r, host_of(M, -1 - list[i]), &nc, cols);
            }
    }
    M->S[r] = nc;
    M->W[r] = nc + (M->dense ? 2 * M->n : 0);
    return tbcols;
}

/* every rank's columns: its own agents; the thread blocks of other ranks with a channel or a remote buffer to
   it; the proxies and hosts of the ranks connected to it (either way), or of every rank (dense) */
static int build_columns(mach_t *M) {
    const plan_t *P = M->P;
    int n = M->n;
    /* per rank: the set of foreign tbs and connected ranks, as lists (deduplicated by the column hash) */
    int *nlist = (int *)calloc((size_t)n, sizeof(int));
    int *caplist = (int *)calloc((size_t)n, sizeof(int));
    int32_t **list = (int32_t **)calloc((size_t)n, sizeof(int32_t *));
    if (!nlist || !caplist || !list) return 0;
#define LPUSH(x, v)                                                                           \
    do {                                                                                      \
        if (nlist[x] >= caplist[x]) {                                                         \
            int nc_ = caplist[x] ? caplist[x] * 2 : 16;                                       \
            int32_t *nl_ = (int32_t *)realloc(list[x], (size_t)nc_ * sizeof(int32_t));        \
            if (!nl_) return 0;                                                               \
            list[x] = nl_;                                                                    \
            caplist[x] = nc_;                                                                 \
        }                                                                                     \
        list[x][nlist[x]++] = (v);                                                            \
    } while (0)
    for (int r = 0; r < n; r++) {
        const gpu_t *g = &P->gpus[r];
        for (int k = 0; k < g->ntb; k++) {
            const tb_t *tb = &P->tbs[g->tb0 + k];
            int pid = M->first_pid[r] + k;
            for (int t = CT_MEM; t <= CT_PORT; t++) {
                for (int j = 0; j < tb->nch[t]; j++) {
                    int x = P->ints[g->peer0[t] + P->ints[tb->ch0[t] + j]];
                    LPUSH(x, pid);
                    LPUSH(x, -1 - r); /* connected rank r (its proxy and host) */
                    LPUSH(r, -1 - x);
                }
                for (int j = 0; j < tb->nrb[t]; j++) {
                    int x = P->rbufs[g->rbuf0 + P->ints[tb->rb0[t] + j]].rank;
                    LPUSH(x, pid);
                    LPUSH(x, -1 - r);
                    LPUSH(r, -1 - x);
                }
            }
        }
    }
    /* sparse columns first; then dense mode when its clocks take at most half again as much memory (a rank
       connected to most ranks already has most proxies and hosts: all-to-all plans lowered without relays) */
    i64 sparse = 0, dense = 0;
    for (int r = 0; r < n; r++) {
        int tbcols = fill_columns(M, r, list[r], nlist[r]);
        if (tbcols < 0) return fail(M, "limit: memory");
        i64 agents = M->first_pid[r + 1] - M->first_pid[r] + 2;
        sparse += agents * M->W[r];
        dense += agents * (tbcols + 2 * (i64)n);
    }
    if (2 * dense <= 3 * sparse) {
        M->dense = 1;
        for (int r = 0; r < n; r++)
            if (fill_columns(M, r, list[r], nlist[r]) < 0) return fail(M, "limit: memory");
    }
    i64 total = M->dense ? dense : sparse;
    for (int r = 0; r < n; r++) free(list[r]);
#undef LPUSH
    free(list);
    free(nlist);
    free(caplist);
    if (total * 4 > MAX_CLOCK_BYTES) return fail(M, "limit: clocks");
    M->clk = (int32_t *)calloc((size_t)total, sizeof(int32_t));
    if (!M->clk) return fail(M, "limit: memory for clocks");
    i64 off = 0;
    for (int a = 0; a < M->na; a++) {
        int r = M->rank_of[a];
        M->clk_off[a] = off;
        off += M->W[r];
        M->own[a] = col_of(M, r, a);
        M->clk[M->clk_off[a] + M->own[a]] = 1; /* the reference starts every clock at 1 on its diagonal */
    }
    return 1;
}

static map_t *get_map(mach_t *M, int q, int r) {
    u64 k = (u64)q * (u64)M->n + (u64)r + 1;
    uint32_t h = (uint32_t)((k * 0x9E3779B97F4A7C15ULL) >> 40) & (uint32_t)(M->map_cap - 1);
    while (M->map_keys[h] && M->map_keys[h] != k) h = (h + 1) & (uint32_t)(M->map_cap - 1);
    map_t *m = &M->maps[h];
    if (M->map_keys[h] == k) return m;
    M->map_keys[h] = k;
    int w = M->S[q]; /* (dense: the proxy and host columns need no translation) */
    m->cq = (int32_t *)malloc((size_t)w * sizeof(int32_t) + 1);
    m->cr = (int32_t *)malloc((size_t)w * sizeof(int32_t) + 1);
    if (!m->cq || !m->cr) return NULL;
    m->n = 0;
    for (int c = 0; c < w; c++) {
        int cr = col_of(M, r, M->kgid[q][c]);
        if (cr >= 0) {
            m->cq[m->n] = c;
            m->cr[m->n] = cr;
            m->n++;
        }
    }
    /* kept as long as the machine: only the matches (a rank pair shares few of its columns) */
    int32_t *cq = (int32_t *)realloc(m->cq, (size_t)m->n * sizeof(int32_t) + 1);
    int32_t *cr = (int32_t *)realloc(m->cr, (size_t)m->n * sizeof(int32_t) + 1);
    if (cq) m->cq = cq;
    if (cr) m->cr = cr;
    return m;
}

static inline int32_t *clk_of(mach_t *M, int a) { return M->clk + M->clk_off[a]; }

static void tick(mach_t *M, int a) { clk_of(M, a)[M->own[a]]++; }

static i64 snap_bytes(const mach_t *M, const snap_t *s) {
    return (i64)M->W[s->rank] * (s->wide ? 4 : 2);
}

static void drop(mach_t *M, snap_t *s) {
    if (--s->refs > 0) return;
    M->pending_bytes -= snap_bytes(M, s);
    free(s);
}

/* the agent's clock now, shared with its earlier snapshots while only its own entry moved; kept in 16 bits an
   entry when every entry fits (pending snapshots were most of the memory of a large all-to-all) */
static pend_t snap(mach_t *M, int a) {
    pend_t p = {NULL, 0};
    int r = M->rank_of[a], w = M->W[r];
    snap_t *s = M->cache[a];
    if (!s || M->cache_ver[a] != M->ver[a]) {
        const int32_t *c = clk_of(M, a);
        int wide = 0;
        for (int i = 0; i < w && !wide; i++) wide = c[i] > 0xffff;
        s = (snap_t *)malloc(offsetof(snap_t, v) + (size_t)w * (wide ? 4 : 2) + 4);
        if (!s) return p;
        s->refs = 1; /* the cache's */
        s->rank = r;
        s->agent = a;
        s->wide = wide;
        if (wide) memcpy(s->v.w, c, (size_t)w * sizeof(int32_t));
        else
            for (int i = 0; i < w; i++) s->v.h[i] = (uint16_t)c[i];
        M->pending_bytes += snap_bytes(M, s);
        if (M->cache[a]) drop(M, M->cache[a]);
        M->cache[a] = s;
        M->cache_ver[a] = M->ver[a];
    }
    s->refs++;
    p.s = s;
    p.own = clk_of(M, a)[M->own[a]];
    return p;
}

static inline int32_t snap_at(const snap_t *s, int i) { return s->wide ? s->v.w[i] : (int32_t)s->v.h[i]; }

/* c[to + i] = max(c[to + i], s[from + i]) for i < len */
static void join_run(int32_t *c, int to, const snap_t *s, int from, int len) {
    if (s->wide) {
        const int32_t *v = s->v.w + from;
        for (int i = 0; i < len; i++)
            if (v[i] > c[to + i]) c[to + i] = v[i];
    } else {
        const uint16_t *v = s->v.h + from;
        for (int i = 0; i < len; i++)
            if ((int32_t)v[i] > c[to + i]) c[to + i] = v[i];
    }
}

/* the agent's clock joins a snapshot (of its own rank or another's) */
static int join(mach_t *M, int a, pend_t p) {
    const snap_t *s = p.s;
    int r = M->rank_of[a];
    int32_t *c = clk_of(M, a);
    M->ver[a]++;
    if (s->rank == r) {
        join_run(c, 0, s, 0, M->W[r]);
        int oc = M->own[s->agent];
        if (p.own > c[oc]) c[oc] = p.own;
        return 1;
    }
    map_t *m = get_map(M, s->rank, r);
    if (!m) return fail(M, "limit: memory");
    for (int i = 0; i < m->n; i++) {
        int32_t v = snap_at(s, m->cq[i]);
        if (v > c[m->cr[i]]) c[m->cr[i]] = v;
    }
    if (M->dense) join_run(c, M->S[r], s, M->S[s->rank], 2 * M->n);
    int oc = col_of(M, r, s->agent);
    if (oc >= 0 && p.own > c[oc]) c[oc] = p.own;
    return 1;
}

static void join_agent(mach_t *M, int a, int b) { /* same rank */
    int32_t *c = clk_of(M, a), *d = clk_of(M, b);
    M->ver[a]++;
    for (int i = 0; i < M->W[M->rank_of[a]]; i++)
        if (d[i] > c[i]) c[i] = d[i];
}

/* is agent w's access at its clock t (in launch lw) ordered before what agent a does now? */
static int ordered(mach_t *M, int a, int w, int32_t t, int lw) {
    int r = M->rank_of[a];
    int col;
    if (w == M->memo_w[0] && r == M->memo_r[0]) col = M->memo_c[0];
    else if (w == M->memo_w[1] && r == M->memo_r[1]) col = M->memo_c[1];
    else {
        col = col_of(M, r, w);
        M->memo_w[1] = M->memo_w[0], M->memo_r[1] = M->memo_r[0], M->memo_c[1] = M->memo_c[0];
        M->memo_w[0] = w, M->memo_r[0] = r, M->memo_c[0] = col;
    }
    int32_t *c = clk_of(M, a);
    if (col >= 0) return c[col] >= t;
    if (w < M->ntb) { /* a thread block's accesses of a launch precede its host's end of that launch */
        int q = M->rank_of[w];
        int hc = col_of(M, r, host_of(M, q));
        int32_t he = M->host_end[(i64)q * M->launches + lw];
        if (hc >= 0 && he > 0 && c[hc] >= he) return 1;
    }
    return 0;
}

/* ------------------------------------------------------------------ memory and races (interp/races.py) */
static int xr_push(mach_t *M, buf_t *b, i64 c, int32_t agent, int32_t t, int launch) {
    int idx;
    if (M->xfree >= 0) {
        idx = M->xfree;
        M->xfree = M->xr[idx].next;
    } else {
        if (M->nxr >= M->capxr) {
            int nc = M->capxr ? M->capxr * 2 : 1024;
            xread_t *nx = (xread_t *)realloc(M->xr, (size_t)nc * sizeof(xread_t));
            if (!nx) return fail(M, "limit: memory");
            M->xr = nx;
            M->capxr = nc;
        }
        idx = M->nxr++;
    }
    M->xr[idx].agent = agent;
    M->xr[idx].t = t;
    M->xr[idx].launch = (uint8_t)launch;
    M->xr[idx].next = b->xhead[c];
    b->xhead[c] = idx;
    return 1;
}

static void xr_clear(mach_t *M, buf_t *b, i64 c) {
    int i = b->xhead[c];
    while (i >= 0) {
        int nx = M->xr[i].next;
        M->xr[i].next = M->xfree;
        M->xfree = i;
        i = nx;
    }
    b->xhead[c] = -1;
}

/* an access of cells [lo, lo + n) of rank r's buffer: races against the last write (and, for a write, the
   reads since), then the shadow state. 0: undecided. */
static int access_cells(mach_t *M, int a, int launch, int r, int bufi, i64 lo, i64 n, int write) {
    buf_t *b = &M->mem[(i64)r * 3 + bufi];
    if (lo < 0 || n < 0 || lo + n > b->cells) return fail(M, "an access outside a buffer");
    int32_t now = clk_of(M, a)[M->own[a]];
    for (i64 c = lo; c < lo + n; c++) {
        int32_t w = b->wa[c];
        if (w >= 0 && w != a && !ordered(M, a, w, b->wt[c], b->wl[c])) return fail(M, "an unordered write");
        if (write) {
            int32_t q = b->ra[c];
            if (q >= 0 && q != a && !ordered(M, a, q, b->rt[c], b->rl[c])) return fail(M, "an unordered read");
            for (int i = b->xhead[c]; i >= 0; i = M->xr[i].next)
                if (M->xr[i].agent != a && !ordered(M, a, M->xr[i].agent, M->xr[i].t, M->xr[i].launch))
                    return fail(M, "an unordered read");
        }
    }
    for (i64 c = lo; c < lo + n; c++) {
        if (write) {
            b->wa[c] = a;
            b->wt[c] = now;
            b->wl[c] = (uint8_t)launch;
            b->ra[c] = -1;
            if (b->xhead[c] >= 0) xr_clear(M, b, c);
        } else {
            int32_t q = b->ra[c];
            if (q >= 0 && q != a && !xr_push(M, b, c, q, b->rt[c], b->rl[c])) return 0;
            b->ra[c] = a;
            b->rt[c] = now;
            b->rl[c] = (uint8_t)launch;
        }
    }
    return 1;
}

static void write_vals(buf_t *b, i64 lo, i64 n, const uint64_t *v) {
    memcpy(b->val + lo, v, (size_t)n * sizeof(uint64_t));
    if (b->npk) /* data over packet space invalidates those packets */
        for (i64 k = lo / 2; k < (lo + n + 1) / 2 && k < b->npk; k++) b->pflag[k] = 0;
}

static uint64_t input_tag(int launch, int r, i64 cell) {
    return ((uint64_t)(launch + 1) << 44) | ((uint64_t)r << 28) | (uint64_t)cell;
}

/* ------------------------------------------------------------------ worklist */
static int queue(mach_t *M, int a) {
    if (M->queued[a]) return 1;
    if (M->wlen >= M->wcap) {
        i64 nc = M->wcap * 2;
        int *nw = (int *)malloc((size_t)nc * sizeof(int));
        if (!nw) return fail(M, "limit: memory");
        for (i64 i = 0; i < M->wlen; i++) nw[i] = M->work[(M->whead + i) % M->wcap];
        free(M->work);
        M->work = nw;
        M->whead = 0;
        M->wcap = nc;
    }
    M->work[(M->whead + M->wlen) % M->wcap] = a;
    M->wlen++;
    M->queued[a] = 1;
    return 1;
}

/* ------------------------------------------------------------------ launches */
static int check_post(mach_t *M, int r, int launch);

static int host_write_inputs(mach_t *M, int r, int launch) {
    int h = host_of(M, r);
    buf_t *b = &M->mem[(i64)r * 3 + B_I];
    if (b->cells) {
        if (!access_cells(M, h, launch, r, B_I, 0, b->cells, 1)) return 0;
        for (i64 c = 0; c < b->cells; c++) b->val[c] = input_tag(launch, r, c);
    }
    tick(M, h);
    return 1;
}

static int end_launch(mach_t *M, int r);

static int start_launch(mach_t *M, int r, int launch) {
    int h = host_of(M, r);
    M->rank_launch[r] = launch;
    M->done_in_launch[r] = 0;
    int first = M->first_pid[r], last = M->first_pid[r + 1];
    for (int pid = first; pid < last; pid++) {
        M->pc[pid] = 0;
        M->launch_of[pid] = launch;
        M->state_n[pid] = -1;
        join_agent(M, pid, h);
        tick(M, pid);
        if (!queue(M, pid)) return 0;
    }
    if (first == last) return end_launch(M, r);
    return 1;
}

static int end_launch(mach_t *M, int r) {
    int launch = M->rank_launch[r], h = host_of(M, r);
    for (int pid = M->first_pid[r]; pid < M->first_pid[r + 1]; pid++) join_agent(M, h, pid);
    tick(M, h);
    M->host_end[(i64)r * M->launches + launch] = clk_of(M, h)[M->own[h]];
    if (!check_post(M, r, launch)) return 0;
    if (launch + 1 < M->launches) {
        if (!host_write_inputs(M, r, launch + 1)) return 0;
        return start_launch(M, r, launch + 1);
    }
    M->finished[r] = 1;
    return 1;
}

/* the expected source blocks of rank r's output: (first output chunk, source rank, its first input chunk,
   chunks); the manifest's layout, else the standard all-to-all (C / N chunks from every rank) */
static int check_post(mach_t *M, int r, int launch) {
    int n = M->n, h = host_of(M, r);
    buf_t *out = &M->mem[(i64)r * 3 + B_O];
    i64 out_off = 0;
    for (int s = 0; s < n; s++) {
        i64 cnt, in_off = 0, o_off;
        if (M->counts) {
            cnt = M->counts[(i64)s * n + r];
            for (int d = 0; d < r; d++) in_off += M->counts[(i64)s * n + d];
            o_off = out_off;
            out_off += cnt;
        } else {
            i64 blk = M->P->gpus[r].out_c / n, iblk = M->P->gpus[s].in_c / n;
            if (M->P->gpus[r].out_c % n || M->P->gpus[s].in_c % n || blk != iblk) return fail(M, "blocks");
            cnt = blk;
            in_off = (i64)r * iblk;
            o_off = (i64)s * blk;
        }
        if (!cnt) continue;
        if (!access_cells(M, h, launch, r, B_O, o_off, cnt, 0)) return 0;
        for (i64 k = 0; k < cnt; k++)
            if (out->val[o_off + k] != input_tag(launch, s, in_off + k)) return fail(M, "a wrong output");
    }
    return 1;
}

/* ------------------------------------------------------------------ operations */
typedef struct {
    int rank, buf;
    i64 lo, n;
} span_t;

static int span_of(mach_t *M, int r, const tb_t *tb, int ct, const ref_t *rf, int buf_override, span_t *sp) {
    if (rf->buf >= REMOTE) {
        if (!resolve_remote(M->P, r, tb, ct, rf, &sp->rank, &sp->buf)) return fail(M, "a remote buffer");
    } else {
        sp->rank = r;
        sp->buf = buf_override >= 0 ? buf_override : rf->buf;
    }
    sp->lo = rf->index;
    sp->n = rf->size;
    return 1;
}

static int chan_end(mach_t *M, int r, const tb_t *tb, int ct, int local) {
    if (local >= tb->nch[ct]) return -1;
    return M->chan_base[r * 3 + ct] + M->P->ints[tb->ch0[ct] + local];
}

static int deliver(mach_t *M, int end, pend_t s) {
    int to = M->chans[end].pair;
    if (!s.s) return fail(M, "limit: memory");
    if (to < 0) {
        drop(M, s.s);
        return fail(M, "a signal to an unpaired channel");
    }
    chan_t *e = &M->chans[to];
    e->inbound++;
    if (!fifo_push(&e->pend, s)) return fail(M, "limit: memory");
    if (M->pending_bytes > MAX_PENDING_BYTES) return fail(M, "limit: pending signals");
    if (e->blocked >= 0) {
        int b = e->blocked;
        e->blocked = -1;
        if (!queue(M, b)) return 0;
    }
    return 1;
}

static int one_signaller(mach_t *M, int *who, int pid) {
    if (*who < 0) *who = pid;
    return *who == pid ? 1 : fail(M, "two thread blocks signal one channel or semaphore");
}

static int upto(mach_t *M, int a, fifo_t *f, i64 *consumed, i64 m) {
    while (*consumed < m && f->len) {
        pend_t s = fifo_pop(f);
        if (!join(M, a, s)) return 0;
        drop(M, s.s);
        (*consumed)++;
    }
    return 1;
}

static int enqueue(mach_t *M, int r, item_t it) {
    if (M->fifo_head[r] + M->fifo_len[r] >= M->fifo_cap[r]) {
        if (M->fifo_head[r] > 0) {
            memmove(M->fifo[r], M->fifo[r] + M->fifo_head[r], (size_t)M->fifo_len[r] * sizeof(item_t));
            M->fifo_head[r] = 0;
        }
        if (M->fifo_len[r] >= M->fifo_cap[r]) {
            int nc = M->fifo_cap[r] ? M->fifo_cap[r] * 2 : 16;
            item_t *nf = (item_t *)realloc(M->fifo[r], (size_t)nc * sizeof(item_t));
            if (!nf) return fail(M, "limit: memory");
            M->fifo[r] = nf;
            M->fifo_cap[r] = nc;
        }
    }
    M->fifo[r][M->fifo_head[r] + M->fifo_len[r]++] = it;
    return queue(M, proxy_of(M, r));
}

static int copy_span(mach_t *M, int a, int launch, const span_t *s, const span_t *d) {
    if (s->n != d->n) return fail(M, "sizes");
    if (!access_cells(M, a, launch, s->rank, s->buf, s->lo, s->n, 0)) return 0;
    buf_t *sb = &M->mem[(i64)s->rank * 3 + s->buf];
    uint64_t stackv[256], *v = s->n <= 256 ? stackv : (uint64_t *)malloc((size_t)s->n * sizeof(uint64_t));
    if (!v) return fail(M, "limit: memory");
    memcpy(v, sb->val + s->lo, (size_t)s->n * sizeof(uint64_t));
    int ok = access_cells(M, a, launch, d->rank, d->buf, d->lo, d->n, 1);
    if (ok) write_vals(&M->mem[(i64)d->rank * 3 + d->buf], d->lo, d->n, v);
    if (v != stackv) free(v);
    return ok;
}

static int put_packets(mach_t *M, int pid, int launch, const span_t *d, const uint64_t *vals) {
    buf_t *b = &M->mem[(i64)d->rank * 3 + B_S];
    if (d->buf != B_S || d->lo < 0 || d->lo + d->n > b->npk) return fail(M, "packets outside the scratch");
    if (!access_cells(M, pid, launch, d->rank, B_S, 2 * d->lo, 2 * d->n, 1)) return 0;
    if (M->npsnaps >= M->cap_psnaps) {
        int nc = M->cap_psnaps ? M->cap_psnaps * 2 : 64;
        pend_t *ns = (pend_t *)realloc(M->psnaps, (size_t)nc * sizeof(pend_t));
        if (!ns) return fail(M, "limit: memory");
        M->psnaps = ns;
        M->cap_psnaps = nc;
    }
    pend_t s = snap(M, pid);
    if (!s.s) return fail(M, "limit: memory");
    M->psnaps[M->npsnaps] = s;
    for (i64 k = 0; k < d->n; k++) {
        b->pval[d->lo + k] = vals[k];
        b->pflag[d->lo + k] = launch + 1;
        b->psnap[d->lo + k] = M->npsnaps;
    }
    M->npsnaps++;
    for (i64 c = 2 * d->lo; c < 2 * (d->lo + d->n); c++) b->val[c] = 0xDEAD;
    for (int a = M->pkt_blocked_head[d->rank]; a >= 0;) {
        int nx = M->pkt_next[a];
        M->pkt_next[a] = -2;
        if (!queue(M, a)) return 0;
        a = nx;
    }
    M->pkt_blocked_head[d->rank] = -1;
    return 1;
}

/* 1: done, 0: undecided, -1: blocked */
static int exec_data(mach_t *M, int pid, int r, const tb_t *tb, const op_t *o) {
    int launch = M->launch_of[pid];
    const ref_t *src = M->P->refs + o->ref, *dst = src + o->nsrc;
    if (o->kind == OP_UPKT) {
        span_t s0, d;
        if (!span_of(M, r, tb, o->ct, &src[0], -1, &s0)) return 0;
        buf_t *b = &M->mem[(i64)r * 3 + B_S];
        if (s0.buf != B_S || s0.lo + s0.n > b->npk) return fail(M, "packets outside the scratch");
        for (i64 k = 0; k < s0.n; k++)
            if (b->pflag[s0.lo + k] != launch + 1) {
                if (M->pkt_next[pid] == -2) {
                    M->pkt_next[pid] = M->pkt_blocked_head[r];
                    M->pkt_blocked_head[r] = pid;
                }
                return -1;
            }
        for (i64 k = 0; k < s0.n; k++) {
            int32_t sid = b->psnap[s0.lo + k];
            if (sid >= 0 && (k == 0 || sid != b->psnap[s0.lo + k - 1]) && !join(M, pid, M->psnaps[sid])) return 0;
        }
        if (!access_cells(M, pid, launch, r, B_S, 2 * s0.lo, 2 * s0.n, 0)) return 0;
        if (!span_of(M, r, tb, o->ct, &dst[0], -1, &d) || d.n != s0.n) return fail(M, "sizes");
        if (!access_cells(M, pid, launch, d.rank, d.buf, d.lo, d.n, 1)) return 0;
        write_vals(&M->mem[(i64)d.rank * 3 + d.buf], d.lo, d.n, b->pval + s0.lo);
        return 1;
    }
    for (int i = 0; i < o->ndst; i++) {
        span_t s, d;
        int over = (o->kind == OP_PUT || o->kind == OP_PPKT) && o->ct == CT_MEM ? src[0].buf : -1;
        if (!span_of(M, r, tb, o->ct, &src[i], over, &s) || !span_of(M, r, tb, o->ct, &dst[i], -1, &d)) return 0;
        if (o->kind == OP_PPKT) {
            if (s.n != d.n || !access_cells(M, pid, launch, s.rank, s.buf, s.lo, s.n, 0)) return fail(M, "sizes");
            if (!put_packets(M, pid, launch, &d, M->mem[(i64)s.rank * 3 + s.buf].val + s.lo)) return 0;
        } else if (!copy_span(M, pid, launch, &s, &d))
            return 0;
    }
    return 1;
}

static int exec_op(mach_t *M, int pid, int r, const tb_t *tb, const op_t *o) {
    const int32_t *ids = M->P->ints + o->ids;
    switch (o->kind) {
    case OP_NOP:
        return 1;
    case OP_SIGNAL:
        for (int j = 0; j < o->nids; j++) {
            int e = chan_end(M, r, tb, o->ct, ids[j]);
            if (e < 0) return fail(M, "a channel");
            int to = M->chans[e].pair;
            if (to >= 0 && !one_signaller(M, &M->chans[to].signaller, pid)) return 0;
            pend_t s = snap(M, pid);
            if (!s.s) return fail(M, "limit: memory");
            if (o->ct == CT_PORT) {
                item_t it;
                memset(&it, 0, sizeof(it));
                it.kind = 1;
                it.chan = e;
                it.snap = s;
                if (!enqueue(M, r, it)) return 0;
            } else if (!deliver(M, e, s))
                return 0;
        }
        return 1;
    case OP_WAIT: {
        int32_t *tk = M->tickets[pid];
        if (M->state_n[pid] < 0) {
            for (int j = 0; j < o->nids; j++) {
                int e = chan_end(M, r, tb, o->ct, ids[j]);
                if (e < 0) return fail(M, "a channel");
                if (M->chans[e].waiter < 0) M->chans[e].waiter = pid;
                if (M->chans[e].waiter != pid) return fail(M, "two thread blocks wait on one channel");
                tk[j] = (int32_t)++M->chans[e].expected;
            }
            M->state_n[pid] = o->nids;
        }
        for (int j = 0; j < o->nids; j++) {
            chan_t *c = &M->chans[chan_end(M, r, tb, o->ct, ids[j])];
            if (c->inbound < tk[j]) {
                c->blocked = pid;
                return -1;
            }
        }
        for (int j = 0; j < o->nids; j++) {
            chan_t *c = &M->chans[chan_end(M, r, tb, o->ct, ids[j])];
            i64 consumed = c->inbound - c->pend.len; /* the signals joined so far */
            if (!upto(M, pid, &c->pend, &consumed, tk[j])) return 0;
        }
        return 1;
    }
    case OP_REL:
        for (int j = 0; j < o->nids; j++) {
            sem_t *s = &M->sems[M->sem_base[r] + ids[j]];
            if (!one_signaller(M, &s->signaller, pid)) return 0;
            s->value++;
            pend_t sn = snap(M, pid);
            if (!sn.s || !fifo_push(&s->pend, sn)) return fail(M, "limit: memory");
            if (s->blocked >= 0) {
                int b = s->blocked;
                s->blocked = -1;
                if (!queue(M, b)) return 0;
            }
        }
        return 1;
    case OP_ACQ: {
        if (M->state_n[pid] < 0) {
            M->state_mask[pid] = 0;
            M->state_n[pid] = 0;
        }
        for (int j = 0; j < o->nids; j++) {
            if (M->state_mask[pid] & (1u << j)) continue;
            sem_t *s = &M->sems[M->sem_base[r] + ids[j]];
            if (s->waiter < 0) s->waiter = pid;
            if (s->waiter != pid) return fail(M, "two thread blocks acquire one semaphore");
            if (s->value <= 0) {
                s->blocked = pid;
                return -1;
            }
            s->value--;
            s->expected++;
            /* the k-th acquire joins the releases up to k (a single acquirer: those not joined yet) */
            if (!upto(M, pid, &s->pend, &s->consumed, s->expected)) return 0;
            M->state_mask[pid] |= 1u << j;
        }
        return 1;
    }
    default:
        break;
    }
    if (o->ct == CT_PORT && o->kind == OP_PUT) {
        if (M->state_n[pid] >= 0) return 1;
        const ref_t *src = M->P->refs + o->ref, *dst = src + o->nsrc;
        for (int i = 0; i < o->ndst; i++) {
            span_t s, d;
            int e = i < o->nids ? chan_end(M, r, tb, CT_PORT, ids[i]) : -1;
            if (e < 0 || !span_of(M, r, tb, o->ct, &src[i], -1, &s) || !span_of(M, r, tb, o->ct, &dst[i], -1, &d))
                return fail(M, "a port put");
            item_t it;
            it.kind = 0;
            it.chan = e;
            it.srank = s.rank, it.sbuf = s.buf, it.slo = (int)s.lo, it.n = (int)s.n;
            it.drank = d.rank, it.dbuf = d.buf, it.dlo = (int)d.lo;
            if (s.n != d.n) return fail(M, "sizes");
            it.launch = M->launch_of[pid];
            it.snap = snap(M, pid);
            if (!it.snap.s || !enqueue(M, r, it)) return fail(M, "limit: memory");
        }
        M->state_n[pid] = 1;
        return 1;
    }
    return exec_data(M, pid, r, tb, o);
}

/* ------------------------------------------------------------------ agents */
static int run_proxy(mach_t *M, int r) {
    int p = proxy_of(M, r);
    while (M->fifo_len[r]) {
        item_t it = M->fifo[r][M->fifo_head[r]];
        M->fifo_head[r]++;
        M->fifo_len[r]--;
        if (!join(M, p, it.snap)) return 0;
        drop(M, it.snap.s);
        tick(M, p);
        if (it.kind == 1) {
            if (!deliver(M, it.chan, snap(M, p))) return 0;
        } else {
            span_t s = {it.srank, it.sbuf, it.slo, it.n}, d = {it.drank, it.dbuf, it.dlo, it.n};
            if (!copy_span(M, p, it.launch, &s, &d)) return 0;
        }
        tick(M, p);
    }
    M->fifo_head[r] = 0;
    return 1;
}

static int advance(mach_t *M, int pid) {
    int r = M->rank_of[pid];
    const tb_t *tb = &M->P->tbs[M->P->gpus[r].tb0 + (pid - M->first_pid[r])];
    while (M->pc[pid] < tb->nops) {
        int rc = exec_op(M, pid, r, tb, &M->P->ops[tb->op0 + M->pc[pid]]);
        if (rc == 0) return 0;
        if (rc < 0) return 1; /* blocked: queued again by whatever releases it */
        if (++M->steps > MAX_STEPS_TOTAL) return fail(M, "limit: steps");
        M->state_n[pid] = -1;
        M->pc[pid]++;
        tick(M, pid);
    }
    M->done_in_launch[r]++;
    M->pc[pid] = tb->nops + 1; /* finished (distinct from "at the end, blocked") */
    if (M->done_in_launch[r] == M->first_pid[r + 1] - M->first_pid[r]) return end_launch(M, r);
    return 1;
}

static int pair_channels(mach_t *M) {
    const plan_t *P = M->P;
    int n = M->n;
    /* per (rank, type): its channels sorted by (peer, occurrence) -> global end, for the k-th-to-k-th pairing */
    for (int t = CT_MEM; t <= CT_PORT; t++) {
        i64 *keys = NULL;
        int *ends = NULL;
        i64 total = 0;
        for (int r = 0; r < n; r++) total += P->gpus[r].npeer[t];
        keys = (i64 *)malloc((size_t)(total + 1) * sizeof(i64));
        ends = (int *)malloc((size_t)(total + 1) * sizeof(int));
        int *occ = (int *)calloc((size_t)n, sizeof(int));
        if (!keys || !ends || !occ) return fail(M, "limit: memory");
        /* key: (rank * n + peer) * 2^20 + occurrence; sorted, so a lookup is a binary search */
        i64 m = 0;
        for (int r = 0; r < n; r++) {
            const gpu_t *g = &P->gpus[r];
            for (int j = 0; j < g->npeer[t]; j++) {
                int pr = P->ints[g->peer0[t] + j];
                keys[m] = ((i64)r * n + pr) * (1LL << 20) + occ[pr]++;
                ends[m] = M->chan_base[r * 3 + t] + j;
                m++;
            }
            for (int j = 0; j < g->npeer[t]; j++) occ[P->ints[g->peer0[t] + j]] = 0;
        }
        /* keys of one rank are in channel order, not sorted: sort (key, end) pairs by key */
        for (i64 i = 1; i < m; i++) { /* insertion sort within each rank's run is enough: ranks ascend */
            i64 k = keys[i];
            int e = ends[i];
            i64 j = i - 1;
            while (j >= 0 && keys[j] > k) {
                keys[j + 1] = keys[j];
                ends[j + 1] = ends[j];
                j--;
            }
            keys[j + 1] = k;
            ends[j + 1] = e;
        }
        for (i64 i = 0; i < m; i++) {
            i64 k = keys[i], occn = k % (1LL << 20), rp = k / (1LL << 20);
            int r = (int)(rp / n), pr = (int)(rp % n);
            i64 want = ((i64)pr * n + r) * (1LL << 20) + occn;
            i64 lo = 0, hi = m - 1, found = -1;
            while (lo <= hi) {
                i64 mid = (lo + hi) / 2;
                if (keys[mid] == want) {
                    found = mid;
                    break;
                }
                if (keys[mid] < want) lo = mid + 1;
                else hi = mid - 1;
            }
            M->chans[ends[i]].pair = found >= 0 ? ends[found] : -1;
        }
        free(keys);
        free(ends);
        free(occ);
    }
    return 1;
}

/* ------------------------------------------------------------------ setup and run */
static int setup(mach_t *M) {
    const plan_t *P = M->P;
    int n = M->n;
    M->ntb = P->ntbs;
    M->na = M->ntb + 2 * n;
    if (M->na > MAX_AGENTS) return fail(M, "limit: agents");
    /* memory of the cells, before allocating any (limit) */
    i64 cells = 0, chans = 0, sems = 0;
    for (int r = 0; r < n; r++) {
        const gpu_t *g = &P->gpus[r];
        cells += g->in_c + g->out_c + g->scr_c * (P->ll ? 2 : 1);
        chans += g->npeer[CT_MEM] + g->npeer[CT_PORT];
        sems += g->nsem;
    }
    if (cells * 27 > (3LL << 30)) return fail(M, "limit: cells");
    M->rank_of = (int *)malloc((size_t)M->na * sizeof(int));
    M->first_pid = (int *)malloc((size_t)(n + 1) * sizeof(int));
    M->W = (int *)calloc((size_t)n, sizeof(int));
    M->S = (int *)calloc((size_t)n, sizeof(int));
    M->kgid = (int32_t **)calloc((size_t)n, sizeof(int32_t *));
    M->hkey = (int32_t **)calloc((size_t)n, sizeof(int32_t *));
    M->hval = (int32_t **)calloc((size_t)n, sizeof(int32_t *));
    M->hcap = (int *)calloc((size_t)n, sizeof(int));
    M->clk_off = (i64 *)malloc((size_t)M->na * sizeof(i64));
    M->own = (int *)malloc((size_t)M->na * sizeof(int));
    if (!M->rank_of || !M->first_pid || !M->W || !M->S || !M->kgid || !M->hkey || !M->hval || !M->hcap || !M->clk_off ||
        !M->own)
        return fail(M, "limit: memory");
    for (int r = 0; r < n; r++) {
        M->first_pid[r] = P->gpus[r].tb0;
        for (int k = 0; k < P->gpus[r].ntb; k++) M->rank_of[P->gpus[r].tb0 + k] = r;
        M->rank_of[M->ntb + r] = r;
        M->rank_of[M->ntb + n + r] = r;
    }
    M->first_pid[n] = M->ntb;
    if (!build_columns(M)) return 0;
    M->map_cap = 1024;
    while (M->map_cap < 4 * (chans + n)) M->map_cap *= 2;
    M->maps = (map_t *)calloc((size_t)M->map_cap, sizeof(map_t));
    M->map_keys = (u64 *)calloc((size_t)M->map_cap, sizeof(u64));
    M->chan_base = (int *)malloc((size_t)n * 3 * sizeof(int));
    M->chans = (chan_t *)calloc((size_t)chans + 1, sizeof(chan_t));
    M->sem_base = (int *)malloc((size_t)n * sizeof(int));
    M->sems = (sem_t *)calloc((size_t)sems + 1, sizeof(sem_t));
    if (!M->maps || !M->map_keys || !M->chan_base || !M->chans || !M->sem_base || !M->sems)
        return fail(M, "limit: memory");
    int ce = 0, se = 0;
    for (int r = 0; r < n; r++) {
        const gpu_t *g = &P->gpus[r];
        for (int t = 0; t < 3; t++) {
            M->chan_base[r * 3 + t] = ce;
            if (t == CT_NONE) continue;
            for (int j = 0; j < g->npeer[t]; j++, ce++) {
                M->chans[ce].waiter = M->chans[ce].signaller = M->chans[ce].blocked = -1;
                M->chans[ce].rank = r;
            }
        }
        M->sem_base[r] = se;
        for (int j = 0; j < g->nsem; j++, se++) {
            M->sems[se].value = M->sems[se].init = P->ints[g->sem0 + j];
            M->sems[se].waiter = M->sems[se].signaller = M->sems[se].blocked = -1;
        }
    }
    M->nchans = ce;
    if (!pair_channels(M)) return 0;
    int na = M->na;
    M->pc = (int *)calloc((size_t)na, sizeof(int));
    M->launch_of = (int *)calloc((size_t)na, sizeof(int));
    M->state_n = (int *)malloc((size_t)na * sizeof(int));
    M->tickets = (int32_t(*)[MAX_SEMAPHORES_PER_OP])calloc((size_t)na, sizeof(*M->tickets));
    M->state_mask = (uint32_t *)calloc((size_t)na, sizeof(uint32_t));
    M->done_in_launch = (int *)calloc((size_t)n, sizeof(int));
    M->rank_launch = (int *)calloc((size_t)n, sizeof(int));
    M->finished = (int *)calloc((size_t)n, sizeof(int));
    M->fifo = (item_t **)calloc((size_t)n, sizeof(item_t *));
    M->fifo_head = (int *)calloc((size_t)n, sizeof(int));
    M->fifo_len = (int *)calloc((size_t)n, sizeof(int));
    M->fifo_cap = (int *)calloc((size_t)n, sizeof(int));
    M->host_end = (int32_t *)calloc((size_t)n * (size_t)M->launches, sizeof(int32_t));
    M->pkt_blocked_head = (int *)malloc((size_t)n * sizeof(int));
    M->pkt_next = (int *)malloc((size_t)na * sizeof(int));
    M->queued = (uint8_t *)calloc((size_t)na, 1);
    M->cache = (snap_t **)calloc((size_t)na, sizeof(snap_t *));
    M->ver = (uint32_t *)calloc((size_t)na, sizeof(uint32_t));
    M->cache_ver = (uint32_t *)calloc((size_t)na, sizeof(uint32_t));
    if (!M->cache || !M->ver || !M->cache_ver) return fail(M, "limit: memory");
    M->wcap = na + 16;
    M->work = (int *)malloc((size_t)M->wcap * sizeof(int));
    M->mem = (buf_t *)calloc((size_t)n * 3, sizeof(buf_t));
    if (!M->pc || !M->launch_of || !M->state_n || !M->tickets || !M->state_mask || !M->done_in_launch ||
        !M->rank_launch || !M->finished || !M->fifo || !M->fifo_head || !M->fifo_len || !M->fifo_cap ||
        !M->host_end || !M->pkt_blocked_head || !M->pkt_next || !M->queued || !M->work || !M->mem)
        return fail(M, "limit: memory");
    for (int a = 0; a < na; a++) M->state_n[a] = -1, M->pkt_next[a] = -2;
    for (int r = 0; r < n; r++) M->pkt_blocked_head[r] = -1;
    M->xfree = -1;
    M->memo_w[0] = M->memo_w[1] = -1;
    for (int r = 0; r < n; r++) {
        const gpu_t *g = &P->gpus[r];
        i64 sizes[3] = {g->in_c, g->out_c, g->scr_c * (P->ll ? 2 : 1)};
        for (int bi = 0; bi < 3; bi++) {
            buf_t *b = &M->mem[(i64)r * 3 + bi];
            i64 c = sizes[bi];
            b->cells = c;
            b->val = (uint64_t *)malloc((size_t)(c + 1) * sizeof(uint64_t));
            b->wa = (int32_t *)malloc((size_t)(c + 1) * sizeof(int32_t));
            b->wt = (int32_t *)calloc((size_t)c + 1, sizeof(int32_t));
            b->ra = (int32_t *)malloc((size_t)(c + 1) * sizeof(int32_t));
            b->rt = (int32_t *)calloc((size_t)c + 1, sizeof(int32_t));
            b->wl = (uint8_t *)calloc((size_t)c + 1, 1);
            b->rl = (uint8_t *)calloc((size_t)c + 1, 1);
            b->xhead = (int32_t *)malloc((size_t)(c + 1) * sizeof(int32_t));
            if (!b->val || !b->wa || !b->wt || !b->ra || !b->rt || !b->wl || !b->rl || !b->xhead)
                return fail(M, "limit: memory");
            for (i64 k = 0; k < c; k++) { /* garbage that matches no input value */
                b->val[k] = (1ULL << 63) | ((uint64_t)bi << 60) | ((uint64_t)r << 32) | (uint64_t)k;
                b->wa[k] = b->ra[k] = b->xhead[k] = -1;
            }
            if (bi == B_S && P->ll) {
                b->npk = g->scr_c;
                b->pval = (uint64_t *)calloc((size_t)b->npk + 1, sizeof(uint64_t));
                b->pflag = (int32_t *)calloc((size_t)b->npk + 1, sizeof(int32_t));
                b->psnap = (int32_t *)malloc(((size_t)b->npk + 1) * sizeof(int32_t));
                if (!b->pval || !b->pflag || !b->psnap) return fail(M, "limit: memory");
                for (i64 k = 0; k < b->npk; k++) b->psnap[k] = -1;
            }
        }
    }
    return 1;
}

static int run_machine(mach_t *M) {
    for (int r = 0; r < M->n; r++) {
        if (!host_write_inputs(M, r, 0) || !start_launch(M, r, 0)) return 0;
    }
    while (M->wlen) {
        int a = M->work[M->whead];
        M->whead = (M->whead + 1) % M->wcap;
        M->wlen--;
        M->queued[a] = 0;
        if (a < M->ntb) {
            if (!advance(M, a)) return 0;
        } else if (a < M->ntb + M->n) {
            if (!run_proxy(M, a - M->ntb)) return 0;
        }
    }
    for (int pid = 0; pid < M->ntb; pid++) {
        int r = M->rank_of[pid];
        const tb_t *tb = &M->P->tbs[M->P->gpus[r].tb0 + (pid - M->first_pid[r])];
        if (M->pc[pid] <= tb->nops) return fail(M, "a deadlock");
    }
    for (int r = 0; r < M->n; r++)
        if (!M->finished[r]) return fail(M, "a deadlock");
    for (int e = 0; e < M->nchans; e++)
        if (M->chans[e].inbound != M->chans[e].expected) return fail(M, "unbalanced channel counters");
    for (int r = 0; r < M->n; r++)
        for (int j = 0; j < M->P->gpus[r].nsem; j++) {
            const sem_t *s = &M->sems[M->sem_base[r] + j];
            if (s->value != s->init) return fail(M, "an unbalanced semaphore");
        }
    return 1;
}

static void free_fifo(mach_t *M, fifo_t *f) {
    for (int i = 0; i < f->len; i++) drop(M, f->q[f->head + i].s);
    free(f->q);
}

static void free_machine(mach_t *M) {
    int n = M->n;
    if (M->kgid)
        for (int r = 0; r < n; r++) free(M->kgid[r]);
    if (M->hkey)
        for (int r = 0; r < n; r++) free(M->hkey[r]);
    if (M->hval)
        for (int r = 0; r < n; r++) free(M->hval[r]);
    if (M->maps)
        for (int i = 0; i < M->map_cap; i++) {
            free(M->maps[i].cq);
            free(M->maps[i].cr);
        }
    if (M->chans)
        for (int e = 0; e < M->nchans; e++) free_fifo(M, &M->chans[e].pend);
    if (M->sems && M->sem_base)
        for (int r = 0; r < n; r++)
            for (int j = 0; j < M->P->gpus[r].nsem; j++) free_fifo(M, &M->sems[M->sem_base[r] + j].pend);
    if (M->fifo)
        for (int r = 0; r < n; r++) {
            if (M->fifo[r])
                for (int i = 0; i < M->fifo_len[r]; i++) drop(M, M->fifo[r][M->fifo_head[r] + i].snap.s);
            free(M->fifo[r]);
        }
    if (M->mem)
        for (i64 i = 0; i < (i64)n * 3; i++) {
            buf_t *b = &M->mem[i];
            free(b->val), free(b->wa), free(b->wt), free(b->ra), free(b->rt), free(b->wl), free(b->rl);
            free(b->xhead), free(b->pval), free(b->pflag), free(b->psnap);
        }
    for (int i = 0; i < M->npsnaps; i++) drop(M, M->psnaps[i].s);
    if (M->cache)
        for (int a = 0; a < M->na; a++)
            if (M->cache[a]) drop(M, M->cache[a]);
    free(M->cache), free(M->ver), free(M->cache_ver);
    free(M->psnaps);
    free(M->rank_of), free(M->first_pid), free(M->W), free(M->S), free(M->kgid), free(M->hkey), free(M->hval);
    free(M->hcap);
    free(M->clk), free(M->clk_off), free(M->own), free(M->maps), free(M->map_keys), free(M->chan_base);
    free(M->chans), free(M->sem_base), free(M->sems), free(M->pc), free(M->launch_of), free(M->state_n);
    free(M->tickets), free(M->state_mask), free(M->done_in_launch), free(M->rank_launch), free(M->finished);
    free(M->fifo), free(M->fifo_head), free(M->fifo_len), free(M->fifo_cap), free(M->host_end);
    free(M->pkt_blocked_head), free(M->pkt_next), free(M->queued), free(M->work), free(M->mem), free(M->xr);
}

static void free_plan(plan_t *P) {
    free(P->gpus), free(P->tbs), free(P->ops), free(P->refs), free(P->ints), free(P->rbufs);
}

/* the first rank with more than limit thread blocks, or -1 */
static int first_crowded(const plan_t *P, int limit) {
    for (int r = 0; r < P->n; r++)
        if (P->gpus[r].ntb > limit) return r;
    return -1;
}

/* ------------------------------------------------------------------ check() */
static PyObject *py_check(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *text_obj, *counts_obj;
    long long chunk_bytes;
    int launches, limit_tbs;
    if (!PyArg_ParseTuple(args, "UOLii", &text_obj, &counts_obj, &chunk_bytes, &launches, &limit_tbs))
        return NULL;
    Py_ssize_t len;
    const char *text = PyUnicode_AsUTF8AndSize(text_obj, &len);
    if (!text) return NULL;
    Py_buffer cb;
    int have_counts = counts_obj != Py_None;
    if (have_counts && PyObject_GetBuffer(counts_obj, &cb, PyBUF_SIMPLE) < 0) return NULL;
    plan_t P;
    memset(&P, 0, sizeof(P));
    mach_t M;
    memset(&M, 0, sizeof(M));
    const char *why = NULL;
    int ok = 0, max_tbs = 0, max_ops = 0, crowded = -1;
    i64 chunk = 0;
    Py_BEGIN_ALLOW_THREADS
    if (launches < 2 || launches > 8) why = "launches";
    else if (!parse(text, len, &P)) why = "not the form a2acc's emitter writes";
    else if ((crowded = first_crowded(&P, limit_tbs)) >= 0) why = "thread blocks";
    else if (have_counts && cb.len != (Py_ssize_t)((i64)P.n * P.n * (i64)sizeof(i64))) why = "the manifest's size";
    else if (!static_ok(&P)) why = "a load check";
    else if (!(chunk = sizes_ok(&P, chunk_bytes, have_counts ? (const i64 *)cb.buf : NULL))) why = "the sizes";
    else if (!lint_ok(&P)) why = "a missing nop";
    else {
        M.P = &P;
        M.n = P.n;
        M.launches = launches;
        M.chunk = chunk;
        M.counts = have_counts ? (const i64 *)cb.buf : NULL;
        ok = setup(&M) && run_machine(&M);
        if (!ok) why = M.why ? M.why : "the execution";
    }
    for (int r = 0; ok && r < P.n; r++) {
        if (P.gpus[r].ntb > max_tbs) max_tbs = P.gpus[r].ntb;
        for (int k = 0; k < P.gpus[r].ntb; k++)
            if (P.tbs[P.gpus[r].tb0 + k].nops > max_ops) max_ops = P.tbs[P.gpus[r].tb0 + k].nops;
    }
    free_machine(&M);
    Py_END_ALLOW_THREADS
    if (have_counts) PyBuffer_Release(&cb);
    PyObject *res;
    i64 pairs = 0;
    for (int r = 0; ok && r < P.n; r++) pairs += P.gpus[r].npeer[CT_MEM] + P.gpus[r].npeer[CT_PORT];
    if (ok)
        res = Py_BuildValue("(iLsiiLi)", P.n, P.n ? P.gpus[0].in_c : 0, P.ll ? "LL" : "Simple", max_tbs, max_ops,
                            pairs / 2, launches);
    else if (crowded >= 0)
        res = Py_BuildValue("(ii)", crowded, P.gpus[crowded].ntb);
    else
        res = PyUnicode_FromString(why ? why : "undecided");
    free_plan(&P);
    return res;
}


static PyMethodDef methods[] = {
    {"check", py_check, METH_VARARGS,
     "check(text, counts, chunk_bytes, launches, max_tbs) -> (ngpus, C, protocol, max_tbs, max_ops, "
     "channel_pairs, launches) when the reference would report no error and no note, (rank, thread blocks) when a "
     "rank has more than max_tbs, else the reason it is not decided here"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_mscclpp", NULL, -1, methods};

PyMODINIT_FUNC PyInit__mscclpp(void) { return PyModule_Create(&module); }
