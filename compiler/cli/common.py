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
