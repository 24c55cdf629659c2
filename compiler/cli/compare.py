"""``a2acc compare``: planners side by side over sizes, simulated; nccl-tests-style table, JSON, CSV and plot."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from a2acc import __version__
from a2acc.cli.common import (
    add_moe_args,
    add_topology_args,
    add_workload_args,
    seed,
    settle_heap,
    topology_from_args,
    workload_from_args,
)
from a2acc.cli.simulate import add_model_args, model_from_args
from a2acc.defaults import BW_DEFINITIONS, GENERATORS, PLOT_METRICS, WORKLOADS
from a2acc.errors import InputError
from a2acc.model.units import parse_size, parse_size_range

# the comparison itself (numpy, the planners, the simulator) is imported when the subcommand runs
TYPE_CHECKING = False
if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from a2acc.analysis.model import SimModel
    from a2acc.model.topology import Topology
    from a2acc.studies.compare import Row

DEFAULT_ALGOS = "fast,spreadout,direct,hierarchical"
#: runs last: its candidates' simulations are the rows above, remembered (a2acc.analysis.fastsim)
AUTO = "auto"
#: ``syccl`` joins the defaults on the tiered topologies it applies to, up to this many GPUs (its
#: synthesis takes ~13 s at 64 GPUs on a 2-core machine; larger ones ask for it with ``-a``)
SYCCL_DEFAULT_MAX_GPUS = 64


def default_algorithms(topo: Topology) -> list[str]:
    """compare's planners when ``-a`` is not given: fast, spreadout, direct, hierarchical, and syccl where it
    applies (tiered topologies) up to :data:`SYCCL_DEFAULT_MAX_GPUS` GPUs."""
    from a2acc.planners import applies

    algos = DEFAULT_ALGOS.split(",")
    if 1 < topo.nranks <= SYCCL_DEFAULT_MAX_GPUS and applies("syccl", topo) is None:
        algos.append("syccl")
    return [*algos, AUTO]


DEFAULT_SIZES = "1M:1G:x4"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "compare",
        help="compare planners over message sizes (simulated), with bounds",
        description="For each algorithm and size: plan (timed), verify, simulate, and compare with the lower "
        "bound. Rows stream as they are computed, in nccl-tests' alltoall_perf layout (size = bytes per rank, "
        "count = per-peer float elements, time in us, algbw/busbw in GB/s with 1e9) with a2acc columns "
        "appended: sched (the planner's time, us), bound (us), % of bound, stages (the planner's "
        "communication stages). Every figure is simulated, not measured on GPUs.",
        epilog="examples:\n"
        "  a2acc compare -t dgx-h200-fast --traffic zipf -b 64M -e 1G -f 4 --plot cmp.png -J cmp.json\n"
        "  a2acc compare -t dgx-h100 -n 8 --traffic zipf -a 'fast,fast[shape=staged],fast[shape=grouped,groups=2]'\n"
        "  a2acc compare -t mi300x-100g -n 3 --traffic m.npy            (the matrix at its own size)\n"
        "  a2acc compare -t dgx-h100 -n 8 --traffic w3 --experts 128 --top-k 8   (tokens x bytes per token)\n"
        "  a2acc compare -t mi300x-100g --traffic uniform --model params.yaml --csv out.csv",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_topology_args(p)
    p.add_argument(
        "--traffic",
        "-m",
        required=True,
        help=f"matrix file (at its own size, or rescaled to --sizes), a generator ({', '.join(GENERATORS)}) or "
        "a workload w0-w7 (at tokens x top-k x bytes per token per GPU, or rescaled to --sizes: the same "
        "routing, more bytes per token)",
    )
    _add_size_args(p)
    p.add_argument(
        "--algorithms",
        "-a",
        action="append",
        default=None,
        metavar="LIST",
        help=f"comma list of planners (default {DEFAULT_ALGOS}, plus syccl on tiered topologies of up to "
        f"{SYCCL_DEFAULT_MAX_GPUS} GPUs, then {AUTO}, whose pick the closing table shows); repeatable. A planner "
        "takes options in brackets, as --opt KEY=VALUE would give them to it: fast[shape=staged] or "
        "fast[shape=grouped,groups=2] (quote the list for the shell); one planner may be listed several times "
        "with different options, each a block of the table named as written ('a2acc plan -a NAME --opt help' "
        "lists a planner's options)",
    )
    p.add_argument("--seed", type=seed, default=0, help="generator seed (a whole number >= 0)")
    p.add_argument("--skew", type=float, default=0.8, help="generator skew (zipf, moe)")
    add_moe_args(p)
    add_workload_args(p)
    add_model_args(p)
    p.add_argument(
        "--mcf", action="store_true", help="also solve the max-concurrent-flow LP bound (small topologies)"
    )
    p.add_argument(
        "--jobs",
        "-j",
        type=int,
        default=None,
        metavar="N",
        help="worker processes, one size each (default: the CPU count, at most one per size; 1: this "
        "process only). The rows are the same whatever N; they print in table order as they complete",
    )
    _add_output_args(p)
    p.set_defaults(func=_run)


def _add_size_args(p: argparse.ArgumentParser) -> None:
    """The sizes to run: ``--sizes`` or nccl-tests' ``-b/-e/-f/-i`` (:func:`_sizes` checks they are not mixed)."""
    p.add_argument(
        "--sizes",
        default=None,
        help=f"MIN:MAX:xFACTOR, MIN:MAX:+STEP or a list (default {DEFAULT_SIZES}; a matrix file: its own size)",
    )
    p.add_argument("-b", "--minbytes", default=None, metavar="SIZE", help="nccl-tests: smallest size")
    p.add_argument("-e", "--maxbytes", default=None, metavar="SIZE", help="nccl-tests: largest size")
    p.add_argument(
        "-f", "--stepfactor", type=float, default=None, metavar="F", help="nccl-tests: size factor"
    )
    p.add_argument("-i", "--stepbytes", default=None, metavar="SIZE", help="nccl-tests: size increment")


def _add_output_args(p: argparse.ArgumentParser) -> None:
    """How the rows are reported (bandwidth definition) and the files written beside the table."""
    p.add_argument(
        "--bw",
        default="fast",
        choices=BW_DEFINITIONS,
        help="algbw definition: fast = total bytes / N / time (FAST, default); alltoallv = the busiest "
        "rank's bytes / time (nccl-tests alltoallv_perf)",
    )
    p.add_argument("--plot", default=None, metavar="PNG", help="write a plot (needs matplotlib)")
    p.add_argument("--plot-metric", default="busbw", choices=PLOT_METRICS, help="what --plot shows")
    p.add_argument("-J", "--json", default=None, metavar="FILE", help="also write the rows as JSON")
    p.add_argument("--csv", default=None, metavar="FILE", help="also write the rows as CSV")
    p.add_argument(
        "--force", action="store_true", help="replace output files a2acc did not write (default: refuse)"
    )


def _sizes(args: argparse.Namespace, matrix: npt.NDArray[np.int64] | None) -> tuple[list[int], bool]:
    """The sizes to run, and whether a matrix file is used at its own size."""
    from a2acc.studies.compare import own_size

    nccl = any(v is not None for v in (args.minbytes, args.maxbytes, args.stepfactor, args.stepbytes))
    if nccl and args.sizes is not None:
        raise InputError("", "--sizes", args.sizes, "give --sizes or nccl-tests' -b/-e/-f/-i, not both")
    if nccl:
        lo_t = args.minbytes if args.minbytes is not None else args.maxbytes
        hi_t = args.maxbytes if args.maxbytes is not None else args.minbytes
        if lo_t is None:
            raise InputError("", "-b/--minbytes", None, "give the smallest (-b) or largest (-e) size")
        lo = parse_size(lo_t, field="-b/--minbytes")
        hi = parse_size(hi_t, field="-e/--maxbytes")
        if args.stepfactor is not None and args.stepbytes is not None:
            raise InputError("", "-f/-i", args.stepbytes, "give a step factor (-f) or a step in bytes (-i)")
        if args.stepbytes is not None:
            spec = f"{lo}:{hi}:+{parse_size(args.stepbytes, field='-i/--stepbytes')}"
        else:
            f = args.stepfactor if args.stepfactor is not None else 2.0
            if not f > 1:
                raise InputError("", "-f/--stepfactor", f, "a factor > 1")
            spec = f"{lo}:{hi}:x{f:g}"
        return parse_size_range(spec, field="-b/-e/-f"), False
    if args.sizes is None and matrix is not None:
        return [own_size(matrix)], True
    sizes = parse_size_range(DEFAULT_SIZES if args.sizes is None else args.sizes)  # '' is no sizes
    if not sizes:
        raise InputError("", "--sizes", args.sizes, "one or more sizes, e.g. 1M:1G:x4 or 1M,64M")
    if any(s <= 0 for s in sizes):
        raise InputError("", "--sizes", args.sizes, "sizes of at least 1 byte per GPU")
    return sizes, False


def _progress(total: int) -> tuple[Any, TextIO | None]:
    """A tqdm bar on a terminal; otherwise None (a line per planner x size goes to stderr instead)."""
    if sys.stderr.isatty():
        from tqdm import tqdm

        return tqdm(total=total, unit="plan", file=sys.stderr, leave=False, dynamic_ncols=True), None
    return None, sys.stderr


def _run(args: argparse.Namespace) -> int:
    from a2acc.studies.compare import check_plot_backend, matrix_for, summary_lines

    topo = topology_from_args(args)
    if args.plot:
        check_plot_backend()  # before any work: a missing matplotlib must not cost a whole run
    _check_outputs(args)
    traffic, matrix, tdesc = _traffic(args, topo)
    sizes, at_own = _sizes(args, matrix)
    if matrix is not None:
        tdesc += " (at its own size)" if at_own else " (rescaled to each size)"
    algos = _algorithms(args, topo)
    model = model_from_args(args, topo)
    _jobs(args.jobs, len(sizes))  # the rest of the input checked before the header is printed
    matrix_for(traffic, topo, sizes[0], args.seed, args.skew)
    print(_header(topo, tdesc, model.describe(), model.source, args.bw), flush=True)
    settle_heap(args)
    rows = _rows(args, topo, traffic, sizes, algos, model)
    print(f"# bound terms: {', '.join(sorted({r.bound_term for r in rows}))}")
    print("\n".join(summary_lines(rows)))
    meta: dict[str, object] = {
        "a2acc_version": __version__,
        "tool": "a2acc compare",
        "topology": topo.name,
        "topology_fingerprint": topo.fingerprint,
        "nranks": topo.nranks,
        "servers": topo.servers,
        "gpus_per_server": topo.gpus_per_server,
        "traffic": tdesc,
        "algorithms": algos,
        "sizes": sizes,
        "bw_definition": args.bw,
        "model": model.params(),
        "engine": "fast (a2acc.analysis.fastsim)",
    }
    _write_outputs(args, rows, meta, topo, tdesc, model)
    return 0


def _check_outputs(args: argparse.Namespace) -> None:
    """Refuse, before any work, output files a2acc did not write (unless ``--force``) or that are inputs."""
    from a2acc.fileio import Output, check_outputs
    from a2acc.studies.compare import owned_csv, owned_json, owned_plot

    if args.plot is not None and not args.plot.lower().endswith(".png"):
        raise InputError("", "--plot", args.plot, "a .png file name (the plot is written as PNG)")
    outputs = [
        Output(flag, path, owned)
        for flag, path, owned in (
            ("-J/--json", args.json, owned_json),
            ("--csv", args.csv, owned_csv),
            ("--plot", args.plot, owned_plot),
        )
        if path is not None
    ]
    check_outputs(outputs, [args.traffic, args.topology, args.model or ""], force=args.force)


def _traffic(
    args: argparse.Namespace, topo: Topology
) -> tuple[str | npt.NDArray[np.int64], npt.NDArray[np.int64] | None, str]:
    """``--traffic`` as :func:`compare_rows` takes it (a generator's name or a matrix), the matrix file's matrix
    (None for a generator) and its description for the header."""
    from a2acc.model.traffic import load_matrix

    if args.traffic in GENERATORS:
        return args.traffic, None, f"{args.traffic} (seed {args.seed}, skew {args.skew})"
    if args.traffic in WORKLOADS:
        matrix, what = workload_from_args(args, args.traffic, topo.nranks, None)
        return matrix, matrix, what
    if Path(args.traffic).exists():
        matrix = load_matrix(args.traffic, expect_ranks=topo.nranks)
        if int(matrix.sum()) == int(
            matrix.trace()
        ):  # times of 0 and bandwidths of inf, a plot without a scale
            raise InputError(
                args.traffic,
                "",
                "no bytes between GPUs",
                "a matrix with a non-zero entry off the diagonal (a comparison scales it to --sizes)",
            )
        return matrix, matrix, args.traffic
    raise InputError(
        "",
        "--traffic",
        args.traffic,
        f"not a file, a generator ({', '.join(GENERATORS)}) or a workload ({', '.join(WORKLOADS)})",
    )


def _algorithms(args: argparse.Namespace, topo: Topology) -> list[str]:
    """``--algorithms`` (or :func:`default_algorithms`): the entries' labels, each a known planner that applies
    to ``topo``, with options it takes (:func:`a2acc.studies.compare.contenders`)."""
    from a2acc.planners import applies
    from a2acc.studies.compare import contenders

    if args.algorithms is None:
        return default_algorithms(topo)
    entries = contenders(args.algorithms)
    for e in entries:
        why = applies(e.planner, topo)
        if why is not None:
            raise InputError("", "--algorithms", e.label, f"does not apply to this topology: {why}")
    return [e.label for e in entries]


def _rows(
    args: argparse.Namespace,
    topo: Topology,
    traffic: str | npt.NDArray[np.int64],
    sizes: list[int],
    algos: list[str],
    model: SimModel,
) -> list[Row]:
    """Every planner x size row, printed as it is computed (:func:`_stream`), with a progress bar on a terminal
    or a line per row on stderr otherwise."""
    from a2acc.studies.compare import compare_rows, size_label

    total = len(sizes) * len(algos)
    bar, log = _progress(total)
    rows: list[Row] = []
    try:
        for k, row in enumerate(
            _stream(
                compare_rows(
                    topo,
                    traffic,
                    sizes,
                    algos,
                    model=model,
                    seed=args.seed,
                    skew=args.skew,
                    mcf=args.mcf,
                    bw=args.bw,
                    jobs=_jobs(args.jobs, len(sizes)),
                ),
                rows,
                bar,
            )
        ):
            if log is not None:
                print(
                    f"a2acc compare: [{k + 1}/{total}] {row.algorithm} @ {size_label(row.size)}: "
                    f"{row.time_s * 1e6:.1f} us simulated, planned in {row.schedule_s * 1e3:.1f} ms",
                    file=log,
                    flush=True,
                )
    finally:
        if bar is not None:
            bar.close()
    return rows


def _jobs(asked: int | None, n_sizes: int) -> int:
    """``--jobs``: what was asked (checked), or the CPUs this process may use, at most one per size."""
    if asked is not None:
        if asked < 1:
            raise InputError("", "--jobs", asked, "an integer >= 1 (1: no worker processes)")
        return asked
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, n_sizes))


def _write_outputs(
    args: argparse.Namespace,
    rows: list[Row],
    meta: dict[str, object],
    topo: Topology,
    tdesc: str,
    model: SimModel,
) -> None:
    """The files ``-J``, ``--csv`` and ``--plot`` ask for, each announced on stdout."""
    from a2acc.studies.compare import plot, write_csv, write_json

    if args.json:
        write_json(args.json, rows, meta)
        print(f"# rows written to {args.json} (JSON)")
    if args.csv:
        write_csv(args.csv, rows, meta)
        print(f"# rows written to {args.csv} (CSV)")
    if args.plot:
        title = (
            f"simulated: {topo.name}, {topo.nranks} GPUs ({topo.servers} x {topo.gpus_per_server}), {tdesc}\n"
            f"{model.describe()}"
        )
        plot(rows, args.plot, title, args.plot_metric)
        print(f"# plot written to {args.plot} ({args.plot_metric})")


def _stream(rows_in: Iterator[Row], sink: list[Row], bar: Any) -> Iterator[Row]:
    """Print each row as it arrives (block headers and footers around each algorithm), collect it, yield it."""
    from a2acc.studies.compare import block_footer, block_header, format_row, size_label

    current: list[Row] = []

    def emit(text: str) -> None:
        if bar is not None:
            bar.write(text, file=sys.stdout)
        else:
            print(text, flush=True)

    for row in rows_in:
        if current and current[-1].algorithm != row.algorithm:
            emit(block_footer(current))
            current = []
        if not current:
            emit(block_header(row.algorithm))
        emit(format_row(row))
        current.append(row)
        sink.append(row)
        if bar is not None:
            bar.set_description(f"{row.algorithm} @ {size_label(row.size)}")
            bar.update(1)
        yield row
    if current:
        emit(block_footer(current))


def _header(topo: Topology, tdesc: str, model: str, source: str, bw: str) -> str:
    s = topo.summary()
    algbw = (
        "total bytes / N / time (FAST)"
        if bw == "fast"
        else "busiest rank's bytes / time (nccl-tests alltoallv_perf)"
    )
    return (
        f"# a2acc compare: {topo.name} ({topo.servers} x {topo.gpus_per_server} = {topo.nranks} GPUs; "
        f"{s.describe()})\n"
        f"# traffic: {tdesc}\n"
        f"# simulated, not measured on GPUs: {model}\n"
        f"#   parameters: {source}\n"
        f"# algbw = {algbw}; busbw = algbw * (N-1)/N (GB/s = 1e9 B/s); size and count as nccl-tests\n"
        f"# sched = the planner's time for one plan (us, wall clock of the plan phase on this CPU); "
        f"bound = lower bound on the time (us); stages = the planner's communication stages\n#"
    )
