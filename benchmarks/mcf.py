"""The mcf planner at scale: LP time, peak memory, plan size, simulated time against the LP and the bound.

Run: ``.venv/bin/python benchmarks/mcf.py [--cases torus,hypercube,gk64,h100,gk1024] [--workers 2]``

Each case runs in its own process (so peak memory, ru_maxrss, is the case's own) through
:func:`a2acc.pipeline.compile` (plan + verify), Zipf(0.8) traffic, 64 MiB per GPU unless noted:

- ``torus``: 4x4x4 torus (64 nodes, 50 GB/s links), monolithic link LP;
- ``hypercube``: hypercube 2^8 (256 nodes, 2,048 links), the monolithic link LP (524k variables);
- ``gk64``: GenKautz n=64, d=4, monolithic, and decomposed into 4 groups (gap to the monolithic optimum);
- ``h100``: dgx-h100 4x8 (GPUs, NVSwitches, NICs, rails as flow nodes);
- ``gk1024``: GenKautz n=1024, d=8 (8,192 links), decomposed into 32 groups with path-based children: the LP
  side only (master with 8 groups + 32 path-based children, k=4, one round), no Program (a million pairs).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time


def _case(name: str, workers: str) -> dict[str, object]:
    import a2acc
    from a2acc.analysis.simulate import simulate
    from a2acc.model.topology import load_topology, parse_topology
    from a2acc.model.traffic import generate
    from a2acc.pipeline import Request, compile

    def direct(spec: dict[str, object]) -> object:
        return parse_topology(
            {"version": 1, "name": name, "direct": {**spec, "bandwidth": 50, "latency": 1}}, name
        )

    if name == "gk1024":
        from a2acc.flows.decompose import decomposed_mcf
        from a2acc.flows.network import FlowNetwork

        topo = direct({"kind": "genkautz", "n": 1024, "degree": 8})
        m = generate("zipf", 1024, 64 << 20, 1)
        t0 = time.perf_counter()
        dc = decomposed_mcf(
            FlowNetwork.of(topo), m, groups=32, formulation="path", k=4, rounds=1, workers=workers
        )
        wall = time.perf_counter() - t0
        assert dc is not None
        return {"case": name, "lp_s": wall, "lp_time_us": dc.time_s * 1e6, "bound_us": dc.bound_s * 1e6}
    topos = {
        "torus": (direct({"kind": "torus", "dims": [4, 4, 4]}), {}),
        "hypercube": (direct({"kind": "hypercube", "dimension": 8}), {}),
        "gk64": (direct({"kind": "genkautz", "n": 64, "degree": 4}), {}),
        "gk64-dec": (direct({"kind": "genkautz", "n": 64, "degree": 4}), {"groups": "4", "workers": workers}),
        "h100": (load_topology("dgx-h100", 4), {}),
    }
    topo, opts = topos[name]
    m = generate("zipf", topo.nranks, 64 << 20, 1)
    res = compile(Request(topo, m, "mcf", planner_options=opts))
    prog = res.program
    sim = simulate(prog, topo).time_s
    bound = a2acc.lower_bounds(m, topo, mcf=True).seconds
    return {
        "case": name,
        "plan_s": res.timings["plan"],
        "verify_s": res.timings["verify"],
        "ops": len(prog.ops),
        "lp_time_us": prog.meta["lp_time_us"],
        "bound_us": bound * 1e6,
        "sim_us": sim * 1e6,
        "algbw_GBps": int(m.sum()) / topo.nranks / sim / 1e9,
        "bound_algbw_GBps": int(m.sum()) / topo.nranks / bound / 1e9,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="torus,hypercube,gk64,gk64-dec,h100,gk1024")
    ap.add_argument("--workers", default="2")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        out = _case(args.one, args.workers)
        out["peak_GiB"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
        print(json.dumps(out))
        return
    for name in args.cases.split(","):
        t0 = time.perf_counter()
        run = subprocess.run(
            [sys.executable, __file__, "--one", name, "--workers", args.workers],
            capture_output=True,
            text=True,
        )
        if run.returncode != 0:
            print(f"{name}: failed\n{run.stderr[-2000:]}")
            continue
        row = json.loads(run.stdout.strip().splitlines()[-1])
        row["wall_s"] = time.perf_counter() - t0
        print(
            " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()),
            flush=True,
        )


if __name__ == "__main__":
    main()
