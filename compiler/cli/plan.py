"""``a2acc plan``: build a verified Program with a registered planner and save it as JSON."""

from __future__ import annotations

import argparse
import time

from a2acc.cli.common import add_topology_args, add_traffic_arg, topology_from_args, traffic_from_args
from a2acc.passes.quantize import DEFAULT_TARGET_CHUNKS
from a2acc.planners import DEFAULT_ALGORITHM, available, schedule
from a2acc.units import format_bytes, parse_size


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    planners = "\n".join(f"  {i.name:14s} {i.summary}" for i in available())
    p = sub.add_parser(
        "plan",
        help="build a verified plan (IR Program) and save it as JSON",
        description=f"Build a plan with a registered planner. Planners:\n{planners}\n\n"
        "The plan is verified before it is written; a planner bug is an error, never a warning.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_topology_args(p)
    add_traffic_arg(p)
    p.add_argument(
        "--algorithm", "-a", default=DEFAULT_ALGORITHM, help=f"planner name (default {DEFAULT_ALGORITHM})"
    )
    p.add_argument("--unit", default=None, help="chunk unit in bytes (default: chosen from --target-chunks)")
    p.add_argument(
        "--target-chunks",
        type=int,
        default=DEFAULT_TARGET_CHUNKS,
        help=f"busiest rank moves about this many chunks (default {DEFAULT_TARGET_CHUNKS})",
    )
    p.add_argument("-o", "--output", required=True, help="plan JSON to write")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    topo = topology_from_args(args)
    m = traffic_from_args(args, topo)
    unit = parse_size(args.unit, field="--unit") if args.unit else None
    t0 = time.perf_counter()
    opts = {"compare_kuhn": True} if args.algorithm == "fast" else {}
    prog = schedule(topo, m, args.algorithm, unit=unit, target_chunks=args.target_chunks, **opts)
    dt = time.perf_counter() - t0
    prog.save(args.output)
    pad = prog.padding_bytes / max(int(m.sum()), 1)
    print(
        f"wrote {args.output}: {args.algorithm}, {len(prog.ops)} ops, unit {format_bytes(prog.unit_bytes)}, "
        f"padding {100 * pad:.2f}%, planned+verified in {dt * 1e3:.1f} ms"
    )
    if args.algorithm == "fast" and prog.meta.get("birkhoff_stages") is not None:
        print(
            f"stages     : {prog.meta['birkhoff_stages']} Birkhoff stages ({prog.meta['birkhoff_method']}); "
            f"FAST's Kuhn method: {prog.meta['birkhoff_stages_kuhn']}; bound n^2-2n+2 = {prog.meta['stage_bound']}"
        )
    return 0
