"""One rank of a multi-process JIT test (started by tests/runtime/test_torch_jit.py with A2ACC_JIT=1).

argv: rank world port out_json seed [mode]. Modes:

- ``full``: all_to_all_single through the patched function and the stock one on the same random skewed splits,
  float32/bfloat16/int64, sync and async; records byte-identity, what the engine saw, the Work type;
- ``miss``: the same matrix called repeatedly: records which calls a2acc served (the first calls go to the
  stock collective while the plan compiles; every rank must switch at the same call);
- ``groups``: two 2-rank subgroups [0, 1] and [2, 3] run different matrices at the same time.
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
        before = eng.stats.handled
        same, _ = _call(rows, rank, i, torch.float32, False, original)
        assert same
        served.append(eng.stats.handled > before)
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


def main() -> None:
    rank, world, port, out, seed = (
        int(sys.argv[1]),
        int(sys.argv[2]),
        int(sys.argv[3]),
        sys.argv[4],
        int(sys.argv[5]),
    )
    mode = sys.argv[6] if len(sys.argv) > 6 else "full"
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    from a2acc.runtime import stats, torch_patch

    result = {"patched": torch_patch.is_installed(), "checks": []}
    if result["patched"]:
        original = torch_patch._STATE["original"]
        eng = torch_patch.engine()
        result["checks"] = {"full": full, "miss": miss, "groups": groups}[mode](
            rank, world, seed, original, eng
        )
        result["stats"] = stats()
    dist.barrier()
    with open(out, "w") as fh:
        json.dump(result, fh)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
