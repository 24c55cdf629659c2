"""Counters of the JIT engine of one process (``a2acc.runtime.stats()`` returns them as a dict).

Everything counted per call is a plain int bumped where it happens; what a call *moved* (collectives, messages,
bytes) is counted by the posting layer at the moment it hands work to torch.distributed
(:class:`a2acc.runtime.launch.post.Posted`), never derived from the plan.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from a2acc.runtime.launch.post import Posted


@dataclass
class EngineStats:
    """``calls`` reaching the engine; ``handled`` by a2acc plans (``by_executor`` says which ran them,
    ``by_algorithm`` which planner made them: the configured one, or ``direct`` where ``A2ACC_TUNE=measure``
    measured it faster); ``tuned`` (buckets whose measurement kept the planner's plan, ``plan``, or the direct
    one, ``direct``; ``plan`` also counts buckets not measured: the same transfers, a direct plan that failed);
    ``stock_while_compiling`` (served by the stock call while a plan compiled in the background); ``small``
    (calls below ``A2ACC_MIN_BYTES`` the stock call served by decision); ``fallbacks`` by reason;
    ``bucket_hits``; ``cache`` (plans taken from memory, disk, or compiled); ``payload_bytes``,
    ``padding_bytes``, ``residual_bytes`` of handled calls; what the plans posted to torch.distributed, counted
    when posted: ``collectives`` (``all_to_all_single`` and ``batch_isend_irecv`` calls), ``p2p_sends`` /
    ``p2p_recvs`` (messages: non-zero sizes of a collective, ops of a batch), ``sent_bytes`` / ``recv_bytes``;
    ``host_syncs`` (waits of the host for a device: one per exchanged call on a GPU group, none on a CPU group,
    plus any wait for a pinned staging slot); ``exchanges_skipped`` (handled calls that needed no exchange: the
    matrix was announced and its plan already agreed, or, of them, ``predicted``: ``A2ACC_EXCHANGE=adaptive``
    ran the plan of the call one period back); ``captured`` (calls made under CUDA-graph capture that the
    group's capacity binding served, :func:`a2acc.runtime.capture`); ``stale`` (calls served without an exchange
    on which this rank's rows no longer fitted the plan's layout, so some went as residual: the prediction or
    announcement was stale); ``plan_seconds`` (per plan that served a call,
    the time its loading or compiling took in the background, in the order they first served); ``overhead_us_median``/``overhead_us_mean`` (decision time of
    exchanged calls: the exchange, bucket and plan state); ``last`` (what the most recent call did, with what it
    posted)."""

    calls: int = 0
    handled: int = 0
    stock_while_compiling: int = 0
    small: int = 0
    fallbacks: Counter[str] = field(default_factory=Counter)
    by_executor: Counter[str] = field(default_factory=Counter)
    by_algorithm: Counter[str] = field(default_factory=Counter)
    tuned: Counter[str] = field(default_factory=Counter)
    bucket_hits: int = 0
    cache: Counter[str] = field(default_factory=lambda: Counter({"memory": 0, "disk": 0, "compiled": 0}))
    payload_bytes: int = 0
    padding_bytes: int = 0
    residual_bytes: int = 0
    host_syncs: int = 0
    exchanges_skipped: int = 0
    predicted: int = 0
    captured: int = 0
    stale: int = 0
    plan_seconds: list[float] = field(default_factory=list)
    posted: Posted = field(default_factory=Posted)
    overhead_s: deque[float] = field(default_factory=lambda: deque(maxlen=10_000))
    # the most recent call: served or not, why not, and for a served one what ran it and what it posted
    _last: tuple[Any, ...] = ()
    _last_why: str = ""

    def served(self, executor: str, plan: Any, source: str, hit: bool, before: tuple[int, ...]) -> None:
        self._last = (executor, plan, source, hit, before, self.posted.snapshot())
        self._last_why = ""

    def fallback(self, reason: str) -> None:
        self.fallbacks[reason] += 1
        self._last, self._last_why = (), reason

    @property
    def last(self) -> dict[str, Any]:
        if not self._last:
            return {"served": False, "why": self._last_why} if self._last_why else {}
        executor, plan, source, hit, before, after = self._last
        d = [b - a for a, b in zip(before, after)]
        return {
            "served": True,
            "executor": executor,
            "algorithm": plan.algorithm,
            "key": plan.key,
            "source": source,
            "hit": hit,
            "collectives": d[0],
            "sends": d[1],
            "recvs": d[2],
            "sent_bytes": d[3],
            "recv_bytes": d[4],
        }

    @last.setter
    def last(self, value: dict[str, Any]) -> None:
        self._last, self._last_why = (), str(value.get("why", ""))

    def as_dict(self) -> dict[str, Any]:
        over = np.array(self.overhead_s) if self.overhead_s else np.zeros(1)
        p = self.posted
        return {
            "calls": self.calls,
            "handled": self.handled,
            "stock_while_compiling": self.stock_while_compiling,
            "small": self.small,
            "fallbacks": dict(self.fallbacks),
            "by_executor": dict(self.by_executor),
            "by_algorithm": dict(self.by_algorithm),
            "tuned": dict(self.tuned),
            "bucket_hits": self.bucket_hits,
            "cache": dict(self.cache),
            "payload_bytes": self.payload_bytes,
            "padding_bytes": self.padding_bytes,
            "residual_bytes": self.residual_bytes,
            "collectives": p.collectives,
            "sent_bytes": p.sent_bytes,
            "recv_bytes": p.recv_bytes,
            "p2p_sends": p.sends,
            "p2p_recvs": p.recvs,
            "host_syncs": self.host_syncs + p.host_waits,
            "exchanges_skipped": self.exchanges_skipped,
            "predicted": self.predicted,
            "captured": self.captured,
            "stale": self.stale,
            "plan_seconds": list(self.plan_seconds),
            "overhead_us_median": float(np.median(over) * 1e6),
            "overhead_us_mean": float(np.mean(over) * 1e6),
            "last": self.last,
        }
