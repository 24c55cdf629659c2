"""Options shared by several subcommands (topology, traffic, output)."""

from __future__ import annotations

import argparse

import numpy as np
import numpy.typing as npt

from a2acc.topology import PRESETS, Topology, load_topology
from a2acc.traffic import load_matrix


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
    return load_matrix(args.traffic, expect_ranks=topo.nranks)
