"""The JIT runtime's own host cost per served call, on a no-op process group (one process playing rank 0).

Run: ``.venv/bin/python benchmarks/jit_runtime_cost.py [--worlds 8 64 256] [--profile]``.

torch.distributed's ``fake`` backend (``FakeProcessGroup``) moves no data and waits for nothing, so what a call
costs there is the host work of the path itself. One process plays rank 0 of a world of 8, 64 or 256 ranks
(``dgx-h100`` with 1, 8 and 32 servers) with ``A2ACC_JIT``'s engine installed (the patched
``all_to_all_single``, the default ``p2p`` executor), on a steady skewed matrix (Zipf 0.8 over destinations,
rotated per source; 32-byte rows, 16 per peer on average).

Two things are not a2acc's and are left out of the figure, each measured and printed beside it:

- the process group's own work: ``FakeProcessGroup``'s ``all_to_all_single`` with split sizes still copies one
  slice per peer to fake a result (torch's ``FakeProcessGroup.hpp``; about 4.7 us per peer at 64 ranks), which
  grows with the world. Every call a2acc hands to torch.distributed is timed and subtracted (``pg us``);
- the other ranks: a fake all-gather returns rank 0's own numbers, which no real world would send, so the split
  sizes of the exchange are filled in for every rank from the matrix (what the real ranks would report; the
  plan state is every rank's own, which in a world that agrees is rank 0's). That fill-in is a dictionary
  lookup and an array copy, timed and subtracted too.

Reported per world and setting: a2acc's own CPU per served call (process CPU ``time.process_time``, median of
``--calls`` calls after ``--warmup``), the stock call's CPU on the same group, the process group's share, how
many calls were exchanged. ``A2ACC_TUNE=measure`` (the default) times each bucket's plan against its direct
plan on the job's own fabric, which here is a no-op: the direct plan (one collective) is kept; ``--tune off``
(also run by default) keeps the planner's plan, the multi-exchange replay.
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import json
import os
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

TOPOLOGIES = {8: "dgx-h100:1", 64: "dgx-h100:8", 256: "dgx-h100:32"}


def matrix(world: int, per_peer: int = 16) -> np.ndarray:
    w = 1.0 / np.arange(1, world + 1) ** 0.8
    rows = per_peer * world
    share = np.floor(w / w.sum() * rows).astype(np.int64)
    share[0] += rows - int(share.sum())
    return np.stack([np.roll(share, s) for s in range(world)])


class Timed:
    """Wraps a callable and adds the CPU it takes to ``spent``."""

    def __init__(self, fn: Any, spent: list[float]) -> None:
        self.fn, self.spent = fn, spent

    def __call__(self, *a: Any, **k: Any) -> Any:
        c0 = time.process_time()
        try:
            return self.fn(*a, **k)
        finally:
            self.spent[0] += time.process_time() - c0

    def method(self) -> Any:
        """The same as a function a class can hold (bound to the instance it is looked up on)."""

        def timed(*a: Any, **k: Any) -> Any:
            return self(*a, **k)

        return timed


def run(world: int, exchange: str, tune: str, calls: int, warmup: int, profile: bool) -> dict[str, Any]:
    import torch
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from a2acc.runtime import torch_patch
    from a2acc.runtime.decide import exchange as exchange_mod
    from a2acc.runtime.settings import JitSettings

    if not dist.is_initialized():
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
    m = matrix(world)
    n = world
    spent = [0.0]  # CPU inside torch.distributed (the process group's own work) and the fill-in
    real_gather = exchange_mod.Gatherer.gather

    def gather(self: Any, values: list[int]) -> np.ndarray:
        got = real_gather(self, values)  # the real all-gather (rank 0's numbers everywhere)
        c0 = time.process_time()
        if (
            len(values) > 2 * n + 3 and values[:n] == m[0].tolist()
        ):  # the call's exchange: every rank's splits
            got = np.array(got)
            got[:, :n] = m
            got[:, n : 2 * n] = m.T
        spent[0] += time.process_time() - c0
        return got

    exchange_mod.Gatherer.gather = gather  # type: ignore[method-assign]
    torch_patch.uninstall()
    s, problems = JitSettings.from_env(
        {
            "A2ACC_TOPOLOGY": TOPOLOGIES[world],
            "A2ACC_EXCHANGE": exchange,
            "A2ACC_TUNE": tune,
            "A2ACC_MISS": "wait",
            "A2ACC_MIN_BYTES": "0",
        }
    )
    if s is None:
        raise SystemExit("; ".join(problems))
    s = dataclasses.replace(s, cache_dir=tempfile.mkdtemp(prefix="a2acc-cost-"))
    # what a2acc hands to the process group, timed where it reaches it (a2acc calls the group's methods directly)
    from torch._C._distributed_c10d import ProcessGroup

    methods = {name: getattr(ProcessGroup, name) for name in ("alltoall_base", "_allgather_base")}
    for name, fn in methods.items():
        setattr(ProcessGroup, name, Timed(fn, spent).method())
    real_batch = dist.batch_isend_irecv
    dist.batch_isend_irecv = Timed(real_batch, spent)  # type: ignore[assignment]
    torch_patch.install(s)
    stock = torch_patch._STATE["original"]
    eng = torch_patch.engine()
    send, recv = m[0].tolist(), m[:, 0].tolist()
    x = torch.zeros(sum(send), 8)
    y = torch.zeros(sum(recv), 8)
    own, pg, st = [], [], []
    prof = cProfile.Profile() if profile else None
    try:
        for i in range(warmup + calls):
            spent[0] = 0.0
            handled = eng.stats.handled
            c0 = time.process_time()
            if prof is not None and i >= warmup:
                prof.enable()
            dist.all_to_all_single(y, x, recv, send)
            if prof is not None:
                prof.disable()
            c1 = time.process_time()
            inside = spent[0]
            spent[0] = 0.0
            c2 = time.process_time()
            stock(y, x, recv, send)  # torch's own call: its process group work included
            c3 = time.process_time()
            if i >= warmup:
                if eng.stats.handled == handled:
                    raise SystemExit(f"world {world}: call {i} was not served ({eng.stats.last})")
                own.append(c1 - c0 - inside)
                pg.append(inside)
                st.append(c3 - c2)
    finally:
        exchange_mod.Gatherer.gather = real_gather  # type: ignore[method-assign]
        dist.batch_isend_irecv = real_batch
        for name, fn in methods.items():
            setattr(ProcessGroup, name, fn)
        torch_patch.uninstall()
    if prof is not None:
        pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
    stats = eng.stats.as_dict()
    return {
        "world": world,
        "topology": TOPOLOGIES[world],
        "exchange": exchange,
        "tune": tune,
        "own_us": statistics.median(own) * 1e6,
        "pg_us": statistics.median(pg) * 1e6,
        "stock_us": statistics.median(st) * 1e6,
        "exchanged": stats["calls"] - stats["exchanges_skipped"],
        "calls": stats["calls"],
        "by_algorithm": stats["by_algorithm"],
        "collectives_per_call": stats["last"].get("collectives", 0),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worlds", type=int, nargs="+", default=[8, 64, 256], choices=sorted(TOPOLOGIES))
    ap.add_argument("--exchange", nargs="+", default=["adaptive", "every"], choices=("adaptive", "every"))
    ap.add_argument("--tune", nargs="+", default=["measure", "off"], choices=("measure", "off"))
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=40)
    ap.add_argument("--profile", action="store_true", help="cProfile of the timed calls (run one setting)")
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # one world, in this process
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if args.one:  # a process group per process: each world runs in a process of its own
        for exchange in args.exchange:
            for tune in args.tune:
                r = run(args.worlds[0], exchange, tune, args.calls, args.warmup, args.profile)
                print("ROW " + json.dumps(r), flush=True)
        return
    import subprocess

    print(
        f"{'world':>5} {'topology':<12} {'exchange':<9} {'tune':<8} {'a2acc own us':>12} {'pg us':>8} "
        f"{'stock us':>9} {'exchanged':>10} {'collectives/call':>16}  plans ran"
    )
    rows = []
    for world in args.worlds:
        cmd = [sys.executable, __file__, "--one", "--worlds", str(world), "--calls", str(args.calls)]
        cmd += ["--warmup", str(args.warmup), "--exchange", *args.exchange, "--tune", *args.tune]
        cmd += ["--profile"] if args.profile else []
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit(f"world {world} failed:\n{out.stderr[-3000:]}")
        for line in out.stdout.splitlines():
            if not line.startswith("ROW "):
                print(line)
                continue
            r = json.loads(line[4:])
            rows.append(r)
            print(
                f"{r['world']:>5} {r['topology']:<12} {r['exchange']:<9} {r['tune']:<8} {r['own_us']:>12.0f} "
                f"{r['pg_us']:>8.0f} {r['stock_us']:>9.0f} {r['exchanged']:>4}/{r['calls']:<5} "
                f"{r['collectives_per_call']:>16}  {r['by_algorithm']}",
                flush=True,
            )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
