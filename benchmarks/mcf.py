"""The mcf planner against its own LP optimum and against the bound, at 64 GPUs and at 1024.

Run: ``.venv/bin/python benchmarks/mcf.py`` (the 64-GPU quality cases torus, hypercube, gk64: seconds each),
``--scale`` (adds the 1024-GPU cases gk1024 and t1688, each planned, verified and simulated: minutes each;
``--cases gk1024`` picks cases), ``--workers local,dask`` (plan each case through 2 local
worker processes and through a Dask ``LocalCluster`` of 2 workers, and check the two plans are byte-identical).

Each case runs in its own process (peak memory is ``ru_maxrss`` of that process; CPU time is
``resource.getrusage``, which other jobs on the machine do not inflate, wall time does). Traffic: Zipf(0.8),
64 MiB per GPU, seed 1, 50 GB/s links with 1 us latency, the simulator's ideal model (what ``a2acc simulate``
uses for direct-connect graphs). The 64-GPU cases use ``a2acc plan``'s default unit; the 1024-GPU cases
``--target-chunks 65536`` (the default unit pads a 1024-GPU Zipf matrix by 18 %, this one by 1 %).

Reported per case (times in us): ``bound`` (the max-concurrent-flow bound of the user's matrix: the link LP
at 64 GPUs; at 1024 the dual bound of :func:`a2acc.flows.scale.certify` with hop-bytes lengths and the cuts of
the simulated schedule's link loads, :func:`_raw_bound`), ``lp`` (the planner's flow on the padded layout: its
LP optimum at 64 GPUs; at 1024 the first-order flow, with ``lp_bound`` its certified bound), ``sim``,
``sim/lp``, ``sim/bound`` and ``lp/lp_bound`` (1 for an exact LP; at 1024 the true LP optimum lies between the
two, so this says how loose the bound can be), and the gap ``sim - bound`` split into parts that add up exactly, in
% of the bound:

- ``pad``: the flow bound of the padded layout minus the bound of the matrix (quantisation);
- ``flow``: the flow's completion time minus the bound of the padded layout (0 for an exact LP; at scale the
  first-order flow's distance from its certified bound, bound looseness included);
- ``round``: the busiest link's bytes after chunk rounding, at line rate, minus the flow's time;
- ``idle``: the end of the busiest link's last op minus its busy time (fill, waits for relayed data,
  latency the window did not hide);
- ``tail``: the end of the plan minus the end of the busiest link (the drain on other links).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import resource
import subprocess
import sys
import time
from typing import Any

import numpy as np

CASES = {
    "torus": ({"kind": "torus", "dims": [4, 4, 4]}, None),
    "hypercube": ({"kind": "hypercube", "dimension": 6}, None),
    "gk64": ({"kind": "genkautz", "n": 64, "degree": 4}, None),
    "gk1024": ({"kind": "genkautz", "n": 1024, "degree": 8}, 65536),
    "t1688": ({"kind": "torus", "dims": [16, 8, 8]}, 65536),
}


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime + c.ru_utime + c.ru_stime


def _dask_address() -> tuple[Any, str]:
    from distributed import LocalCluster

    cl = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
    return cl, cl.scheduler_address.removeprefix("tcp://")


def _gap(prog: Any, topo: Any, sim: Any, bound_raw: float, bound_padded: float) -> dict[str, float]:
    """The gap split of the module docstring (seconds)."""
    t = prog.table
    nl = len(topo.link_names)
    link_of = np.full((topo.nranks, topo.nranks), -1, dtype=np.int64)
    for i, (u, v) in enumerate(topo.link_names):
        link_of[int(u[1:]), int(v[1:])] = i
    link = np.where(t.src_rank != t.dst_rank, link_of[t.src_rank, t.dst_rank], -1)
    busy = sim.link_busy_bytes[:nl] / sim.link_capacity[:nl]
    top = int(np.argmax(busy))
    top_end = float(sim.op_end[link == top].max())
    flow = float(prog.meta["lp_time_us"]) * 1e-6
    return {
        "pad": bound_padded - bound_raw,
        "flow": flow - bound_padded,
        "round": float(busy[top]) - flow,
        "idle": top_end - float(busy[top]),
        "tail": sim.time_s - top_end,
    }


def _raw_bound(m: Any, topo: Any, sim: Any) -> float:
    """A certified bound of the user's matrix at 1024 GPUs without a second first-order flow: the dual bound of
    :func:`a2acc.flows.scale.certify` (valid for any edge lengths) with hop-bytes lengths and with the cuts and
    smooth-maximum gradient of the simulated schedule's own link loads; the best of them."""
    from a2acc.flows.network import FlowNetwork
    from a2acc.flows.scale import EPS_FINAL, certify

    net = FlowNetwork.of(topo)
    d = m.astype(np.float64)
    np.fill_diagonal(d, 0.0)
    u = sim.link_busy_bytes[: net.nedges] / net.cap
    u = u / u.max()
    tries = [net.cap.copy(), (u >= 0.999).astype(np.float64), (u >= 0.99).astype(np.float64)]
    tries.append(np.exp(np.log(net.nedges) / EPS_FINAL * (u - 1.0)))
    return max(certify(net, d, w) for w in tries)


def _case(name: str, workers: str) -> dict[str, Any]:
    from a2acc.analysis.bounds import mcf_bound
    from a2acc.analysis.fastsim import simulate_fast
    from a2acc.ir.quantize import UnitPolicy
    from a2acc.model.topology import parse_topology
    from a2acc.model.traffic import generate
    from a2acc.pipeline import Request, compile

    spec, target = CASES[name]
    topo = parse_topology(
        {"version": 1, "name": name, "direct": {**spec, "bandwidth": 50, "latency": 1}}, name
    )
    m = generate("zipf", topo.nranks, 64 << 20, 1)
    units = UnitPolicy(target_chunks=target) if target else UnitPolicy()
    cluster = None
    if workers == "dask":
        cluster, addr = _dask_address()
        workers = f"dask://{addr}"
    try:
        c0, w0 = _cpu(), time.perf_counter()
        res = compile(Request(topo, m, "mcf", planner_options={"workers": workers}, units=units))
        c1, w1 = _cpu(), time.perf_counter()
    finally:
        if cluster is not None:
            cluster.close()
    prog = res.program
    sim = simulate_fast(prog, topo, payload_bytes=int(m.sum()))
    c2, w2 = _cpu(), time.perf_counter()
    if target is None:
        got = mcf_bound(m, topo)  # what `a2acc bounds` reports for the matrix itself
        bound_raw = float(got) if got is not None else float("nan")
    else:
        bound_raw = _raw_bound(m, topo, sim)
    bound_padded = float(prog.meta["lp_bound_us"]) * 1e-6
    gap = _gap(prog, topo, sim, bound_raw, bound_padded)
    return {
        "case": name,
        "gpus": topo.nranks,
        "ops": len(prog.table),
        "plan_cpu_s": c1 - c0,
        "plan_wall_s": w1 - w0,
        "verify_s": res.timings["verify"],
        "sim_cpu_s": c2 - c1,
        "sim_wall_s": w2 - w1,
        "bound_us": bound_raw * 1e6,
        "lp_us": float(prog.meta["lp_time_us"]),
        "lp_bound_us": bound_padded * 1e6,
        "sim_us": sim.time_s * 1e6,
        "sim/lp": sim.time_s / (float(prog.meta["lp_time_us"]) * 1e-6),
        "lp/lp_bound": float(prog.meta["lp_time_us"]) / float(prog.meta["lp_bound_us"]),
        "sim/bound": sim.time_s / bound_raw,
        **{f"{k}%": 100 * v / bound_raw for k, v in gap.items()},
        "padding%": 100 * prog.padding_bytes / max(int(m.sum()), 1),
        "window": prog.meta.get("window"),
        "deps": prog.meta.get(
            "deps"
        ),  # the Program's form (admission, or hop-only where it simulated faster)
        "schedule_us": prog.meta.get("schedule_us"),
        "other_form_us": prog.meta.get("admission_us", prog.meta.get("hop_only_us")),  # the form not kept
        "sha256": hashlib.sha256(prog.to_json().encode()).hexdigest()[:16],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--cases", default="torus,hypercube,gk64", help="comma-separated, from: " + ",".join(CASES)
    )
    ap.add_argument("--scale", action="store_true", help="add the 1024-GPU cases gk1024,t1688 (minutes each)")
    ap.add_argument("--workers", default="1", help="comma-separated: 1, N local processes, local (=2), dask")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--with", dest="with_workers", default="1", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        out = _case(args.one, args.with_workers)
        out["peak_GiB"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
        print(json.dumps(out))
        return
    with open("/proc/loadavg") as f:
        print("load average at start:", " ".join(f.read().split()[:3]), flush=True)
    seen: dict[str, str] = {}
    names = args.cases.split(",") + (["gk1024", "t1688"] if args.scale else [])
    for name in dict.fromkeys(names):
        for w in args.workers.split(","):
            w = "2" if w == "local" else w
            cmd = [sys.executable, __file__, "--one", name, "--with", w]
            run = subprocess.run(cmd, capture_output=True, text=True)
            if run.returncode != 0:
                print(f"{name} workers={w}: failed\n{run.stderr[-3000:]}", flush=True)
                continue
            row = json.loads(run.stdout.strip().splitlines()[-1])
            with open("/proc/loadavg") as f:
                row["load"] = " ".join(f.read().split()[:3])
            cells = [f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()]
            print(f"workers={w} " + " ".join(cells), flush=True)
            if name in seen and seen[name] != row["sha256"]:
                print(f"{name}: plans differ between workers settings ({seen[name]} vs {row['sha256']})")
            seen.setdefault(name, row["sha256"])


if __name__ == "__main__":
    main()
