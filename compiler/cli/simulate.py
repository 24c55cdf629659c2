"""``a2acc simulate PLAN --topology T``: completion time, algbw/busbw, busiest links, under a calibrated model."""

from __future__ import annotations

import argparse
import sys

from a2acc.cli.common import add_topology_args, topology_from_args
from a2acc.errors import InputError

TYPE_CHECKING = False  # what a subcommand runs is imported when it runs: the parser is built without numpy
if TYPE_CHECKING:
    from a2acc.analysis.model import SimModel
    from a2acc.model.topology import Topology


def add_model_args(p: argparse.ArgumentParser) -> None:
    """``--model FILE`` and ``--incast on|off``, shared by simulate and compare."""
    p.add_argument(
        "--model",
        default=None,
        metavar="PARAMS.yaml",
        help="simulator parameters written by 'a2acc calibrate -o' (default: the topology's transport "
        "defaults; docs/simulator.md)",
    )
    p.add_argument(
        "--incast",
        default=None,
        choices=("on", "off"),
        help="the model's incast loss on scale-out receive ports (default on; off: ideal fair sharing; "
        "lossless transports have none)",
    )


def model_from_args(args: argparse.Namespace, topo: Topology) -> SimModel:
    """The model ``--model``/``--incast`` ask for; a note on stderr where it does not match the topology."""
    from a2acc.analysis.incast import IncastModel
    from a2acc.analysis.model import default_model, load_model

    model = load_model(args.model) if args.model else default_model(topo)
    ours = (topo.inter.transport if topo.inter is not None else "") or "ideal"
    if args.model and model.transport != ours:
        print(
            f"a2acc: note: --model {args.model} describes a {model.transport} fabric; {topo.name}'s transport is "
            f"{ours}: its parameters are used as given",
            file=sys.stderr,
        )
    if args.incast == "off":
        model = model.with_incast(IncastModel.off())
    elif args.incast == "on" and not model.incast.enabled:
        print(
            f"a2acc: note: --incast on: the {model.transport} model has no incast loss (lossless or ideal fabric)",
            file=sys.stderr,
        )
    return model


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "simulate",
        help="simulate a plan on a topology (fluid model: per-message and per-stage costs, fair sharing, incast)",
        description="Simulate a plan's DAG on a topology: alpha per message, the rendezvous cost of stages, "
        "max-min fair sharing of links and the incast model of the topology's transport (docs/simulator.md).",
    )
    p.add_argument("plan", help="plan JSON written by 'a2acc plan -o' (built for this topology)")
    add_topology_args(p)
    add_model_args(p)
    p.add_argument(
        "--engine",
        default="fast",
        choices=("fast", "reference"),
        help="fast (default) or the event-driven reference engine (same model, slower)",
    )
    p.add_argument("--top", type=int, default=8, help="print the N busiest links")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    import numpy as np

    from a2acc.analysis.bounds import lower_bounds
    from a2acc.analysis.fastsim import simulate_fast
    from a2acc.analysis.simulate import simulate
    from a2acc.ir import load_program
    from a2acc.ir.verify import check_program

    topo = topology_from_args(args)
    prog = load_program(args.plan)
    if prog.nranks != topo.nranks:
        raise InputError(args.plan, "nranks", prog.nranks, f"the topology has {topo.nranks} GPUs")
    if args.top < 0:
        raise InputError("", "--top", args.top, "a count >= 0")
    check_program(prog, args.plan)
    model = model_from_args(args, topo)
    if args.engine == "fast":
        res = simulate_fast(prog, topo, model=model)
    else:
        res = simulate(prog, topo, model=model, record_timeline=False)
    payload = prog.traffic if prog.traffic is not None else prog.counts * prog.unit_bytes
    bound = lower_bounds(payload, topo)
    print(f"simulated  : {model.describe()} ({args.engine} engine)")
    print(f"parameters : {model.source}")
    print(
        f"time       : {res.time_s * 1e6:.2f} us  (lower bound {bound.seconds * 1e6:.2f} us, {bound.best.name}; "
        + (f"{100 * bound.seconds / res.time_s:.1f}% of bound)" if res.time_s > 0 else "nothing to move)")
    )
    if res.timeout_probability > 0:
        print(
            f"timeouts   : probability {res.timeout_probability:.2f} of a retransmission timeout per run "
            f"(fluid makespan {res.makespan_s * 1e6:.2f} us; the time above is the expectation)"
        )
    if res.time_s > 0:
        print(f"algbw      : {res.algbw_GBps:.2f} GB/s   busbw {res.busbw_GBps:.2f} GB/s  (GB/s = 1e9 B/s)")
    util = res.utilisation()
    order = np.argsort(-util)[: args.top]
    if len(order):
        print("busiest links (average utilisation over the run):")
    for i in order:
        print(f"  {res.link_names[i]:28s} {100 * util[i]:5.1f}%  {res.link_busy_bytes[i] / 2**20:10.1f} MiB")
    return 0
