"""Megatron-LM's MoE token-imbalance workloads W0-W7: logical routing, per-rank split sizes, traffic matrices.

The workloads follow the descriptions of Megatron-LM's token-imbalance benchmark (NVIDIA/Megatron-LM pull
request 7488, ``benchmarks/moe/token_imbalance/README.md``): eight workloads derived from ``(workload, seed,
step)`` alone, each isolating one variable, every routed row carrying exactly ``top_k`` distinct experts, and the
same logical workload at any expert-parallel (EP) layout. The definitions below are written from those
descriptions; where they are silent the choices are a2acc's (docs/workloads.md lists them).

**The logical workload.** A step routes ``T = tokens x gpus`` logical tokens, numbered ``0..T-1``; token ``g``
sits on GPU ``g // tokens`` (W4: on ragged per-GPU shares, :func:`source_offsets`) and goes to ``top_k``
distinct experts out of ``experts``. Token ``g``'s experts depend on ``(workload, seed, step, g)`` only - its
draws are addressed by its number (:func:`a2acc.hashing.draws`), not taken from a stream - so neither the
layout nor the GPU count changes them (more GPUs append tokens). Each routed (token, expert) pair is one row of
Megatron's all-to-all dispatcher (a token routed to two experts on one GPU travels twice), of
``bytes_per_token`` bytes.

**The workloads** (``H`` hot experts, default ``max(top_k, experts // 4)``; a *hot* token takes all its experts
from the hot set, a *cold* one from every expert; draws are uniform without replacement):

- ``w0`` balanced: round robin, token ``g`` takes experts ``(g * top_k + j) % experts``: every expert and GPU
  equally loaded (exactly, when ``tokens * top_k`` is a multiple of ``experts``).
- ``w1`` hot expert set: a fixed set of ``H`` experts drawn from ``seed`` (not contiguous, not spread by rule);
  a token is hot with probability ``hot_share`` (default 3/4). Per-expert heat.
- ``w2`` hot rank: the same draws as W1 with the hot set at experts ``0..H-1``, which a contiguous layout puts
  on as few EP ranks as it can (one rank when ``H <= experts / ep``). Per-rank placement at W1's heat: the two
  expert histograms are permutations of each other, exactly.
- ``w3`` spread hot experts: the same draws with the hot set at experts ``i * experts // H``, spread over the
  layout. Placement, not heat (again a permutation of W1's histogram).
- ``w4`` source ragged: cold tokens only (balanced destinations), on ragged sources: the GPUs' token counts
  ramp linearly from ``1 - ragged`` to ``1 + ragged`` times ``tokens`` (default 1/2), the ramp assigned to the
  GPUs in a seeded order. Pre-dispatch skew.
- ``w5`` zero expert/rank: cold tokens over the upper half of the experts only: the lower half, and the EP ranks
  that hold only them, receive nothing.
- ``w6`` rotating hotspot: W2 with its hot block moved by ``H`` experts every ``period`` steps (default 3):
  ``base = (step // period) * H % experts``. Plan staleness from step to step.
- ``w7`` burst: cold tokens, except that the last step of every ``burst_every`` (default 4: three steady steps,
  one burst, then recovery) routes a share ``burst_share`` (default 1/2) of its tokens hot into experts
  ``0..H-1``. A re-plan hidden in steady-state numbers.

W1, W2, W3 and W6 share one stream of draws per ``(seed, step)`` (whether a token is hot, and which positions
of its pool it takes) and differ only in how pool positions map to experts.

**The EP layout** (:class:`EpLayout`): the topology's GPUs form EP groups of ``ep`` GPUs, ``block`` (consecutive
GPUs: EP inside a server when ``ep`` is its GPU count) or ``strided`` (GPU ``j`` of every block of ``gpus / ep``:
EP across servers); within a group, expert ``e`` lives on EP rank ``e // (experts / ep)`` (``contiguous``,
Megatron's default) or ``e % ep`` (``round-robin``). A token's pairs go to the GPUs of its own group.

**Library API** (what a benchmark calls per (workload, seed, step, layout, rank); deterministic, no state):

- :func:`rank_routing` - one GPU's view: the expert ids of its tokens, their destination GPUs, and the split
  sizes of ``all_to_all_single`` in rows (token-expert pairs): dispatch sends ``send[d]`` rows to GPU ``d``
  (``input_split_sizes``) and receives ``recv[s]`` from GPU ``s`` (``output_split_sizes``); the combine is the
  transpose (input ``recv``, output ``send``). Cost: the rows of the GPU's EP group only.
- :func:`token_matrix` - rows from every GPU to every GPU (``[s, d]``: sender ``s``), and :func:`traffic_matrix`,
  the same in bytes: the all-to-all a2acc plans.
- :func:`routing` - the logical routing of a range of tokens, layout-free.

Example (4 GPUs as two EP groups of 2, W3 at step 5)::

    w = Workload("w3", experts=8, top_k=2, tokens=128, seed=1)
    lay = EpLayout(gpus=4, ep=2)
    r = rank_routing(w, 5, lay, rank=1)
    # dist.all_to_all_single(out, inp, output_split_sizes=r.recv.tolist(), input_split_sizes=r.send.tolist())
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from a2acc.defaults import EP_GROUPS, EP_PLACEMENTS, WORKLOADS
from a2acc.errors import TrafficMatrixError
from a2acc.hashing import below, draws, fraction, mix64
from a2acc.model.topology import MAX_RANKS
from a2acc.model.traffic import MAX_RANK_BYTES

I64 = npt.NDArray[np.int64]

TITLES = {
    "w0": "balanced",
    "w1": "hot expert set",
    "w2": "hot rank",
    "w3": "spread hot experts",
    "w4": "source ragged",
    "w5": "zero expert/rank",
    "w6": "rotating hotspot",
    "w7": "burst",
}
#: the limits, checked before anything is drawn: experts, experts per token, and (token, expert) pairs per step
#: (about 10 M pairs a second are drawn and counted: a step at the limit takes a few seconds)
MAX_EXPERTS = 1 << 16
MAX_TOP_K = 64
MAX_PAIRS = 1 << 26
#: the largest step number (draw keys hash it as text; any whole number would do, a bound keeps errors readable)
MAX_STEP = 2**62
#: the workloads that share W1's draws (hot or cold per token, pool positions), mapped differently
_HOT_FAMILY = ("w1", "w2", "w3", "w6")
#: tokens routed per chunk (bounds the temporary arrays: ~100 bytes per token and slot)
_CHUNK = 1 << 16

Groups = Literal["block", "strided"]
Placement = Literal["contiguous", "round-robin"]
GROUPS: tuple[Groups, ...] = EP_GROUPS  # named in a2acc.defaults: the command line lists them
PLACEMENTS: tuple[Placement, ...] = EP_PLACEMENTS


def _err(field: str, value: object, allowed: str) -> TrafficMatrixError:
    return TrafficMatrixError("workload", field, value, allowed)


def _key(*parts: object) -> int:
    """A 64-bit draw key from text parts (BLAKE2b): the same on every machine and Python version."""
    text = "|".join(str(p) for p in ("a2acc-workload", *parts))
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


@dataclass(frozen=True)
class Workload:
    """One of W0-W7 with its parameters (module docstring). ``tokens`` is per GPU (W4: the mean)."""

    name: str
    experts: int
    top_k: int = 2
    tokens: int = 4096
    seed: int = 0
    hot_experts: int = 0  # 0: max(top_k, experts // 4)
    hot_share: float = 0.75
    period: int = 3
    burst_every: int = 4
    burst_share: float = 0.5
    ragged: float = 0.5

    def __post_init__(self) -> None:
        if self.name not in WORKLOADS:
            raise _err("KIND", self.name, f"one of {', '.join(WORKLOADS)}")
        if not 1 <= self.experts <= MAX_EXPERTS:
            raise _err("--experts", self.experts, f"1 to {MAX_EXPERTS} experts")
        if not 1 <= self.top_k <= min(self.experts, MAX_TOP_K):
            raise _err("--top-k", self.top_k, f"1 to min(experts, {MAX_TOP_K}) distinct experts per token")
        if self.tokens < 1:
            raise _err("--tokens", self.tokens, "at least 1 token per GPU")
        if not 0 <= self.seed < 2**63:
            raise _err("--seed", self.seed, "a whole number >= 0")
        if self.hot_experts and not self.top_k <= self.hot_experts <= self.experts:
            raise _err("--hot-experts", self.hot_experts, f"top-k ({self.top_k}) to experts ({self.experts})")
        for name, v in (("--hot-share", self.hot_share), ("--burst-share", self.burst_share)):
            if not 0.0 <= v <= 1.0:
                raise _err(name, v, "a fraction of the tokens in [0, 1]")
        if not 0.0 <= self.ragged < 1.0:
            raise _err("--ragged", self.ragged, "in [0, 1): the GPUs hold (1 +- ragged) x tokens")
        if self.period < 1:
            raise _err("--period", self.period, "at least 1 step")
        if self.burst_every < 1:
            raise _err("--burst-every", self.burst_every, "at least 1 step")
        if self.name == "w5" and self.experts // 2 < self.top_k:
            raise _err("--experts", self.experts, "w5 routes over half the experts: at least 2 x top-k")

    @property
    def hot(self) -> int:
        """The hot set's size ``H``."""
        return self.hot_experts or max(self.top_k, self.experts // 4)

    def title(self) -> str:
        return f"{self.name} ({TITLES[self.name]})"


def _check_step(step: int) -> None:
    if not 0 <= step <= MAX_STEP:
        raise _err("--step", step, f"a step number 0 to {MAX_STEP}")


def relabel(w: Workload, step: int) -> I64:
    """Pool position -> expert id for ``w`` at ``step``: hot tokens take positions ``0..H-1``, cold ones
    positions ``0..pool-1`` (:func:`routing`)."""
    e, h = w.experts, w.hot
    ids = np.arange(e, dtype=np.int64)
    if w.name == "w6":
        return (ids + (step // w.period) * h % e) % e  # (the base reduced first: any step number)
    if w.name == "w5":
        return ids + e // 2  # the live upper half; pool positions past it are never drawn
    if w.name == "w1":
        score = mix64(np.uint64(_key("w1-hot-set", w.seed)) ^ ids.astype(np.uint64))
        hot = np.sort(np.lexsort((ids, score))[:h])
    elif w.name == "w3":
        hot = ids[:h] * e // h
    else:
        return ids
    rest = np.setdiff1d(ids, hot, assume_unique=True)
    return np.concatenate([hot, rest]).astype(np.int64)


def _hot_share(w: Workload, step: int) -> float:
    if w.name in _HOT_FAMILY:
        return w.hot_share
    if w.name == "w7":
        return w.burst_share if step % w.burst_every == w.burst_every - 1 else 0.0
    return 0.0


def routing(w: Workload, step: int, first: int, count: int) -> I64:
    """``[count, top_k]`` expert ids of logical tokens ``first .. first + count - 1`` at ``step``: distinct per
    row, each row's ids ascending in pool position. Layout-free: token ``g``'s row depends on ``(w, step, g)``
    only."""
    _check_step(step)
    k, e = w.top_k, w.experts
    g = np.arange(first, first + count, dtype=np.int64)
    if w.name == "w0":
        return np.asarray((g[:, None] * k + np.arange(k)[None, :]) % e, dtype=np.int64)
    family = "hot" if w.name in _HOT_FAMILY else w.name
    bits = draws(_key(family, w.seed, step), g, k + 1)
    hot = fraction(bits[:, 0]) < _hot_share(w, step)
    cold_pool = e - e // 2 if w.name == "w5" else e
    pool = np.where(hot, w.hot, cold_pool)
    return relabel(w, step)[_distinct(bits[:, 1:], pool)]


def _distinct(bits: npt.NDArray[np.uint64], pool: I64) -> I64:
    """Per row, ``bits.shape[1]`` distinct positions in ``[0, pool[row])``, uniform without replacement: draw
    ``j`` picks the ``c``-th position not taken yet, ``c`` uniform below ``pool - j`` (a partial Fisher-Yates
    shuffle over an implicit list), returned ascending."""
    n, k = bits.shape
    taken = np.empty((n, 0), dtype=np.int64)
    for j in range(k):
        c = below(bits[:, j], pool - j)
        for i in range(j):  # skip the positions taken, smallest first
            c += c >= taken[:, i]
        taken = np.sort(np.concatenate([taken, c[:, None]], axis=1), axis=1)
    return taken


def source_offsets(w: Workload, gpus: int) -> I64:
    """``[gpus + 1]`` token offsets: GPU ``i`` holds logical tokens ``off[i] .. off[i+1] - 1`` (``tokens`` each;
    W4: the seeded ragged ramp, largest remainders rounded so that the total stays ``tokens x gpus``)."""
    total = w.tokens * gpus
    if w.name != "w4" or gpus == 1:
        return np.arange(gpus + 1, dtype=np.int64) * w.tokens
    ramp = 1.0 + w.ragged * (2.0 * np.arange(gpus) / (gpus - 1) - 1.0)
    gpu_ids = np.arange(gpus, dtype=np.int64)
    order = np.lexsort((gpu_ids, mix64(np.uint64(_key("w4-sources", w.seed)) ^ gpu_ids.astype(np.uint64))))
    share = np.empty(gpus)
    share[order] = ramp  # the ramp's i-th value to the GPU that sorts i-th
    exact = share * (total / share.sum())
    counts = np.floor(exact).astype(np.int64)
    left = total - int(counts.sum())
    counts[np.lexsort((gpu_ids, -(exact - counts)))[:left]] += 1
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)


@dataclass(frozen=True)
class EpLayout:
    """How the experts sit on the topology's GPUs (module docstring): ``ep`` GPUs per EP group (0: all of them),
    the groups ``block`` or ``strided``, experts ``contiguous`` or ``round-robin`` within a group."""

    gpus: int
    ep: int = 0
    groups: Groups = "block"
    placement: Placement = "contiguous"

    def __post_init__(self) -> None:
        if not 1 <= self.gpus <= MAX_RANKS:
            raise _err("--ranks", self.gpus, f"1 to {MAX_RANKS} GPUs")
        if self.ep and not (1 <= self.ep <= self.gpus and self.gpus % self.ep == 0):
            raise _err("--ep", self.ep, f"a divisor of the GPU count {self.gpus} (0: all of them)")
        if self.groups not in GROUPS:
            raise _err("--ep-groups", self.groups, f"one of {', '.join(GROUPS)}")
        if self.placement not in PLACEMENTS:
            raise _err("--placement", self.placement, f"one of {', '.join(PLACEMENTS)}")

    @property
    def size(self) -> int:
        """GPUs per EP group."""
        return self.ep or self.gpus

    def check(self, w: Workload) -> None:
        """Refuse a workload whose experts do not split evenly over the EP ranks, or too large to draw."""
        if w.experts % self.size:
            raise _err("--experts", w.experts, f"a multiple of the EP size {self.size} (experts per EP rank)")
        if w.tokens * self.gpus * w.top_k > MAX_PAIRS:
            raise _err(
                "--tokens",
                w.tokens,
                f"at most {MAX_PAIRS} token-expert pairs per step (tokens x GPUs x top-k; this is "
                f"{w.tokens * self.gpus * w.top_k})",
            )

    def members(self, gpu: int) -> I64:
        """The GPUs of ``gpu``'s EP group, in EP-rank order."""
        p = self.size
        if self.groups == "block":
            return np.arange(p, dtype=np.int64) + gpu // p * p
        stride = self.gpus // p
        return np.arange(p, dtype=np.int64) * stride + gpu % stride

    def destinations(self, src: I64, experts: I64, n_experts: int) -> I64:
        """The GPU each (source GPU, expert) pair goes to (broadcasting ``src`` against ``experts``)."""
        p = self.size
        owner = experts // (n_experts // p) if self.placement == "contiguous" else experts % p
        if self.groups == "block":
            return np.asarray(src // p * p + owner, dtype=np.int64)
        stride = self.gpus // p
        return np.asarray(src % stride + owner * stride, dtype=np.int64)


def _rows(w: Workload, step: int, lay: EpLayout, gpu: int, off: I64) -> tuple[I64, I64]:
    """(experts, destination GPUs) of ``gpu``'s tokens, each ``[tokens_of_gpu, top_k]``."""
    lo, hi = int(off[gpu]), int(off[gpu + 1])
    experts = np.concatenate(
        [routing(w, step, a, min(_CHUNK, hi - a)) for a in range(lo, hi, _CHUNK)]
        or [np.zeros((0, w.top_k), dtype=np.int64)]
    )
    return experts, lay.destinations(np.int64(gpu), experts, w.experts)


@dataclass(frozen=True)
class RankRouting:
    """One GPU's dispatch (module docstring): its tokens' ``experts`` and ``destinations`` (``[tokens, top_k]``),
    and the rows it sends to (``send``) and receives from (``recv``) every GPU; the combine is the transpose."""

    rank: int
    experts: I64
    destinations: I64
    send: I64
    recv: I64

    @property
    def combine_send(self) -> I64:
        """The combine's ``input_split_sizes``: the rows dispatched to this GPU go back where they came from."""
        return self.recv

    @property
    def combine_recv(self) -> I64:
        """The combine's ``output_split_sizes``."""
        return self.send


def rank_routing(w: Workload, step: int, layout: EpLayout, rank: int) -> RankRouting:
    """GPU ``rank``'s dispatch at ``step`` (module docstring); draws only its EP group's tokens."""
    layout.check(w)
    if not 0 <= rank < layout.gpus:
        raise _err("rank", rank, f"0 to {layout.gpus - 1}")
    off = source_offsets(w, layout.gpus)
    experts, dest = _rows(w, step, layout, rank, off)
    send = np.bincount(dest.ravel(), minlength=layout.gpus).astype(np.int64)
    recv = np.zeros(layout.gpus, dtype=np.int64)
    for m in layout.members(rank).tolist():
        d = dest if m == rank else _rows(w, step, layout, m, off)[1]
        recv[m] = int(np.count_nonzero(d == rank))
    return RankRouting(rank, experts, dest, send, recv)


def token_matrix(w: Workload, step: int, layout: EpLayout) -> I64:
    """``[gpus, gpus]`` token-expert rows from each GPU (row) to each GPU (column) at ``step``."""
    layout.check(w)
    n = layout.gpus
    off = source_offsets(w, n)
    out = np.zeros(n * n, dtype=np.int64)
    for gpu in range(n):
        _experts, dest = _rows(w, step, layout, gpu, off)
        out += np.bincount(gpu * n + dest.ravel(), minlength=n * n)
    return out.reshape(n, n)


def traffic_matrix(w: Workload, step: int, layout: EpLayout, bytes_per_token: int) -> I64:
    """:func:`token_matrix` in bytes: ``bytes_per_token`` per row (a token's hidden state, hidden x dtype)."""
    pairs = w.tokens * layout.gpus * w.top_k  # every row of the step: a bound on any rank's bytes
    if not 1 <= bytes_per_token <= MAX_RANK_BYTES // pairs:
        raise _err(
            "--bytes-per-token",
            bytes_per_token,
            f"1 to {MAX_RANK_BYTES // pairs} bytes (a rank sends and receives at most {MAX_RANK_BYTES} bytes)",
        )
    return token_matrix(w, step, layout) * np.int64(bytes_per_token)


def bytes_per_token_for(w: Workload, size: int, align: int = 16) -> int:
    """The bytes per token (a multiple of ``align``, at least ``align``) at which the mean GPU sends about
    ``size`` bytes: ``size / (tokens x top_k)`` rounded. What a comparison over sizes scales: the routing stays
    the same at every size."""
    if size < 0:
        raise _err("--size", size, "bytes per GPU >= 0")
    per = size / (w.tokens * w.top_k)
    return max(align, round(per / align) * align)


def describe(w: Workload, step: int, layout: EpLayout, bytes_per_token: int) -> str:
    """One line naming everything that fixes the matrix (what compare prints as its traffic)."""
    ep = f"EP {layout.size}" + (f" ({layout.groups}, {layout.placement})" if layout.size > 1 else "")
    return (
        f"{w.title()}, seed {w.seed}, step {step}: {w.experts} experts, top-{w.top_k}, {w.tokens} tokens/GPU, "
        f"{bytes_per_token} B/token, {ep}"
    )
