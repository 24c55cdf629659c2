"""``a2acc compare``: algorithms side by side over sizes, nccl-tests-style table, JSON and plot."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import numpy.typing as npt

from a2acc.analysis.compare import format_table, plot, run_compare, stderr_progress
from a2acc.analysis.incast import INCAST_MODELS
from a2acc.cli.common import add_topology_args, topology_from_args
from a2acc.errors import InputError
from a2acc.model.traffic import GENERATORS, load_matrix
from a2acc.model.units import parse_size_range
from a2acc.planners import available

DEFAULT_ALGOS = "fast,spreadout,direct,hierarchical"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "compare",
        help="compare planners over message sizes (simulated), with bounds",
        description="For each size and algorithm: plan (timed), verify, simulate, and compare with the lower "
        "bound. Output follows nccl-tests' alltoall_perf table (size = bytes per rank, count = per-peer "
        "float elements, time in us, algbw/busbw in GB/s with 1e9) with a2acc columns appended: schedule "
        "time, bound, %% of bound, stages. algbw uses FAST's definition (total bytes / N / time).",
        epilog="example: a2acc compare -t dgx-h200-fast --traffic zipf --sizes 64M:1G:x4 --plot cmp.png",
    )
    add_topology_args(p)
    p.add_argument(
        "--traffic",
        "-m",
        required=True,
        help=f"matrix file (rescaled per size) or generator ({', '.join(GENERATORS)})",
    )
    p.add_argument(
        "--sizes", default="1M:1G:x4", help="MIN:MAX:xFACTOR, MIN:MAX:+STEP or a list (default 1M:1G:x4)"
    )
    p.add_argument("--algorithms", "-a", default=DEFAULT_ALGOS, help=f"comma list (default {DEFAULT_ALGOS})")
    p.add_argument("--seed", type=int, default=0, help="generator seed")
    p.add_argument("--skew", type=float, default=0.8, help="generator skew (zipf, moe)")
    p.add_argument("--incast", default="mi300x-rocev2", choices=sorted(INCAST_MODELS), help="incast model")
    p.add_argument(
        "--mcf", action="store_true", help="also solve the max-concurrent-flow LP bound (small topologies)"
    )
    p.add_argument("--plot", default=None, metavar="PNG", help="write algbw vs size (needs matplotlib)")
    p.add_argument("--json", action="store_true", help="print machine-readable rows instead of the table")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    topo = topology_from_args(args)
    if args.traffic in GENERATORS:
        traffic: str | npt.NDArray[np.int64] = args.traffic
        tdesc = f"{args.traffic} (seed {args.seed}, skew {args.skew})"
    elif Path(args.traffic).exists():
        traffic = load_matrix(args.traffic, expect_ranks=topo.nranks)
        tdesc = f"{args.traffic} (rescaled to each size)"
    else:
        raise InputError(
            "", "--traffic", args.traffic, f"not a file and not a generator ({', '.join(GENERATORS)})"
        )
    sizes = parse_size_range(args.sizes)
    algos = [a.strip() for a in args.algorithms.split(",") if a.strip()]
    known = {i.name for i in available()}
    for a in algos:
        if a not in known:
            raise InputError("", "--algorithms", a, f"known planners: {', '.join(sorted(known))}")
    incast = INCAST_MODELS[args.incast]()
    rows = run_compare(
        topo,
        traffic,
        sizes,
        algos,
        seed=args.seed,
        skew=args.skew,
        incast=incast,
        mcf=args.mcf,
        progress=stderr_progress,
    )
    if sys.stderr.isatty():
        print("\r\033[K", end="", file=sys.stderr)
    if args.json:
        print(
            json.dumps(
                {
                    "topology": topo.name,
                    "nranks": topo.nranks,
                    "traffic": tdesc,
                    "rows": [r.to_json() for r in rows],
                },
                indent=1,
            )
        )
    else:
        s = topo.summary()
        header = (
            f"# a2acc compare: {topo.name} ({topo.servers} x {topo.gpus_per_server} = {topo.nranks} GPUs; "
            f"{s.describe()})\n# traffic: {tdesc}; incast model: {incast.name}; "
            f"simulated (flow-level, max-min fair share), not measured on GPUs\n"
            f"# algbw = total bytes / N / time (FAST); busbw = algbw * (N-1)/N; bound term per size: "
            + ", ".join(sorted({r.bound_term for r in rows}))
            + "\n#"
        )
        print(format_table(rows, header))
    if args.plot:
        plot(rows, args.plot, f"{topo.name}: {tdesc}")
        if not args.json:
            print(f"# plot written to {args.plot}")
    return 0
