"""Load checks of an MSCCL++ execution plan: what ``ExecutionPlan::loadExecutionPlan`` throws on, what it does not
check but the kernel needs, the intra-thread-block synchronisation rules, and the message sizes a plan loads with.

Written from microsoft/mscclpp ``src/core/executor/execution_plan.cc`` (the loader: message size divisibility,
``min_message_size``/``max_message_size``, chunk sizes equal on input and output and across ranks) and
``src/core/include/execution_common.hpp`` / ``execution_kernel.hpp`` (the limits: 64 operations per thread
block, 16 channels of a type and 16 remote buffers per thread block, 8 channels per operation, 16 barriers and
semaphores per operation, uint32 byte offsets; no implicit ``__syncthreads`` between operations). Nothing here
executes the plan: :mod:`.machine` does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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

DATA_OPS = frozenset(
    {"put", "get", "copy", "cpkt", "upkt", "ppkt", "rppkt", "re", "res", "rre", "rres", "glres", "gstore"}
)
# operations run by threads tid < n (one item per thread): ordering with data ops needs a nop
PUBLISH_OPS = frozenset({"signal", "sem_release", "pws", "pwsf"})
WAIT_OPS = frozenset({"wait", "rlxwait", "sem_acquire"})
NOT_MODELLED = frozenset({"repkt", "respkt", "recpkt", "recspkt", "gstorepkt"})


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


def crowded(rank: int, count: int, limit: int, note: str = "") -> str:
    """The error of a rank with more thread blocks than the GPU keeps resident (the same words from the
    compiled check and the reference)."""
    return (
        f"gpus[{rank}].threadblocks: {count} thread blocks, more than max_threadblocks={limit}: every thread "
        f"block spins on the others, so all must be co-resident (one per SM/CU){note}"
    )


def static_checks(
    plan: Plan, target: str | None = None, max_threadblocks: int = 0, threadblocks_note: str = ""
) -> tuple[list[str], list[str]]:
    """Structural errors and notes of a read plan (no execution). ``target`` "amd" also rejects switch
    channels (compiled out on HIP: the NVLS operations would silently do nothing); ``max_threadblocks`` (0: no
    limit) rejects a rank with more thread blocks than its GPU keeps resident (the executor launches them all
    and they spin on each other: upstream does not check, the plan would hang)."""
    errs: list[str] = []
    if max_threadblocks:
        errs += [
            crowded(r, len(g.threadblocks), max_threadblocks, threadblocks_note)
            for r, g in enumerate(plan.gpus)
            if len(g.threadblocks) > max_threadblocks
        ]
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
        errs += _gpu_checks(plan, r, g, target)
        for k, tb in enumerate(g.threadblocks):
            e, packets = _tb_checks(plan, r, g, k, tb, target)
            errs += e
            uses_packets |= packets
    if uses_packets and plan.protocol != "LL":
        errs.append(
            "protocol: value 'Simple' is invalid; the plan uses LL packet operations, whose scratch the executor "
            "doubles only for protocol LL"
        )
    return errs, _pairing_notes(plan)


def _gpu_checks(plan: Plan, r: int, g: Gpu, target: str | None) -> list[str]:
    """A GPU's id, thread block ids, channel peers and remote buffer ranks."""
    errs: list[str] = []
    n = len(plan.gpus)
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
    return errs


def _tb_checks(
    plan: Plan, r: int, g: Gpu, k: int, tb: ThreadBlock, target: str | None
) -> tuple[list[str], bool]:
    """A thread block's tables and operations; also whether it uses LL packet operations."""
    nch = {t: len(g.peers(t)) for t in ("memory", "port")}
    nsw = sum(len(c.rank_groups) for c in g.channels if c.channel_type == "switch")
    ch, rb = _tb_tables(g, tb)
    errs = _table_checks(r, g, k, ch, rb, nch, nsw)
    nops = flat_ops(tb.ops)
    if nops > MAX_OPS_PER_TB:
        errs.append(
            f"{_where(r, k, 'ops')}: {nops} operations (pipelines flattened); the executor allows "
            f"{MAX_OPS_PER_TB} per thread block (MAX_OPERATION) and throws at load"
        )
    packets = False
    for path, op, nested in _flatten(tb.ops):
        packets |= op.name in PACKET_OPS
        errs += _op_checks(plan, g, r, op, _where(r, k, path), ch, rb, nested, len(g.threadblocks), target)
    return errs, packets


def _table_checks(
    r: int,
    g: Gpu,
    k: int,
    ch: dict[str, list[int]],
    rb: dict[str, list[int]],
    nch: dict[str, int],
    nsw: int,
) -> list[str]:
    """The thread block's channel and remote-buffer tables: ids that resolve, at most 16 of a type."""
    errs: list[str] = []
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
    return errs


@dataclass
class _OpCheck:
    """One operation under check: its context, and the errors found so far (``need`` adds one)."""

    plan: Plan
    g: Gpu
    r: int
    op: Op
    where: str
    ch: dict[str, list[int]]
    rb: dict[str, list[int]]
    errs: list[str] = field(default_factory=list)

    @property
    def ct(self) -> str:
        return self.op.channel_type or "none"

    def need(self, cond: bool, msg: str) -> None:
        if not cond:
            self.errs.append(f"{self.where}: {self.op.name}: {msg}")

    def channel_ids(self, ct: str) -> None:
        for j, c in enumerate(self.op.channel_ids or ()):
            have = len(self.ch.get(ct, []))
            self.need(c < have, f"channel_ids[{j}]={c} but the thread block has {have} {ct} channel(s)")


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
    """One operation's fields against the executor's tables and limits."""
    c = _OpCheck(plan, g, r, op, where, ch, rb)
    name = op.name
    if name == "pipeline":
        return c.errs
    if nested and name in PACKET_OPS:
        c.errs.append(f"{where}: {name} inside a pipeline: packet operations ignore the iteration offset")
    if name in NOT_MODELLED:
        c.errs.append(
            f"{where}: {name}: this interpreter does not model the operation, so it cannot vouch for it"
        )
    if name in ("glres", "gstore") and target == "amd":
        c.errs.append(f"{where}: {name}: switch operations are compiled out on HIP (AMD)")
    if name in ("signal", "wait", "rlxsignal", "rlxwait", "flush"):
        _sync_checks(c)
    elif name in ("sem_acquire", "sem_release"):
        ids = op.semaphore_ids or ()
        c.need(len(ids) >= 1, "needs semaphore_ids")
        c.need(
            len(ids) <= MAX_SEMAPHORES_PER_OP,
            f"{len(ids)} semaphores; at most {MAX_SEMAPHORES_PER_OP} per operation",
        )
        for j, sid in enumerate(ids):
            c.need(
                sid < len(g.semaphores),
                f"semaphore_ids[{j}]={sid} but the GPU has {len(g.semaphores)} semaphore(s)",
            )
    elif name == "barrier":
        c.need(
            op.barrier_id is not None and op.barrier_id < MAX_BARRIERS,
            f"barrier_id must be in 0..{MAX_BARRIERS - 1}",
        )
        c.need(
            op.num_threadblocks is not None and 1 <= op.num_threadblocks <= ntbs,
            f"num_threadblocks must be in 1..{ntbs}",
        )
    elif name != "nop":
        _data_checks(c)
    return c.errs


def _sync_checks(c: _OpCheck) -> None:
    name, ct = c.op.name, c.ct
    c.need(ct in ("memory", "port"), f"channel_type {ct!r} must be memory or port")
    if name.startswith("rlx"):
        c.need(ct == "memory", "relaxed signal/wait exist only for memory channels")
    if name == "flush":
        c.need(ct == "port", "flush is a port-channel operation")
    ids = c.op.channel_ids or ()
    c.need(len(ids) >= 1, "needs channel_ids")
    c.need(
        len(ids) <= MAX_CHANNELS_PER_OP, f"{len(ids)} channels; at most {MAX_CHANNELS_PER_OP} per operation"
    )
    c.channel_ids(ct)


def _data_checks(c: _OpCheck) -> None:
    op, name, ct = c.op, c.op.name, c.ct
    src, dst = op.src or (), op.dst or ()
    c.need(
        len(src) <= MAX_REFS_PER_OP and len(dst) <= MAX_REFS_PER_OP,
        f"at most {MAX_REFS_PER_OP} buffer references per side",
    )
    for side, refs in (("src_buff", src), ("dst_buff", dst)):
        for j, ref in enumerate(refs):
            c.errs += _ref_checks(c.plan, c.g, c.r, op, ref, f"{c.where}.{side}[{j}]", ct, c.rb)
    if name in ("put", "pws", "pwsf", "ppkt"):
        _put_checks(c)
    elif name == "get":
        c.need(ct == "memory", "get exists only for memory channels")
        c.need(len(src) == len(dst) >= 1, "needs as many src_buff as dst_buff entries")
        for sref, dref in zip(src, dst, strict=False):
            if sref.index != dref.index:
                c.errs.append(
                    f"{c.where}: get with source index {sref.index} != destination index {dref.index}: the kernel at "
                    "HEAD swaps the two offsets (handleGet), so only equal indices are safe"
                )
    elif name in ("copy", "cpkt", "upkt"):
        c.need(len(src) == 1 and len(dst) == 1, "exactly one src_buff and one dst_buff")
        c.need(all(x.kind == "local" for x in (*src, *dst)), "local buffers only")
        c.need(
            all(s.size == d.size for s, d in zip(src, dst, strict=False)),
            "source and destination sizes differ",
        )
        if name == "cpkt":
            c.need(all(d.type == "s" for d in dst), "copy_packets writes packets to scratch")
        if name == "upkt":
            c.need(all(s.type == "s" for s in src), "unpack_packets reads packets from scratch")
    elif name == "rppkt":
        c.need(ct == "memory", "read_put_packets is modelled for memory channels only")
        c.need(len(src) == 1 and src[0].kind == "local" and src[0].type == "s", "one local scratch source")
        c.need(len(dst) >= 1 and all(d.kind == "remote" for d in dst), "remote scratch destinations")
    elif name in ("re", "res", "rre", "rres"):
        c.need(len(src) >= 1 and len(dst) >= 1, "needs sources and destinations")
        c.need(src[0].kind == "local" and dst[0].kind == "local", "first source and destination are local")
        if name in ("rre", "rres", "res"):
            c.need(ct == "memory", "remote reduce operations use memory channels")
    elif name in ("glres", "gstore"):
        c.need(ct == "switch", "switch operations need channel_type switch")


def _put_checks(c: _OpCheck) -> None:
    op, name, ct = c.op, c.op.name, c.ct
    src, dst = op.src or (), op.dst or ()
    c.need(ct in ("memory", "port"), f"channel_type {ct!r} must be memory or port")
    if name in ("pws", "pwsf"):
        c.need(
            ct == "port", "put with signal exists only for port channels (a memory channel would not signal)"
        )
    c.need(len(src) == len(dst) >= 1, "needs as many src_buff as dst_buff entries (at least one)")
    c.need(
        all(s.kind == "local" for s in src) and all(d.kind == "remote" for d in dst),
        "sources local, destinations remote",
    )
    c.need(
        all(s.size == d.size for s, d in zip(src, dst, strict=False)), "source and destination sizes differ"
    )
    c.need(len(dst) <= MAX_CHANNELS_PER_OP, f"at most {MAX_CHANNELS_PER_OP} destinations")
    if ct == "memory" and name in ("put", "ppkt") and len({s.type for s in src}) > 1:
        c.errs.append(
            f"{c.where}: put reads every source from src_buff[0]'s buffer ('{src[0].type}'; the kernel's "
            f"handlePut), but the sources name {sorted({s.type for s in src})}"
        )
    if ct == "port":
        ids = op.channel_ids or ()
        c.need(
            len(ids) == len(dst),
            "a port put needs one channel_ids entry per destination (thread i uses channel i)",
        )
        c.channel_ids("port")
    if name == "ppkt":
        c.need(
            all(d.kind != "remote" or _remote(c.g, c.rb, ct, d)[1] == "s" for d in dst),
            "packets go to remote scratch",
        )
        c.need(ct == "memory", "port put_packets is not modelled by this interpreter")


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


def _items(op: Op) -> int:
    """Threads that do a synchronisation or port operation (thread i does item i, ``tid < n``)."""
    if op.name in ("signal", "wait", "rlxsignal", "rlxwait", "flush"):
        return len(op.channel_ids or ())
    if op.name in ("sem_acquire", "sem_release"):
        return len(op.semaphore_ids or ())
    return len(op.dst or ())


@dataclass
class _Lint:
    """What the thread block did since its last nop (``__syncthreads``)."""

    accesses: list[tuple[int, str, int, int, bool]] = field(default_factory=list)  # rank, buf, lo, hi, write
    data_since: str = ""
    wait_since: str = ""
    wait_items: int = 0  # threads that waited (the most of any wait since the nop)

    def reset(self) -> None:
        self.accesses, self.data_since, self.wait_since, self.wait_items = [], "", "", 0


def _lint_ops(
    r: int, k: int, ops: tuple[Op, ...], path: str, wrap: bool, rb: dict[str, list[int]], g: Gpu
) -> list[str]:
    errs: list[str] = []
    reported: set[int] = set()
    st = _Lint()

    def flag(i: int, msg: str) -> None:
        if i not in reported:
            reported.add(i)
            errs.append(f"{_where(r, k, f'{path}[{i}]')}: {msg}")

    for i, op in list(enumerate(ops)) * (2 if wrap else 1):
        name = op.name
        if name in ("nop", "barrier"):
            st.reset()
            continue
        if name == "pipeline":
            errs += _lint_ops(r, k, op.ops, f"{path}[{i}].ops", True, rb, g)
            st.reset()
            continue
        port = op.channel_type == "port"
        if name in PUBLISH_OPS or (port and name in ("put", "ppkt")):
            for msg in _publish_lint(op, st, port):
                flag(i, msg)
        if name in DATA_OPS and not port:
            if st.wait_since:
                flag(
                    i,
                    f"{name} follows {st.wait_since} without a nop: only threads tid < n wait, the others run "
                    "ahead into the data operation",
                )
            mine = _accesses(op, r, rb, g)
            for a in mine:
                if any(
                    a[0] == b[0] and a[1] == b[1] and a[2] < b[3] and b[2] < a[3] and (a[4] or b[4])
                    for b in st.accesses
                ):
                    flag(
                        i,
                        f"{name} touches rank {a[0]} {a[1]}[{a[2]}:{a[3]}], which an earlier data operation of "
                        "the thread block since the last nop also touches (one writes): not synchronised",
                    )
                    break
            st.accesses += mine
            st.data_since = f"a data operation ({name})"
        if name in WAIT_OPS:
            st.wait_since = f"a {name}"
            st.wait_items = max(st.wait_items, _items(op))
    return errs


def _publish_lint(op: Op, st: _Lint, port: bool) -> list[str]:
    """A signal, semaphore release or port put since the last nop: after a data operation, every thread must
    have finished it; after a wait, the threads that publish must be the ones that waited (one thread each)."""
    name, out = op.name, []
    if st.data_since:
        out.append(
            f"{name} follows {st.data_since} without a nop: threads still writing that data are not "
            "synchronised with it (no implicit __syncthreads between operations)"
        )
    n = _items(op)
    if port and st.wait_since and len(op.dst or ()) > 1 and name in ("put", "pws", "pwsf", "ppkt"):
        out.append(
            f"{name} with {len(op.dst or ())} destinations follows {st.wait_since} without a nop: threads 1.. "
            "issue their puts before thread 0's wait is satisfied"
        )
    elif st.wait_since and (st.wait_items > 1 or n > 1):
        out.append(
            f"{name} (threads 0..{max(n, 1) - 1}) follows {st.wait_since} (threads 0..{st.wait_items - 1}) without "
            "a nop: a thread publishes before the waits of the other threads are satisfied"
        )
    return out


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
