"""fast's simulated time against the lower bound, and where the gap goes.

Run: ``.venv/bin/python benchmarks/quality.py`` (the default cases below), ``--wide`` for the other presets
and traffic kinds (regression check), ``--algos fast,spreadout,direct,hierarchical`` to add the baselines,
``--opt order=ascending`` for FAST's stage order, ``--target-chunks N`` for another unit.

Every plan goes through :func:`a2acc.pipeline.compile` (quantised with the default unit policy, verified) and
is simulated with the **ideal** model (:class:`a2acc.analysis.model.SimModel`: line rate, link latencies, no
software costs, no incast), so the time and the bound (FLASH Theorem 1, the server scale-out cut) count the
same bytes at the same rates. The gap ``time - bound`` is split into three parts that add up exactly:

- ``pad``: the busiest scale-out NIC port's bytes (sent or received) at line rate, minus the bound: what the
  chunk layout (quantisation padding) and an uneven load over a server's NICs cost (for fast, whose balancing
  evens the load, this is the padding plus at most a chunk per tile; for planners that do not balance, such as
  spreadout, it is mostly imbalance);
- ``idle``: the last network byte's end minus that NIC floor: time the binding port was not busy (link latency
  per stage, waiting for a peer's previous stage, waiting for balancing);
- ``tail``: the end of the plan minus the last network byte's end: redistribution inside the servers after
  the network has finished (FAST §4.3's last pipeline step).

Each is printed in percent of the bound. The default cases: dgx-h100 and dgx-h200-fast, 4 and 8 servers of 8,
Zipf(0.8) and balanced, 128 MiB, 512 MiB and 1 GiB per GPU, seeds 1-3. Target: fast within 2 % of the bound.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from a2acc.analysis.bounds import lower_bounds
from a2acc.analysis.fastsim import simulate_fast
from a2acc.analysis.model import SimModel
from a2acc.ir.quantize import DEFAULT_TARGET_CHUNKS, UnitPolicy
from a2acc.model.topology import Topology, load_topology
from a2acc.model.traffic import generate
from a2acc.pipeline import Request, compile

SIZES_MIB = (128, 512, 1024)
SEEDS = (1, 2, 3)
DEFAULT_CASES = [
    (p, n, k) for p in ("dgx-h100", "dgx-h200-fast") for n in (4, 8) for k in ("zipf", "balanced")
]
WIDE_CASES = [
    (p, n, k)
    for p in ("dgx-h100", "mi300x-100g", "dgx-a100", "dgx2", "ndv2")
    for n in (2, 4, 8)
    for k in ("uniform", "zipf", "balanced")
]


@dataclass(frozen=True)
class Gap:
    """One plan's time against the bound, the gap split into pad + idle + tail (all in seconds)."""

    time_s: float
    bound_s: float
    bound_term: str
    pad_s: float
    idle_s: float
    tail_s: float
    stages: int

    @property
    def ratio(self) -> float:
        return self.time_s / self.bound_s


def measure(
    topo: Topology,
    matrix: npt.NDArray[np.int64],
    algorithm: str = "fast",
    model: SimModel | None = None,
    options: dict[str, str] | None = None,
    target_chunks: int = DEFAULT_TARGET_CHUNKS,
) -> Gap:
    """Compile, simulate under ``model`` (ideal by default) and split the gap (module docstring)."""
    mdl = model if model is not None else SimModel()
    req = Request(  # planned under the model it is judged by: fast's shape search prices with it
        topo,
        matrix,
        algorithm,
        planner_options=options,
        units=UnitPolicy(target_chunks=target_chunks),
        model=mdl,
    )
    prog = compile(req).program
    sim = simulate_fast(prog, topo, model=mdl, payload_bytes=int(matrix.sum()))
    rep = lower_bounds(matrix, topo)
    kinds = topo.link_kinds
    nic = np.array(
        [k in ("nic_tx", "nic_rx", "direct") for k in kinds] + [False] * (len(sim.link_capacity) - len(kinds))
    )
    floor = float((sim.link_busy_bytes[nic] / sim.link_capacity[nic]).max()) if nic.any() else 0.0
    inter = np.array([op.link in ("inter", "direct") for op in prog.ops], dtype=bool)
    net_end = float(sim.op_end[inter].max()) if inter.any() else 0.0
    stages = prog.meta.get("stages", 0)
    return Gap(
        time_s=sim.time_s,
        bound_s=rep.seconds,
        bound_term=rep.best.name,
        pad_s=floor - rep.seconds,
        idle_s=net_end - floor,
        tail_s=sim.time_s - net_end,
        stages=int(stages) if isinstance(stages, (int, float)) else 0,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--wide", action="store_true", help="other presets and uniform traffic (regression check)"
    )
    ap.add_argument("--algos", default="fast")
    ap.add_argument("--sizes", default=",".join(map(str, SIZES_MIB)), help="MiB per GPU")
    ap.add_argument("--seeds", default=",".join(map(str, SEEDS)))
    ap.add_argument("--presets", default="", help="comma-separated subset of the presets")
    ap.add_argument("--traffic", default="", help="comma-separated subset of the traffic kinds")
    ap.add_argument("--servers", default="", help="comma-separated subset of the server counts")
    ap.add_argument("--opt", action="append", default=[], help="planner option KEY=VALUE (repeatable)")
    ap.add_argument(
        "--target-chunks",
        type=int,
        default=DEFAULT_TARGET_CHUNKS,
        help="chunks of the busiest rank (the unit policy of a2acc plan; finer = less padding)",
    )
    args = ap.parse_args()
    cases = WIDE_CASES if args.wide else DEFAULT_CASES
    if args.presets:
        keep = set(args.presets.split(","))
        cases = [c for c in cases if c[0] in keep]
    if args.traffic:
        cases = [c for c in cases if c[2] in args.traffic.split(",")]
    if args.servers:
        cases = [c for c in cases if str(c[1]) in args.servers.split(",")]
    options = dict(kv.split("=", 1) for kv in args.opt) or None
    sizes = [int(s) for s in args.sizes.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    algos = args.algos.split(",")
    print(
        "ideal model: line rate, link latencies, no software costs, no incast; gap parts in % of the bound; "
        f"unit: busiest rank ~{args.target_chunks} chunks; fast options: {options or 'defaults'}"
    )
    print(
        f"{'preset':>14} {'n x m':>5} {'traffic':>8} {'MiB':>5} {'seed':>4} {'alg':>12} {'time/bound':>10} "
        f"{'pad%':>6} {'idle%':>6} {'tail%':>6} {'stages':>6} {'term':>10}"
    )
    worst: dict[tuple[str, str], float] = {}
    for preset, n, kind in cases:
        topo = load_topology(preset, servers=n)
        for size in sizes:
            for seed in seeds:
                if kind == "balanced" and seed != seeds[0]:
                    continue  # balanced traffic does not depend on the seed
                matrix = generate(kind, topo.nranks, size << 20, seed, skew=0.8)
                for alg in algos:
                    g = measure(
                        topo,
                        matrix,
                        alg,
                        options=options if alg == "fast" else None,
                        target_chunks=args.target_chunks,
                    )
                    key = (alg, kind)
                    worst[key] = max(worst.get(key, 0.0), g.ratio)
                    pct = 100.0 / g.bound_s
                    print(
                        f"{preset:>14} {n:>2}x{topo.gpus_per_server:<2} {kind:>8} {size:>5} {seed:>4} {alg:>12} "
                        f"{g.ratio:>10.4f} {g.pad_s * pct:>6.2f} {g.idle_s * pct:>6.2f} {g.tail_s * pct:>6.2f} "
                        f"{g.stages:>6} {g.bound_term:>10}",
                        flush=True,
                    )
    print("worst time / bound: " + ", ".join(f"{a} {k} {v:.4f}" for (a, k), v in sorted(worst.items())))


if __name__ == "__main__":
    main()
