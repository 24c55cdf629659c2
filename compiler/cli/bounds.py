"""``a2acc bounds --topology T --traffic M``: every lower-bound term and which one binds."""

from __future__ import annotations

import argparse

from a2acc.cli.common import add_topology_args, add_traffic_arg, topology_from_args, traffic_from_args


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "bounds",
        help="lower bounds on completion time (FLASH Thm 1, cuts, MCF LP) and the SC25 PMBS hierarchical peak model",
    )
    add_topology_args(p)
    add_traffic_arg(p)
    p.add_argument(
        "--mcf",
        action="store_true",
        help="also solve the max-concurrent-flow LP with HiGHS (always on for direct-connect graphs; large graphs "
        "use the decomposition's relaxed master LP, still a lower bound)",
    )
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from a2acc.analysis.bounds import lower_bounds

    topo = topology_from_args(args)
    m = traffic_from_args(args, topo)
    rep = lower_bounds(m, topo, mcf=args.mcf or topo.direct is not None)
    best = rep.best
    print(f"{'term':12s} {'time (us)':>12s} {'algbw (GB/s)':>13s}  kind    detail")
    for t in rep.terms:
        bw = rep.total_bytes / rep.nranks / t.seconds / 1e9 if t.seconds > 0 else float("inf")
        kind = "bound" if t.valid else "model"
        mark = "  <- binds" if t is best else ""
        print(f"{t.name:12s} {t.seconds * 1e6:12.2f} {bw:13.2f}  {kind:6s}  {t.detail}{mark}")
    print(
        f"lower bound: {best.seconds * 1e6:.2f} us ({best.name}); best possible algbw {rep.algbw_GBps:.2f} GB/s"
    )
    return 0
