"""``A2ACC_*`` settings of the JIT path, validated; an invalid setting yields a warning, never an exception.

| variable | meaning | default |
|---|---|---|
| ``A2ACC_JIT`` | ``1`` arms the integration | off |
| ``A2ACC_TOPOLOGY`` | preset (``dgx-h100:4`` = 4 servers) or topology file | required |
| ``A2ACC_ALGORITHM`` | planner | ``fast`` |
| ``A2ACC_PLANNER_OPTS`` | planner options, ``KEY=VALUE,...`` | none |
| ``A2ACC_EXECUTOR`` | what runs a plan: ``reference`` (torch.distributed p2p), ``msccl``, ``mscclpp`` | ``reference`` |
| ``A2ACC_BACKEND`` | what a plan is lowered to and cached as: ``none`` or a registered target | by executor |
| ``A2ACC_BACKEND_OPTS`` | target options, ``KEY=VALUE,...`` (e.g. ``dialect=rccl``) | by platform |
| ``A2ACC_CACHE_DIR`` | plan cache directory | ``~/.cache/a2acc`` |
| ``A2ACC_MISS`` | on a cache miss: ``stock`` (serve the call with the stock collective while the plan compiles in the background) or ``wait`` (compile in the call) | ``stock`` |
| ``A2ACC_LOG`` | ``debug``, ``info``, ``warning``, ``error`` | ``warning`` |

The executor and the backend are separate: the ``reference`` executor runs the Program itself and needs no
lowering, but ``A2ACC_BACKEND=msccl-xml`` still lowers and caches XML so that ``a2acc cache export`` can hand
the next job an ``MSCCL_ALGO_DIR`` (the executors load algorithms only at communicator creation).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass

EXECUTORS = ("reference", "msccl", "mscclpp")
MISS_MODES = ("stock", "wait")
# the backend each executor needs when A2ACC_BACKEND is not set
DEFAULT_BACKEND = {"reference": "none", "msccl": "msccl-xml", "mscclpp": "mscclpp-json"}
LOG_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


@dataclass(frozen=True)
class JitSettings:
    algorithm: str = "fast"
    backend: str = "none"
    topology: str = ""
    cache_dir: str | None = None
    log_level: int = logging.WARNING
    executor: str = "reference"
    planner_opts: tuple[tuple[str, str], ...] = ()
    backend_opts: tuple[tuple[str, str], ...] = ()
    miss: str = "stock"

    @property
    def target(self) -> str | None:
        return None if self.backend == "none" else self.backend

    @staticmethod
    def from_env(env: Mapping[str, str] | None = None) -> tuple[JitSettings | None, list[str]]:
        """Settings from the environment, or None plus the reasons when they are unusable."""
        from a2acc.backends import TARGETS
        from a2acc.errors import InputError
        from a2acc.options import split_pairs
        from a2acc.planners import available

        e = os.environ if env is None else env
        problems: list[str] = []
        algorithm = e.get("A2ACC_ALGORITHM", "fast") or "fast"
        known = {i.name for i in available()}
        if algorithm not in known:
            problems.append(f"A2ACC_ALGORITHM={algorithm!r} is not a planner ({', '.join(sorted(known))})")
        executor = e.get("A2ACC_EXECUTOR", "reference") or "reference"
        if executor not in EXECUTORS:
            problems.append(f"A2ACC_EXECUTOR={executor!r}: use one of {', '.join(EXECUTORS)}")
            executor = "reference"
        backend = e.get("A2ACC_BACKEND") or DEFAULT_BACKEND[executor]
        if backend != "none" and backend not in TARGETS:
            problems.append(f"A2ACC_BACKEND={backend!r}: use none or one of {', '.join(sorted(TARGETS))}")
        opts: list[tuple[tuple[str, str], ...]] = []
        for var in ("A2ACC_PLANNER_OPTS", "A2ACC_BACKEND_OPTS"):
            try:
                opts.append(tuple(split_pairs([e.get(var, "")], where=var)))
            except InputError as exc:
                problems.append(str(exc))
                opts.append(())
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
        miss = (e.get("A2ACC_MISS", "stock") or "stock").lower()
        if miss not in MISS_MODES:
            problems.append(f"A2ACC_MISS={miss!r}: use one of {', '.join(MISS_MODES)}")
        if problems:
            return None, problems
        return (
            JitSettings(
                algorithm,
                backend,
                topology,
                cache_dir,
                LOG_LEVELS[level_name],
                executor,
                opts[0],
                opts[1],
                miss,
            ),
            [],
        )


def parse_topology_spec(spec: str) -> tuple[str, int | None]:
    """``NAME`` or ``NAME:SERVERS`` (a preset scaled to SERVERS) or a file path."""
    if ":" in spec and not os.path.exists(spec):
        name, _, servers = spec.rpartition(":")
        if servers.isdigit():
            return name, int(servers)
    return spec, None
