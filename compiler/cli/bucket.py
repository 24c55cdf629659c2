"""``a2acc bucket --topology T --traffic M``: the skew bucket (key, relabelling, layout, padding) for one matrix."""

from __future__ import annotations

import argparse

from a2acc.cli.common import add_topology_args, add_traffic_arg, topology_from_args, traffic_from_args
from a2acc.defaults import DEFAULT_ALGORITHM
from a2acc.model.units import format_bytes


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("bucket", help="print the skew-bucket key, chunk layout and padding for a matrix")
    add_topology_args(p)
    add_traffic_arg(p)
    p.add_argument("--algorithm", "-a", default=DEFAULT_ALGORITHM)
    p.add_argument(
        "--backend",
        "-b",
        default="none",
        help="as A2ACC_BACKEND: none (the p2p and reference executors run the plan itself) or a backend name",
    )
    p.add_argument(
        "--buckets",
        choices=("symmetric", "plain"),
        default="symmetric",
        help="as A2ACC_BUCKETS: symmetric (canonical form under the topology's symmetries, the JIT's default) or plain",
    )
    p.add_argument("--full", action="store_true", help="print the whole layout matrix")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    import numpy as np

    from a2acc.backends import TARGETS
    from a2acc.jit.bucket import BucketIndex
    from a2acc.planners import PLANNERS

    PLANNERS.entry(args.algorithm)  # an unknown name is one line listing the known ones
    if args.backend != "none":
        TARGETS.entry(args.backend)
    topo = topology_from_args(args)
    m = traffic_from_args(args, topo)
    b = BucketIndex(topo, args.algorithm, args.backend, symmetric=args.buckets == "symmetric").lookup(m)
    print(f"key        : {b.key}")
    if b.ranks is not None:
        print(
            f"relabelled : rank {b.ranks.tolist()} plays canonical rank 0..{len(b.ranks) - 1} (layout below is canonical)"
        )
    print(f"unit       : {format_bytes(b.unit)} ({b.unit} B per chunk)")
    print(
        f"layout     : {int(b.layout.sum())} chunks, max pair {int(b.layout.max())}, "
        f"max row {int(b.layout.sum(axis=1).max())}, max column {int(b.layout.sum(axis=0).max())}"
    )
    print(
        f"padding    : {format_bytes(b.padding_bytes)} = {100 * b.padding_fraction:.2f}% of {format_bytes(b.payload_bytes)}"
    )
    print(
        f"residual   : {format_bytes(b.overflow_bytes)} = {100 * b.overflow_fraction:.2f}% (bytes beyond the layout)"
    )
    if args.full:
        with np.printoptions(linewidth=200, threshold=1 << 20):
            print(b.layout)
    return 0
