"""Skew buckets: chunk layouts that a family of similar traffic matrices share.

A compiled plan is built for a **layout** ``L`` (chunks per (src, dst) pair) and a unit ``u`` (bytes per chunk);
it serves every matrix ``T`` that it **covers**: ``ceil(T / u) <= L`` elementwise (each peer's bytes fit its
chunks and are zero-padded). The bucket key is the content hash of (layout, unit, planner, backend, topology
fingerprint and GPU, a2acc version), so equal keys mean byte-identical plans (the GPU is not in the fingerprint,
which covers what plans depend on, but a lowered file may depend on it: MSCCL++'s thread-block limit).

Design for MoE traffic, whose matrix changes every call but drifts slowly:

- **Unit ladder** (:func:`a2acc.ir.quantize.ladder_unit`). ``u = align * 2^k`` with ``k`` set so the mean pair holds about ``pair_chunks`` chunks; the
  unit changes only when the traffic volume changes by a factor of 2, so consecutive calls share it.
- **Serving lookup.** A :class:`BucketIndex` keeps recent layouts per (topology, planner, backend, N, unit).
  A matrix reuses the most recently used layout if it is within both budgets, else the layout with the least
  waste (padding + overflow) among those within both budgets.
- **Residual instead of exact cover.** Requiring every one of N^2 pairs to fit makes hits vanish under
  per-call sampling noise (with 512 tokens per pair, sigma is ~4.4 %, and a covering margin for all 1024 pairs
  costs 15-30 % padding: measured). So a layout serves the bulk and the few bytes that exceed it (whole rows)
  travel as a small residual exchange; its share is reported (``overflow``), never hidden.
- **Statistical layout on a miss.** Per-pair EWMA mean + ``z`` standard deviations of the required chunks;
  when that does not serve the matrix itself within both budgets (a burst, a new regime), the matrix's own
  chunks plus the same margin, so that the burst's recurrences hit.
- **Canonical form** (:mod:`a2acc.jit.symmetry`). With ``symmetric=True`` (the JIT's default) the matrix is
  relabelled by an automorphism of the topology that sorts servers and GPUs by the traffic they touch before
  anything else happens, so a hot expert that rotates or jumps keeps hitting the same layouts. The bucket says
  which rank plays each canonical rank (``ranks``); the layout, its key and its plan are canonical.

Determinism: the index is updated only from the matrix sequence, which is identical on every rank (it is
all-gathered), so every rank picks the same layout with no broadcast. The runtime still cross-checks the plan
hash and falls back if ranks disagree (e.g. one process restarted with an empty index).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from math import lcm

import numpy as np
import numpy.typing as npt

from a2acc import __version__
from a2acc.ir.quantize import DEFAULT_ALIGN, DEFAULT_PAIR_CHUNKS, ladder_unit, quantize
from a2acc.jit.symmetry import Symmetry
from a2acc.model.topology import Topology

DEFAULT_MAX_PADDING = 0.10
DEFAULT_CAPACITY = 32


def variant(name: str, options: dict[str, str] | None = None) -> str:
    """The planner or backend part of a bucket key: its name, plus its options when any are set (other
    options give other plans, so they must give other keys)."""
    return name if not options else f"{name}{sorted(options.items())}"


@dataclass(frozen=True)
class Bucket:
    """The layout chosen for one matrix: ``padding_bytes`` are unused chunk bytes, ``overflow_bytes`` the bytes
    that do not fit the layout and travel as a residual exchange (see :mod:`a2acc.runtime`). ``layout`` is in
    canonical rank order; ``ranks[c]`` is the rank that plays canonical rank ``c``."""

    key: str
    layout: npt.NDArray[np.int64]
    unit: int
    padding_bytes: int
    overflow_bytes: int
    payload_bytes: int
    hit: bool
    ranks: npt.NDArray[np.int64] | None = None  # None: the identity

    @property
    def permuted(self) -> bool:
        return self.ranks is not None

    @property
    def padding_fraction(self) -> float:
        return self.padding_bytes / self.payload_bytes if self.payload_bytes else 0.0

    @property
    def overflow_fraction(self) -> float:
        return self.overflow_bytes / self.payload_bytes if self.payload_bytes else 0.0


def bucket_key(layout: npt.NDArray[np.int64], unit: int, planner: str, backend: str, fingerprint: str) -> str:
    h = hashlib.sha256()
    h.update(
        f"a2acc-bucket/{__version__}/{planner}/{backend}/{fingerprint}/{unit}/{layout.shape[0]}/".encode()
    )
    h.update(np.ascontiguousarray(layout, dtype="<i8").tobytes())
    return h.hexdigest()[:32]


def fit(layout: npt.NDArray[np.int64], matrix: npt.NDArray[np.int64], unit: int) -> tuple[int, int]:
    """(padding bytes, overflow bytes) of serving ``matrix`` with ``layout``."""
    cap = layout * unit
    used = np.minimum(cap, matrix)
    return int(cap.sum() - used.sum()), int((matrix - used).sum())


@dataclass
class BucketIndex:
    """Recent layouts of one (topology, planner, backend); see module docstring.

    A cached layout serves a matrix when its padding is at most ``max_padding`` and the bytes that do not fit
    are at most ``max_overflow`` of the payload (they travel as a residual exchange). On a miss the new layout
    is the per-pair EWMA mean plus ``z`` standard deviations of the required chunks (never below the current
    matrix's needs where that keeps padding within budget), so the family's typical matrices fit.
    """

    topology: Topology
    planner: str
    backend: str
    pair_chunks: int = DEFAULT_PAIR_CHUNKS
    z: float = 0.5
    alpha: float = 0.1
    max_padding: float = DEFAULT_MAX_PADDING
    max_overflow: float = 0.05
    capacity: int = DEFAULT_CAPACITY
    symmetric: bool = False
    _layouts: dict[int, list[tuple[str, npt.NDArray[np.int64]]]] = field(default_factory=dict)
    _stacks: dict[int, npt.NDArray[np.int64]] = field(default_factory=dict)
    _stats: dict[int, tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]] = field(default_factory=dict)
    _fp: str = ""
    _sym: Symmetry | None = None
    _frame: npt.NDArray[np.int64] | None = None  # the relabelling last used (symmetric)
    _pinned: list[tuple[str, npt.NDArray[np.int64], int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        gpu = self.topology.gpu
        self._fp = self.topology.fingerprint + (
            f"/{gpu.model}:{gpu.compute_units}" if gpu is not None else ""
        )
        self._sym = Symmetry(self.topology) if self.symmetric else None

    def key_for(self, bucket: Bucket, planner: str) -> str:
        """The key ``bucket``'s layout has when planned by ``planner`` (no options) for this index's backend:
        the key a job running that planner caches it under, so the two share cache entries."""
        return self.key(bucket.layout, bucket.unit, planner)

    def key(self, layout: npt.NDArray[np.int64], unit: int, planner: str | None = None) -> str:
        """The key of a layout planned by ``planner`` (default: this index's planner, options included) for this
        index's topology and backend."""
        return bucket_key(layout, unit, self.planner if planner is None else planner, self.backend, self._fp)

    def pin(self, layout: npt.NDArray[np.int64], unit: int) -> str:
        """Offer a fixed layout (e.g. one ``a2acc compile`` wrote for the executor) before any other: a matrix
        it serves within both budgets uses it, in the matrix's own rank order. Returns its bucket key."""
        lay = np.asarray(layout, dtype=np.int64)
        key = bucket_key(lay, int(unit), self.planner, self.backend, self._fp)
        if all(k != key for k, _l, _u in self._pinned):
            self._pinned.append((key, lay, int(unit)))
        return key

    def _pinned_lookup(self, m: npt.NDArray[np.int64]) -> Bucket | None:
        payload = int(m.sum())
        best: Bucket | None = None
        for key, lay, unit in self._pinned:
            if lay.shape != m.shape:
                continue
            pad, over = fit(lay, m, unit)
            serves = pad <= self.max_padding * payload and over <= self.max_overflow * payload
            if serves and (best is None or pad + over < best.padding_bytes + best.overflow_bytes):
                best = Bucket(key, lay, unit, pad, over, payload, True)
        return best

    def lookup(self, matrix: npt.NDArray[np.int64], align: int = 1) -> Bucket:
        """Bucket for ``matrix``: a pinned layout that serves it, else the best serving cached layout (hit),
        else a new layout (miss). Its unit is a multiple of ``align`` (and of the ladder's own alignment): the
        JIT passes the call's row size, so every chunk holds whole rows.

        With ``symmetric``, two frames are tried: the relabelling last used (a stationary skew keeps its frame,
        whatever the noise does to the order of similar ranks), then the matrix's canonical form (a hot expert
        that moved); a miss is laid out in the canonical form."""
        m = np.asarray(matrix, dtype=np.int64)
        pinned = self._pinned_lookup(m) if self._pinned else None
        if pinned is not None:
            return pinned
        # relabelling keeps the mean pair, so one unit serves every frame
        unit = ladder_unit(m, self.pair_chunks, lcm(DEFAULT_ALIGN, max(int(align), 1)))
        if self._sym is None:
            hit = self._serve(m, unit)
            self._observe(m, unit)
            return hit if hit is not None else self._new(m, unit)
        canon = self._sym.canonical(m)
        frames = [f for f in (self._frame,) if f is not None]
        if not any(np.array_equal(f, canon) for f in frames):
            frames.append(canon)
        for perm in frames:
            mp = m[np.ix_(perm, perm)]
            hit = self._serve(mp, unit)
            if hit is not None:
                self._observe(mp, unit)
                self._frame = perm
                return _relabelled(hit, perm)
        mp = m[np.ix_(canon, canon)]
        self._observe(mp, unit)
        self._frame = canon
        return _relabelled(self._new(mp, unit), canon)

    def _observe(self, m: npt.NDArray[np.int64], unit: int) -> None:
        """Per-pair EWMA mean and variance of the required chunks (per unit)."""
        req = quantize(m, unit)
        mean, var = self._stats.get(unit, (req.astype(np.float64), np.zeros(req.shape)))
        d = req - mean
        self._stats[unit] = (mean + self.alpha * d, (1 - self.alpha) * (var + self.alpha * d * d))

    def _serve(self, m: npt.NDArray[np.int64], unit: int) -> Bucket | None:
        """The cached layout that serves ``m`` within both budgets (the most recently used first, else the least
        waste), or None."""
        payload = int(m.sum())
        layouts = self._layouts.get(unit)
        if not layouts:
            return None
        key, lay = layouts[-1]
        cap = lay * unit
        used = int(np.minimum(cap, m).sum())
        pad0, over0 = int(cap.sum()) - used, payload - used
        if pad0 <= self.max_padding * payload and over0 <= self.max_overflow * payload:
            return Bucket(key, lay, unit, pad0, over0, payload, True)
        stack = self._stacks.get(unit)
        if stack is None:
            stack = np.stack([lay for _k, lay in layouts]) * unit
            self._stacks[unit] = stack
        used_all = np.minimum(stack, m).sum(axis=(1, 2))
        pads = stack.sum(axis=(1, 2)) - used_all
        overs = payload - used_all
        ok = (pads <= self.max_padding * payload) & (overs <= self.max_overflow * payload)
        if not ok.any():
            return None
        waste = np.where(ok, pads + overs, np.iinfo(np.int64).max)
        # least waste; ties go to the most recently used layout (the end of the list)
        i = int(len(waste) - 1 - np.argmin(waste[::-1]))
        key, lay = layouts[i]
        if i != len(layouts) - 1:
            layouts.append(layouts.pop(i))
            self._stacks.pop(unit, None)
        return Bucket(key, lay, unit, int(pads[i]), int(overs[i]), payload, True)

    def _new(self, m: npt.NDArray[np.int64], unit: int) -> Bucket:
        """A new layout for ``m``'s family (see the class docstring), remembered."""
        req = quantize(m, unit)
        payload = int(m.sum())
        mean, var = self._stats[unit]
        lay = np.ceil(mean + self.z * np.sqrt(var)).astype(np.int64)
        lay = np.maximum(lay, (m > 0).astype(np.int64))  # every non-empty pair keeps at least one chunk
        grown = np.maximum(lay, req)
        if fit(grown, m, unit)[0] <= self.max_padding * payload:
            lay = grown
        pad, over = fit(lay, m, unit)
        if pad > self.max_padding * payload or over > self.max_overflow * payload:
            # the family's statistics do not describe this matrix (a burst, a new regime): lay out the matrix
            # itself, with the same margin where the padding budget allows, so its recurrences hit
            own = req + np.ceil(self.z * np.sqrt(req)).astype(np.int64)
            lay = own if fit(own, m, unit)[0] <= self.max_padding * payload else req
            pad, over = fit(lay, m, unit)
        key = bucket_key(lay, unit, self.planner, self.backend, self._fp)
        layouts = self._layouts.setdefault(unit, [])
        layouts.append((key, lay))
        if len(layouts) > self.capacity:
            layouts.pop(0)
        self._stacks.pop(unit, None)
        return Bucket(key, lay, unit, pad, over, payload, False)


def _relabelled(b: Bucket, perm: npt.NDArray[np.int64]) -> Bucket:
    return b if bool((perm == np.arange(perm.shape[0])).all()) else replace(b, ranks=perm)
