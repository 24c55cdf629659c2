"""A small MoE layer trained on 4 Gloo processes, with and without the JIT: the same losses, bit for bit.

Run: ``.venv/bin/python examples/moe_train_gloo.py [--steps 30] [--procs 4]``.

Each process holds two experts (eight in all) and 512 tokens of width 256. A top-2 router picks each token's
experts; the tokens go to their experts' ranks with ``torch.distributed.all_to_all_single`` and come back the same
way, inside an autograd function (dispatch forward, combine backward, as Megatron-LM's ``_AllToAll`` does), so
every step makes four all-to-alls with split sizes that follow the routing. The script trains twice in fresh
processes, once as is and once with ``A2ACC_JIT=1`` (``A2ACC_TOPOLOGY=dgx-h100:1``: the four ranks as GPUs of
one server), and checks that every step's loss is bit-identical; it prints the JIT's counters and the time per
step of both runs. On Gloo over loopback a2acc cannot be faster than the stock call (every byte costs the same
there); the run shows it serves a real training loop's calls and changes nothing in the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

WORKER = r"""
import json, sys, time
import torch
import torch.distributed as dist

rank, world, port, steps, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
torch.manual_seed(0)
torch.set_num_threads(1)
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
E_LOCAL, HIDDEN, TOKENS, TOP_K = 2, 256, 512, 2
experts = E_LOCAL * world


class AllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, out_splits, in_splits):
        ctx.splits = (out_splits, in_splits)
        y = x.new_empty(sum(out_splits), x.shape[1])
        dist.all_to_all_single(y, x.contiguous(), out_splits, in_splits)  # looked up at call time: patched
        return y

    @staticmethod
    def backward(ctx, g):
        out_splits, in_splits = ctx.splits
        dx = g.new_empty(sum(in_splits), g.shape[1])
        dist.all_to_all_single(dx, g.contiguous(), in_splits, out_splits)
        return dx, None, None


g = torch.Generator().manual_seed(100 + rank)
router = torch.nn.Linear(HIDDEN, experts, bias=False)
local = torch.nn.ModuleList(torch.nn.Linear(HIDDEN, HIDDEN) for _ in range(E_LOCAL))
params = list(router.parameters()) + list(local.parameters())
torch.manual_seed(1234 + rank)  # each rank's experts its own, the router the same everywhere
for p in local.parameters():
    torch.nn.init.normal_(p, std=0.05)
torch.manual_seed(7)
torch.nn.init.normal_(router.weight, std=0.5)
opt = torch.optim.SGD(params, lr=0.05)
losses, times = [], []
for step in range(steps):
    x = torch.randn(TOKENS, HIDDEN, generator=g)
    target = torch.randn(TOKENS, HIDDEN, generator=g) * 0.1
    t0 = time.perf_counter()
    probs = torch.softmax(router(x), dim=-1)
    w, e = torch.topk(probs, TOP_K, dim=-1)  # tokens x top-k experts
    flat_e = e.reshape(-1)
    order = torch.argsort(flat_e * TOKENS + torch.arange(flat_e.numel()) // TOP_K, stable=True)
    dest = flat_e[order] // E_LOCAL
    send = torch.bincount(dest, minlength=world)
    counts = torch.empty_like(send)
    dist.all_to_all_single(counts, send)  # the per-rank counts: a few bytes, no split sizes
    send_l, recv_l = send.tolist(), counts.tolist()
    rows = x.repeat_interleave(TOP_K, dim=0)[order]
    recv_expert = torch.empty(sum(recv_l), dtype=torch.int64)
    dist.all_to_all_single(recv_expert, flat_e[order].contiguous(), recv_l, send_l)
    got = AllToAll.apply(rows, recv_l, send_l)  # dispatch
    local_id = recv_expert - rank * E_LOCAL
    res = torch.zeros_like(got)
    for j in range(E_LOCAL):
        m = local_id == j
        res[m] = torch.relu(local[j](got[m]))
    back = AllToAll.apply(res, send_l, recv_l)  # combine
    y = torch.zeros(TOKENS * TOP_K, HIDDEN)
    y = y.index_copy(0, order, back)
    y = (y.view(TOKENS, TOP_K, HIDDEN) * w.unsqueeze(-1)).sum(1)
    loss = torch.nn.functional.mse_loss(y, target)
    opt.zero_grad()
    loss.backward()
    for p in router.parameters():  # the router is replicated: average its gradient
        dist.all_reduce(p.grad)
        p.grad /= world
    opt.step()
    times.append(time.perf_counter() - t0)
    losses.append(loss.item())
result = {"losses": [float(v).hex() for v in losses], "times": times}
try:
    import a2acc.runtime
    result["stats"] = {k: v for k, v in a2acc.runtime.stats().items() if k != "last"}
except ImportError:
    pass
json.dump(result, open(out, "w"))
dist.barrier()
dist.destroy_process_group()
"""


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def train(procs: int, steps: int, jit: bool, tmp: str) -> list[dict]:
    script = os.path.join(tmp, "worker.py")
    Path(script).write_text(WORKER)
    env = {k: v for k, v in os.environ.items() if not k.startswith("A2ACC_")}
    env.update(OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    if jit:
        env.update(A2ACC_JIT="1", A2ACC_TOPOLOGY="dgx-h100:1", A2ACC_CACHE_DIR=os.path.join(tmp, "cache"))
    port = _port()
    outs = [os.path.join(tmp, f"{'jit' if jit else 'stock'}-{r}.json") for r in range(procs)]
    ps = [
        subprocess.Popen(
            [sys.executable, script, str(r), str(procs), str(port), str(steps), outs[r]], env=env
        )
        for r in range(procs)
    ]
    for p in ps:
        if p.wait() != 0:
            raise SystemExit(f"a training process failed (exit {p.returncode})")
    return [json.loads(Path(o).read_text()) for o in outs]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--steps", type=int, default=30)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        stock = train(args.procs, args.steps, False, tmp)
        jit = train(args.procs, args.steps, True, tmp)
    same = all(a["losses"] == b["losses"] for a, b in zip(stock, jit))
    st = jit[0]["stats"]
    med = sorted(sum(r["times"][3:]) for r in stock), sorted(sum(r["times"][3:]) for r in jit)
    print(f"losses bit-identical over {args.steps} steps on {args.procs} ranks: {same}")
    print(
        f"first loss {float.fromhex(stock[0]['losses'][0]):.6f}, last {float.fromhex(stock[0]['losses'][-1]):.6f}"
    )
    print(
        f"JIT (rank 0): {st['calls']} calls, {st['handled']} served by a2acc plans, {st['small']} below "
        f"A2ACC_MIN_BYTES, {st['stock_while_compiling']} while compiling, {st['exchanges_skipped']} without the exchange"
    )
    print(
        f"time per step after step 3, slowest rank: stock {med[0][-1] / (args.steps - 3) * 1e3:.1f} ms, "
        f"JIT {med[1][-1] / (args.steps - 3) * 1e3:.1f} ms"
    )
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
