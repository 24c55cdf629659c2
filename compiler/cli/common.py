"""Options shared by several subcommands (topology, traffic, output)."""

from __future__ import annotations

import argparse

from a2acc.defaults import PRESETS

# types only: the parser is built without numpy; a subcommand imports what it runs when it runs
TYPE_CHECKING = False
if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from a2acc.model.topology import Topology


def seed(text: str) -> int:
    """A generator seed: a whole number >= 0 (numpy's generators refuse negative ones)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid seed '{text}': a whole number >= 0") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"invalid seed '{text}': a whole number >= 0")
    return value


def add_topology_args(p: argparse.ArgumentParser, required: bool = True) -> None:
    p.add_argument(
        "--topology",
        "-t",
        required=required,
        metavar="NAME|FILE",
        help=f"preset ({', '.join(PRESETS)}) or a YAML/JSON topology file",
    )
    p.add_argument(
        "--servers", "-n", type=int, default=None, metavar="N", help="scale a server preset to N servers"
    )


def topology_from_args(args: argparse.Namespace) -> Topology:
    from a2acc.model.topology import load_topology

    return load_topology(args.topology, args.servers)


def settle_heap(args: argparse.Namespace) -> None:
    """Move every object alive now (what the command has imported and read) out of the garbage collector's
    full collections (``gc.freeze``), before a command plans. Planning allocates millions of short-lived
    objects, and every full collection would walk numpy's, HiGHS's and a2acc's module objects again: ~8-10 % of
    ``compile -a auto``'s CPU at dgx-h100 4x8 (``benchmarks/cli_time.py``). Only in a process whose own command
    line this is (the console script, ``python -m a2acc``: ``args.own_process``), which exits after it; a
    caller of :func:`a2acc.cli.main` with arguments (a test, a notebook) keeps its collector as it was."""
    if getattr(args, "own_process", False):
        import gc

        gc.freeze()


def add_traffic_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--traffic",
        "-m",
        required=True,
        metavar="FILE",
        help="traffic matrix (.npy, .csv, .json, or nccl-tests alltoallv text), bytes, row = sender",
    )


def traffic_from_args(args: argparse.Namespace, topo: Topology) -> npt.NDArray[np.int64]:
    from a2acc.model.traffic import load_matrix

    return load_matrix(args.traffic, expect_ranks=topo.nranks)


OPT_HELP = (
    "planner or backend option KEY=VALUE (repeatable, or comma-separated); each key goes to whichever of the "
    "planner and the backend declares it (planner.KEY= / backend.KEY= to choose); --opt help lists them"
)


def add_opt_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--opt", "-O", action="append", default=[], metavar="KEY=VALUE", help=OPT_HELP)


def add_time_limit_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--time-limit",
        type=float,
        default=None,
        metavar="S",
        help="seconds > 0 a searching planner may spend: per LP solve for mcf, the whole synthesis for syccl; "
        "the best plan found so far is returned and marked not proven best (the planners' own "
        "--opt time_limit=0 means no limit)",
    )


def add_timings_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--timings", action="store_true", help="print the time of each pipeline phase")


def resolve_opts(
    args: argparse.Namespace, algorithm: str, backend: str | None
) -> tuple[dict[str, str], dict[str, str]] | None:
    """Route ``--opt`` pairs to the planner and the backend; None after printing ``--opt help``."""
    from a2acc.backends import get_target
    from a2acc.options import describe, route, split_pairs
    from a2acc.planners import options_type

    pcls = options_type(algorithm)
    tcls = get_target(backend).Options if backend is not None else None
    if "help" in args.opt:
        lines = describe(pcls, f"options of planner '{algorithm}'")
        if tcls is not None:
            lines += describe(tcls, f"options of backend '{backend}'")
        print("\n".join(lines))
        return None
    pairs = split_pairs(args.opt)
    limit = getattr(args, "time_limit", None)
    if limit is not None:
        import dataclasses

        from a2acc.errors import InputError

        if "time_limit" not in {f.name for f in dataclasses.fields(pcls)}:
            raise InputError(
                "", "--time-limit", limit, f"planner '{algorithm}' has no time limit (it solves no LP)"
            )
        if not 0 < limit < 1e7:  # the planners' own bound on time_limit, said here under the flag's name
            raise InputError("", "--time-limit", limit, "seconds, more than 0 and less than 1e7")
        given = [k for k, _v in pairs if k in ("time_limit", "planner.time_limit")]
        if given:  # one of the two would silently win
            raise InputError(
                "", "--time-limit", limit, f"also given as --opt {given[0]}=...; give the time limit once"
            )
        pairs.append(("planner.time_limit", str(limit)))
    return route(pairs, pcls, tcls)


def add_moe_args(p: argparse.ArgumentParser) -> None:
    """The MoE shape shared by the ``moe`` generator and the workloads w0-w7: tokens, experts, top-k, bytes per
    token."""
    p.add_argument(
        "--tokens", type=int, default=4096, help="moe, w0-w7: tokens per GPU (moe: ignored with --size)"
    )
    p.add_argument("--experts", type=int, default=0, help="moe, w0-w7: experts (default 2 per GPU)")
    p.add_argument("--top-k", type=int, default=2, help="moe, w0-w7: distinct experts per token")
    p.add_argument("--hidden", type=int, default=4096, help="moe, w0-w7: hidden size")
    p.add_argument("--dtype-bytes", type=int, default=2, help="moe, w0-w7: bytes per element (2 = bf16)")


def add_workload_args(p: argparse.ArgumentParser) -> None:
    """Megatron-LM's token-imbalance workloads w0-w7 (:mod:`a2acc.model.workloads`): step, bytes per token, EP
    layout, the hot set and the shapes of w4, w6, w7 (with :func:`add_moe_args` for the MoE shape)."""
    from a2acc.defaults import EP_GROUPS as GROUPS
    from a2acc.defaults import EP_PLACEMENTS as PLACEMENTS

    g = p.add_argument_group(
        "workloads w0-w7",
        "Megatron-LM's token-imbalance workloads (docs/workloads.md); also --seed and the moe shape",
    )
    g.add_argument(
        "--step", type=int, default=0, help="the step of the workload's sequence (w6 rotates, w7 bursts)"
    )
    g.add_argument(
        "--bytes-per-token",
        type=int,
        default=None,
        metavar="B",
        help="bytes of one routed token (default hidden x dtype-bytes; --size sets it instead)",
    )
    g.add_argument("--ep", type=int, default=0, help="GPUs per EP group, a divisor of the GPU count (0: all)")
    g.add_argument(
        "--ep-groups",
        choices=GROUPS,
        default="block",
        help="EP groups of consecutive GPUs (block) or one GPU per block of GPUs/ep (strided: across servers)",
    )
    g.add_argument(
        "--placement",
        choices=PLACEMENTS,
        default="contiguous",
        help="experts on EP ranks in blocks (contiguous, Megatron's) or dealt round robin",
    )
    g.add_argument("--hot-experts", type=int, default=0, help="hot set size (default max(top-k, experts/4))")
    g.add_argument("--hot-share", type=float, default=0.75, help="w1, w2, w3, w6: share of hot tokens")
    g.add_argument("--period", type=int, default=3, help="w6: steps before the hot block moves")
    g.add_argument("--burst-every", type=int, default=4, help="w7: steps per cycle, the last one a burst")
    g.add_argument("--burst-share", type=float, default=0.5, help="w7: share of hot tokens in a burst step")
    g.add_argument("--ragged", type=float, default=0.5, help="w4: GPUs hold (1 +- ragged) x tokens")


def workload_from_args(
    args: argparse.Namespace, kind: str, gpus: int, size: int | None, align: int = 16
) -> tuple[npt.NDArray[np.int64], str]:
    """Workload ``kind`` (w0-w7) as the arguments set it, on ``gpus`` GPUs: its byte matrix and a one-line
    description. ``size`` (bytes per GPU) sets the bytes per token instead of ``--bytes-per-token``/hidden x
    dtype-bytes."""
    from a2acc.errors import InputError
    from a2acc.model.workloads import (
        EpLayout,
        Workload,
        bytes_per_token_for,
        describe,
        traffic_matrix,
    )

    w = Workload(
        kind,
        experts=args.experts or 2 * gpus,
        top_k=args.top_k,
        tokens=args.tokens,
        seed=args.seed,
        hot_experts=args.hot_experts,
        hot_share=args.hot_share,
        period=args.period,
        burst_every=args.burst_every,
        burst_share=args.burst_share,
        ragged=args.ragged,
    )
    layout = EpLayout(gpus, args.ep, args.ep_groups, args.placement)
    if size is not None:
        bpt = bytes_per_token_for(w, size, align)
    elif args.bytes_per_token is not None:
        bpt = args.bytes_per_token
    else:
        for name, v in (("--hidden", args.hidden), ("--dtype-bytes", args.dtype_bytes)):
            if v < 1:
                raise InputError("", name, v, "must be >= 1")
        bpt = args.hidden * args.dtype_bytes
    if args.step < 0:
        raise InputError("", "--step", args.step, "a step number >= 0")
    m = traffic_matrix(w, args.step, layout, bpt)
    return m, describe(w, args.step, layout, bpt)
