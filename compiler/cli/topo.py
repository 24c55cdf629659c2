"""``a2acc topo show NAME|FILE [--servers N]``: print a topology's tier summary and links."""

from __future__ import annotations

import argparse
from collections import Counter

from a2acc.defaults import PRESETS


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("topo", help="inspect topologies and presets", description="Inspect topologies.")
    tsub = p.add_subparsers(dest="topo_cmd", metavar="ACTION")
    show = tsub.add_parser("show", help="print the tier summary of a preset or file")
    show.add_argument("spec", metavar="NAME|FILE", help=f"preset ({', '.join(PRESETS)}) or topology file")
    show.add_argument("--servers", "-n", type=int, default=None, help="scale a server preset to N servers")
    show.set_defaults(func=_show)
    ls = tsub.add_parser("list", help="list the shipped presets")
    ls.set_defaults(func=_list)


def _list(args: argparse.Namespace) -> int:
    from a2acc.model.topology import load_topology

    for name in PRESETS:
        t = load_topology(name)
        print(f"{name:15s} {t.summary().describe()}")
    return 0


def _show(args: argparse.Namespace) -> int:
    from a2acc.model.topology import load_topology

    t = load_topology(args.spec, args.servers)
    s = t.summary()
    print(f"topology   : {t.name}  ({t.source})")
    print(f"GPUs       : {t.nranks} = {t.servers} servers x {t.gpus_per_server}")
    print(f"tiers      : {s.describe()}")
    if t.intra is not None:
        print(f"intra      : {t.intra.kind}, {t.intra.bandwidth:g} GB/s, alpha {t.intra.latency:g} us")
    if t.inter is not None:
        i = t.inter
        print(
            f"inter      : {i.nics_per_server} NICs/server x {i.bandwidth:g} GB/s, alpha {i.latency:g} us, {i.wiring}"
        )
    if t.direct is not None:
        d = t.direct
        bws = sorted({float(e[2]) for e in d.edges}) or [d.bandwidth]  # parallel links summed, per edge
        bw = f"{bws[0]:g}" if len(bws) == 1 else f"{bws[0]:g} to {bws[-1]:g}"
        print(f"direct     : {d.kind} {dict(d.params)}, {len(d.edges)} directed edges of {bw} GB/s")
    print(f"memory     : {t.memory_bandwidth:g} GB/s (local copies)")
    print(
        f"GPU        : {t.gpu.describe() if t.gpu is not None else 'not given (targets use their defaults)'}"
    )
    kinds = Counter(t.link_kinds)
    print(
        "graph      : "
        + ", ".join(f"{k}={v}" for k, v in sorted(kinds.items()))
        + f" ({len(t.link_kinds)} links)"
    )
    return 0
