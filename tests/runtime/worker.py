"""One rank of a multi-process JIT test (started by tests/runtime/test_torch_jit.py with A2ACC_JIT=1).

argv: rank world port out_json seed. Runs all_to_all_single through the patched function and the stock one on the
same random skewed splits, for float32, bfloat16 and int64, sync and async, and records whether the results are
byte-identical and what the engine saw (bucket hits, cache levels).
"""

from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist


def main() -> None:
    rank, world, port, out, seed = (
        int(sys.argv[1]),
        int(sys.argv[2]),
        int(sys.argv[3]),
        sys.argv[4],
        int(sys.argv[5]),
    )
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    from a2acc.runtime import torch_patch

    result = {"patched": torch_patch.is_installed(), "checks": []}
    if not result["patched"]:
        dist.barrier()
        with open(out, "w") as fh:
            json.dump(result, fh)
        return
    original = torch_patch._STATE["original"]
    eng = torch_patch.engine()
    g = torch.Generator().manual_seed(seed)  # same on every rank: every rank knows every split
    calls = []
    for it in range(6):
        base = torch.randint(20, 60, (world, world), generator=g)
        skew = torch.randint(0, 4, (world, world), generator=g) * 40
        rows = base + skew if it % 3 else base  # similar matrices repeat the bucket
        for dtype in (torch.float32, torch.bfloat16, torch.int64):
            for async_op in (False, True):
                calls.append((rows.clone(), dtype, async_op))
    for i, (rows, dtype, async_op) in enumerate(calls):
        send = [int(x) for x in rows[rank]]
        recv = [int(x) for x in rows[:, rank]]
        x = (torch.arange(sum(send) * 3, dtype=torch.float64).reshape(-1, 3) + 1000 * rank + i).to(dtype)
        out_a = torch.full((sum(recv), 3), -1, dtype=dtype)
        out_b = torch.full((sum(recv), 3), -2, dtype=dtype)
        before = dict(eng.stats.cache)
        w = dist.all_to_all_single(out_a, x, recv, send, async_op=async_op)
        if async_op:
            w.wait()
        original(out_b, x, recv, send)
        same = bool(
            torch.equal(
                out_a.view(torch.uint8) if dtype != torch.bfloat16 else out_a.view(torch.int16),
                out_b.view(torch.uint8) if dtype != torch.bfloat16 else out_b.view(torch.int16),
            )
        )
        after = dict(eng.stats.cache)
        src = [k for k in after if after[k] != before.get(k, 0)]
        result["checks"].append({"i": i, "dtype": str(dtype), "async": async_op, "same": same, "source": src})
    # equal splits (no split sizes given)
    x = torch.arange(world * 4 * 2, dtype=torch.float32).reshape(world * 4, 2) + rank
    a, b = torch.empty_like(x), torch.empty_like(x)
    dist.all_to_all_single(a, x)
    original(b, x)
    result["checks"].append(
        {"i": -1, "dtype": "float32-even", "async": False, "same": bool(torch.equal(a, b)), "source": []}
    )
    s = eng.stats
    result["stats"] = {
        "calls": s.calls,
        "handled": s.handled,
        "fallbacks": s.fallbacks,
        "bucket_hits": s.bucket_hits,
        "cache": s.cache,
        "residual_bytes": s.residual_bytes,
    }
    dist.barrier()
    with open(out, "w") as fh:
        json.dump(result, fh)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
