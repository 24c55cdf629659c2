"""An interpreter of MSCCL++ execution plans: load checks, execution over back-to-back launches, deadlocks,
races, cross-launch hazards and the postcondition.

Split as the upstream DSL's ``python/mscclpp/language/internal/`` is: :mod:`.load` (load checks, sizes and the
intra-thread-block rules), :mod:`.machine` (the execution), :mod:`.races` (vector clocks and shadow cells);
this module runs them in order (:func:`check_plan`).

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

from a2acc.backends.mscclpp.interp.load import (
    InterpResult,
    Sizes,
    choose_sizes,
    crowded,
    layout_checks,
    size_checks,
    static_checks,
    sync_lint,
)
from a2acc.backends.mscclpp.interp.machine import MAX_INTERP_AGENTS, MAX_INTERP_CELLS, run
from a2acc.backends.mscclpp.model import Plan
from a2acc.ir.layout import ChunkLayout

__all__ = [
    "MAX_INTERP_AGENTS",
    "MAX_INTERP_CELLS",
    "InterpResult",
    "Sizes",
    "check_plan",
    "choose_sizes",
    "crowded",
    "layout_checks",
    "run",
    "size_checks",
    "static_checks",
    "sync_lint",
]


def check_plan(
    plan: Plan,
    *,
    layout: ChunkLayout | None = None,
    chunk_bytes: int | None = None,
    target: str | None = None,
    launches: int = 2,
    execute: bool = True,
    max_threadblocks: int = 0,
    threadblocks_note: str = "",
) -> InterpResult:
    """Load checks, then (if the plan loads and ``execute``) ``launches`` launches; the intra-thread-block
    rules always. ``max_threadblocks`` (0: none) is the most thread blocks a rank may have on the GPU the plan
    runs on (``threadblocks_note`` says where the figure comes from)."""
    enabled = gc.isenabled()
    gc.disable()  # the machine's state is long-lived and acyclic: collections would only rescan it
    try:
        errs, notes = static_checks(plan, target, max_threadblocks, threadblocks_note)
        return _check_plan(plan, errs, notes, layout, chunk_bytes, launches, execute)
    finally:
        if enabled:
            gc.enable()


def _check_plan(
    plan: Plan,
    errs: list[str],
    notes: list[str],
    layout: ChunkLayout | None,
    chunk_bytes: int | None,
    launches: int,
    execute: bool,
) -> InterpResult:
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
