"""Counters of the JIT engine of one process (``a2acc.runtime.stats()`` returns them as a dict)."""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

PHASES = ("exchange", "decide", "pack", "start", "wait", "tail")


@dataclass
class EngineStats:
    """``calls`` reaching the engine; ``handled`` by a2acc plans (``by_executor`` says which ran them,
    ``by_algorithm`` which planner made them: the configured one, or ``direct`` where ``A2ACC_TUNE=measure``
    measured it faster); ``tuned`` (buckets whose measurement kept the planner's plan, ``plan``, or the direct
    one, ``direct``; ``plan`` also counts buckets not measured: the same transfers, a direct plan that failed);
    ``stock_while_compiling`` (served by the stock call while a plan compiled in the background);
    ``fallbacks`` by reason; ``bucket_hits``; ``cache`` (plans taken from memory, disk, or compiled);
    ``payload_bytes``, ``padding_bytes``, ``residual_bytes`` of handled calls; ``sent_bytes`` (bytes this rank
    sent through the plans' messages: relays and the padding of arena messages included, direct messages and the
    residual at their actual size), ``p2p_sends``/``p2p_recvs`` (messages
    posted) and ``p2p_steps`` (transfer steps) of the ``p2p`` executor; ``host_syncs`` (device-to-host copies
    the engine made: one per exchanged call on a GPU group, none on a CPU group); ``exchanges_skipped`` (handled
    calls that needed no exchange: the matrix was announced and its plan already agreed, or, of them,
    ``predicted``: ``A2ACC_EXCHANGE=adaptive`` ran the plan of the call one period back); ``phase_s`` (seconds per phase
    of handled calls, see the field); ``cpu_s`` (CPU time of the handled calls in the calling thread: the
    engine's and executor's Python and copies, no waiting);
    ``overhead_us_median``/``overhead_us_mean`` (the hook's decision time per call, exchanges and data
    movement excluded); ``last`` (what the most recent call did)."""

    calls: int = 0
    handled: int = 0
    stock_while_compiling: int = 0
    fallbacks: Counter[str] = field(default_factory=Counter)
    by_executor: Counter[str] = field(default_factory=Counter)
    by_algorithm: Counter[str] = field(default_factory=Counter)
    tuned: Counter[str] = field(default_factory=Counter)
    bucket_hits: int = 0
    cache: dict[str, int] = field(default_factory=lambda: {"memory": 0, "disk": 0, "compiled": 0})
    payload_bytes: int = 0
    padding_bytes: int = 0
    residual_bytes: int = 0
    sent_bytes: int = 0
    p2p_sends: int = 0
    p2p_recvs: int = 0
    p2p_steps: int = 0
    host_syncs: int = 0
    exchanges_skipped: int = 0
    predicted: int = 0
    # seconds spent per phase by handled calls: exchange (the split-size collective), decide (bucket lookup and
    # plan state), pack, start (copies and posts of all steps but the last), wait (blocked in Work.wait inside
    # the executor), tail (the last step and the unpack, waits included)
    # CPU time of the calling thread (and of the async tail's thread) per handled call: Python and in-thread
    # copies, nothing spent waiting (time.thread_time, so a busy machine does not inflate it)
    cpu_s: float = 0.0
    phase_s: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    overhead_s: deque[float] = field(default_factory=lambda: deque(maxlen=10_000))
    last: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        over = np.array(self.overhead_s) if self.overhead_s else np.zeros(1)
        return {
            "calls": self.calls,
            "handled": self.handled,
            "stock_while_compiling": self.stock_while_compiling,
            "fallbacks": dict(self.fallbacks),
            "by_executor": dict(self.by_executor),
            "by_algorithm": dict(self.by_algorithm),
            "tuned": dict(self.tuned),
            "bucket_hits": self.bucket_hits,
            "cache": dict(self.cache),
            "payload_bytes": self.payload_bytes,
            "padding_bytes": self.padding_bytes,
            "residual_bytes": self.residual_bytes,
            "sent_bytes": self.sent_bytes,
            "p2p_sends": self.p2p_sends,
            "p2p_recvs": self.p2p_recvs,
            "p2p_steps": self.p2p_steps,
            "host_syncs": self.host_syncs,
            "exchanges_skipped": self.exchanges_skipped,
            "predicted": self.predicted,
            "phase_s": dict(self.phase_s),
            "cpu_s": self.cpu_s,
            "overhead_us_median": float(np.median(over) * 1e6),
            "overhead_us_mean": float(np.mean(over) * 1e6),
            "last": dict(self.last),
        }

    def add_cpu(self, seconds: float) -> None:
        self.cpu_s += seconds
        if self.last.get("served"):
            self.last["cpu_ms"] = self.last.get("cpu_ms", 0.0) + seconds * 1e3

    def fallback(self, reason: str) -> None:
        self.fallbacks[reason] += 1
        self.last = {"served": False, "why": reason}
