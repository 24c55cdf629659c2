"""The topology as flow arrays: nodes, directed edges with capacities (bytes/s), and each rank's node.

Every node of the topology graph is a flow node: GPUs, and on server presets also NVSwitches, NICs and network
switches (transit nodes: flow passes through them but only GPUs are ranks). Edge order is the topology's link
order, so flows, simulator link loads and reports line up.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import numpy.typing as npt

from a2acc.model.topology import Topology


@dataclass(frozen=True, eq=False)
class FlowNetwork:
    names: tuple[str, ...]
    tail: npt.NDArray[np.int64]
    head: npt.NDArray[np.int64]
    cap: npt.NDArray[np.float64]  # bytes per second
    rank_node: npt.NDArray[np.int64]  # node index of rank r

    @staticmethod
    def of(topo: Topology) -> FlowNetwork:
        g = topo.graph
        names = tuple(str(v) for v in g.nodes)
        idx = {v: i for i, v in enumerate(names)}
        links = topo.link_names
        tail = np.array([idx[u] for u, _v in links], dtype=np.int64)
        head = np.array([idx[v] for _u, v in links], dtype=np.int64)
        cap = np.array(topo.link_bandwidths, dtype=np.float64)
        rank_node = np.array([idx[f"g{r}"] for r in range(topo.nranks)], dtype=np.int64)
        return FlowNetwork(names, tail, head, cap, rank_node)

    @property
    def nnodes(self) -> int:
        return len(self.names)

    @property
    def nedges(self) -> int:
        return int(self.tail.shape[0])

    @cached_property
    def node_rank(self) -> npt.NDArray[np.int64]:
        """Rank of each node, -1 for transit nodes (switches, NICs)."""
        out = np.full(self.nnodes, -1, dtype=np.int64)
        out[self.rank_node] = np.arange(self.rank_node.shape[0])
        return out

    @cached_property
    def out_edges(self) -> list[list[int]]:
        """Edge indices leaving each node, in edge order."""
        out: list[list[int]] = [[] for _ in range(self.nnodes)]
        for e, u in enumerate(self.tail.tolist()):
            out[u].append(e)
        return out
