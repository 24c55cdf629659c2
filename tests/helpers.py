"""Small topologies for exact-arithmetic tests (alpha = 0, round bandwidths)."""

from __future__ import annotations

from typing import Any

from a2acc.model.topology import Topology, parse_topology


def tiered(
    servers: int,
    gpus: int,
    *,
    fabric: str = "switch",
    intra_bw: float = 1000.0,
    nic_bw: float = 1.0,
    latency: float = 0.0,
    wiring: str = "rail_optimized",
    links: list[list[Any]] | None = None,
) -> Topology:
    intra: dict[str, Any] = {"fabric": fabric, "bandwidth": intra_bw, "latency": latency}
    if links is not None:
        intra["links"] = links
    data: dict[str, Any] = {
        "version": 1,
        "name": f"test-{servers}x{gpus}",
        "servers": servers,
        "gpus_per_server": gpus,
        "memory_bandwidth": 1e6,
        "intra": intra,
    }
    if servers > 1:
        data["inter"] = {"nics_per_server": gpus, "bandwidth": nic_bw, "latency": latency, "wiring": wiring}
    return parse_topology(data, "test")
