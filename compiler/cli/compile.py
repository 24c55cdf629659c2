"""``a2acc compile``: plan, verify, lower to a registered backend, check the exact text, then write it."""

from __future__ import annotations

import argparse
import os

from a2acc.backends import TARGETS
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
from a2acc.defaults import AUTO_PADDING, DEFAULT_ALGORITHM
from a2acc.errors import InputError, InternalError
from a2acc.model.units import format_bytes


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    backends = "\n".join(f"  {t.name:14s} {t.summary}" for t in TARGETS.entries())
    p = sub.add_parser(
        "compile",
        help="plan + lower to executor files (a registered backend), verified before anything is written",
        description="Plan the matrix, verify the plan, lower it with a backend, read the exact text back with the "
        f"backend's strict reader and interpreter, and only then write it. Backends:\n{backends}\n\n"
        "msccl-xml: -o DIR becomes an MSCCL_ALGO_DIR holding only XML files (sorted name order = priority), and "
        "DIR.manifest.json beside it describes the all-to-all-v packing (offsets, counts, chunk bytes, padding).",
        epilog="examples:\n  a2acc compile -t mi300x -m m.npy -a fast --opt dialect=rccl -o algos\n"
        "  a2acc compile -t dgx-h100 -n 4 -m m.npy -a fast --opt birkhoff=kuhn,proto=Simple -o algos --timings\n"
        "  a2acc compile -t dgx-h100 -m m.npy -a fast --opt help",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_topology_args(p)
    add_traffic_arg(p)
    p.add_argument("--algorithm", "-a", default=DEFAULT_ALGORITHM)
    p.add_argument("--backend", "-b", default="msccl-xml", help=f"one of {', '.join(sorted(TARGETS))}")
    add_opt_args(p)
    add_time_limit_arg(p)
    p.add_argument(
        "--max-padding",
        default="auto",
        help="layout granularity as the padding allowed (fraction of payload); auto tries "
        f"{', '.join(map(str, AUTO_PADDING))} until the plan fits the executor's limits",
    )
    add_timings_arg(p)
    p.add_argument(
        "--force",
        action="store_true",
        help="write even if the output directory holds files a2acc did not write (they are left in place)",
    )
    p.add_argument(
        "-o",
        "--output",
        required=False,
        help="output: a directory for backends that write one (msccl-xml: an MSCCL_ALGO_DIR), else a file",
    )
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from a2acc.fileio import check_parent
    from a2acc.ir.quantize import UnitPolicy
    from a2acc.pipeline import Request, compile, emit

    if args.backend not in TARGETS:
        raise InputError("", "--backend", args.backend, f"known backends: {', '.join(sorted(TARGETS))}")
    routed = resolve_opts(args, args.algorithm, args.backend)
    if routed is None:
        return 0
    if not args.output:
        raise InputError("", "--output", None, "give the output with -o (a directory for msccl-xml)")
    check_parent("--output", args.output)  # the output directory, as every single-file output is checked
    if args.max_padding == "auto":
        max_padding: float | str = "auto"
    else:
        try:
            max_padding = float(args.max_padding)
        except ValueError:
            raise InputError("", "--max-padding", args.max_padding, "a fraction like 0.03, or auto") from None
    topo = topology_from_args(args)
    m = traffic_from_args(args, topo)
    settle_heap(args)
    res = compile(
        Request(
            topo,
            m,
            args.algorithm,
            planner_options=routed[0],
            target=args.backend,
            target_options=routed[1],
            units=UnitPolicy(max_padding=max_padding),
        )
    )
    if res.lowered is None:
        raise InternalError("compile() with a backend returned no lowered files")
    paths = emit(res, args.output, force=args.force)
    man = res.lowered.manifest
    pad = man.padding_bytes() / max(int(m.sum()), 1)
    for path in paths[:-1]:
        print(f"wrote {path} (verified): {res.lowered.summary}")
    print(
        f"wrote {paths[-1]}: chunk {format_bytes(man.chunk_bytes)}, buffer {format_bytes(man.buffer_bytes)}/rank, "
        f"padding {100 * pad:.2f}% of payload ({res.unit_label})"
    )
    if man.dtypes:
        from a2acc.ir.quantize import DTYPE_BYTES

        by_size: dict[int, list[str]] = {}
        for d in man.dtypes:
            by_size.setdefault(DTYPE_BYTES[d], []).append(d)
        counts = "; ".join(f"{', '.join(ds)}: {man.count_per_peer(sz)}" for sz, ds in sorted(by_size.items()))
        print(f"the packed call selects the file for these element types (count per peer): {counts}")
    if res.lowered.usage:
        print("use: " + res.lowered.usage.format(output=os.path.abspath(args.output)))
    if args.timings:
        print("\n".join(res.timing_lines()))
    return 0
