"""The one-device check of a2acc's replay layer: every rank played in one process, on one device.

Run: ``.venv/bin/python benchmarks/gpu_check.py [--device cuda|cpu]`` (default: cuda when available).

Each rank is a thread with its own stream; a process-group double (:class:`World`) stands in for NCCL: its
``all_to_all_single`` meets every rank at a barrier and each rank copies its receive blocks out of its peers'
send blocks, on its own stream, after waiting for the event each peer recorded when it posted (what NCCL's
stream does), so stream order is exercised for real on a GPU. The plans are a2acc's own (``fast`` in FAST's
staged shape on two servers of ``dgx-h100``: balancing, stages and relays over several exchanges), bound with
:class:`a2acc.runtime.launch.bound.BoundLaunch` exactly as the JIT binds them. On CUDA every check runs under
``torch.cuda.set_sync_debug_mode("error")`` (a hidden host sync is an error) except where it says otherwise.

Checks, one line each, ``NAME: ok|FAIL|skipped (why)``:

- ``placement``: every tensor a bound launch holds (buffers, index tensors, the split sizes it hands the device)
  lives on the data's device;
- ``replay``: a multi-exchange plan gives every rank the all-to-all's bytes (float32 and bfloat16), for several
  matrices within the layout;
- ``relabelled``: the same with the plan's ranks played by other ranks (a canonical bucket);
- ``direct``: a plan that is the caller's own all-to-all posts one collective of the caller's tensors;
- ``capacity``: a fixed-capacity binding moves rows up to the capacity, zeros the rest and counts them;
- ``static``: the fixed-capacity call under a dispatch-level detector: no value read back to the host, no
  count-dependent shape (the same ops and shapes for counts within and beyond the capacity);
- ``async``: an ``async_op`` call's work is complete on the host and its output right;
- ``side_stream`` (CUDA): a call on a side stream, waited on the main stream through its ``Work``: the main
  stream sees the output without any host sync, even with the side stream held back by a sleep kernel;
- ``graph`` (CUDA): a fixed-capacity call of every rank captured in one CUDA graph and replayed with new
  counts gives the right bytes;
- ``pack_bandwidth``: packing and unpacking throughput against a plain device copy of the same bytes (printed;
  on a GPU ok above a quarter of it; on the CPU the figures are printed and only the bytes are checked).
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

W_SERVERS = 2


class Done:
    """A completed work."""

    def wait(self) -> bool:
        return True


class Group:
    """One rank's view of the double's process group."""

    def __init__(self, world: World, rank: int) -> None:
        self.world, self.rank = world, rank


class World:
    """A process group double for ranks that are threads of one process (see module docstring)."""

    def __init__(self, n: int, device: Any) -> None:
        import torch

        self.n, self.device = n, device
        self.barrier = threading.Barrier(n)
        self.slots: list[Any] = [None] * n
        self.cuda = device.type == "cuda"
        self.streams = [torch.cuda.Stream(device) if self.cuda else None for _ in range(n)]
        self.groups = [Group(self, r) for r in range(n)]
        self.posted = [0] * n

    def stock(
        self, out: Any, inp: Any, osz: Any = None, isz: Any = None, group: Any = None, async_op: bool = False
    ) -> Any:
        import torch

        r = group.rank
        n = self.n
        isz = list(isz) if isz else [inp.shape[0] // n] * n
        osz = list(osz) if osz else [out.shape[0] // n] * n
        ev = None
        if self.cuda:
            ev = torch.cuda.Event()
            ev.record(torch.cuda.current_stream(self.device))
        self.slots[r] = (inp, isz, ev)
        self.posted[r] += 1
        self.barrier.wait()
        at = 0
        for q in range(n):
            src, sizes, qev = self.slots[q]
            if qev is not None:
                torch.cuda.current_stream(self.device).wait_event(qev)
            lo = sum(sizes[:r])
            k = osz[q]
            if sizes[r] != k:
                raise RuntimeError(f"rank {q} sends {sizes[r]} rows to {r}, which expects {k}")
            if k:
                out[at : at + k].copy_(src[lo : lo + k])
            at += k
        if self.cuda:  # the senders' buffers are free once every receiver's copies have run
            done = torch.cuda.Event()
            done.record(torch.cuda.current_stream(self.device))
            self.slots[r] = (*self.slots[r][:2], done)
        self.barrier.wait()
        if self.cuda:
            for q in range(n):
                torch.cuda.current_stream(self.device).wait_event(self.slots[q][2])
        self.barrier.wait()
        return Done() if async_op else None

    def run(self, fn: Callable[[int], Any]) -> list[Any]:
        """``fn(rank)`` on every rank, each in its thread on its stream; their results (errors re-raised)."""
        import torch

        out: list[Any] = [None] * self.n
        errs: list[BaseException] = []

        def body(r: int) -> None:
            try:
                if self.cuda:
                    with torch.cuda.stream(self.streams[r]):
                        out[r] = fn(r)
                else:
                    out[r] = fn(r)
            except BaseException as exc:  # reported after every thread ends
                errs.append(exc)
                self.barrier.abort()

        threads = [threading.Thread(target=body, args=(r,)) for r in range(self.n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errs:
            raise errs[0]
        if self.cuda:
            torch.cuda.synchronize(self.device)
        return out


# ---------------------------------------------------------------------------------------------------- fixtures
def plan(algorithm: str, options: dict[str, str] | None, seed: int = 1) -> tuple[Any, np.ndarray, int]:
    """A Program for a skewed layout on two ``dgx-h100`` servers: (program, counts, unit)."""
    from a2acc.ir import program_from_json
    from a2acc.model.topology import load_topology
    from a2acc.runtime.decide.compiling import compile_entry

    topo = load_topology("dgx-h100", W_SERVERS)
    n = topo.nranks
    rng = np.random.default_rng(seed)
    counts = rng.integers(1, 6, size=(n, n))
    counts[:, 3] *= 4  # a hot expert: the staged plan balances and relays
    unit = 64
    entry = compile_entry(topo, counts, unit, algorithm, None, f"check-{algorithm}-{seed}", options)
    return program_from_json(entry.program_json), counts, unit


def bind(
    world: World, prog: Any, row_bytes: int, ranks: list[int] | None = None, direct: bool = True
) -> list[Any]:
    from a2acc.runtime.executors.p2p import P2PExecutor
    from a2acc.runtime.launch.bound import BoundLaunch
    from a2acc.runtime.launch.post import Posted

    prepared = P2PExecutor().prepare(prog)
    n = prog.nranks
    inv = list(range(n)) if ranks is None else [ranks.index(g) for g in range(n)]
    out = []
    for g in range(n):  # group rank g plays program rank inv[g]
        lp = prepared.program(inv[g], ranks, direct)
        grp = world.groups[g]
        out.append(
            BoundLaunch(
                lp, row_bytes, world.device, (grp, grp), list(range(n)), "nccl", world.stock, Posted()
            )
        )
    return out


def rows_within(
    counts: np.ndarray, unit: int, row_bytes: int, rng: Any, ranks: list[int] | None = None
) -> np.ndarray:
    """A matrix of rows per pair (group ranks) that fits the layout ``counts`` (program ranks)."""
    cap = (counts * unit) // row_bytes
    if ranks is not None:
        p = np.asarray(ranks)
        full = np.zeros_like(cap)
        full[np.ix_(p, p)] = cap
        cap = full
    return rng.integers(0, cap + 1)


def data(rows: np.ndarray, rank: int, width: int, dtype: Any, device: Any, salt: int) -> Any:
    import torch

    n = int(rows[rank].sum())
    x = torch.arange(n * width, dtype=torch.float32).reshape(n, width) + 1000.0 * rank + salt
    return x.to(dtype).to(device)


def expected(inputs: list[Any], rows: np.ndarray, rank: int) -> Any:
    import torch

    parts = []
    for s, x in enumerate(inputs):
        off = int(rows[s, :rank].sum())
        parts.append(x[off : off + int(rows[s, rank])].cpu())
    return torch.cat(parts)


def same(a: Any, b: Any) -> bool:
    import torch

    return a.shape == b.shape and bool(torch.equal(a.cpu().view(torch.uint8), b.cpu().view(torch.uint8)))


def call_of(
    launch: Any, world: World, rank: int, x: Any, y: Any, rows: np.ndarray, async_op: bool = False
) -> Any:
    from a2acc.runtime.launch.call import Call

    rb = x.stride(0) * x.element_size()
    ins, outs = [int(v) for v in rows[rank]], [int(v) for v in rows[:, rank]]
    return Call(y, x, world.groups[rank], rank, world.n, ins, outs, rb, True, world.stock, False, async_op)


# ---------------------------------------------------------------------------------------------------- checks
def check_placement(device: Any) -> str:
    import torch

    prog, _counts, _unit = plan("fast", {"shape": "staged"})
    world = World(prog.nranks, device)
    launches = bind(world, prog, 16)
    bad = []
    for lc in launches:
        held = [lc.buffers.data, lc.buffers.staging, *[st[1] for st in lc.steps if st[1] is not None]]
        sl = lc.slots
        held += [sl.in_peer, sl.in_pos, sl.in_cap, sl.out_cap, sl.out_off, sl.region]
        held.append(lc.h2d.put([1] * world.n, [1] * world.n))
        bad += [t for t in held if isinstance(t, torch.Tensor) and t.device.type != device.type]
    return "ok" if not bad else f"FAIL ({len(bad)} tensors off {device})"


def run_calls(world: World, launches: list[Any], xs: list[Any], ys: list[Any], rows: np.ndarray) -> None:
    """One call of every rank through its bound launch."""
    world.run(lambda r: launches[r].run(call_of(launches[r], world, r, xs[r], ys[r], rows)))


def check_replay(device: Any, relabel: bool = False) -> str:
    import torch

    for algorithm, options in (("fast", {"shape": "staged"}), ("spreadout", None)):
        prog, counts, unit = plan(algorithm, options, seed=2 if relabel else 1)
        n = prog.nranks
        rng = np.random.default_rng(7)
        ranks = rng.permutation(n).tolist() if relabel else None
        world = World(n, device)
        if len(bind(world, prog, 16, ranks)[0].lp.exchanges) < 2:
            return f"FAIL (the {algorithm} plan is not a multi-exchange one)"
        for dtype, width in ((torch.float32, 4), (torch.bfloat16, 8)):  # 16-byte rows either way
            launches = bind(world, prog, 16, ranks)
            for salt in range(2):
                rows = rows_within(counts, unit, 16, rng, ranks)
                xs = [data(rows, r, width, dtype, device, salt) for r in range(n)]
                ys = [
                    torch.full((int(rows[:, r].sum()), width), -1.0, dtype=dtype, device=device)
                    for r in range(n)
                ]
                run_calls(world, launches, xs, ys, rows)
                for r in range(n):
                    if not same(ys[r], expected(xs, rows, r)):
                        return f"FAIL ({algorithm}, rank {r}, {dtype}, matrix {salt})"
    return "ok (fast staged and spreadout plans, float32 and bfloat16)"


def check_direct(device: Any) -> str:
    import torch

    prog, counts, unit = plan("direct", None)
    n = prog.nranks
    world = World(n, device)
    launches = bind(world, prog, 16)
    if not all(lc.lp.direct for lc in launches):
        return "FAIL (the direct plan is not bound as one collective)"
    rows = rows_within(counts, unit, 16, np.random.default_rng(3)) + 5  # beyond the layout: nothing to pack
    xs = [data(rows, r, 4, torch.float32, device, 0) for r in range(n)]
    ys = [torch.empty(int(rows[:, r].sum()), 4, device=device) for r in range(n)]
    before = list(world.posted)
    run_calls(world, launches, xs, ys, rows)
    if [a - b for a, b in zip(world.posted, before)] != [1] * n:
        return "FAIL (not one collective per rank)"
    ok = all(same(ys[r], expected(xs, rows, r)) for r in range(n))
    return "ok" if ok else "FAIL (bytes)"


def device_counts(rows: np.ndarray, device: Any) -> list[tuple[Any, Any]]:
    """Each rank's split sizes of the call ``rows`` (rows per pair) as the device tensors a fixed-capacity
    binding takes: (what it sends to each peer, what it receives from each)."""
    import torch

    n = len(rows)
    return [
        (torch.as_tensor(rows[r]).to(device), torch.as_tensor(rows[:, r].copy()).to(device)) for r in range(n)
    ]


def capacity_bindings(world: World, n: int, cap: np.ndarray, overflow: str) -> list[Any]:
    """Fixed-capacity bindings of every rank, planned as the engine plans them."""
    from math import lcm

    from a2acc.ir import program_from_json
    from a2acc.ir.quantize import DEFAULT_ALIGN, ladder_unit
    from a2acc.model.topology import load_topology
    from a2acc.runtime.decide.compiling import compile_entry
    from a2acc.runtime.launch.capture import CapacityLaunch

    rb = 16
    m = cap * rb
    unit = ladder_unit(m, align=lcm(DEFAULT_ALIGN, rb))
    counts = -(-m // unit)
    topo = load_topology("dgx-h100", W_SERVERS)
    prog = program_from_json(
        compile_entry(topo, counts, unit, "fast", None, "cap", {"shape": "staged"}).program_json
    )
    return [
        CapacityLaunch(lc, cap, r, overflow) for r, lc in enumerate(bind(world, prog, rb, None, direct=False))
    ]


def check_capacity(device: Any) -> str:
    import torch

    from a2acc.errors import CapacityOverflow

    n = 8 * W_SERVERS
    rng = np.random.default_rng(5)
    cap = rng.integers(2, 9, size=(n, n))
    world = World(n, device)
    binds = capacity_bindings(world, n, cap, "flag")
    rows = rng.integers(0, 12, size=(n, n))  # some pairs beyond their capacity
    n_in = [int(cap[r].sum()) + 12 * n for r in range(n)]
    xs = [
        torch.arange(k * 4, dtype=torch.float32, device=device).reshape(k, 4) + 1000 * r
        for r, k in enumerate(n_in)
    ]
    ys = [torch.full((int(rows[:, r].sum()), 4), -1.0, device=device) for r in range(n)]
    cs = device_counts(rows, device)
    world.run(lambda r: binds[r](ys[r], xs[r], *cs[r]))
    fit = np.minimum(rows, cap)
    for r in range(n):
        ro = 0
        for s in range(n):
            off = int(rows[s, :r].sum())
            want = xs[s][off : off + int(fit[s, r])].cpu()
            got = ys[r][ro : ro + int(rows[s, r])].cpu()
            if not same(got[: int(fit[s, r])], want) or bool(got[int(fit[s, r]) :].any()):
                return f"FAIL (rank {r} from {s})"
            ro += int(rows[s, r])
    raised = 0
    for b in binds:
        try:
            b.check()
        except CapacityOverflow:
            raised += 1
    over = [int((rows[r] - fit[r]).sum() + (rows[:, r] - fit[:, r]).sum()) for r in range(n)]
    if raised != sum(1 for k in over if k):
        return f"FAIL (overflow raised on {raised} ranks, {sum(1 for k in over if k)} overflowed)"
    dropped = sum(int(b.dropped.sum()) for b in binds)
    return (
        "ok"
        if dropped == int((rows - fit).sum())
        else f"FAIL (dropped {dropped} of {int((rows - fit).sum())})"
    )


def check_static(device: Any) -> str:
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    n = 8 * W_SERVERS
    rng = np.random.default_rng(9)
    cap = rng.integers(2, 9, size=(n, n))
    world = World(n, device)
    binds = capacity_bindings(world, n, cap, "drop")
    bad: list[str] = []
    forbidden = ("_local_scalar_dense", "nonzero", "masked_select", "unique", "repeat_interleave")

    class Detector(TorchDispatchMode):  # a dispatch mode is per thread: each rank's thread enters its own
        def __init__(self) -> None:
            super().__init__()
            self.trace: list[Any] = []

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            name = str(func)
            if any(f in name for f in forbidden):
                bad.append(name)
            out = func(*args, **(kwargs or {}))
            ts = [o for o in torch.utils._pytree.tree_leaves(out) if isinstance(o, torch.Tensor)]
            if any(t.device.type != device.type for t in ts):
                bad.append(f"{name}: off the device")
            self.trace.append((name, [tuple(t.shape) for t in ts]))
            return out

    def calls(scale: int) -> list[list[Any]]:
        rows = rng.integers(0, 9 * scale, size=(n, n))
        xs = [torch.zeros(int(cap[r].sum()) + 10, 4, device=device) for r in range(n)]
        ys = [torch.zeros(int(cap[:, r].sum()) + 10, 4, device=device) for r in range(n)]
        cs = device_counts(rows, device)
        world.run(lambda r: binds[r](ys[r], xs[r], *cs[r]))  # warm-up: what precedes a capture

        def traced(r: int) -> list[Any]:
            det = Detector()
            with det:
                binds[r](ys[r], xs[r], *cs[r])
            return det.trace

        return world.run(traced)

    runs = [calls(1), calls(3)]  # within the capacity, then beyond it
    if bad:
        return f"FAIL ({sorted(set(bad))[:3]})"
    if runs[0] != runs[1]:
        return "FAIL (the ops or shapes depend on the counts)"
    return f"ok ({len(runs[0][0])} ops per rank, the same within and beyond the capacity)"


def check_async(device: Any) -> str:
    import torch

    prog, counts, unit = plan("fast", {"shape": "staged"})
    n = prog.nranks
    world = World(n, device)
    launches = bind(world, prog, 16)
    rows = rows_within(counts, unit, 16, np.random.default_rng(11))
    xs = [data(rows, r, 4, torch.float32, device, 1) for r in range(n)]
    ys = [torch.full((int(rows[:, r].sum()), 4), -1.0, device=device) for r in range(n)]

    def one(r: int) -> bool:
        work = launches[r].run(call_of(launches[r], world, r, xs[r], ys[r], rows, async_op=True))
        work.wait()
        return bool(work.is_completed())

    done = world.run(one)
    ok = all(done) and all(same(ys[r], expected(xs, rows, r)) for r in range(n))
    return "ok" if ok else "FAIL"


def check_side_stream(device: Any) -> str:
    if device.type != "cuda":
        return "skipped (needs CUDA streams)"
    import torch

    prog, counts, unit = plan("fast", {"shape": "staged"})
    n = prog.nranks
    world = World(n, device)
    launches = bind(world, prog, 16)
    rows = rows_within(counts, unit, 16, np.random.default_rng(13))
    xs = [data(rows, r, 4, torch.float32, device, 2) for r in range(n)]
    ys = [torch.full((int(rows[:, r].sum()), 4), -1.0, device=device) for r in range(n)]
    copies = [torch.empty_like(y) for y in ys]
    sides = [torch.cuda.Stream(device) for _ in range(n)]

    def one(r: int) -> None:
        main = torch.cuda.current_stream(device)
        sides[r].wait_stream(main)
        with torch.cuda.stream(sides[r]):
            torch.cuda._sleep(20_000_000)  # hold the side stream back: a missing wait shows as stale bytes
            work = launches[r].run(call_of(launches[r], world, r, xs[r], ys[r], rows, async_op=True))
        work.wait()  # the main stream waits for the side stream's copies; the host does not
        copies[r].copy_(ys[r])

    world.run(one)
    ok = all(same(copies[r], expected(xs, rows, r)) for r in range(n))
    return "ok" if ok else "FAIL (the main stream read the output before the call ended)"


def check_graph(device: Any) -> str:
    if device.type != "cuda":
        return "skipped (needs CUDA graphs)"
    import torch

    n = 8 * W_SERVERS
    rng = np.random.default_rng(17)
    cap = rng.integers(2, 9, size=(n, n))
    world = World(n, device)
    binds = capacity_bindings(world, n, cap, "drop")
    xs = [torch.zeros(int(cap[r].sum()), 4, device=device) for r in range(n)]
    ys = [torch.zeros(int(cap[:, r].sum()), 4, device=device) for r in range(n)]
    cs = [
        (torch.zeros(n, dtype=torch.int64, device=device), torch.zeros(n, dtype=torch.int64, device=device))
        for _ in range(n)
    ]
    stream = torch.cuda.Stream(device)
    world.streams = [stream] * n  # every rank issues onto the capturing stream, in the barriers' order
    world.run(lambda r: binds[r](ys[r], xs[r], *cs[r]))  # warm-up
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream, capture_error_mode="relaxed"):
        world.run(lambda r: binds[r](ys[r], xs[r], *cs[r]))
    rows = np.minimum(rng.integers(0, 9, size=(n, n)), cap)
    for r in range(n):
        off = np.cumsum(rows[r]) - rows[r]
        x = torch.zeros_like(xs[r])
        for q in range(n):
            x[int(off[q]) : int(off[q] + rows[r, q])] = (
                torch.arange(int(rows[r, q]) * 4, dtype=torch.float32).reshape(-1, 4) + 100 * r + q
            )
        xs[r].copy_(x)
        cs[r][0].copy_(torch.as_tensor(rows[r]))
        cs[r][1].copy_(torch.as_tensor(rows[:, r].copy()))
    graph.replay()
    torch.cuda.synchronize(device)
    for r in range(n):
        ro = 0
        for s in range(n):
            off = int(rows[s, :r].sum())
            if not same(ys[r][ro : ro + int(rows[s, r])], xs[s][off : off + int(rows[s, r])]):
                return f"FAIL (rank {r} from {s} after replay)"
            ro += int(rows[s, r])
    return "ok"


def check_pack_bandwidth(device: Any) -> str:
    import torch

    from a2acc.runtime.launch.slots import RegionMap, Slots, words

    n, rb = 64, 4096
    rng = np.random.default_rng(19)
    cap = rng.integers(8, 24, size=n)  # rows per peer: about 4 MiB
    off = np.concatenate([[0], np.cumsum(cap)[:-1]])
    unit = rb
    region = RegionMap(off, cap, int(cap.sum()))
    slots = Slots(region, region, rb, unit, device)
    splits = torch.as_tensor(cap).to(device)
    x = torch.randn(int(cap.sum()), rb // 4, device=device)
    y = torch.empty_like(x)
    buf = torch.empty(int(cap.sum()) * unit, dtype=torch.uint8, device=device)
    src, dst, bw = words(x, rb, True), words(y, rb, True), words(buf, rb, True)

    def timed(fn: Callable[[], Any]) -> float:
        for _ in range(3):
            fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        k = 20
        for _ in range(k):
            fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return (time.perf_counter() - t0) / k

    nbytes = x.numel() * 4
    t_pack = timed(lambda: slots.pack(src, splits, bw))
    t_unpack = timed(lambda: slots.unpack(bw, splits, dst, 0))
    t_copy = timed(lambda: y.copy_(x))
    if not same(y, x):
        return "FAIL (unpack after pack is not the input)"
    gbs = [nbytes / t / 1e9 for t in (t_pack, t_unpack, t_copy)]
    ratio = min(gbs[0], gbs[1]) / gbs[2]
    # a GPU must gather at a good share of its memory bandwidth; a shared CPU's timings only inform
    verdict = "ok" if ratio >= 0.25 or device.type == "cpu" else "FAIL"
    return f"{verdict} (pack {gbs[0]:.1f} GB/s, unpack {gbs[1]:.1f} GB/s, copy {gbs[2]:.1f} GB/s, {nbytes >> 20} MiB)"


CHECKS: dict[str, Callable[[Any], str]] = {
    "placement": check_placement,
    "replay": check_replay,
    "relabelled": lambda d: check_replay(d, relabel=True),
    "direct": check_direct,
    "capacity": check_capacity,
    "static": check_static,
    "async": check_async,
    "side_stream": check_side_stream,
    "graph": check_graph,
    "pack_bandwidth": check_pack_bandwidth,
}


def main() -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=("cuda", "cpu")
    )
    ap.add_argument("--only", nargs="*", choices=sorted(CHECKS), help="run these checks only")
    args = ap.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("a2acc gpu_check: --device cuda but torch sees no CUDA device")
        return 2
    if device.type == "cuda":
        torch.cuda.set_sync_debug_mode("error")
        print(f"device: {torch.cuda.get_device_name(device)}, torch {torch.__version__}")
    else:
        print(f"device: cpu, torch {torch.__version__}")
    failed = 0
    for name, fn in CHECKS.items():
        if args.only and name not in args.only:
            continue
        try:
            verdict = fn(device)
        except Exception as exc:  # a check that crashes fails, with why
            verdict = f"FAIL ({type(exc).__name__}: {str(exc)[:160]})"
        failed += verdict.startswith("FAIL")
        print(f"{name}: {verdict}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
