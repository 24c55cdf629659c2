"""``a2acc traffic gen|show``: generate seeded matrices and print their statistics."""

from __future__ import annotations

import argparse
from pathlib import Path

from a2acc.cli.common import add_moe_args, add_workload_args, seed, workload_from_args
from a2acc.defaults import GENERATORS, WORKLOADS
from a2acc.errors import InputError


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "traffic", help="generate and inspect traffic matrices", description="Traffic matrices."
    )
    tsub = p.add_subparsers(dest="traffic_cmd", metavar="ACTION")
    gen = tsub.add_parser(
        "gen",
        help="generate a seeded matrix",
        description="Generate a seeded traffic matrix (bytes, row = sender). Kinds: "
        "balanced (size/N everywhere), uniform (FAST: rand() % 10000), zipf (skew s), lognormal (sigma, or "
        "the Gini of the entries), moe (tokens/experts/top-k/hidden/dtype/skew), w0-w7 (Megatron-LM's "
        "token-imbalance workloads: balanced, hot expert set, hot rank, spread hot experts, source ragged, "
        "zero expert/rank, rotating hotspot, burst; docs/workloads.md).",
    )
    gen.add_argument("kind", choices=GENERATORS + WORKLOADS)
    who = gen.add_mutually_exclusive_group(required=True)
    who.add_argument("--ranks", type=int, help="number of GPUs")
    who.add_argument("--topology", "-t", help="take the GPU count from a preset or file")
    gen.add_argument("--servers", "-n", type=int, default=None, help="with --topology: scale to N servers")
    gen.add_argument(
        "--size",
        help="bytes per rank (mean row sum), e.g. 256M (1024-based); w0-w7: sets the bytes per token",
    )
    gen.add_argument("--seed", type=seed, default=0, help="generator seed (a whole number >= 0)")
    gen.add_argument("--skew", type=float, default=0.8, help="Zipf exponent (zipf, moe router skew)")
    spread = gen.add_mutually_exclusive_group()
    spread.add_argument("--sigma", type=float, default=1.0, help="log-normal sigma")
    spread.add_argument(
        "--gini",
        type=float,
        default=None,
        help="lognormal: the sigma whose draws give the entries off the diagonal this Gini coefficient "
        "(measured MoE routing: 0.10-0.38)",
    )
    gen.add_argument(
        "--align",
        default="16",
        help="round entries to multiples of this many bytes (K/M/G suffixes, like --size)",
    )
    add_moe_args(gen)
    add_workload_args(gen)
    gen.add_argument(
        "-o",
        "--output",
        required=True,
        help="output file (.npy, .csv, .json, or nccl-tests' whitespace-separated text for any other suffix)",
    )
    gen.add_argument(
        "--force",
        action="store_true",
        help="replace an existing file a2acc cannot prove it wrote (default: refuse; a JSON matrix of a2acc's, "
        "or a file with exactly the bytes about to be written, is replaced without it)",
    )
    gen.set_defaults(func=_gen)
    show = tsub.add_parser("show", help="print row/column sums and skew statistics")
    show.add_argument("file")
    show.add_argument("--full", action="store_true", help="print every row and column sum")
    show.set_defaults(func=_show)


def _gen(args: argparse.Namespace) -> int:
    from a2acc.fileio import Output, atomic_write_bytes, check_outputs
    from a2acc.model.topology import load_topology
    from a2acc.model.traffic import MoeSpec, generate, matrix_bytes, owned_matrix, validate_matrix
    from a2acc.model.units import format_bytes, parse_size

    if args.ranks is not None:
        if args.servers is not None:
            raise InputError(
                "", "--servers", args.servers, "scales a --topology preset; with --ranks leave it out"
            )
        n = args.ranks
    else:
        n = load_topology(args.topology, args.servers).nranks
    size = parse_size(args.size, field="--size") if args.size is not None else None
    align = parse_size(str(args.align), source="traffic gen", field="--align")
    if args.gini is not None and args.kind != "lognormal":
        raise InputError("traffic gen", "--gini", args.gini, "sets the lognormal generator's spread only")
    if args.kind in WORKLOADS:
        if not 1 <= align <= 1 << 30:
            raise InputError("traffic gen", "--align", args.align, "1 to 2**30 bytes")
        m, what = workload_from_args(args, args.kind, n, size, align)
    else:
        spec = MoeSpec(args.tokens, args.experts, args.top_k, args.hidden, args.dtype_bytes, args.skew)
        m = generate(
            args.kind,
            n,
            size,
            args.seed,
            skew=args.skew,
            sigma=args.sigma,
            gini_target=args.gini,
            align=align,
            moe=spec,
        )
        what = f"{args.kind} seed {args.seed}"
    if m.sum() == 0:
        raise InputError(
            "traffic gen", "--size", args.size, "the generated matrix is all zeros; use a larger size"
        )
    validate_matrix(m, f"traffic gen {args.kind}")  # a limit the parameters pass is theirs, not the output's
    data = matrix_bytes(m, Path(args.output).suffix, args.output)
    topo_input = [args.topology] if args.topology else []
    check_outputs([Output("-o/--output", args.output, owned_matrix, data)], topo_input, force=args.force)
    atomic_write_bytes(args.output, data)
    print(f"wrote {args.output}: {n} x {n}, {format_bytes(m.sum())} total, {what}")
    return 0


def _show(args: argparse.Namespace) -> int:
    import numpy as np

    from a2acc.model.traffic import load_matrix, stats
    from a2acc.model.units import format_bytes

    m = load_matrix(args.file)
    s = stats(m)
    rows, cols = np.array(s.row_sums), np.array(s.col_sums)
    print(f"matrix     : {args.file}  {s.n} x {s.n}, total {format_bytes(s.total)} ({s.total} B)")
    print(
        f"row sums   : min {format_bytes(rows.min())}  median {format_bytes(np.median(rows))}  "
        f"max {format_bytes(rows.max())} (rank {int(rows.argmax())})"
    )
    print(
        f"col sums   : min {format_bytes(cols.min())}  median {format_bytes(np.median(cols))}  "
        f"max {format_bytes(cols.max())} (rank {int(cols.argmax())})"
    )
    print(
        f"entries    : max {format_bytes(s.max_entry)}  median {format_bytes(s.median_entry)}  "
        f"p90 {format_bytes(s.p90_entry)}  zeros {100 * s.zero_fraction:.1f}% (off-diagonal)"
    )
    print(
        f"skew       : max/median {s.max_over_median:.2f}  p90/median "
        f"{(s.p90_entry / s.median_entry if s.median_entry else float('inf')):.2f}  "
        f"gini {s.gini:.3f}  cv {s.cv:.3f} (entries off the diagonal)"
    )
    print(
        f"per rank   : sends max/mean {s.send_max_over_mean:.3f}  receives max/mean {s.recv_max_over_mean:.3f}  "
        f"gini of received bytes {s.recv_gini:.3f}"
    )
    if args.full:
        for i in range(s.n):
            print(f"  rank {i:4d}: sends {s.row_sums[i]:>14d} B  receives {s.col_sums[i]:>14d} B")
    return 0
