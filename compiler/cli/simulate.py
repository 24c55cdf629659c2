"""``a2acc simulate PLAN --topology T``: completion time, algbw/busbw, busiest links."""

from __future__ import annotations

import argparse

import numpy as np

from a2acc.analysis.bounds import lower_bounds
from a2acc.analysis.incast import INCAST_MODELS
from a2acc.analysis.simulate import simulate
from a2acc.cli.common import add_topology_args, topology_from_args
from a2acc.errors import InputError
from a2acc.ir import load_program
from a2acc.ir.verify import check_program


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "simulate", help="simulate a plan on a topology (alpha-beta, max-min fair sharing, incast)"
    )
    p.add_argument("plan")
    add_topology_args(p)
    p.add_argument("--incast", default="mi300x-rocev2", choices=sorted(INCAST_MODELS))
    p.add_argument("--top", type=int, default=8, help="print the N busiest links")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    topo = topology_from_args(args)
    prog = load_program(args.plan)
    if prog.nranks != topo.nranks:
        raise InputError(args.plan, "nranks", prog.nranks, f"the topology has {topo.nranks} GPUs")
    check_program(prog, args.plan)
    res = simulate(prog, topo, incast=INCAST_MODELS[args.incast]())
    payload = prog.traffic if prog.traffic is not None else prog.counts * prog.unit_bytes
    bound = lower_bounds(payload, topo)
    print(
        f"time       : {res.time_s * 1e6:.2f} us  (lower bound {bound.seconds * 1e6:.2f} us, {bound.best.name}; "
        f"{100 * bound.seconds / res.time_s:.1f}% of bound)"
    )
    print(f"algbw      : {res.algbw_GBps:.2f} GB/s   busbw {res.busbw_GBps:.2f} GB/s")
    util = res.utilisation()
    order = np.argsort(-util)[: args.top]
    print("busiest links (average utilisation over the run):")
    for i in order:
        print(f"  {res.link_names[i]:28s} {100 * util[i]:5.1f}%  {res.link_busy_bytes[i] / 1e6:10.1f} MB")
    return 0
