"""One rank of a multi-process JIT test (started by tests/runtime/test_torch_jit.py with A2ACC_JIT=1).

argv: rank world port out_json seed [mode]. Modes:

- ``full``: all_to_all_single through the patched function and the stock one on the same random skewed splits,
  float32/bfloat16/int64, sync and async; records byte-identity, what the engine saw, the Work type;
- ``miss``: the same matrix called repeatedly: records which calls a2acc served (the first calls go to the
  stock collective while the plan compiles; every rank must switch at the same call);
- ``groups``: two 2-rank subgroups [0, 1] and [2, 3] run different matrices at the same time;
- ``nccl``: the data on ``fakegpu`` behind the NCCL test double (:mod:`tests.runtime.nccl_double`), which
  rejects tensors on any other device and counts host syncs; a2acc's patch is installed after the double;
- ``content``: rank 1 plans with another planner: every rank must stop before running mismatched Programs;
- ``capture``: CUDA-graph capture / torch.compile tracing reported by patched checks: the stock call serves,
  nothing is exchanged, one warning;
- ``adaptive``: a stationary skew with per-call noise, then a hot expert that jumps, then the first skew again:
  records per call whether it was byte-identical, served, run without an exchange (``A2ACC_EXCHANGE``), and
  the residual bytes it sent; ``mixed``: the same with rank 1 set to ``A2ACC_EXCHANGE=every``.
"""

from __future__ import annotations

import json
import sys
import time

import torch
import torch.distributed as dist


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype == torch.bfloat16:
        return bool(torch.equal(a.view(torch.int16), b.view(torch.int16)))
    return bool(torch.equal(a.view(torch.uint8), b.view(torch.uint8)))


def _call(rows, rank, i, dtype, async_op, original, group=None):
    send = [int(x) for x in rows[rank]]
    recv = [int(x) for x in rows[:, rank]]
    x = (torch.arange(sum(send) * 3, dtype=torch.float64).reshape(-1, 3) + 1000 * rank + i).to(dtype)
    out_a = torch.full((sum(recv), 3), -1, dtype=dtype)
    out_b = torch.full((sum(recv), 3), -2, dtype=dtype)
    w = dist.all_to_all_single(out_a, x, recv, send, group=group, async_op=async_op)
    is_work = isinstance(w, dist.Work) if async_op else None
    if async_op:
        w.wait()
        assert w.is_completed()
        assert w.get_future().done()
    original(out_b, x, recv, send, group=group)
    return _same(out_a, out_b), is_work


def _served(rows, rank, i, original, eng):
    """One float32 call of ``rows`` through the patched and the stock function: (byte-identical?, served by a2acc?)."""
    before = eng.stats.handled
    same, _ = _call(rows, rank, i, torch.float32, False, original)
    return same, eng.stats.handled > before


def full(rank, world, seed, original, eng):
    g = torch.Generator().manual_seed(seed)  # same on every rank: every rank knows every split
    calls = []
    for it in range(6):
        base = torch.randint(20, 60, (world, world), generator=g)
        skew = torch.randint(0, 4, (world, world), generator=g) * 40
        rows = base + skew if it % 3 else base  # similar matrices repeat the bucket
        for dtype in (torch.float32, torch.bfloat16, torch.int64):
            for async_op in (False, True):
                calls.append((rows.clone(), dtype, async_op))
    checks = []
    for i, (rows, dtype, async_op) in enumerate(calls):
        before = dict(eng.stats.cache)
        handled_before = eng.stats.handled
        same, is_work = _call(rows, rank, i, dtype, async_op, original)
        after = dict(eng.stats.cache)
        src = [k for k in after if after[k] != before.get(k, 0)]
        checks.append(
            {
                "i": i,
                "dtype": str(dtype),
                "async": async_op,
                "same": same,
                "source": src,
                "work": is_work,
                "handled": eng.stats.handled > handled_before,
            }
        )
    # equal splits (no split sizes given)
    x = torch.arange(world * 4 * 2, dtype=torch.float32).reshape(world * 4, 2) + rank
    a, b = torch.empty_like(x), torch.empty_like(x)
    dist.all_to_all_single(a, x)
    original(b, x)
    checks.append(
        {"i": -1, "dtype": "float32-even", "async": False, "same": bool(torch.equal(a, b)), "source": []}
    )
    return checks


def miss(rank, world, seed, original, eng):
    g = torch.Generator().manual_seed(seed)
    rows = torch.randint(20, 60, (world, world), generator=g)
    served = []
    for i in range(40):
        same, was_served = _served(rows, rank, i, original, eng)
        assert same
        served.append(was_served)
        if sum(served) >= 3:
            break
        time.sleep(0.05)
    return [{"served": served}]


def groups(rank, world, seed, original, eng):
    mine = [0, 1] if rank < 2 else [2, 3]
    g01 = dist.new_group([0, 1])
    g23 = dist.new_group([2, 3])
    grp = g01 if rank < 2 else g23
    gen = torch.Generator().manual_seed(seed + (0 if rank < 2 else 100))  # each group its own matrices
    checks = []
    for i in range(4):
        rows = torch.randint(10, 80, (2, 2), generator=gen)
        for async_op in (False, True):
            same, is_work = _call(rows, mine.index(rank), i, torch.float32, async_op, original, group=grp)
            checks.append({"i": i, "async": async_op, "same": same, "work": is_work})
    return checks


def nccl(rank, world, seed, original, eng):
    from tests.runtime import nccl_double as nd

    try:  # the double itself: a CPU tensor is refused, as NCCL refuses it
        dist.all_gather_into_tensor(torch.zeros(world, dtype=torch.int64), torch.zeros(1, dtype=torch.int64))
        refused = False
    except nd.DeviceRuleError:
        refused = True
    g = torch.Generator().manual_seed(seed)
    base = torch.randint(20, 60, (world, world), generator=g)

    def hot(h):  # a hot expert at h: the rotating-hotspot matrix
        rows = base.clone()
        rows[:, h] *= 3
        return rows

    def fake_call(rows, i, dtype, async_op=False, announce=None):
        """One call on ``fakegpu`` tensors, patched then stock: (byte-identical?, host syncs of the patched)."""
        send = [int(x) for x in rows[rank]]
        recv = [int(x) for x in rows[:, rank]]
        x = nd.fake(
            (torch.arange(sum(send) * 3, dtype=torch.float64).reshape(-1, 3) + 1000 * rank + i).to(dtype)
        )
        out_a = nd.fake(torch.full((sum(recv), 3), -1, dtype=dtype))
        out_b = nd.fake(torch.full((sum(recv), 3), -2, dtype=dtype))
        d2h = nd.STATS["d2h"] + nd.STATS["h2d"]
        if announce is not None:
            assert a2acc.runtime.announce(announce)
        w = dist.all_to_all_single(out_a, x, recv, send, async_op=async_op)
        if w is not None:
            w.wait()
        syncs = nd.STATS["d2h"] + nd.STATS["h2d"] - d2h
        original(out_b, x, recv, send)
        a, b = nd.host(out_a).view(torch.uint8), nd.host(out_b).view(torch.uint8)
        return bool(torch.equal(a, b)), syncs

    import a2acc.runtime
    from a2acc.errors import AnnounceError

    checks = []
    for i in range(12):
        handled, predicted = eng.stats.handled, eng.stats.predicted
        dtype = (torch.float32, torch.bfloat16)[i % 2]
        same, syncs = fake_call(hot(i % world), i, dtype, async_op=bool(i % 3 == 2))
        checks.append(
            {
                "i": i,
                "same": same,
                "served": eng.stats.handled > handled,
                "syncs": syncs,
                "predicted": eng.stats.predicted > predicted,
            }
        )
        time.sleep(0.02)
    # the same rotating hot expert, each call's matrix announced first (what Megatron's dispatcher knows):
    # plans every rank has run without the exchange, so without a host sync
    announced = []
    for i in range(12):
        skipped = eng.stats.exchanges_skipped
        rows = hot(i % world)
        same, syncs = fake_call(rows, i, torch.float32, announce=rows)
        announced.append({"same": same, "skipped": eng.stats.exchanges_skipped > skipped, "syncs": syncs})
    # a stale announcement, the same on every rank (the last call's matrix, the hot expert has moved on): the plan
    # follows the announcement, the data the call's split sizes; the result is still the stock call's
    skipped = eng.stats.exchanges_skipped
    same, _ = fake_call(hot(0), 12, torch.float32, announce=hot((12 - 1) % world))
    stale_call = {"same": same, "skipped": eng.stats.exchanges_skipped > skipped}
    # tensors a2acc cannot serve in place (output of another dtype) on every rank: every rank raises
    rows = hot(0)
    send = [int(x) for x in rows[rank]]
    recv = [int(x) for x in rows[:, rank]]
    a2acc.runtime.announce(rows)
    out_a = nd.fake(torch.zeros(sum(recv), 3, dtype=torch.bfloat16))
    try:
        dist.all_to_all_single(out_a, nd.fake(torch.zeros(sum(send), 3)), recv, send)
        mismatch = ""
    except AnnounceError as exc:
        mismatch = str(exc)
    return {
        "announced": announced,
        "stale": stale_call,
        "mismatch": mismatch,
        "refused": refused,
        "rejected": nd.STATS["rejected"],
        "calls": checks,
        "devices": str(out_a.device),
        "double": dict(nd.STATS),
    }


def adaptive(rank, world, seed, original, eng):
    g = torch.Generator().manual_seed(seed)
    base = torch.randint(200, 400, (world, world), generator=g)
    base[:, 1] *= 3  # a stationary hot expert

    def noisy(m):  # every call differs a little (the same draw on every rank)
        return m + torch.randint(0, 6, m.shape, generator=g)

    jumped = base.clone()
    jumped[:, 1] //= 3
    jumped[:, world - 1] *= 4  # the hot expert jumped (another bucket or frame)
    calls = []
    plan = (
        [noisy(base) for _ in range(24)] + [noisy(jumped) for _ in range(3)] + [noisy(base) for _ in range(6)]
    )
    for i, rows in enumerate(plan):
        before = (eng.stats.handled, eng.stats.predicted, eng.stats.residual_bytes, eng.stats.stale)
        same, _ = _call(rows, rank, i, (torch.float32, torch.bfloat16)[i % 2], bool(i % 5 == 4), original)
        calls.append(
            {
                "same": same,
                "served": eng.stats.handled > before[0],
                "predicted": eng.stats.predicted > before[1],
                "residual": eng.stats.residual_bytes - before[2],
                "stale": eng.stats.stale > before[3],
            }
        )
    return calls


def mixed(rank, world, seed, original, eng):
    """``adaptive`` with rank 1 set to ``A2ACC_EXCHANGE=every``: the exchange must notice and stop skipping."""
    import dataclasses

    if rank == 1:
        eng.settings = dataclasses.replace(eng.settings, exchange="every")
        eng.adaptive = False
    return adaptive(rank, world, seed, original, eng)


def failrank(rank, world, seed, original, eng):
    """Rank 1 cannot compile the first bucket (a rank-local failure of both its plans: the planner's and the
    direct plan A2ACC_TUNE=measure compiles first): every rank must take the stock call for that bucket,
    together, and the next bucket runs normally."""
    if rank == 1:
        real = eng.loader.load
        first: list[str] = []

        def load(key, make, group, **kw):
            if len(first) < 2 and key not in first:
                first.append(key)
            if key in first:
                raise RuntimeError("injected failure on rank 1")
            return real(key, make, group, **kw)

        eng.loader.load = load
    g = torch.Generator().manual_seed(seed)
    out = []
    for phase in range(2):
        rows = torch.randint(20, 60, (world, world), generator=g) * (1 + 3 * phase)  # another bucket
        for i in range(8):
            same, served = _served(rows, rank, i, original, eng)
            out.append({"phase": phase, "same": same, "served": served})
            time.sleep(0.05)
    return {"calls": out, "fallbacks": dict(eng.stats.fallbacks)}


def quick(rank, world, seed, original, eng):
    """A new bucket's planner plan takes long to compile on every rank (1.5 s added): its direct plan, compiled
    first, serves the calls in between; then the planner's plan takes over."""
    real = eng.loader.load
    loaded: list[str] = []

    def load(key, make, group, **kw):
        loaded.append(key)
        if len(loaded) == 2:  # the bucket's second job: the planner's plan (the direct plan is the first)
            time.sleep(1.5)
        return real(key, make, group, **kw)

    eng.loader.load = load
    g = torch.Generator().manual_seed(seed)
    rows = torch.randint(20, 60, (world, world), generator=g)
    out = []
    for i in range(16):
        before = dict(eng.stats.by_algorithm)
        same, served = _served(rows, rank, i, original, eng)
        algo = [k for k, v in eng.stats.by_algorithm.items() if v != before.get(k, 0)]
        out.append({"same": same, "served": served, "algorithm": algo[0] if algo else None})
        time.sleep(0.2)
    return {"calls": out}


def tune(rank, world, seed, original, eng):
    """A2ACC_TUNE=measure with each call's time replaced by a fixed one per plan, so the outcome is known: in
    phase 0 the direct plan is faster on every rank but rank 2 (the slowest rank decides: the planner's plan is
    kept), in phase 1 (another bucket) it is faster on every rank (it is kept)."""
    from a2acc.runtime.decide import tuning

    phase = 0

    def end(self, mark, trial, which):
        slow = which == tuning.PLAN or (phase == 0 and rank == 2)
        trial.add(which, 0.010 if slow else 0.005)

    tuning.Tuner.end = end
    g = torch.Generator().manual_seed(seed)
    out = []
    for phase in range(2):
        rows = torch.randint(20, 60, (world, world), generator=g)
        rows[:, 1 + 2 * phase] *= 6  # a hot expert (the planner's plan relays: not the direct transfers)
        for i in range(12):
            before = dict(eng.stats.by_algorithm)
            same, served = _served(rows, rank, i, original, eng)
            ran = [k for k, v in eng.stats.by_algorithm.items() if v != before.get(k, 0)]
            out.append({"phase": phase, "same": same, "served": served, "ran": ran})
    if rank == 1:  # as if rank 1 had A2ACC_TUNE=off: the next exchange stops a2acc for the group, everywhere
        for grp in eng._groups.values():
            grp.tuner.on = False
    for i in range(3):
        same, served = _served(rows, rank, 12 + i, original, eng)
        out.append({"phase": 2, "same": same, "served": served, "ran": []})
    return {"calls": out, "fallbacks": dict(eng.stats.fallbacks)}


def content(rank, world, seed, original, eng):
    """Rank 1 plans every bucket with another planner (as a rank with another a2acc or numpy could): its
    Programs differ from the others' for the same buckets. Every rank must find out before running one, and take
    the stock call, together."""
    if rank == 1:
        import tempfile

        from a2acc.jit.cache import PlanCache
        from a2acc.runtime import engine as engine_mod

        eng.loader.cache = PlanCache(
            tempfile.mkdtemp()
        )  # its own cache: the others must not load its entries
        real = engine_mod.compile_entry
        engine_mod.compile_entry = lambda topo, layout, unit, _alg, *rest: real(
            topo, layout, unit, "spreadout", *rest
        )
    g = torch.Generator().manual_seed(seed)
    rows = torch.randint(20, 60, (world, world), generator=g)
    out = []
    for i in range(10):
        same, served = _served(rows, rank, i, original, eng)
        out.append({"same": same, "served": served})
        time.sleep(0.05)
    return {"calls": out, "fallbacks": dict(eng.stats.fallbacks)}


def capture(rank, world, seed, original, eng):
    """CUDA-graph capture (``torch.cuda.is_available``/``is_current_stream_capturing`` patched to say so) and
    torch.compile tracing (``torch.compiler.is_compiling`` patched): the hook must not reach the engine."""
    calls = []
    saved = (torch.cuda.is_available, torch.cuda.is_current_stream_capturing, torch.compiler.is_compiling)
    cuda, eng._cuda = eng._cuda, True  # the engine asks torch.cuda.is_available() once: as if it had said yes
    for what in ("graph", "compile"):
        if what == "graph":
            torch.cuda.is_available = lambda: True
            torch.cuda.is_current_stream_capturing = lambda: True
        else:
            torch.compiler.is_compiling = lambda: True
        for i in range(3):
            x = torch.arange(world * 4, dtype=torch.float32).reshape(world * 4, 1) + rank + i
            a = torch.empty_like(x)
            before = (eng.stats.handled, len(eng._groups), eng.stats.host_syncs)
            dist.all_to_all_single(a, x)
            after = (eng.stats.handled, len(eng._groups), eng.stats.host_syncs)
            torch.cuda.is_available, torch.cuda.is_current_stream_capturing, torch.compiler.is_compiling = (
                saved
            )
            b = torch.empty_like(x)
            original(b, x)
            calls.append({"what": what, "same": bool(torch.equal(a, b)), "untouched": before == after})
            if what == "graph":
                torch.cuda.is_available = lambda: True
                torch.cuda.is_current_stream_capturing = lambda: True
            else:
                torch.compiler.is_compiling = lambda: True
        torch.cuda.is_available, torch.cuda.is_current_stream_capturing, torch.compiler.is_compiling = saved
    eng._cuda = cuda
    # after capture ends, the same call goes through a2acc again
    x = torch.arange(world * 4, dtype=torch.float32).reshape(world * 4, 1) + rank
    a = torch.empty_like(x)
    calls_before = eng.stats.calls
    dist.all_to_all_single(a, x)
    return {
        "calls": calls,
        "fallbacks": dict(eng.stats.fallbacks),
        "engine_after": eng.stats.calls > calls_before,
    }


class Recorder:
    """What reaches torch.distributed below a2acc (installed before a2acc's patch, so a2acc's stock function is
    this one): every ``all_to_all_single`` with its per-peer bytes, every batch with its ops."""

    def __init__(self) -> None:
        self.log: list[dict] = []
        self.a2a, self.batch = dist.all_to_all_single, dist.batch_isend_irecv

    def install(self) -> None:
        import torch.distributed.distributed_c10d as c10d

        def a2a(out, inp, osz=None, isz=None, group=None, async_op=False):
            rb = inp.element_size() * (inp[0].numel() if inp.dim() > 1 else 1)
            n = dist.get_world_size(group)
            isz_ = list(isz) if isz else [inp.shape[0] // n] * n
            osz_ = list(osz) if osz else [out.shape[0] // n] * n
            self.log.append(
                {
                    "kind": "a2a",
                    "even": not isz,
                    "send": [k * rb for k in isz_],
                    "recv": [k * rb for k in osz_],
                }
            )
            return self.a2a(out, inp, osz, isz, group=group, async_op=async_op)

        def batch(ops):
            self.log.append(
                {
                    "kind": "p2p",
                    "ops": [
                        (op.op is dist.isend, op.peer, op.tensor.numel() * op.tensor.element_size())
                        for op in ops
                    ],
                }
            )
            return self.batch(ops)

        dist.all_to_all_single = c10d.all_to_all_single = a2a
        dist.batch_isend_irecv = c10d.batch_isend_irecv = batch


RECORDER: Recorder | None = None


def honest(rank, world, seed, original, eng):
    """A relaying plan (fast's staged shape on two servers, every call exchanged, nothing measured): what each
    served call posted below a2acc must be exactly its launch program's exchanges, byte for byte per peer, and
    the counts ``stats()`` reports must be what was posted. With ``A2ACC_TEST_BUG=stock`` the bound launch is
    replaced by the stock call on the caller's tensors (while the plan's counts are still added): the
    comparison must then fail (the test runs both)."""
    import os

    from a2acc.runtime.launch import bound

    rec = RECORDER
    if os.environ.get("A2ACC_TEST_BUG") == "stock":
        real_run = bound.BoundLaunch.run

        def run(self, call, matrix=None):
            if self.lp.direct:
                return real_run(self, call, matrix)
            for x in self.steps:  # the plan's counts, as a careless implementation would add them
                self.posted.add(*x[3].counts)
            call.stock(call.output, call.input, call.out_splits, call.in_splits, group=call.group)
            return None

        bound.BoundLaunch.run = run
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(6):
        rows = torch.randint(20, 60, (world, world), generator=g)
        rows[:, 1] *= 8  # a hot expert: the staged plan balances and relays
        start = len(rec.log)
        before = dict(eng.stats.as_dict())
        same, served = _served(rows, rank, i, original, eng)
        posted = rec.log[start:-1]  # the stock reference call is the last
        after = eng.stats.as_dict()
        # the split-size exchange first; a2acc's metadata (that one, and with A2ACC_MISS=wait a new bucket's status)
        # goes as even all-to-alls, the plan's exchanges with sizes per peer or as batches
        exchange = posted[0]
        data = [p for p in posted if not (p["kind"] == "a2a" and p["even"])]
        launches = [
            lc
            for grp in eng._groups.values()
            for k, lc in grp.launches.items()
            if k[0] == after["last"].get("key")
        ]
        expect = []
        if launches and not launches[0].lp.direct:
            lp = launches[0].lp
            for ex, step in zip(lp.exchanges, launches[0].steps):
                post = step[3]
                if post.how == "a2a":
                    expect.append(
                        {
                            "kind": "a2a",
                            "send": [k * lp.unit for k in ex.send],
                            "recv": [k * lp.unit for k in ex.recv],
                        }
                    )
                elif post.ops:
                    expect.append(
                        {
                            "kind": "p2p",
                            "bytes": sorted(
                                int(o.tensor.numel() * o.tensor.element_size()) for o in post.ops
                            ),
                        }
                    )
        got = []
        for p in data:
            if p["kind"] == "a2a":
                got.append({"kind": "a2a", "send": p["send"], "recv": p["recv"]})
            else:
                got.append({"kind": "p2p", "bytes": sorted(b for _s, _p, b in p["ops"])})
        sent = sum(
            sum(b for q, b in enumerate(p["send"]) if q != rank)
            if p["kind"] == "a2a"
            else sum(b for s_, _p, b in p["ops"] if s_)
            for p in data
        )
        out.append(
            {
                "same": same,
                "served": served,
                "exchange_even": exchange["kind"] == "a2a" and exchange["even"],
                "plan_matches": got == expect and bool(expect),
                "stages": len(expect),
                "sent_counted": after["sent_bytes"] - before["sent_bytes"],
                "sent_posted": sent,
                "collectives_counted": after["collectives"] - before["collectives"],
                "collectives_posted": len(data),
            }
        )
    return out


class SyncDetector:
    """A dispatch-level detector for what a captured CUDA graph cannot contain: every op that reads a device
    value on the host (``.item()``, ``.tolist()``, a copy to the CPU) or copies host data up with a blocking copy
    (a capture may hold only non-blocking copies, from pinned memory), and every op whose output shape depends
    on data (``nonzero``, ``masked_select``, ``unique``, ``repeat_interleave`` without ``output_size``). It
    records each op and its output shapes, so two calls with different counts can be compared: a data-dependent
    shape shows as a different trace."""

    FORBIDDEN = ("_local_scalar_dense", "nonzero", "masked_select", "unique", "repeat_interleave", "item")

    def __init__(self):
        from torch.utils._python_dispatch import TorchDispatchMode

        det = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                name = str(func)
                if any(f in name for f in det.FORBIDDEN):
                    det.bad.append(name)
                out = func(*args, **kwargs)
                leaves = torch.utils._pytree.tree_leaves((args, kwargs))
                fake_in = any(
                    getattr(t, "device", None) is not None and t.device.type == "fakegpu" for t in leaves
                )
                outs = [o for o in torch.utils._pytree.tree_leaves(out) if isinstance(o, torch.Tensor)]
                if fake_in and any(o.device.type == "cpu" for o in outs):
                    det.bad.append(f"{name}: device to host")
                copies = name in ("aten._to_copy.default", "aten.copy_.default")
                nb = kwargs.get(
                    "non_blocking", args[2] if name == "aten.copy_.default" and len(args) > 2 else False
                )
                up = copies and any(o.device.type == "fakegpu" for o in outs) and not fake_in
                if up and not nb:
                    det.bad.append(f"{name}: blocking host to device copy")
                det.trace.append((name, tuple(tuple(o.shape) for o in outs)))
                return out

        self.mode = Mode()
        self.bad: list[str] = []
        self.trace: list = []

    def run(self, fn):
        self.trace = []
        with self.mode:
            fn()
        return self.trace


def capture_ready(rank, world, seed, original, eng):
    """A plan bound at a fixed capacity (``a2acc.runtime.capture``) on ``fakegpu`` data behind the NCCL double:
    the served path runs under :class:`SyncDetector`; counts within the capacity give the stock call's result;
    counts beyond it give zeros for the rows that did not fit, counted, and ``check()`` raises (``flag``) or
    reports (``drop``); the patched call under (simulated) capture replays the binding."""
    from a2acc.errors import CapacityOverflow
    from a2acc.runtime import capture
    from tests.runtime import nccl_double as nd

    g = torch.Generator().manual_seed(seed)
    cap = torch.randint(6, 14, (world, world), generator=g)
    like = nd.fake(torch.zeros(1, 3))
    flagged = capture(cap, like, overflow="flag")
    dropping = capture(cap, like, overflow="drop")  # the group's binding from here on (the last one bound)
    n_in, n_out = int(cap[rank].sum()) + 5, int(cap[:, rank].sum())
    det = SyncDetector()
    out = {"traces_equal": True, "bad": [], "calls": []}
    traces = []
    for i in range(6):  # calls 0-1: warm-up (as before a capture), 2-3 within the capacity, 4-5 beyond it
        over = i >= 4
        rows = torch.minimum(torch.randint(0, 14, (world, world), generator=g), cap)
        if over:  # every rank sends rank 1 three rows more than its capacity (the same matrix on every rank)
            rows[:, 1] = cap[:, 1] + 3
        send, recv = rows[rank], rows[:, rank]
        x = nd.fake(torch.arange(n_in * 3, dtype=torch.float32).reshape(n_in, 3) + 1000 * rank + i)
        y = nd.fake(torch.full((n_out + 3 * world, 3), -5.0))
        s_dev, r_dev = nd.fake(send.clone()), nd.fake(recv.clone())
        binding = flagged if i % 2 == 0 else dropping
        before = (nd.STATS["d2h"], nd.STATS["h2d"])
        got: dict = {}

        def call(b=binding, x=x, y=y, s=s_dev, r=r_dev, got=got):
            got["n"] = b(y, x, s, r)

        traces.append(det.run(call))
        syncs = (nd.STATS["d2h"] - before[0]) + (nd.STATS["h2d"] - before[1])
        # what the stock call gives for the rows that fit; zeros for the rest of each source's rows
        fit = torch.minimum(rows, cap)
        xs = nd.host(x)
        parts = []
        off = torch.cumsum(rows[rank], 0) - rows[rank]
        for q in range(world):
            parts.append(xs[int(off[q]) : int(off[q]) + int(fit[rank, q])])
        ref_d = nd.fake(torch.empty(int(fit[:, rank].sum()), 3))
        original(ref_d, nd.fake(torch.cat(parts)), fit[:, rank].tolist(), fit[rank].tolist())
        ref = nd.host(ref_d)
        expect = torch.full_like(nd.host(y), 0.0)
        at, ro = 0, 0
        for s_ in range(world):
            k, f = int(recv[s_]), int(fit[s_, rank])
            expect[ro : ro + f] = ref[at : at + f]
            at, ro = at + f, ro + k
        got_rows = nd.host(got["n"]).tolist()
        out["calls"].append(
            {
                "over": over,
                "same": bool(torch.equal(nd.host(y)[:ro], expect[:ro])),
                "got": got_rows == fit[:, rank].tolist(),
                "syncs": syncs,
            }
        )
    # after a warm-up call each (what precedes a capture), the same binding with counts within and beyond the
    # capacity: the same ops with the same shapes
    out["traces_equal"] = traces[2] == traces[4] and traces[3] == traces[5]
    out["trace_len"] = len(traces[2])
    out["bad"] = det.bad
    try:
        flagged.check()
        out["flag"] = "no error"
    except CapacityOverflow as exc:
        out["flag"] = str(exc)
    out["drop"] = dropping.check()
    # the patched call under capture (as if a graph were being captured): the group's binding replays it
    cuda, eng._cuda = eng._cuda, True
    saved = torch.cuda.is_current_stream_capturing
    torch.cuda.is_current_stream_capturing = lambda: True
    try:
        rows = torch.minimum(torch.randint(0, 14, (world, world), generator=g), cap)
        send, recv = [int(v) for v in rows[rank]], [int(v) for v in rows[:, rank]]
        x = nd.fake(torch.arange(sum(send) * 3, dtype=torch.float32).reshape(-1, 3) + rank)
        ya, yb = nd.fake(torch.zeros(sum(recv), 3)), nd.fake(torch.zeros(sum(recv), 3))
        before = eng.stats.captured
        det.run(lambda: dist.all_to_all_single(ya, x, recv, send))
    finally:
        torch.cuda.is_current_stream_capturing = saved
        eng._cuda = cuda
    original(yb, x, recv, send)
    out["patched"] = {
        "served": eng.stats.captured > before,
        "same": bool(torch.equal(nd.host(ya), nd.host(yb))),
    }
    out["bad"] = det.bad
    return out


def small(rank, world, seed, original, eng):
    """A2ACC_MIN_BYTES=4K: per-expert counts exchanged without split sizes (a few bytes) go to the stock call
    before any exchange; a small call with split sizes is exchanged, found small, and the stock call serves it
    (then, repeating, without the exchange); a large one is served. Each call's collectives are counted below
    a2acc (a recorder installed before its patch)."""
    rec = RECORDER
    g = torch.Generator().manual_seed(seed)
    out = []
    big = torch.randint(
        200, 300, (world, world), generator=g
    )  # 16-byte rows: 3-5 KiB per pair, >= 64 KiB per rank
    tiny = torch.randint(1, 4, (world, world), generator=g)
    for i in range(8):
        counts = torch.arange(world * 2, dtype=torch.int64) + rank  # what an MoE layer exchanges first
        got = torch.empty_like(counts)
        n0, s0 = len(rec.log), dict(eng.stats.as_dict())
        dist.all_to_all_single(got, counts)
        a = {"what": "counts", "posted": len(rec.log) - n0, "small": eng.stats.small - s0["small"]}
        want = torch.empty_like(counts)
        original(want, counts)
        a["same"] = bool(torch.equal(got, want))
        out.append(a)
        for what, rows in (("tiny", tiny), ("big", big)):
            n0, s0 = len(rec.log), eng.stats.as_dict()
            same, served = _served(rows, rank, i, original, eng)
            after = eng.stats.as_dict()
            out.append(
                {
                    "what": what,
                    "same": same,
                    "served": served,
                    "posted": len(rec.log) - n0 - 1,  # the stock reference call is the last
                    "small": after["small"] - s0["small"],
                    "predicted": after["predicted"] - s0["predicted"],
                }
            )
        time.sleep(0.05)
    return out


def main() -> None:
    rank, world, port, out, seed = (
        int(sys.argv[1]),
        int(sys.argv[2]),
        int(sys.argv[3]),
        sys.argv[4],
        int(sys.argv[5]),
    )
    mode = sys.argv[6] if len(sys.argv) > 6 else "full"
    if mode in ("nccl", "capture_ready"):  # the double first, then a2acc's patch (A2ACC_JIT is not set)
        sys.path.insert(0, str(__import__("pathlib").Path(__file__).parents[2]))
        import os

        from tests.runtime import nccl_double

        nccl_double.install(report=os.environ.get("A2ACC_TEST_REPORT", "fakegpu:gloo"))
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    if mode in ("honest", "small"):  # below a2acc: installed before its patch (A2ACC_JIT is not set)
        global RECORDER
        RECORDER = Recorder()
        RECORDER.install()
    from a2acc.runtime import stats, torch_patch

    if mode in ("nccl", "honest", "capture_ready", "small"):
        torch_patch.install()

    result = {"patched": torch_patch.is_installed(), "checks": []}
    if result["patched"]:
        original = torch_patch._STATE["original"]
        eng = torch_patch.engine()
        result["checks"] = {
            "full": full,
            "miss": miss,
            "groups": groups,
            "nccl": nccl,
            "capture": capture,
            "failrank": failrank,
            "quick": quick,
            "tune": tune,
            "content": content,
            "adaptive": adaptive,
            "mixed": mixed,
            "honest": honest,
            "capture_ready": capture_ready,
            "small": small,
        }[mode](rank, world, seed, original, eng)
        result["stats"] = stats()
    dist.barrier()
    with open(out, "w") as fh:
        json.dump(result, fh)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
