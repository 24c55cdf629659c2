"""``A2ACC_*`` settings of the JIT path, validated at activation; an invalid setting is reported once (rank 0)
and keeps the stock collectives, never an exception in the job.

| variable | meaning | default |
|---|---|---|
| ``A2ACC_JIT`` | ``1`` arms the integration | off |
| ``A2ACC_TOPOLOGY`` | preset (``dgx-h100:4`` = 4 servers) or topology file | required |
| ``A2ACC_ALGORITHM`` | planner (``auto``: the fastest plan of those that apply) | ``fast`` (:data:`a2acc.defaults.DEFAULT_ALGORITHM`) |
| ``A2ACC_PLANNER_OPTS`` | planner options, ``KEY=VALUE,...`` (checked against the planner's options) | ``auto``: ``budget_s=0`` |
| ``A2ACC_EXECUTOR`` | what runs a plan (:data:`a2acc.runtime.executors.EXECUTORS`) | ``p2p`` |
| ``A2ACC_EXECUTOR_OPTS`` | executor options, ``KEY=VALUE,...`` (``p2p``: ``overlap=true``) | none |
| ``A2ACC_BACKEND`` | what a plan is lowered to and cached as: ``none`` or a registered target | by executor |
| ``A2ACC_BACKEND_OPTS`` | target options, ``KEY=VALUE,...`` (e.g. ``dialect=rccl``; checked) | by platform |
| ``A2ACC_BUCKETS`` | ``symmetric``: buckets in canonical form under the topology's symmetries; ``plain`` | ``symmetric`` |
| ``A2ACC_CACHE_DIR`` | plan cache directory | ``~/.cache/a2acc`` |
| ``A2ACC_EXCHANGE`` | ``adaptive``: once exchanges keep finding the bucket of the call one period back (1 to 64 calls), up to 8 calls in a row run that call's plan without the split-size exchange (each rank's own split sizes travel as they are, rows beyond the plan as residual); ``every``: an exchange per call. Ranks that disagree exchange on every call | ``adaptive`` |
| ``A2ACC_TUNE`` | ``measure``: each bucket's first calls alternate between the planner's plan and the direct plan, and the faster on the job's own fabric is kept (:mod:`a2acc.runtime.decide.tuning`); ``off``: the planner's plan always | ``measure`` |
| ``A2ACC_MISS`` | on a cache miss: ``stock`` (serve the call with the stock collective while the plan compiles in the background; with ``A2ACC_TUNE=measure`` the bucket's direct plan is made in that call, a few milliseconds, and serves from the next) or ``wait`` (compile in the call) | ``stock`` |
| ``A2ACC_MIN_BYTES`` | calls that move less per rank go to the stock collective untouched (no exchange) when they give no split sizes, else once the exchange shows it (and, with ``A2ACC_EXCHANGE=adaptive``, without it once the call repeats); ``K``/``M``/``G`` suffixes (1024-based); ``0``: every call through a2acc | ``DEFAULT_MIN_BYTES`` |
| ``A2ACC_LOG`` | ``debug``, ``info``, ``warning``, ``error`` | ``warning`` |

The executor and the backend are separate: ``p2p`` and ``reference`` run the Program itself and need no
lowering, but ``A2ACC_BACKEND=msccl-xml`` still lowers and caches XML so that ``a2acc cache export`` can hand
the next job an ``MSCCL_ALGO_DIR`` (the executors load algorithms only at communicator creation).

``A2ACC_ALGORITHM=auto`` runs with ``budget_s=0`` unless ``A2ACC_PLANNER_OPTS`` sets it: only the quick planners
(fast, direct, spreadout, hierarchical), whose choice does not depend on how long a search ran, so every rank
of a job (and every job sharing the cache) picks the same plan for a bucket and a background miss stays short.
A budget above 0 also runs the searching planners (syccl, mcf) while time is left; give it only with a shared,
warmed cache (``a2acc cache export`` from one compile), as ranks that plan with different time left may pick
differently and then serve the call with the stock collective.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass

from a2acc.defaults import DEFAULT_ALGORITHM

MISS_MODES = ("stock", "wait")
#: below this many bytes per rank a call goes to the stock collective: the smallest size at which a plan beat the
#: direct transfers by more than the JIT's host cost per served call on any multi-server preset
#: (benchmarks/jit_threshold.py; docs/runtime.md, "The size threshold")
DEFAULT_MIN_BYTES = 512 << 10
BUCKET_MODES = ("symmetric", "plain")
EXCHANGE_MODES = ("adaptive", "every")
TUNE_MODES = ("measure", "off")
LOG_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


@dataclass(frozen=True)
class JitSettings:
    algorithm: str = DEFAULT_ALGORITHM
    backend: str = "none"
    topology: str = ""
    cache_dir: str | None = None
    log_level: int = logging.WARNING
    executor: str = "p2p"
    planner_opts: tuple[tuple[str, str], ...] = ()
    backend_opts: tuple[tuple[str, str], ...] = ()
    miss: str = "stock"
    executor_opts: tuple[tuple[str, str], ...] = ()
    buckets: str = "symmetric"
    exchange: str = "adaptive"
    tune: str = "measure"
    min_bytes: int = DEFAULT_MIN_BYTES

    @property
    def target(self) -> str | None:
        return None if self.backend == "none" else self.backend

    @staticmethod
    def from_env(env: Mapping[str, str] | None = None) -> tuple[JitSettings | None, list[str]]:
        """Settings from the environment, or None plus the reasons when they are unusable."""
        e = os.environ if env is None else env
        problems: list[str] = []
        algorithm, executor, backend = _names(e, problems)
        opts = {
            var: _options(e, var, kind, name, problems)
            for var, kind, name in (
                ("A2ACC_PLANNER_OPTS", "planner", algorithm),
                ("A2ACC_BACKEND_OPTS", "backend", backend),
                ("A2ACC_EXECUTOR_OPTS", "executor", executor),
            )
        }
        if algorithm == "auto" and not any(k == "budget_s" for k, _ in opts["A2ACC_PLANNER_OPTS"]):
            opts["A2ACC_PLANNER_OPTS"] = (*opts["A2ACC_PLANNER_OPTS"], ("budget_s", "0"))
        topology = e.get("A2ACC_TOPOLOGY", "")
        if not topology:
            problems.append(
                "A2ACC_TOPOLOGY is not set: give a preset (e.g. dgx-h100:4 for 4 servers) or a topology file"
            )
        level_name = _choice(e, "A2ACC_LOG", "warning", tuple(LOG_LEVELS), problems)
        miss = _choice(e, "A2ACC_MISS", "stock", MISS_MODES, problems)
        buckets = _choice(e, "A2ACC_BUCKETS", "symmetric", BUCKET_MODES, problems)
        exchange = _choice(e, "A2ACC_EXCHANGE", "adaptive", EXCHANGE_MODES, problems)
        tune = _choice(e, "A2ACC_TUNE", "measure", TUNE_MODES, problems)
        min_bytes = _size(e, "A2ACC_MIN_BYTES", DEFAULT_MIN_BYTES, problems)
        if problems:
            return None, problems
        return (
            JitSettings(
                algorithm=algorithm,
                backend=backend,
                topology=topology,
                cache_dir=e.get("A2ACC_CACHE_DIR") or None,
                log_level=LOG_LEVELS[level_name],
                executor=executor,
                planner_opts=opts["A2ACC_PLANNER_OPTS"],
                backend_opts=opts["A2ACC_BACKEND_OPTS"],
                miss=miss,
                executor_opts=opts["A2ACC_EXECUTOR_OPTS"],
                buckets=buckets,
                exchange=exchange,
                tune=tune,
                min_bytes=min_bytes,
            ),
            [],
        )


def _choice(
    e: Mapping[str, str], var: str, default: str, allowed: tuple[str, ...], problems: list[str]
) -> str:
    value = (e.get(var, default) or default).lower()
    if value not in allowed:
        problems.append(f"{var}={value!r}: use one of {', '.join(allowed)}")
        return default
    return value


def _size(e: Mapping[str, str], var: str, default: int, problems: list[str]) -> int:
    from a2acc.errors import InputError
    from a2acc.model.units import parse_size

    text = (e.get(var) or "").strip()
    if not text:
        return default
    try:
        return parse_size(text, source=var, field=var)
    except InputError:
        problems.append(f"{var}={text!r}: give a size in bytes, e.g. 0, 65536 or 256K (K/M/G: 1024-based)")
        return default


def _names(e: Mapping[str, str], problems: list[str]) -> tuple[str, str, str]:
    """(planner, executor, backend), each checked against its registry."""
    from a2acc.backends import TARGETS
    from a2acc.planners import available
    from a2acc.runtime.executors import DEFAULT_EXECUTOR, EXECUTORS, info

    # names are matched without regard to case, as A2ACC_MISS, A2ACC_LOG and A2ACC_BUCKETS are
    algorithm = (e.get("A2ACC_ALGORITHM", DEFAULT_ALGORITHM) or DEFAULT_ALGORITHM).lower()
    known = {i.name for i in available()}
    if algorithm not in known:
        problems.append(f"A2ACC_ALGORITHM={algorithm!r} is not a planner ({', '.join(sorted(known))})")
    executor = (e.get("A2ACC_EXECUTOR", DEFAULT_EXECUTOR) or DEFAULT_EXECUTOR).lower()
    if executor not in EXECUTORS:
        problems.append(f"A2ACC_EXECUTOR={executor!r}: use one of {', '.join(EXECUTORS)}")
        executor = DEFAULT_EXECUTOR
    needs = info(executor).backend
    backend = (e.get("A2ACC_BACKEND") or needs).lower()
    if backend != "none" and backend not in TARGETS:
        problems.append(f"A2ACC_BACKEND={backend!r}: use none or one of {', '.join(sorted(TARGETS))}")
    elif needs != "none" and backend != needs:  # that executor runs only the files of its backend
        problems.append(
            f"A2ACC_BACKEND={backend!r} with A2ACC_EXECUTOR={executor}: it runs {needs} files only (leave "
            f"A2ACC_BACKEND unset or set it to {needs})"
        )
    return algorithm, executor, backend


def _options(
    e: Mapping[str, str], var: str, kind: str, name: str, problems: list[str]
) -> tuple[tuple[str, str], ...]:
    """``KEY=VALUE`` pairs of ``var``, checked against the options dataclass of the planner, backend or
    executor ``name`` (an unknown key or a bad value is a problem now, not one warning per bucket later)."""
    from a2acc.errors import InputError
    from a2acc.options import parse_options, split_pairs

    try:
        pairs = tuple(split_pairs([e.get(var, "")], where=var))
        cls = _options_type(kind, name)
        if cls is not None:
            parse_options(cls, dict(pairs), where=var)
        return pairs
    except InputError as exc:  # an options check names the CLI's flag; here the variable is what was set
        msg = str(exc)
        problems.append(var + msg[len("--opt") :] if msg.startswith("--opt") else msg)
        return ()


def _options_type(kind: str, name: str) -> type | None:
    """The options dataclass of a planner / backend / executor; None when ``name`` is unknown (that is
    reported by :func:`_names`)."""
    from a2acc.errors import InputError
    from a2acc.options import NoOptions

    try:
        if kind == "planner":
            from a2acc.planners import options_type

            return options_type(name)
        if kind == "backend":
            from a2acc.backends import get_target

            return NoOptions if name == "none" else get_target(name).Options
        from a2acc.runtime.executors import options_type as executor_options

        return executor_options(name)
    except (InputError, KeyError, ImportError, AttributeError):
        return None


def parse_topology_spec(spec: str) -> tuple[str, int | None]:
    """``NAME`` or ``NAME:SERVERS`` (a preset scaled to SERVERS) or a file path."""
    if ":" in spec and not os.path.exists(spec):
        name, _, servers = spec.rpartition(":")
        if servers.isdigit():
            return name, int(servers)
    return spec, None
