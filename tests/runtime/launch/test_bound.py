"""Bound launches sharing one group's buffers: plans of different sizes take turns over the same buffers (they
grow once, every launch re-slices its views, the row of zeros is re-zeroed after another launch wrote there),
played by every rank in one process with the one-device check's process-group double."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

_spec = importlib.util.spec_from_file_location(
    "gpu_check", Path(__file__).resolve().parents[3] / "benchmarks" / "gpu_check.py"
)
assert _spec is not None and _spec.loader is not None
gc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gc)


def test_launches_of_one_group_share_and_grow_its_buffers(monkeypatch):
    from a2acc.runtime.executors.p2p import P2PExecutor
    from a2acc.runtime.launch import bound
    from a2acc.runtime.launch.bound import BoundLaunch, Buffers
    from a2acc.runtime.launch.post import Posted

    # the residual travels point to point, which the double does not carry: its rows must be zeros until then
    monkeypatch.setattr(bound, "post_residual", lambda *a: 0)

    dev = torch.device("cpu")
    small, counts_s, unit_s = gc.plan("fast", {"shape": "staged"}, seed=1)
    big, counts_b, unit_b = gc.plan("spreadout", None, seed=3)
    n = small.nranks
    world = gc.World(n, dev)
    shared = [Buffers(dev) for _ in range(n)]  # one per rank: what the engine keeps per group and device

    def bind(prog):
        prepared = P2PExecutor().prepare(prog)
        return [
            BoundLaunch(
                prepared.program(r),
                16,
                dev,
                (world.groups[r],) * 2,
                list(range(n)),
                "nccl",
                world.stock,
                Posted(),
                shared[r],
            )
            for r in range(n)
        ]

    a = bind(small)
    gen0 = shared[0].generation
    b = bind(big)  # bound after: the buffers grow if the big plan needs more
    rng = np.random.default_rng(5)
    for launches, counts, unit in ((a, counts_s, unit_s), (b, counts_b, unit_b), (a, counts_s, unit_s)) * 2:
        rows = gc.rows_within(counts, unit, 16, rng)
        fit01 = int(launches[0].cap_in[1])
        rows[0, 1] = fit01 + 3  # three rows beyond the layout: gathered from the row of zeros
        xs = [gc.data(rows, r, 4, torch.float32, dev, 0) for r in range(n)]
        ys = [torch.full((int(rows[:, r].sum()), 4), -1.0) for r in range(n)]
        gc.run_calls(world, launches, xs, ys, rows)
        for r in range(n):
            want = gc.expected(xs, rows, r)
            got = ys[r]
            if r == 1:
                lo = int(rows[0, 1]) - 3
                assert bool((got[lo : lo + 3] == 0).all())
                got = torch.cat([got[:lo], got[lo + 3 :]])
                want = torch.cat([want[:lo], want[lo + 3 :]])
            assert gc.same(got, want)
    assert shared[0].data.numel() >= max(lc.lp.data_rows * lc.lp.unit for lc in (a[0], b[0]))
    assert shared[0].generation >= gen0  # grown at most once per size needed, every launch re-sliced
