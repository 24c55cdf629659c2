"""``a2acc compile``: plan, verify, lower to an executor format, verify what was written."""

from __future__ import annotations

import argparse

from a2acc.backends import BACKENDS
from a2acc.cli.common import add_topology_args, add_traffic_arg, topology_from_args, traffic_from_args
from a2acc.errors import InputError, LoweringError
from a2acc.passes.quantize import unit_for_padding
from a2acc.planners import DEFAULT_ALGORITHM, schedule
from a2acc.units import format_bytes, parse_size

AUTO_PADDING = (0.02, 0.05, 0.1, 0.2, 0.4)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    names = ", ".join(f"{b.name}{'' if b.available else ' (not built yet)'}" for b in BACKENDS.values())
    p = sub.add_parser(
        "compile",
        help="plan + lower to executor files (MSCCL XML), verified before exit 0",
        description="Plan the matrix, lower the plan and verify the written files with the backend's strict "
        f"reader and interpreter. Backends: {names}. For msccl-xml, -o DIR becomes an MSCCL_ALGO_DIR holding "
        "only XML files (sorted name order = priority), and DIR.manifest.json beside it describes the "
        "all-to-all-v packing (offsets, counts, chunk bytes, padding).",
        epilog="example: a2acc compile -t mi300x -m m.npy -a fast --backend msccl-xml --dialect rccl -o algos",
    )
    add_topology_args(p)
    add_traffic_arg(p)
    p.add_argument("--algorithm", "-a", default=DEFAULT_ALGORITHM)
    p.add_argument("--backend", "-b", default="msccl-xml", choices=sorted(BACKENDS))
    p.add_argument(
        "--dialect", default="nccl", choices=["nccl", "rccl"], help="msccl-executor-nccl or RCCL MSCCL"
    )
    p.add_argument("--proto", default=None, choices=["Simple", "LL", "LL128"], help="default: by buffer size")
    p.add_argument("--instances", type=int, default=1, help="split every transfer over this many channels")
    p.add_argument("--tb-layout", default="auto", choices=["auto", "split", "combined"])
    p.add_argument(
        "--max-padding",
        default="auto",
        help="layout granularity as the padding allowed (fraction of payload); auto tries 0.02, 0.05, 0.1, 0.2, "
        "0.4 until the plan fits the executor's limits",
    )
    p.add_argument(
        "--size-range", default=None, metavar="MIN:MAX", help="minBytes:maxBytes (default: exactly C*unit)"
    )
    p.add_argument("-o", "--output", required=True, help="algorithm directory to write")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    info = BACKENDS[args.backend]
    if not info.available:
        raise InputError("", "--backend", args.backend, "this backend is not built yet; use msccl-xml")
    from a2acc.backends.msccl_xml.api import compile_to_dir

    topo = topology_from_args(args)
    m = traffic_from_args(args, topo)
    size_range = None
    if args.size_range:
        parts = args.size_range.split(":")
        if len(parts) != 2:
            raise InputError("", "--size-range", args.size_range, "use MIN:MAX (bytes, K/M/G allowed)")
        size_range = (parse_size(parts[0], field="--size-range"), parse_size(parts[1], field="--size-range"))
    try:
        targets = AUTO_PADDING if args.max_padding == "auto" else (float(args.max_padding),)
    except ValueError:
        raise InputError("", "--max-padding", args.max_padding, "a fraction like 0.03, or auto") from None
    last: LoweringError | None = None
    for tc in targets:
        prog = schedule(topo, m, args.algorithm, unit=unit_for_padding(m, tc))
        try:
            out = compile_to_dir(
                prog,
                args.output,
                dialect=args.dialect,
                proto=args.proto,
                instances=args.instances,
                tb_layout=args.tb_layout,
                size_range=size_range,
            )
        except LoweringError as exc:
            last = exc
            continue
        a = out.algo
        man = out.manifest
        pad = man.padding_bytes() / max(int(m.sum()), 1)
        print(
            f"wrote {out.xml_path} ({len(out.text)} B, verified): {a.ngpus} GPUs, C={a.nchunksperloop}, proto "
            f"{a.proto}, {a.nchannels} channels, max {max(len(g.tbs) for g in a.gpus)} tbs/GPU, max "
            f"{max(len(t.steps) for g in a.gpus for t in g.tbs)} steps/tb"
        )
        print(
            f"wrote {out.manifest_path}: chunk {format_bytes(man.chunk_bytes)}, buffer {format_bytes(man.buffer_bytes)}"
            f"/rank, padding {100 * pad:.2f}% of payload, minBytes={a.min_bytes} maxBytes={a.max_bytes}"
        )
        print(f"use: MSCCL_ALGO_DIR={out.xml_path.parent} (set before the first communicator is created)")
        return 0
    assert last is not None
    raise LoweringError(f"{last} (tried --max-padding {', '.join(map(str, targets))})")
