"""``A2ACC_*`` settings of the JIT path, validated; an invalid setting yields a warning, never an exception."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass

BACKENDS = ("reference", "msccl-xml", "mscclpp")
LOG_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


@dataclass(frozen=True)
class JitSettings:
    algorithm: str = "fast"
    backend: str = "reference"
    topology: str = ""
    cache_dir: str | None = None
    log_level: int = logging.WARNING

    @staticmethod
    def from_env(env: Mapping[str, str] | None = None) -> tuple[JitSettings | None, list[str]]:
        """Settings from the environment, or None plus the reasons when they are unusable."""
        from a2acc.planners import available

        e = os.environ if env is None else env
        problems: list[str] = []
        algorithm = e.get("A2ACC_ALGORITHM", "fast") or "fast"
        known = {i.name for i in available()}
        if algorithm not in known:
            problems.append(f"A2ACC_ALGORITHM={algorithm!r} is not a planner ({', '.join(sorted(known))})")
        backend = e.get("A2ACC_BACKEND", "reference") or "reference"
        if backend not in BACKENDS:
            problems.append(f"A2ACC_BACKEND={backend!r}: use one of {', '.join(BACKENDS)}")
        topology = e.get("A2ACC_TOPOLOGY", "")
        if not topology:
            problems.append(
                "A2ACC_TOPOLOGY is not set: give a preset (e.g. dgx-h100:4 for 4 servers) or a topology file"
            )
        level_name = (e.get("A2ACC_LOG", "warning") or "warning").lower()
        if level_name not in LOG_LEVELS:
            problems.append(f"A2ACC_LOG={level_name!r}: use one of {', '.join(LOG_LEVELS)}")
            level_name = "warning"
        cache_dir = e.get("A2ACC_CACHE_DIR") or None
        if problems:
            return None, problems
        return JitSettings(algorithm, backend, topology, cache_dir, LOG_LEVELS[level_name]), []


def parse_topology_spec(spec: str) -> tuple[str, int | None]:
    """``NAME`` or ``NAME:SERVERS`` (a preset scaled to SERVERS) or a file path."""
    if ":" in spec and not os.path.exists(spec):
        name, _, servers = spec.rpartition(":")
        if servers.isdigit():
            return name, int(servers)
    return spec, None
