"""``a2acc bounds --topology T --traffic M``: every lower-bound term and which one binds."""

from __future__ import annotations

import argparse
import sys

from a2acc.cli.common import add_topology_args, add_traffic_arg, topology_from_args, traffic_from_args

#: direct-connect graphs get the MCF term without --mcf while its LP has at most this many variables (ranks that
#: send x directed links): an 8 x 8 torus has 16,384 (about 3 s of CPU), a 16 x 16 torus 262,144 (minutes of
#: CPU), a 32 x 32 torus (solved at scale) took 165 s of CPU and 3.3 GiB
AUTO_MCF_VARIABLES = 20_000


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "bounds",
        help="lower bounds on completion time (FLASH Thm 1, cuts, MCF LP) and the SC25 PMBS hierarchical peak model",
        description="Lower bounds on the all-to-all's completion time and which one binds. The max-concurrent-"
        "flow (MCF) LP term is solved with --mcf; on direct-connect graphs it is on by default while the LP has "
        f"at most {AUTO_MCF_VARIABLES:,} variables (ranks that send x directed links: an 8 x 8 torus); larger "
        "ones take minutes of CPU and GiBs, so they are solved only with --mcf, which says so on standard "
        "error before it starts.",
    )
    add_topology_args(p)
    add_traffic_arg(p)
    p.add_argument(
        "--mcf",
        action="store_true",
        help="also solve the max-concurrent-flow LP with HiGHS (on by default for direct-connect graphs up to "
        f"{AUTO_MCF_VARIABLES:,} LP variables; large graphs use the decomposition's relaxed master LP, still a "
        "lower bound)",
    )
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from a2acc.analysis.bounds import lower_bounds, mcf_variables

    topo = topology_from_args(args)
    m = traffic_from_args(args, topo)
    size = mcf_variables(m, topo) if args.mcf or topo.direct is not None else 0
    auto = topo.direct is not None and size <= AUTO_MCF_VARIABLES
    if args.mcf and size > AUTO_MCF_VARIABLES:
        print(
            f"a2acc: bounds: solving the max-concurrent-flow LP ({size:,} variables: ranks that send x "
            f"{len(topo.link_names):,} directed links); an LP this large can take minutes of CPU and GiBs of "
            "memory (Ctrl-C stops it)",
            file=sys.stderr,
            flush=True,
        )
    rep = lower_bounds(m, topo, mcf=args.mcf or auto)
    best = rep.best
    print(f"{'term':12s} {'time (us)':>12s} {'algbw (GB/s)':>13s}  kind    detail")
    for t in rep.terms:
        bw = rep.total_bytes / rep.nranks / t.seconds / 1e9 if t.seconds > 0 else float("inf")
        kind = "bound" if t.valid else "model"
        mark = "  <- binds" if t is best else ""
        print(f"{t.name:12s} {t.seconds * 1e6:12.2f} {bw:13.2f}  {kind:6s}  {t.detail}{mark}")
    if topo.direct is not None and not (args.mcf or auto):
        print(
            f"mcf          not solved: its LP has {size:,} variables, more than the {AUTO_MCF_VARIABLES:,} solved "
            "by default (a 16 x 16 torus's 262,144 take minutes of CPU); --mcf solves it"
        )
    print(
        f"lower bound: {best.seconds * 1e6:.2f} us ({best.name}); best possible algbw {rep.algbw_GBps:.2f} GB/s"
    )
    return 0
