"""An interpreter of MSCCL++ execution plans: load checks, execution over back-to-back launches, deadlocks,
races, cross-launch hazards and the postcondition.

Written from the executor's code (microsoft/mscclpp ``src/core/executor/execution_plan.cc``,
``src/core/executor/executor.cc``, ``src/core/include/execution_kernel.hpp``, ``include/mscclpp/
semaphore_device.hpp``, ``include/mscclpp/packet_device.hpp``), not from the DSL that writes plans. Three
phases:

1. **Load checks** (:func:`static_checks`, :func:`size_checks`): what ``ExecutionPlan::loadExecutionPlan``
   throws on (message size divisibility, ``min_message_size``/``max_message_size``, chunk sizes equal on
   input and output and across ranks) and what it does not check but the kernel needs (ids dense, every
   index resolving through the thread block's tables, the limits of ``execution_common.hpp``: 64 operations
   per thread block, 16 channels of a type and 16 remote buffers per thread block, 8 channels per operation,
   16 barriers and semaphores per operation, uint32 byte offsets); the intra-thread-block synchronisation
   rules of the kernel (no implicit ``__syncthreads`` between operations: a signal or semaphore release after
   a data operation, a data operation after a wait, and two data operations on overlapping ranges each need a
   ``nop`` between them); the channel pairing (the k-th channel to p on r is the k-th to r on p).
2. **Execution** of ``launches`` back-to-back launches of every rank, each rank on its own: a launch of a rank
   starts when its previous one finished (stream order), independently of the others. Thread blocks run their
   operations in order (pipelines unrolled into iterations); ``wait`` takes a ticket on the channel's shared
   expected counter and blocks until that many signals arrived; semaphores count; ``barrier`` generations;
   LL packets carry the launch's flag (1, 2, ...) and readers spin until it matches; port-channel ``put`` and
   ``signal`` go through a per-rank proxy in FIFO order per channel, so a port put completes at some later
   time, before the next signal on its channel. Channel counters, semaphores, scratch and flags persist across
   launches. No progress with work left is a **deadlock**, reported per stuck thread block.
3. **Races** by vector clocks over thread blocks, proxies and each rank's host (the caller between launches,
   which reads the output and rewrites the input): happens-before is program order, signal -> the wait that
   consumed it (a wait joins every signal counted up to its ticket), release -> acquire, barrier, LL packet
   write -> the read that saw its flag, proxy FIFO order, and a rank's launch end -> its host -> its next
   launch. Relaxed signals order control only: a read before them is ordered before a write after the wait,
   a write is not. Two unordered accesses to the same bytes, not both reads, are a race; when they belong to
   different launches it is reported as a **cross-launch hazard** (e.g. a peer writing scratch the previous
   launch still reads, or a port put's source rewritten by the caller before the proxy read it).

**Postcondition**, checked at the end of every launch of every rank against that launch's inputs: standard
``alltoall`` (output block s of rank r = input block r of rank s), ``allgather``, ``allreduce`` (sums of
64-bit values), ``reducescatter``, ``sendrecv`` (rank r receives rank r-1's input), or an a2acc manifest's
all-to-all-v layout. Values are random 64-bit words per granule (the gcd of all byte offsets), fresh per launch,
so stale data from a previous launch or garbage from scratch is caught. At the end every channel counter must be
balanced and every semaphore back at its initial value. The quirks of the executor at microsoft/mscclpp's main
(``1f5f065d``) are modelled: a memory ``put`` reads every source from the buffer of its first source, ``flush``
does nothing, ``reduce_op`` is ignored (always a sum).
"""

from __future__ import annotations

import gc
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from a2acc.backends.mscclpp.model import (
    MAX_BARRIERS,
    MAX_CHANNELS_PER_OP,
    MAX_CHANNELS_PER_TB,
    MAX_OPS_PER_TB,
    MAX_PIPELINE_ITERATIONS,
    MAX_REFS_PER_OP,
    MAX_SEMAPHORES_PER_OP,
    MAX_THREADS_PER_BLOCK,
    MAX_U32,
    PACKET_OPS,
    BufRef,
    Gpu,
    Op,
    Plan,
    ThreadBlock,
    flat_ops,
)
from a2acc.ir.layout import ChunkLayout

# operations executed by every thread of the block on a byte range (need nops around them)
DATA_OPS = frozenset(
    {"put", "get", "copy", "cpkt", "upkt", "ppkt", "rppkt", "re", "res", "rre", "rres", "glres", "gstore"}
)
# operations run by threads tid < n (one item per thread): ordering with data ops needs a nop
PUBLISH_OPS = frozenset({"signal", "sem_release", "pws", "pwsf"})
WAIT_OPS = frozenset({"wait", "rlxwait", "sem_acquire"})
NOT_MODELLED = frozenset({"repkt", "respkt", "recpkt", "recspkt", "gstorepkt"})
MAX_INTERP_CELLS = 1 << 24  # granules per rank and buffer the interpreter allocates at most
MAX_INTERP_STEPS = 5_000_000
MAX_INTERP_AGENTS = 6000  # thread blocks + proxies + hosts: two dense int32 clock matrices of this side


@dataclass
class InterpResult:
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    launches: int = 0
    steps: int = 0

    @property
    def ok(self) -> bool:
        return not self.errors


@dataclass(frozen=True)
class Sizes:
    """The message a caller passes, per rank: send and receive buffer bytes; ``chunk`` bytes per chunk."""

    input_bytes: tuple[int, ...]
    output_bytes: tuple[int, ...]
    chunk: tuple[int, ...]


def _where(r: int, t: int, path: str) -> str:
    return f"gpus[{r}].threadblocks[{t}].{path}"


# ---------------------------------------------------------------------- load checks
def _tb_tables(g: Gpu, tb: ThreadBlock) -> tuple[dict[str, list[int]], dict[str, list[int]]]:
    """TB-local channel and remote-buffer index tables per channel type (entries of one type concatenate, as
    ``setupChannels``/``setupRemoteBuffers`` build them)."""
    ch: dict[str, list[int]] = {}
    for t in tb.channels:
        ch.setdefault(t.channel_type, []).extend(t.ids)
    rb: dict[str, list[int]] = {}
    for t in tb.remote_buffer_refs:
        rb.setdefault(t.channel_type, []).extend(t.ids)
    return ch, rb


def _flatten(ops: tuple[Op, ...], path: str = "ops") -> list[tuple[str, Op, bool]]:
    """(path, op, inside a pipeline) for every operation, pipeline bodies included."""
    out: list[tuple[str, Op, bool]] = []
    for i, o in enumerate(ops):
        out.append((f"{path}[{i}]", o, False))
        for j, inner in enumerate(o.ops):
            out.append((f"{path}[{i}].ops[{j}]", inner, True))
    return out


def capacity(g: Gpu, buf: str) -> int:
    return {"i": g.input_chunks, "o": g.output_chunks, "s": g.scratch_chunks}.get(buf, 0)


def static_checks(plan: Plan, target: str | None = None) -> tuple[list[str], list[str]]:
    """Structural errors and notes of a read plan (no execution). ``target`` "amd" also rejects switch
    channels (compiled out on HIP: the NVLS operations would silently do nothing)."""
    errs: list[str] = []
    notes: list[str] = []
    n = len(plan.gpus)
    if plan.num_threads_per_block > MAX_THREADS_PER_BLOCK:
        errs.append(
            f"num_threads_per_block: value {plan.num_threads_per_block} is invalid; the kernel is built with "
            f"__launch_bounds__({MAX_THREADS_PER_BLOCK}, 1)"
        )
    if plan.min_message_size > plan.max_message_size:
        errs.append(
            f"min_message_size: value {plan.min_message_size} is invalid; it exceeds max_message_size "
            f"{plan.max_message_size}, so no message size loads"
        )
    if plan.buffer_alignment % 4:
        errs.append(f"buffer_alignment: value {plan.buffer_alignment} is invalid; must be a multiple of 4")
    uses_packets = False
    for r, g in enumerate(plan.gpus):
        if g.id != r:
            errs.append(f"gpus[{r}].id: value {g.id} is invalid; gpus[r] must have id r (the loader checks)")
        for k, tb in enumerate(g.threadblocks):
            if tb.id != k:
                errs.append(
                    f"gpus[{r}].threadblocks[{k}].id: value {tb.id} is invalid; must be {k} (ops are stored by "
                    "list position, channel tables by id)"
                )
        for i, c in enumerate(g.channels):
            if c.channel_type == "switch":
                if target == "amd":
                    errs.append(
                        f"gpus[{r}].channels[{i}]: switch (NVLS) channel on an AMD target: the switch operations "
                        "are compiled out on HIP and NVLS setup fails"
                    )
                continue
            for j, p in enumerate(c.connected_to):
                if not 0 <= p < n or p == r:
                    errs.append(
                        f"gpus[{r}].channels[{i}].connected_to[{j}]: value {p} is invalid; a peer rank in 0..{n - 1} "
                        f"other than {r}"
                    )
        for q, b in enumerate(g.remote_buffers):
            if not 0 <= b.rank < n or b.rank == r:
                errs.append(
                    f"gpus[{r}].remote_buffers[{q}].rank: value {b.rank} is invalid; a peer rank in 0..{n - 1}"
                )
        nch = {t: len(g.peers(t)) for t in ("memory", "port")}
        nsw = sum(len(c.rank_groups) for c in g.channels if c.channel_type == "switch")
        for k, tb in enumerate(g.threadblocks):
            ch, rb = _tb_tables(g, tb)
            for t, ids in ch.items():
                limit = nsw if t == "switch" else nch.get(t, 0)
                for j, gid in enumerate(ids):
                    if gid >= limit:
                        errs.append(
                            f"{_where(r, k, 'channels')} {t} channel_ids[{j}]: value {gid} is invalid; the GPU has "
                            f"{limit} {t} channel(s)"
                        )
                if len(ids) > MAX_CHANNELS_PER_TB:
                    errs.append(
                        f"{_where(r, k, 'channels')}: {len(ids)} {t} channels; the kernel holds at most "
                        f"{MAX_CHANNELS_PER_TB} per thread block (MAX_CHANNEL): more corrupts shared memory"
                    )
            for t, ids in rb.items():
                for j, q in enumerate(ids):
                    if q >= len(g.remote_buffers):
                        errs.append(
                            f"{_where(r, k, 'remote_buffer_refs')} {t} remote_buffer_ids[{j}]: value {q} is invalid; "
                            f"the GPU has {len(g.remote_buffers)} remote buffer(s)"
                        )
                    elif t not in g.remote_buffers[q].access_channel_types:
                        errs.append(
                            f"{_where(r, k, 'remote_buffer_refs')} {t} remote_buffer_ids[{j}]: remote buffer {q} is "
                            f"not accessed through {t} channels (access_channel_types "
                            f"{list(g.remote_buffers[q].access_channel_types)})"
                        )
                if len(ids) > MAX_CHANNELS_PER_TB:
                    errs.append(
                        f"{_where(r, k, 'remote_buffer_refs')}: {len(ids)} {t} remote buffers; at most "
                        f"{MAX_CHANNELS_PER_TB} per thread block"
                    )
            nops = flat_ops(tb.ops)
            if nops > MAX_OPS_PER_TB:
                errs.append(
                    f"{_where(r, k, 'ops')}: {nops} operations (pipelines flattened); the executor allows "
                    f"{MAX_OPS_PER_TB} per thread block (MAX_OPERATION) and throws at load"
                )
            for path, op, nested in _flatten(tb.ops):
                where = _where(r, k, path)
                uses_packets |= op.name in PACKET_OPS
                errs += _op_checks(plan, g, r, op, where, ch, rb, nested, len(g.threadblocks), target)
    if uses_packets and plan.protocol != "LL":
        errs.append(
            "protocol: value 'Simple' is invalid; the plan uses LL packet operations, whose scratch the executor "
            "doubles only for protocol LL"
        )
    notes += _pairing_notes(plan)
    return errs, notes


def _op_checks(
    plan: Plan,
    g: Gpu,
    r: int,
    op: Op,
    where: str,
    ch: dict[str, list[int]],
    rb: dict[str, list[int]],
    nested: bool,
    ntbs: int,
    target: str | None,
) -> list[str]:
    errs: list[str] = []
    name = op.name
    ct = op.channel_type or "none"
    src, dst = op.src or (), op.dst or ()

    def need(cond: bool, msg: str) -> None:
        if not cond:
            errs.append(f"{where}: {name}: {msg}")

    if name == "pipeline":
        return errs
    if nested and name in PACKET_OPS:
        errs.append(f"{where}: {name} inside a pipeline: packet operations ignore the iteration offset")
    if name in NOT_MODELLED:
        errs.append(
            f"{where}: {name}: this interpreter does not model the operation, so it cannot vouch for it"
        )
    if name in ("glres", "gstore") and target == "amd":
        errs.append(f"{where}: {name}: switch operations are compiled out on HIP (AMD)")
    if name in ("signal", "wait", "rlxsignal", "rlxwait", "flush"):
        need(ct in ("memory", "port"), f"channel_type {ct!r} must be memory or port")
        if name.startswith("rlx"):
            need(ct == "memory", "relaxed signal/wait exist only for memory channels")
        if name == "flush":
            need(ct == "port", "flush is a port-channel operation")
        ids = op.channel_ids or ()
        need(len(ids) >= 1, "needs channel_ids")
        need(
            len(ids) <= MAX_CHANNELS_PER_OP,
            f"{len(ids)} channels; at most {MAX_CHANNELS_PER_OP} per operation",
        )
        for j, c in enumerate(ids):
            need(
                c < len(ch.get(ct, [])),
                f"channel_ids[{j}]={c} but the thread block has {len(ch.get(ct, []))} {ct} channel(s)",
            )
        return errs
    if name in ("sem_acquire", "sem_release"):
        ids = op.semaphore_ids or ()
        need(len(ids) >= 1, "needs semaphore_ids")
        need(
            len(ids) <= MAX_SEMAPHORES_PER_OP,
            f"{len(ids)} semaphores; at most {MAX_SEMAPHORES_PER_OP} per operation",
        )
        for j, sid in enumerate(ids):
            need(
                sid < len(g.semaphores),
                f"semaphore_ids[{j}]={sid} but the GPU has {len(g.semaphores)} semaphore(s)",
            )
        return errs
    if name == "barrier":
        need(
            op.barrier_id is not None and op.barrier_id < MAX_BARRIERS,
            f"barrier_id must be in 0..{MAX_BARRIERS - 1}",
        )
        need(
            op.num_threadblocks is not None and 1 <= op.num_threadblocks <= ntbs,
            f"num_threadblocks must be in 1..{ntbs}",
        )
        return errs
    if name == "nop":
        return errs
    # data operations
    need(
        len(src) <= MAX_REFS_PER_OP and len(dst) <= MAX_REFS_PER_OP,
        f"at most {MAX_REFS_PER_OP} buffer references per side",
    )
    for side, refs in (("src_buff", src), ("dst_buff", dst)):
        for j, ref in enumerate(refs):
            errs += _ref_checks(plan, g, r, op, ref, f"{where}.{side}[{j}]", ct, rb)
    if name in ("put", "pws", "pwsf", "ppkt"):
        need(ct in ("memory", "port"), f"channel_type {ct!r} must be memory or port")
        if name in ("pws", "pwsf"):
            need(
                ct == "port",
                "put with signal exists only for port channels (a memory channel would not signal)",
            )
        need(len(src) == len(dst) >= 1, "needs as many src_buff as dst_buff entries (at least one)")
        need(
            all(s.kind == "local" for s in src) and all(d.kind == "remote" for d in dst),
            "sources local, destinations remote",
        )
        need(
            all(s.size == d.size for s, d in zip(src, dst, strict=False)),
            "source and destination sizes differ",
        )
        need(len(dst) <= MAX_CHANNELS_PER_OP, f"at most {MAX_CHANNELS_PER_OP} destinations")
        if ct == "memory" and name in ("put", "ppkt") and len({s.type for s in src}) > 1:
            errs.append(
                f"{where}: put reads every source from src_buff[0]'s buffer ('{src[0].type}'; the kernel's handlePut), "
                f"but the sources name {sorted({s.type for s in src})}"
            )
        if ct == "port":
            ids = op.channel_ids or ()
            need(
                len(ids) == len(dst),
                "a port put needs one channel_ids entry per destination (thread i uses channel i)",
            )
            for j, c in enumerate(ids):
                need(
                    c < len(ch.get("port", [])),
                    f"channel_ids[{j}]={c} but the thread block has {len(ch.get('port', []))} port channel(s)",
                )
        if name == "ppkt":
            need(
                all(d.kind != "remote" or _remote(g, rb, ct, d)[1] == "s" for d in dst),
                "packets go to remote scratch",
            )
            need(ct == "memory", "port put_packets is not modelled by this interpreter")
    elif name == "get":
        need(ct == "memory", "get exists only for memory channels")
        need(len(src) == len(dst) >= 1, "needs as many src_buff as dst_buff entries")
        for sref, dref in zip(src, dst, strict=False):
            if sref.index != dref.index:
                errs.append(
                    f"{where}: get with source index {sref.index} != destination index {dref.index}: the kernel at HEAD "
                    "swaps the two offsets (handleGet), so only equal indices are safe"
                )
    elif name in ("copy", "cpkt", "upkt"):
        need(len(src) == 1 and len(dst) == 1, "exactly one src_buff and one dst_buff")
        need(all(x.kind == "local" for x in (*src, *dst)), "local buffers only")
        need(
            all(s.size == d.size for s, d in zip(src, dst, strict=False)),
            "source and destination sizes differ",
        )
        if name == "cpkt":
            need(all(d.type == "s" for d in dst), "copy_packets writes packets to scratch")
        if name == "upkt":
            need(all(s.type == "s" for s in src), "unpack_packets reads packets from scratch")
    elif name == "rppkt":
        need(ct == "memory", "read_put_packets is modelled for memory channels only")
        need(len(src) == 1 and src[0].kind == "local" and src[0].type == "s", "one local scratch source")
        need(len(dst) >= 1 and all(d.kind == "remote" for d in dst), "remote scratch destinations")
    elif name in ("re", "res", "rre", "rres"):
        need(len(src) >= 1 and len(dst) >= 1, "needs sources and destinations")
        need(src[0].kind == "local" and dst[0].kind == "local", "first source and destination are local")
        if name in ("rre", "rres", "res"):
            need(ct == "memory", "remote reduce operations use memory channels")
    elif name in ("glres", "gstore"):
        need(ct == "switch", "switch operations need channel_type switch")
    return errs


def _remote(g: Gpu, rb: dict[str, list[int]], ct: str, ref: BufRef) -> tuple[int, str]:
    ids = rb.get(ct, [])
    if ref.buffer_id >= len(ids) or ids[ref.buffer_id] >= len(g.remote_buffers):
        return -1, ""
    b = g.remote_buffers[ids[ref.buffer_id]]
    return b.rank, b.type


def _ref_checks(
    plan: Plan, g: Gpu, r: int, op: Op, ref: BufRef, where: str, ct: str, rb: dict[str, list[int]]
) -> list[str]:
    errs: list[str] = []
    if ref.kind == "switch":
        return errs
    if ref.kind == "remote":
        if ct not in ("memory", "port"):
            return [f"{where}: a remote buffer_id needs the op's channel_type memory or port (is {ct!r})"]
        ids = rb.get(ct, [])
        if ref.buffer_id >= len(ids):
            return [
                f"{where}.buffer_id: value {ref.buffer_id} is invalid; the thread block has {len(ids)} {ct} remote buffer(s)"
            ]
        q = ids[ref.buffer_id]
        if q >= len(g.remote_buffers):
            return errs  # reported with the thread block's table
        b = g.remote_buffers[q]
        if not 0 <= b.rank < len(plan.gpus):
            return errs
        cap = capacity(plan.gpus[b.rank], b.type)
        rank, buf = b.rank, b.type
    else:
        cap = capacity(g, ref.type)
        rank, buf = r, ref.type
    if ref.size < 1:
        errs.append(f"{where}.size: value {ref.size} is invalid; must be >= 1 chunk")
    if ref.index + ref.size > cap:
        errs.append(
            f"{where}: chunks [{ref.index}, {ref.index + ref.size}) of rank {rank} '{buf}' exceed its {cap} chunk(s)"
        )
    return errs


def sync_lint(plan: Plan) -> list[str]:
    """The kernel runs a thread block's operations with no implicit ``__syncthreads`` between them
    (``execution_kernel.hpp``): flag a publishing operation (signal, semaphore release, port put) after a data
    operation, a data operation after a wait or acquire, and two data operations on overlapping ranges (one
    writing), each without a ``nop`` (or ``barrier``) between. Pipeline bodies are checked with wrap-around
    (the last operation of an iteration is followed by the first of the next)."""
    errs: list[str] = []
    for r, g in enumerate(plan.gpus):
        for k, tb in enumerate(g.threadblocks):
            rb = _tb_tables(g, tb)[1]
            errs += _lint_ops(r, k, tb.ops, "ops", False, rb, g)
    return errs


def _lint_ops(
    r: int, k: int, ops: tuple[Op, ...], path: str, wrap: bool, rb: dict[str, list[int]], g: Gpu
) -> list[str]:
    errs: list[str] = []
    reported: set[int] = set()
    accesses: list[tuple[int, str, int, int, bool]] = []  # rank, buf, lo, hi, write
    data_since = ""
    wait_since = ""

    def flag(i: int, msg: str) -> None:
        if i not in reported:
            reported.add(i)
            errs.append(f"{_where(r, k, f'{path}[{i}]')}: {msg}")

    for i, op in list(enumerate(ops)) * (2 if wrap else 1):
        name = op.name
        if name in ("nop", "barrier"):
            accesses, data_since, wait_since = [], "", ""
            continue
        if name == "pipeline":
            errs += _lint_ops(r, k, op.ops, f"{path}[{i}].ops", True, rb, g)
            accesses, data_since, wait_since = [], "", ""
            continue
        port = op.channel_type == "port"
        if data_since and (name in PUBLISH_OPS or (port and name in ("put", "ppkt"))):
            flag(
                i,
                f"{name} follows {data_since} without a nop: threads still writing that data are not "
                "synchronised with it (no implicit __syncthreads between operations)",
            )
        if port and wait_since and len(op.dst or ()) > 1 and name in ("put", "pws", "pwsf", "ppkt"):
            flag(
                i,
                f"{name} with {len(op.dst or ())} destinations follows {wait_since} without a nop: threads 1.. "
                "issue their puts before thread 0's wait is satisfied",
            )
        if name in DATA_OPS and not port:
            if wait_since:
                flag(
                    i,
                    f"{name} follows {wait_since} without a nop: only threads tid < n wait, the others run "
                    "ahead into the data operation",
                )
            mine = _accesses(op, r, rb, g)
            for a in mine:
                if any(
                    a[0] == b[0] and a[1] == b[1] and a[2] < b[3] and b[2] < a[3] and (a[4] or b[4])
                    for b in accesses
                ):
                    flag(
                        i,
                        f"{name} touches rank {a[0]} {a[1]}[{a[2]}:{a[3]}], which an earlier data operation of "
                        "the thread block since the last nop also touches (one writes): not synchronised",
                    )
                    break
            accesses += mine
            data_since = f"a data operation ({name})"
        if name in WAIT_OPS:
            wait_since = f"a {name}"
    return errs


def _accesses(op: Op, r: int, rb: dict[str, list[int]], g: Gpu) -> list[tuple[int, str, int, int, bool]]:
    out = []
    ct = op.channel_type or "none"
    for side, refs in ((False, op.src or ()), (True, op.dst or ())):
        for ref in refs:
            if ref.kind == "local":
                out.append((r, ref.type, ref.index, ref.index + ref.size, side))
            elif ref.kind == "remote":
                rank, buf = _remote(g, rb, ct, ref)
                if rank >= 0:
                    out.append((rank, buf, ref.index, ref.index + ref.size, side))
    return out


def _pairing_notes(plan: Plan) -> list[str]:
    notes = []
    for t in ("memory", "port"):
        counts: dict[tuple[int, int], int] = {}
        for r, g in enumerate(plan.gpus):
            for p in g.peers(t):
                counts[(r, p)] = counts.get((r, p), 0) + 1
        for (r, p), c in sorted(counts.items()):
            back = counts.get((p, r), 0)
            if r < p and c != back:
                notes.append(
                    f"{t} channels: rank {r} has {c} to rank {p} but rank {p} has {back} back; the executor adds "
                    "unpaired dummy connections, and signals on those reach no thread block"
                )
    return notes


# ---------------------------------------------------------------------- sizes
def choose_sizes(plan: Plan, chunk_bytes: int | None = None) -> tuple[Sizes | None, list[str]]:
    """A message size the plan loads with (per rank send/receive bytes). With ``chunk_bytes`` (a manifest's),
    exactly that chunk; otherwise the smallest chunk (a multiple of ``buffer_alignment``) whose size lies in
    [min_message_size, max_message_size] and that runs every pipeline at least twice."""
    a = plan.buffer_alignment
    errs: list[str] = []
    n = len(plan.gpus)
    if n == 0:
        return None, ["gpus: value [] is invalid; a plan needs at least one GPU"]
    coll = plan.collective

    def sel(g: Gpu, cb: int) -> int:
        return (g.output_chunks if coll == "allgather" else g.input_chunks) * cb

    if chunk_bytes is None:
        cb = a
        g0 = plan.gpus[0]
        base = g0.output_chunks if coll == "allgather" else g0.input_chunks
        if base and plan.min_message_size > base * cb:
            cb = -(-plan.min_message_size // base)
            cb = -(-cb // a) * a
        for g in plan.gpus:
            for tb in g.threadblocks:
                for o in tb.ops:
                    if o.iter_context is not None and o.iter_context[1] > 0:
                        unit, nch = o.iter_context
                        want = -(-(3 * unit) // (2 * nch))
                        cb = max(cb, -(-want // a) * a)
    else:
        cb = chunk_bytes
    sizes = Sizes(
        tuple(g.input_chunks * cb for g in plan.gpus),
        tuple(g.output_chunks * cb for g in plan.gpus),
        tuple(cb for _ in plan.gpus),
    )
    s0 = sel(plan.gpus[0], cb)
    if not plan.min_message_size <= s0 <= plan.max_message_size:
        errs.append(
            f"min_message_size/max_message_size: no message size with {cb}-byte chunks lies in "
            f"[{plan.min_message_size}, {plan.max_message_size}] (tried {s0} bytes)"
        )
    return sizes, errs


def size_checks(plan: Plan, sizes: Sizes) -> list[str]:
    """What ``checkMessageSize`` and ``getSizeAndChunks`` throw on, plus uint32 offsets and pipeline counts."""
    errs = []
    a = plan.buffer_alignment
    chunk = []
    for r, g in enumerate(plan.gpus):
        ib, ob = sizes.input_bytes[r], sizes.output_bytes[r]
        nin, nout = g.input_chunks, g.output_chunks
        for key, v in (("input_chunks", nin), ("output_chunks", nout)):
            if v == 0:
                errs.append(
                    f"gpus[{r}].{key}: value 0 is invalid; the executor's size check computes (size / "
                    f"{a}) % {key} and divides by zero"
                )
        if ib % a or ob % a:
            errs.append(f"gpus[{r}]: message of {ib}/{ob} bytes is not a multiple of buffer_alignment {a}")
        elif nin and nout and ((ib // a) % nin or (ob // a) % nout):
            errs.append(f"gpus[{r}]: {ib} bytes do not split into {nin} chunks of whole {a}-byte units")
        if nin and nout and ib // nin != ob // nout:
            errs.append(f"gpus[{r}]: chunk sizes differ ({ib // nin} input, {ob // nout} output bytes)")
        chunk.append(ib // nin if nin else (ob // nout if nout else 0))
        s = ob if plan.collective == "allgather" else ib
        if not plan.min_message_size <= s <= plan.max_message_size:
            errs.append(
                f"gpus[{r}]: message size {s} outside [min_message_size {plan.min_message_size}, "
                f"max_message_size {plan.max_message_size}]"
            )
        scr_mult = 2 if plan.protocol == "LL" else 1
        top = max(nin, nout, g.scratch_chunks * scr_mult) * chunk[-1]
        if top > MAX_U32:
            errs.append(
                f"gpus[{r}]: byte offsets up to {top} exceed uint32 (the Operation struct stores offsets and sizes "
                "as uint32)"
            )
        for tb in g.threadblocks:
            for o in tb.ops:
                if o.iter_context is not None:
                    unit, nch = o.iter_context
                    it = -(-nch * chunk[-1] // unit) if unit else 0
                    if it > MAX_PIPELINE_ITERATIONS:
                        errs.append(
                            f"gpus[{r}] tb {tb.id}: {it} pipeline iterations; the kernel counts in uint16"
                        )
    has_remote = any(b for g in plan.gpus for b in g.remote_buffers)
    if has_remote and len(set(chunk)) > 1:
        errs.append(
            f"chunk bytes differ across ranks ({sorted(set(chunk))}): remote offsets are computed with the local "
            "rank's chunk size"
        )
    return errs


# ---------------------------------------------------------------------- execution
Snap = tuple["npt.NDArray[np.int32] | None", "npt.NDArray[np.int32]", "npt.NDArray[np.int32]"]


class _Chan:
    """One channel end (rank, type, global id): the signals that arrived (each with the signaller's clocks:
    data, fenced-at-launch-start, control), the shared expected counter, and the prefix join of consumed ones."""

    __slots__ = ("consumed", "cum", "cumc", "cumf", "expected", "inbound", "pending")

    def __init__(self, nagents: int) -> None:
        self.inbound = 0
        self.expected = 0
        self.pending: deque[Snap] = deque()
        self.consumed = 0
        self.cum = np.zeros(nagents, np.int32)
        self.cumf = np.zeros(nagents, np.int32)
        self.cumc = np.zeros(nagents, np.int32)

    def upto(self, m: int) -> None:
        while self.consumed < m and self.pending:
            vd, vf, vc = self.pending.popleft()
            if vd is not None:
                np.maximum(self.cum, vd, out=self.cum)
            np.maximum(self.cumf, vf, out=self.cumf)
            np.maximum(self.cumc, vc, out=self.cumc)
            self.consumed += 1


class _Sem:
    """A device semaphore: its value, and the releases as a signal sequence (the k-th acquire joins releases
    1..k, the part of the happens-before every schedule guarantees)."""

    __slots__ = ("chan", "value")

    def __init__(self, value: int, nagents: int) -> None:
        self.value = value
        self.chan = _Chan(nagents)


@dataclass
class _Step:
    op: Op
    path: str
    off: int  # pipeline iteration offset (bytes)
    unit: int  # pipeline unit (bytes); 0 outside pipelines
    what: str = ""  # "rank r tb t path (name)", for messages
    cache: Any = None  # the step's resolved channels and byte ranges (the same in every launch)


class _Buf:
    """A physical buffer of one rank in granules: values, LL packets (scratch), last writer/reader epochs."""

    def __init__(self, cells: int, rng: np.random.Generator, packets: bool) -> None:
        self.val = rng.integers(0, 1 << 63, size=cells, dtype=np.uint64)
        self.wa = np.full(cells, -1, np.int32)
        self.wt = np.zeros(cells, np.int32)
        self.wl = np.zeros(cells, np.int16)  # launch of the last write
        self.ra = np.full(cells, -1, np.int32)
        self.rt = np.zeros(cells, np.int32)
        self.rl = np.zeros(cells, np.int16)
        self.extra: dict[int, list[tuple[int, int, int]]] = {}
        npk = cells // 2 if packets else 0
        self.pval = np.zeros(npk, np.uint64)
        self.pflag = np.zeros(npk, np.int64)
        self.psnap = np.full(npk, -1, np.int64)


class _Machine:
    def __init__(
        self,
        plan: Plan,
        sizes: Sizes,
        launches: int,
        layout: ChunkLayout | None,
        max_errors: int,
        seed: int,
    ) -> None:
        self.plan = plan
        self.sizes = sizes
        self.launches = launches
        self.layout = layout
        self.max_errors = max_errors
        self.res = InterpResult()
        self.rng = np.random.default_rng(seed)
        self.n = len(plan.gpus)
        g0 = math.gcd(*sizes.chunk) if sizes.chunk else plan.buffer_alignment
        units = [
            o.iter_context[0] for g in plan.gpus for tb in g.threadblocks for o in tb.ops if o.iter_context
        ]
        grain = math.gcd(g0, *units) if units else g0
        if any(
            o.tbg is not None for g in plan.gpus for tb in g.threadblocks for _p, o, _n in _flatten(tb.ops)
        ):
            grain = math.gcd(grain, plan.buffer_alignment)
        self.grain = grain
        self.races = 0
        self.steps = 0
        self.setup_agents()
        self.setup_memory()

    # ------------------------------------------------------------------ setup
    def err(self, msg: str) -> None:
        if len(self.res.errors) < self.max_errors:
            self.res.errors.append(msg)

    def setup_agents(self) -> None:
        plan = self.plan
        self.tbs: list[tuple[int, int]] = []
        self.steps_of: list[list[_Step]] = []
        self.tables: list[tuple[dict[str, list[int]], dict[str, list[int]]]] = []
        for r, g in enumerate(plan.gpus):
            for k, tb in enumerate(g.threadblocks):
                self.tbs.append((r, k))
                self.tables.append(_tb_tables(g, tb))
                self.steps_of.append(self.unroll(r, tb))
        self.ntb = len(self.tbs)
        self.first_pid = [0] * (self.n + 1)
        for r in range(self.n):
            self.first_pid[r + 1] = self.first_pid[r] + len(plan.gpus[r].threadblocks)
        # agents: thread blocks, then one proxy per rank (its port-channel FIFOs), then one host per rank
        self.proxy0 = self.ntb
        self.host0 = self.ntb + self.n
        na = self.ntb + 2 * self.n
        self.na = na
        self.vc = np.zeros((na, na), np.int32)
        self.vcc = np.zeros((na, na), np.int32)
        np.fill_diagonal(self.vc, 1)
        np.fill_diagonal(self.vcc, 1)
        self.pc = [0] * self.ntb
        self.launch_of = [0] * self.ntb
        self.done_in_launch = [0] * self.n
        self.rank_launch = [0] * self.n
        self.state: list[Any] = [None] * self.ntb  # per-op progress (tickets, acquired semaphores)
        # channel ends and pairing
        self.chans: dict[tuple[int, str, int], _Chan] = {}
        self.pair: dict[tuple[int, str, int], tuple[int, str, int] | None] = {}
        for t in ("memory", "port"):
            occ: dict[tuple[int, int], list[int]] = {}
            for r, g in enumerate(plan.gpus):
                for gid, p in enumerate(g.peers(t)):
                    occ.setdefault((r, p), []).append(gid)
                    self.chans[(r, t, gid)] = _Chan(na)
            for (r, p), gids in occ.items():
                back = occ.get((p, r), [])
                for j, gid in enumerate(gids):
                    self.pair[(r, t, gid)] = (p, t, back[j]) if j < len(back) else None
        self.sems: dict[tuple[int, int], _Sem] = {}
        for r, g in enumerate(plan.gpus):
            for s, v in enumerate(g.semaphores):
                self.sems[(r, s)] = _Sem(v, na)
        self.barriers: dict[tuple[int, int], list[Any]] = {}
        self.fifo: list[deque[tuple[Any, ...]]] = [deque() for _ in range(self.n)]
        self.proxy_done = [0] * self.n  # items the proxy of rank r completed
        self.proxy_issued = [0] * self.n
        self.snaps: list[Snap] = []
        self.waiting: dict[tuple[Any, ...], list[int]] = {}
        self.fence: list[npt.NDArray[np.int32]] = [np.zeros(na, np.int32) for _ in range(self.n)]

    def unroll(self, r: int, tb: ThreadBlock) -> list[_Step]:
        cb = self.sizes.chunk[r]
        out: list[_Step] = []
        for i, o in enumerate(tb.ops):
            if o.iter_context is None:
                out.append(_Step(o, f"ops[{i}]", 0, 0, f"rank {r} tb {tb.id} ops[{i}] ({o.name})"))
                continue
            unit, nch = o.iter_context
            it = -(-nch * cb // unit) if unit else 0
            for j in range(min(it, MAX_PIPELINE_ITERATIONS)):
                for m, inner in enumerate(o.ops):
                    path = f"ops[{i}].ops[{m}]"
                    out.append(
                        _Step(inner, path, j * unit, unit, f"rank {r} tb {tb.id} {path} ({inner.name})")
                    )
        return out

    def setup_memory(self) -> None:
        plan, sz, gr = self.plan, self.sizes, self.grain
        self.mem: dict[tuple[int, str], _Buf] = {}
        self.alias: dict[tuple[int, str], tuple[str, int]] = {}
        ll = plan.protocol == "LL"
        for r, g in enumerate(plan.gpus):
            ib, ob = sz.input_bytes[r], sz.output_bytes[r]
            cells_i, cells_o = ib // gr, ob // gr
            scr_bytes = (
                g.scratch_chunks
                * sz.chunk[r]
                * (2 if ll else 1)
                * (2 if plan.use_double_scratch_buffer else 1)
            )
            if plan.inplace and plan.collective == "allgather":
                self.mem[(r, "o")] = _Buf(cells_o, self.rng, False)
                self.alias[(r, "i")] = ("o", r * ib)
            elif plan.inplace and plan.collective == "reducescatter":
                self.mem[(r, "i")] = _Buf(cells_i, self.rng, False)
                self.alias[(r, "o")] = ("i", r * ob)
            elif plan.inplace:
                self.mem[(r, "i")] = _Buf(max(cells_i, cells_o), self.rng, False)
                self.alias[(r, "o")] = ("i", 0)
            else:
                self.mem[(r, "i")] = _Buf(cells_i, self.rng, False)
                self.mem[(r, "o")] = _Buf(cells_o, self.rng, False)
            self.mem[(r, "s")] = _Buf(max(scr_bytes // gr, 0), self.rng, True)
        self.inputs: list[list[npt.NDArray[np.uint64]]] = []

    # ------------------------------------------------------------------ addresses
    def phys(self, r: int, buf: str, byte_off: int) -> tuple[_Buf, int]:
        if (r, buf) in self.alias:
            real, base = self.alias[(r, buf)]
            return self.mem[(r, real)], (base + byte_off)
        return self.mem[(r, buf)], byte_off

    def half(self, r: int, launch: int) -> int:
        if not self.plan.use_double_scratch_buffer:
            return 0
        return (len(self.mem[(r, "s")].val) * self.grain) // 2 if (launch + 1) % 2 == 0 else 0

    def rng_of(
        self, r: int, step: _Step, op: Op, ref: BufRef, pid: int, tbg_j: int, tbg_m: int
    ) -> tuple[int, str, int, int] | None:
        """(rank, buffer, byte offset, byte length) of a reference in this step (pipeline sub-range and
        thread-block-group share applied)."""
        g = self.plan.gpus[r]
        cb = self.sizes.chunk[r]
        if ref.kind == "remote":
            rank, buf = _remote(g, self.tables[pid][1], op.channel_type or "none", ref)
            if rank < 0:
                return None
        else:
            rank, buf = r, ref.type
        off, ln = ref.index * cb, ref.size * cb
        if tbg_m > 1:
            a = self.plan.buffer_alignment
            nel = ln // a
            lo = (tbg_j * (nel // tbg_m) + min(tbg_j, nel % tbg_m)) * a
            hi = ((tbg_j + 1) * (nel // tbg_m) + min(tbg_j + 1, nel % tbg_m)) * a
            off, ln = off + lo, hi - lo
        if step.unit:
            if step.off >= ln:
                self.err(
                    f"rank {r} {step.path}: {op.name} covers {ln} bytes but the pipeline iterates to offset {step.off}: "
                    "the kernel's unsigned size arithmetic wraps (nested ops need size == num_chunks)"
                )
                return None
            off, ln = off + step.off, min(ln - step.off, step.unit)
        return rank, buf, off, ln

    # ------------------------------------------------------------------ race tracking
    def access(
        self,
        agent: int,
        launch: int,
        r: int,
        buf: str,
        byte_off: int,
        nbytes: int,
        write: bool,
        what: str,
        phys: bool = False,
    ) -> tuple[_Buf, int, int]:
        """Record an access; report unordered conflicting ones. Returns the buffer and its cell range."""
        if phys:
            b, base = self.mem[(r, "s")], byte_off
        else:
            b, base = self.phys(r, buf, byte_off)
        lo, hi = base // self.grain, (base + nbytes) // self.grain
        if lo < 0 or hi > len(b.val) or base % self.grain or nbytes % self.grain:
            self.err(
                f"{what}: rank {r} {buf} bytes [{base}, {base + nbytes}) outside the buffer or misaligned"
            )
            return b, 0, 0
        vc, vcc = self.vc[agent], self.vcc[agent]
        now = int(vc[agent])
        self.where[(agent, now)] = what
        if hi - lo <= 4:
            self.access_small(b, lo, hi, agent, now, launch, r, buf, write, vc, vcc)
            return b, lo, hi
        wa = b.wa[lo:hi]
        wmin, wmax = int(wa.min()), int(wa.max())
        if wmin == wmax and (wmin < 0 or wmin == agent or vc[wmin] >= b.wt[lo:hi].max()):
            pass  # one earlier writer (or none), ordered before this access: the common case
        elif wmax >= 0:
            okm = wa >= 0
            bad = okm & (wa != agent) & (vc[np.where(okm, wa, 0)] < b.wt[lo:hi])
            if bad.any():
                j = int(np.flatnonzero(bad)[0])
                self.report_race(
                    agent,
                    launch,
                    int(b.wa[lo + j]),
                    int(b.wt[lo + j]),
                    int(b.wl[lo + j]),
                    r,
                    buf,
                    lo + j,
                    write,
                    "written",
                )
        if write:
            ra = b.ra[lo:hi]
            rmin, rmax = int(ra.min()), int(ra.max())
            if rmin == rmax and (rmin < 0 or rmin == agent or vcc[rmin] >= b.rt[lo:hi].max()):
                bad = None
            else:
                okm = ra >= 0
                bad = okm & (ra != agent) & (vcc[np.where(okm, ra, 0)] < b.rt[lo:hi])
            if bad is not None and bad.any():
                j = int(np.flatnonzero(bad)[0])
                self.report_race(
                    agent,
                    launch,
                    int(b.ra[lo + j]),
                    int(b.rt[lo + j]),
                    int(b.rl[lo + j]),
                    r,
                    buf,
                    lo + j,
                    write,
                    "read",
                )
            elif b.extra:
                for c in range(lo, hi):
                    for q, tq, lq in b.extra.pop(c, ()):
                        if q != agent and vcc[q] < tq:
                            self.report_race(agent, launch, q, tq, lq, r, buf, c, write, "read")
                            break
            b.wa[lo:hi] = agent
            b.wt[lo:hi] = now
            b.wl[lo:hi] = launch
            b.ra[lo:hi] = -1
            if b.extra:
                for c in range(lo, hi):
                    b.extra.pop(c, None)
        else:
            prev = b.ra[lo:hi]
            keep = (prev >= 0) & (prev != agent)
            if keep.any():
                for jj in np.flatnonzero(keep).tolist():
                    b.extra.setdefault(lo + jj, []).append(
                        (int(prev[jj]), int(b.rt[lo + jj]), int(b.rl[lo + jj]))
                    )
            b.ra[lo:hi] = agent
            b.rt[lo:hi] = now
            b.rl[lo:hi] = launch
        return b, lo, hi

    def access_small(
        self,
        b: _Buf,
        lo: int,
        hi: int,
        agent: int,
        now: int,
        launch: int,
        r: int,
        buf: str,
        write: bool,
        vc: npt.NDArray[np.int32],
        vcc: npt.NDArray[np.int32],
    ) -> None:
        """:meth:`access` for a few granules, without numpy slicing (most accesses here are one chunk)."""
        wa, wt, ra, rt = b.wa, b.wt, b.ra, b.rt
        for c in range(lo, hi):
            w = int(wa[c])
            if w >= 0 and w != agent and vc[w] < wt[c]:
                self.report_race(agent, launch, w, int(wt[c]), int(b.wl[c]), r, buf, c, write, "written")
                break
        if write:
            raced = False
            for c in range(lo, hi):
                readers = [(int(ra[c]), int(rt[c]), int(b.rl[c]))] if ra[c] >= 0 else []
                if b.extra:
                    readers += b.extra.pop(c, [])
                for q, tq, lq in readers:
                    if not raced and q != agent and vcc[q] < tq:
                        self.report_race(agent, launch, q, tq, lq, r, buf, c, write, "read")
                        raced = True
            wa[lo:hi] = agent
            wt[lo:hi] = now
            b.wl[lo:hi] = launch
            ra[lo:hi] = -1
        else:
            for c in range(lo, hi):
                q = int(ra[c])
                if q >= 0 and q != agent:
                    b.extra.setdefault(c, []).append((q, int(rt[c]), int(b.rl[c])))
            ra[lo:hi] = agent
            rt[lo:hi] = now
            b.rl[lo:hi] = launch

    def agent_name(self, a: int) -> str:
        if a < self.ntb:
            r, k = self.tbs[a]
            return f"rank {r} tb {k}"
        if a < self.host0:
            return f"the port proxy of rank {a - self.proxy0}"
        return f"the caller (host) of rank {a - self.host0}"

    def report_race(
        self,
        agent: int,
        launch: int,
        other: int,
        t_other: int,
        l_other: int,
        r: int,
        buf: str,
        cell: int,
        write: bool,
        prev: str,
    ) -> None:
        self.races += 1
        if self.races > 20:
            return
        mine = self.where.get((agent, int(self.vc[agent, agent])), self.agent_name(agent))
        theirs = self.where.get((other, t_other), self.agent_name(other))
        byte = cell * self.grain
        verb = "writes" if write else "reads"
        if l_other != launch:
            self.err(
                f"cross-launch hazard: {mine} (launch {launch + 1}) {verb} rank {r} {buf} byte {byte}, which "
                f"{theirs} (launch {l_other + 1}) {prev}, with nothing ordering the two"
            )
        else:
            self.err(
                f"race: {mine} (launch {launch + 1}) {verb} rank {r} {buf} byte {byte} {prev} by {theirs} without ordering"
            )

    # ------------------------------------------------------------------ clocks
    def tick(self, a: int) -> None:
        self.vc[a, a] += 1
        self.vcc[a, a] += 1

    def snap(self, a: int) -> Snap:
        v = self.vc[a].copy()
        return v, v, self.vcc[a].copy()

    def join(self, a: int, vd: npt.NDArray[np.int32] | None, vcc: npt.NDArray[np.int32]) -> None:
        # every snapshot's data part is covered by its control part, so vc <= vcc stays true
        if vd is not None:
            np.maximum(self.vc[a], vd, out=self.vc[a])
        np.maximum(self.vcc[a], vcc, out=self.vcc[a])

    # ------------------------------------------------------------------ values
    def read_cells(self, b: _Buf, lo: int, hi: int) -> npt.NDArray[np.uint64]:
        return b.val[lo:hi].copy()

    def write_cells(self, b: _Buf, lo: int, hi: int, vals: npt.NDArray[np.uint64]) -> None:
        b.val[lo:hi] = vals
        if len(b.pflag):  # data over packet space invalidates those packets
            b.pflag[lo // 2 : (hi + 1) // 2] = 0

    # ------------------------------------------------------------------ run
    def run(self) -> InterpResult:
        self.where: dict[tuple[int, int], str] = {}
        self.work: deque[int] = deque()
        self.queued = [False] * (self.ntb + self.n)
        self.finished_all = [False] * self.n
        for r in range(self.n):
            self.host_write_inputs(r, 0)
            self.start_launch(r, 0)
        while self.work:
            a = self.work.popleft()
            self.queued[a] = False
            if a < self.ntb:
                self.advance(a)
            else:
                self.run_proxy(a - self.ntb)
            if self.steps > MAX_INTERP_STEPS:
                self.err(f"stopped after {MAX_INTERP_STEPS} steps")
                break
        self.final_report()
        self.res.steps = self.steps
        self.res.launches = self.launches
        return self.res

    def queue(self, a: int) -> None:
        if not self.queued[a]:
            self.queued[a] = True
            self.work.append(a)

    def wake(self, key: tuple[Any, ...]) -> None:
        for a in self.waiting.pop(key, ()):
            self.queue(a)

    def block(self, key: tuple[Any, ...], pid: int) -> None:
        self.waiting.setdefault(key, []).append(pid)

    def host_write_inputs(self, r: int, launch: int) -> None:
        h = self.host0 + r
        ib = self.sizes.input_bytes[r]
        while len(self.inputs) <= launch:
            self.inputs.append([np.zeros(0, np.uint64)] * self.n)
        vals = self.rng.integers(0, 1 << 63, size=ib // self.grain, dtype=np.uint64)
        self.inputs[launch][r] = vals
        if ib:
            b, lo, hi = self.access(
                h, launch, r, "i", 0, ib, True, f"the caller of rank {r} writing its input"
            )
            b.val[lo:hi] = vals
        self.tick(h)

    def start_launch(self, r: int, launch: int) -> None:
        h = self.host0 + r
        self.rank_launch[r] = launch
        self.fence[r] = self.vc[h].copy()  # a kernel boundary: everything before it is globally visible
        self.done_in_launch[r] = 0
        first, last = self.first_pid[r], self.first_pid[r + 1]
        for pid in range(first, last):
            self.pc[pid] = 0
            self.launch_of[pid] = launch
            self.state[pid] = None
            self.join(pid, self.vc[h], self.vcc[h])
            self.tick(pid)
            self.queue(pid)
        if first == last:
            self.end_launch(r)

    def end_launch(self, r: int) -> None:
        launch = self.rank_launch[r]
        h = self.host0 + r
        for pid in range(self.first_pid[r], self.first_pid[r + 1]):
            self.join(h, self.vc[pid], self.vcc[pid])
        self.tick(h)
        self.check_post(r, launch)
        if launch + 1 < self.launches:
            self.host_write_inputs(r, launch + 1)
            self.start_launch(r, launch + 1)
        else:
            self.finished_all[r] = True

    def advance(self, pid: int) -> None:
        steps = self.steps_of[pid]
        r = self.tbs[pid][0]
        while self.pc[pid] < len(steps):
            st = steps[self.pc[pid]]
            if not self.execute(pid, r, st):
                return
            self.steps += 1
            self.state[pid] = None
            self.pc[pid] += 1
            self.tick(pid)
        self.done_in_launch[r] += 1
        self.pc[pid] = len(steps) + 1  # finished (distinct from "at the end, blocked")
        if self.done_in_launch[r] == self.first_pid[r + 1] - self.first_pid[r]:
            self.end_launch(r)

    def resolve_chan(self, pid: int, ct: str, local: int) -> tuple[int, str, int] | None:
        r = self.tbs[pid][0]
        ids = self.tables[pid][0].get(ct, [])
        if local >= len(ids):
            return None
        return (r, ct, ids[local])

    # ------------------------------------------------------------------ one operation
    def execute(self, pid: int, r: int, st: _Step) -> bool:
        op = st.op
        name = op.name
        launch = self.launch_of[pid]
        what = st.what
        ct = op.channel_type or "none"
        if name in ("nop", "flush"):
            return True
        if name in ("signal", "rlxsignal"):
            if st.cache is None:
                st.cache = [
                    k for c in op.channel_ids or () if (k := self.resolve_chan(pid, ct, c)) is not None
                ]
            for key in st.cache:
                if ct == "port":
                    self.enqueue(pid, r, ("signal", key))
                elif name == "signal":
                    self.deliver_signal(key, self.snap(pid))
                else:  # relaxed: orders control; data only as far as the launch boundary fenced it
                    self.deliver_signal(key, (None, self.fence[r], self.vcc[pid].copy()))
            return True
        if name in ("wait", "rlxwait"):
            if st.cache is None:
                st.cache = [
                    self.chans[k] for c in op.channel_ids or () if (k := self.resolve_chan(pid, ct, c))
                ]
            ends: list[_Chan] = st.cache
            tickets = self.state[pid]
            if tickets is None:
                tickets = self.state[pid] = []
                for e in ends:
                    e.expected += 1
                    tickets.append(e.expected)
            for e, tk in zip(ends, tickets, strict=True):
                if e.inbound < tk:
                    self.block(("ch", id(e)), pid)
                    self.stuck_why = ("wait", st, tk, e.inbound)
                    return False
            vc, vcc = self.vc[pid], self.vcc[pid]
            for e, tk in zip(ends, tickets, strict=True):
                e.upto(tk)
                np.maximum(vc, e.cumf, out=vc)
                if name == "wait":  # an acquire: also the data its release sequence published
                    np.maximum(vc, e.cum, out=vc)
                np.maximum(vcc, e.cumc, out=vcc)
            return True
        if name == "sem_release":
            for s in op.semaphore_ids or ():
                sem = self.sems.get((r, s))
                if sem is None:
                    continue
                sem.value += 1
                sem.chan.inbound += 1
                sem.chan.pending.append(self.snap(pid))
                self.wake(("sem", r, s))
            return True
        if name == "sem_acquire":
            ids = list(op.semaphore_ids or ())
            got = self.state[pid] if self.state[pid] is not None else set()
            for j, s in enumerate(ids):
                if j in got:
                    continue
                sem = self.sems.get((r, s))
                if sem is None:
                    got.add(j)
                    continue
                if sem.value <= 0:
                    self.state[pid] = got
                    self.block(("sem", r, s), pid)
                    self.stuck_why = ("sem", st, s, r)
                    return False
                sem.value -= 1
                sem.chan.expected += 1
                sem.chan.upto(sem.chan.expected)
                self.join(pid, sem.chan.cum, sem.chan.cumc)
                got.add(j)
            return True
        if name == "barrier":
            bkey = (r, op.barrier_id or 0)
            bar = self.barriers.setdefault(bkey, [0, set(), np.zeros(self.na, np.int32), None])
            if self.state[pid] is None:
                gen = bar[0]
                bar[1].add(pid)
                np.maximum(bar[2], self.vc[pid], out=bar[2])
                self.state[pid] = gen
                if len(bar[1]) >= (op.num_threadblocks or 1):
                    bar[3] = (gen, bar[2].copy())
                    bar[0] += 1
                    bar[1] = set()
                    bar[2] = np.zeros(self.na, np.int32)
                    self.wake(("bar", bkey))
            gen = self.state[pid]
            if bar[3] is None or bar[3][0] < gen:
                self.block(("bar", bkey), pid)
                return False
            self.join(pid, bar[3][1], bar[3][1])
            return True
        if name in ("put", "pws", "pwsf") and ct == "port":
            if self.state[pid] is None:
                items = []
                for i, (sref, dref) in enumerate(zip(op.src or (), op.dst or (), strict=False)):
                    cid = (op.channel_ids or ())[i] if i < len(op.channel_ids or ()) else 0
                    ckey = self.resolve_chan(pid, "port", cid)
                    a = self.rng_of(r, st, op, sref, pid, *self.tbg(op))
                    b = self.rng_of(r, st, op, dref, pid, *self.tbg(op))
                    if ckey is None or a is None or b is None:
                        continue
                    items.append(self.enqueue(pid, r, ("put", ckey, a, b, launch, what)))
                    if name in ("pws", "pwsf"):
                        items.append(self.enqueue(pid, r, ("signal", ckey)))
                self.state[pid] = max(items, default=0)
            if name == "pwsf" and self.proxy_done[r] < self.state[pid]:
                self.block(("flush", r), pid)
                self.stuck_why = ("pwsf", st)
                return False
            if name == "pwsf":
                p = self.proxy0 + r
                self.join(pid, self.vc[p], self.vcc[p])
            return True
        if name in DATA_OPS or name in NOT_MODELLED:
            return self.data_op(pid, r, st, launch, what)
        return True

    def tbg(self, op: Op) -> tuple[int, int]:
        return op.tbg if op.tbg is not None else (0, 1)

    def enqueue(self, pid: int, r: int, item: tuple[Any, ...]) -> int:
        self.fifo[r].append((*item, self.snap(pid)))
        self.proxy_issued[r] += 1
        self.queue(self.ntb + r)
        return self.proxy_issued[r]

    def deliver_signal(self, key: tuple[int, str, int], snap: Snap) -> None:
        peer = self.pair.get(key)
        if peer is None:
            self.lost_signals += 1
            return
        e = self.chans[peer]
        e.inbound += 1
        e.pending.append(snap)
        self.wake(("ch", id(e)))

    lost_signals = 0
    stuck_why: tuple[Any, ...] = ()

    def why_stuck(self) -> str:
        w = self.stuck_why
        if not w:
            return ""
        if w[0] == "wait":
            return f"{w[1].what} waits for signal {w[2]} on its channel, {w[3]} arrived"
        if w[0] == "sem":
            return f"{w[1].what} acquires semaphore {w[2]} of rank {w[3]}, which is not released"
        if w[0] == "pwsf":
            return f"{w[1].what} waits for its port proxy to complete a put"
        return f"{w[1].what} spins on LL packets of launch {w[2] + 1} that never arrive"

    def run_proxy(self, r: int) -> None:
        p = self.proxy0 + r
        q = self.fifo[r]
        while q:
            item = q.popleft()
            vd, _vf, vcc = item[-1]
            self.join(p, vd, vcc)
            self.tick(p)
            if item[0] == "signal":
                self.deliver_signal(item[1], self.snap(p))
            else:
                _k, _key, a, b, launch, what = item[:6]
                src_b, slo, shi = self.access(
                    p,
                    launch,
                    a[0],
                    a[1],
                    *self.scr_adj(a, launch, False),
                    False,
                    f"{what} via the port proxy",
                )
                vals = self.read_cells(src_b, slo, shi)
                dst_b, dlo, dhi = self.access(
                    p, launch, b[0], b[1], *self.scr_adj(b, launch, True), True, f"{what} via the port proxy"
                )
                if dhi - dlo == len(vals):
                    self.write_cells(dst_b, dlo, dhi, vals)
            self.proxy_done[r] += 1
            self.wake(("flush", r))
            self.tick(p)

    def scr_adj(self, ref: tuple[int, str, int, int], launch: int, remote: bool) -> tuple[int, int]:
        """Byte offset and length after the double-scratch half offset (local scratch only, for data ops)."""
        rank, buf, off, ln = ref
        if buf == "s" and not remote:
            off += self.half(rank, launch)
        return off, ln

    def data_op(self, pid: int, r: int, st: _Step, launch: int, what: str) -> bool:
        op = st.op
        name = op.name
        if name in NOT_MODELLED:
            return True
        if st.cache is None:
            j, m = self.tbg(op)
            st.cache = (
                [self.rng_of(r, st, op, s, pid, j, m) for s in op.src or ()],
                [self.rng_of(r, st, op, d, pid, j, m) for d in op.dst or ()],
            )
        src, dst = st.cache
        if any(x is None for x in (*src, *dst)):
            return True
        flag = launch + 1
        if name in ("upkt", "rppkt"):  # spin until every packet carries this launch's flag
            s0 = src[0]
            assert s0 is not None
            b = self.mem[(r, "s")]
            plo, phi = self.pkt_cells(s0, launch)
            if plo < 0 or phi > len(b.pflag):
                self.err(f"{what}: packets [{plo}, {phi}) outside rank {r}'s packet scratch")
                return True
            if (b.pflag[plo:phi] != flag).any():
                self.block(("pkt", r), pid)
                self.stuck_why = ("pkt", st, launch)
                return False
            for sid in set(b.psnap[plo:phi].tolist()):
                if sid >= 0:
                    vd, _vf, vcc = self.snaps[sid]
                    self.join(pid, vd, vcc)
            self.access(
                pid, launch, r, "s", 2 * s0[2] + self.half(r, launch), 2 * s0[3], False, what, phys=True
            )
            vals = b.pval[plo:phi].copy()
            for d in dst:
                assert d is not None
                if name == "upkt":
                    db, lo, hi = self.access(
                        pid, launch, d[0], d[1], *self.scr_adj(d, launch, d[0] != r), True, what
                    )
                    if hi - lo == len(vals):
                        self.write_cells(db, lo, hi, vals)
                else:
                    self.put_packets(pid, launch, d, vals, flag, what)
            return True
        if name == "cpkt" or name == "ppkt":
            for s, d in zip(src, dst, strict=False):
                assert s is not None and d is not None
                if op.src:  # handlePutPackets reads every source from src_buff[0]'s buffer
                    s = (s[0], op.src[0].type, s[2], s[3])
                sb, lo, hi = self.access(
                    pid, launch, s[0], s[1], *self.scr_adj(s, launch, False), False, what
                )
                self.put_packets(pid, launch, d, self.read_cells(sb, lo, hi), flag, what)
            return True
        if name in ("copy", "put", "get"):
            for i, (s, d) in enumerate(zip(src, dst, strict=False)):
                assert s is not None and d is not None
                if name == "put" and i > 0 and op.src:  # handlePut reads from src_buff[0]'s buffer
                    s = (s[0], op.src[0].type, s[2], s[3])
                sb, slo, shi = self.access(
                    pid, launch, s[0], s[1], *self.scr_adj(s, launch, s[0] != r), False, what
                )
                vals = self.read_cells(sb, slo, shi)
                db, dlo, dhi = self.access(
                    pid, launch, d[0], d[1], *self.scr_adj(d, launch, d[0] != r), True, what
                )
                if dhi - dlo == len(vals):
                    self.write_cells(db, dlo, dhi, vals)
            return True
        if name in ("re", "res", "rre", "rres"):
            acc: npt.NDArray[np.uint64] | None = None
            for s in src:
                assert s is not None
                sb, lo, hi = self.access(
                    pid, launch, s[0], s[1], *self.scr_adj(s, launch, s[0] != r), False, what
                )
                v = self.read_cells(sb, lo, hi)
                acc = v if acc is None else (acc + v if len(v) == len(acc) else acc)
            if acc is None:
                return True
            for d in dst:
                assert d is not None
                db, lo, hi = self.access(
                    pid, launch, d[0], d[1], *self.scr_adj(d, launch, d[0] != r), True, what
                )
                if hi - lo == len(acc):
                    self.write_cells(db, lo, hi, acc)
            return True
        if name in ("glres", "gstore"):
            self.err(f"{what}: switch (NVLS) operations are not executed by this interpreter")
            return True
        return True

    def pkt_cells(self, ref: tuple[int, str, int, int], launch: int) -> tuple[int, int]:
        """Packet slots of a scratch data range: the packet of data byte o lives at physical 2·o (+ half)."""
        rank, _buf, off, ln = ref
        phys = 2 * off + self.half(rank, launch)
        return phys // (2 * self.grain), (phys + 2 * ln) // (2 * self.grain)

    def put_packets(
        self,
        pid: int,
        launch: int,
        d: tuple[int, str, int, int],
        vals: npt.NDArray[np.uint64],
        flag: int,
        what: str,
    ) -> None:
        rank = d[0]
        b = self.mem[(rank, "s")]
        plo, phi = self.pkt_cells(d, launch)
        if plo < 0 or phi > len(b.pflag) or phi - plo != len(vals):
            self.err(f"{what}: packets [{plo}, {phi}) outside rank {rank}'s packet scratch")
            return
        self.access(
            pid, launch, rank, "s", 2 * d[2] + self.half(rank, launch), 2 * d[3], True, what, phys=True
        )
        b.pval[plo:phi] = vals
        b.pflag[plo:phi] = flag
        self.snaps.append(self.snap(pid))
        b.psnap[plo:phi] = len(self.snaps) - 1
        b.val[2 * plo : 2 * phi] = np.uint64(0xDEAD)
        self.wake(("pkt", rank))

    # ------------------------------------------------------------------ results
    def check_post(self, r: int, launch: int) -> None:
        plan = self.plan
        coll = plan.collective
        h = self.host0 + r
        n = self.n
        ins = self.inputs[launch]
        ob = self.sizes.output_bytes[r]
        gr = self.grain
        if self.layout is not None:
            lay = self.layout
            k = self.sizes.chunk[r] // gr
            expect = []
            for s in range(n):
                c = int(lay.counts[s, r])
                if c:
                    expect.append(
                        (
                            int(lay.out_off[r, s]) * k,
                            ins[s][int(lay.in_off[s, r]) * k : (int(lay.in_off[s, r]) + c) * k],
                            s,
                        )
                    )
        elif coll in ("alltoall", "allgather", "sendrecv"):
            expect = []
            cells = ob // gr
            if cells % n and coll != "sendrecv":
                self.err(
                    f"rank {r}: output of {ob} bytes does not split into {n} equal blocks; cannot check {coll}"
                )
                return
            blk = cells // n
            for s in range(n):
                if coll == "alltoall":
                    iblk = len(ins[s]) // n
                    expect.append((s * blk, ins[s][r * iblk : (r + 1) * iblk], s))
                elif coll == "allgather":
                    expect.append((s * len(ins[s]), ins[s], s))
            if coll == "sendrecv":
                expect = [(0, ins[(r - 1) % n], (r - 1) % n)]
        elif coll in ("allreduce", "reducescatter"):
            total = np.zeros(len(ins[0]), np.uint64)
            for s in range(n):
                if len(ins[s]) == len(total):
                    total = total + ins[s]
            if coll == "reducescatter":
                blk = len(total) // n
                total = total[r * blk : (r + 1) * blk]
            expect = [(0, total, -1)]
        else:
            if launch == 0 and r == 0:
                self.res.notes.append(
                    f"collective {coll!r} has no postcondition here (and no manifest): deadlock, races and load "
                    "checks only"
                )
            return
        for start, want, s in expect:
            if not len(want):
                continue
            b, lo, hi = self.access(
                h,
                launch,
                r,
                "o",
                start * gr,
                len(want) * gr,
                False,
                f"the caller of rank {r} reading its output",
            )
            got = b.val[lo:hi]
            if len(got) != len(want):
                self.err(
                    f"postcondition: rank {r} output [{start * gr}, +{len(want) * gr}) outside the buffer"
                )
                continue
            bad = np.flatnonzero(got != want)
            if len(bad):
                j = int(bad[0])
                src = f" (from rank {s})" if s >= 0 else ""
                stale = ""
                if (
                    launch > 0
                    and s >= 0
                    and len(self.inputs[launch - 1][s])
                    and got[j] in self.inputs[launch - 1][s]
                ):
                    stale = ": it holds the previous launch's data"
                self.err(
                    f"postcondition ({'manifest layout' if self.layout is not None else coll}, launch {launch + 1}): "
                    f"rank {r} output byte {(start + j) * gr}{src} is wrong in {len(bad)} granule(s){stale}"
                )

    def final_report(self) -> None:
        stuck = [pid for pid in range(self.ntb) if self.pc[pid] <= len(self.steps_of[pid])]
        if stuck or not all(self.finished_all):
            lines = []
            for pid in stuck[:8]:
                r, k = self.tbs[pid]
                steps = self.steps_of[pid]
                pc = self.pc[pid]
                st = steps[pc] if pc < len(steps) else None
                desc = f"{st.path} ({st.op.name})" if st is not None else "its end"
                lines.append(f"rank {r} tb {k} at {desc} in launch {self.launch_of[pid] + 1}")
            self.err(
                f"deadlock: {len(stuck)} thread block(s) cannot progress: "
                + "; ".join(lines)
                + (f" (last blocked: {self.why_stuck()})" if self.stuck_why else "")
            )
            return
        for key, e in self.chans.items():
            if e.inbound != e.expected:
                r, t, gid = key
                self.err(
                    f"unbalanced: rank {r} {t} channel {gid} received {e.inbound} signal(s) over {self.launches} "
                    f"launches but waited {e.expected} time(s); the counters persist, so later launches mismatch"
                )
        for (r, s), sem in self.sems.items():
            init = self.plan.gpus[r].semaphores[s]
            if sem.value != init:
                self.err(f"unbalanced: rank {r} semaphore {s} ends at {sem.value}, not its initial {init}")
        if self.lost_signals:
            self.err(f"{self.lost_signals} signal(s) went to unpaired channels and reached no thread block")


def run(
    plan: Plan,
    sizes: Sizes,
    *,
    launches: int = 2,
    layout: ChunkLayout | None = None,
    max_errors: int = 40,
    seed: int = 7,
) -> InterpResult:
    """Execute ``launches`` back-to-back launches (see the module docstring)."""
    cells = max((s // max(1, math.gcd(*sizes.chunk))) for s in (*sizes.input_bytes, *sizes.output_bytes, 1))
    if cells > MAX_INTERP_CELLS:
        return InterpResult([f"not interpreted: {cells} granules per buffer exceed {MAX_INTERP_CELLS}"])
    agents = sum(len(g.threadblocks) for g in plan.gpus) + 2 * len(plan.gpus)
    if agents > MAX_INTERP_AGENTS:
        return InterpResult(
            [
                f"not interpreted: {agents} thread blocks, proxies and hosts exceed the race checker's {MAX_INTERP_AGENTS}"
            ]
        )
    return _Machine(plan, sizes, launches, layout, max_errors, seed).run()


def layout_checks(plan: Plan, layout: ChunkLayout) -> list[str]:
    """A plan checked against an a2acc manifest must be the uniform call the manifest describes."""
    errs = []
    n = layout.nranks
    if len(plan.gpus) != n:
        return [f"gpus: the plan has {len(plan.gpus)} GPUs but the manifest {n} ranks"]
    need = int(max(layout.input_sizes.max(initial=0), layout.output_sizes.max(initial=0)))
    for r, g in enumerate(plan.gpus):
        if g.input_chunks != g.output_chunks or g.input_chunks < need:
            errs.append(
                f"gpus[{r}]: input_chunks {g.input_chunks} / output_chunks {g.output_chunks} do not hold the "
                f"manifest's layout (equal, >= {need} chunks)"
            )
    return errs


def check_plan(
    plan: Plan,
    *,
    layout: ChunkLayout | None = None,
    chunk_bytes: int | None = None,
    target: str | None = None,
    launches: int = 2,
    execute: bool = True,
) -> InterpResult:
    """Load checks, then (if the plan loads and ``execute``) ``launches`` launches; the intra-thread-block
    rules always."""
    enabled = gc.isenabled()
    gc.disable()  # the machine's state is long-lived and acyclic: collections would only rescan it
    try:
        return _check_plan(plan, layout, chunk_bytes, target, launches, execute)
    finally:
        if enabled:
            gc.enable()


def _check_plan(
    plan: Plan,
    layout: ChunkLayout | None,
    chunk_bytes: int | None,
    target: str | None,
    launches: int,
    execute: bool,
) -> InterpResult:
    errs, notes = static_checks(plan, target)
    sizes, e = choose_sizes(plan, chunk_bytes)
    errs += e
    if sizes is not None:
        errs += size_checks(plan, sizes)
    if layout is not None:
        errs += layout_checks(plan, layout)
    lint = sync_lint(plan)
    if errs or sizes is None or not execute:
        return InterpResult(errs + lint, [*notes, "not executed: the plan does not load"])
    res = run(plan, sizes, launches=launches, layout=layout)
    out = InterpResult(lint + res.errors, notes + res.notes, res.launches, res.steps)
    return out
