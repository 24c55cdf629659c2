"""``a2acc plan``: build a verified Program with a registered planner and save it as JSON."""

from __future__ import annotations

import argparse

from a2acc.cli.common import (
    add_opt_args,
    add_time_limit_arg,
    add_timings_arg,
    add_topology_args,
    add_traffic_arg,
    resolve_opts,
    settle_heap,
    topology_from_args,
    traffic_from_args,
)
from a2acc.defaults import DEFAULT_ALGORITHM, DEFAULT_TARGET_CHUNKS, MAX_RANK_BYTES
from a2acc.errors import InputError
from a2acc.ir.passes import PASSES
from a2acc.model.units import format_bytes, parse_size
from a2acc.planners import available

TYPE_CHECKING = False  # the pipeline (numpy, the planners) is imported when the subcommand runs
if TYPE_CHECKING:
    from a2acc.pipeline import Result


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    planners = "\n".join(f"  {i.name:14s} {i.summary}" for i in available())
    passes = "\n".join(f"  {e.name:14s} {e.summary}" for e in PASSES.entries())
    p = sub.add_parser(
        "plan",
        help="build a verified plan (IR Program) and save it as JSON",
        description=f"Build a plan with a registered planner. Planners:\n{planners}\n\nPasses (--pass):\n{passes}\n\n"
        "The plan is verified before it is written; a planner bug is an error, never a warning.",
        epilog="examples:\n  a2acc plan -t dgx-h100 -n 4 -m m.npy -a fast -o plan.json --timings\n"
        "  a2acc plan -t dgx-h100 -n 4 -m m.npy -a fast --opt birkhoff=kuhn --opt compare_kuhn=true -o plan.json\n"
        "  a2acc plan -t dgx-h100 -m m.npy -a fast --opt help",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_topology_args(p)
    add_traffic_arg(p)
    p.add_argument(
        "--algorithm", "-a", default=DEFAULT_ALGORITHM, help=f"planner name (default {DEFAULT_ALGORITHM})"
    )
    add_opt_args(p)
    add_time_limit_arg(p)
    p.add_argument("--unit", default=None, help="chunk unit in bytes (default: chosen from --target-chunks)")
    p.add_argument(
        "--target-chunks",
        type=int,
        default=DEFAULT_TARGET_CHUNKS,
        help=f"busiest rank moves about this many chunks (default {DEFAULT_TARGET_CHUNKS})",
    )
    p.add_argument(
        "--pass", dest="passes", action="append", default=[], metavar="NAME", help="run a pass on the plan"
    )
    add_timings_arg(p)
    p.add_argument("-o", "--output", required=False, help="plan JSON to write (required unless --opt help)")
    p.add_argument(
        "--force", action="store_true", help="replace an output file a2acc did not write (default: refuse)"
    )
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from a2acc.ir.quantize import UnitPolicy
    from a2acc.pipeline import Request, compile

    routed = resolve_opts(args, args.algorithm, None)
    if routed is None:
        return 0
    if routed[1]:  # backend.KEY=VALUE: plan writes no backend file, so the option would do nothing
        key = next(iter(routed[1]))
        raise InputError(
            "", "--opt", f"backend.{key}", "backend options apply to a2acc compile (plan lowers nothing)"
        )
    _check_output(args)
    topo = topology_from_args(args)
    m = traffic_from_args(args, topo)
    settle_heap(args)
    unit = _unit(args.unit) if args.unit else None
    res = compile(
        Request(
            topo,
            m,
            args.algorithm,
            planner_options=routed[0],
            units=UnitPolicy(unit=unit, target_chunks=args.target_chunks),
            passes=tuple(args.passes),
        )
    )
    res.program.save(args.output)
    _report(args, res, int(m.sum()))
    return 0


def _unit(text: str) -> int:
    """``--unit``: 1 byte to the most a rank may send (a unit past the largest entry only pads: the report shows
    how much)."""
    unit = parse_size(text, field="--unit")
    if not 1 <= unit <= MAX_RANK_BYTES:
        raise InputError("", "--unit", text, f"a chunk size of 1 to {MAX_RANK_BYTES} bytes (2**50)")
    return unit


def _check_output(args: argparse.Namespace) -> None:
    """``-o`` is required (past ``--opt help``) and may not replace a file a2acc did not write, nor an input."""
    if not args.output:
        from a2acc.errors import InputError

        raise InputError("", "--output", None, "give the plan JSON to write with -o FILE")
    from a2acc.fileio import Output, check_outputs
    from a2acc.ir.serial import is_own_plan_json

    check_outputs(
        [Output("-o/--output", args.output, lambda head: is_own_plan_json(head.decode("utf-8", "replace")))],
        [args.traffic or "", args.topology or ""],
        force=args.force,
    )


def _report(args: argparse.Namespace, res: Result, payload: int) -> None:
    """What was written: ops, stages, layout and padding (of ``payload`` bytes), the planner's time and its
    scalar meta, and the per-phase timings with ``--timings``."""
    prog = res.program
    pad = prog.padding_bytes / max(payload, 1)
    print(
        f"wrote {args.output}: {args.algorithm}, {len(prog.table)} ops"
        + (
            f" in {prog.meta['stages']} communication stages"
            if isinstance(prog.meta.get("stages"), int)
            else ""
        )
        + f", {int(prog.counts.sum())} chunks of {format_bytes(prog.unit_bytes)} (the layout unit; "
        f"{format_bytes(prog.padded_bytes)} with padding {format_bytes(max(prog.padding_bytes, 0))} = "
        f"{100 * pad:.2f}%)"
    )
    print(
        f"time       : planner {res.timings.get('plan', 0.0) * 1e3:.1f} ms, quantize+plan+verify "
        f"{res.total_s * 1e3:.1f} ms (wall clock on this CPU)"
    )
    scalars = {
        k: v
        for k, v in sorted(prog.meta.items())
        if isinstance(v, (int, float, str)) and v != "" and k != "note"
    }
    if scalars:
        print(
            "planner    : "
            + ", ".join(f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in scalars.items())
        )
    if prog.meta.get("note"):
        print(f"note       : {prog.meta['note']}")
    if args.timings:
        print("\n".join(res.timing_lines()))
