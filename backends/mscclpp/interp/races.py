"""Race detection for the MSCCL++ interpreter: vector clocks over agents and the shadow state of every cell.

Agents are thread blocks, one port proxy per rank and one host (the caller) per rank. Each agent has two
vector clocks: ``vc`` (data: what it has seen completed, through acquire edges) and ``vcc`` (control: also
through relaxed edges). Happens-before is program order, signal -> the wait that consumed it, release ->
acquire, barrier, LL packet write -> the read that saw its flag, proxy FIFO order and a rank's launch end ->
its host -> its next launch (:mod:`.machine` performs the joins). Relaxed signals order control only: a read
before them is ordered before a write after the wait (``vcc``), a write is not (``vc``).

Every cell (granule of a buffer) keeps its last writer and its readers since that write, each as (agent,
the agent's own clock at the access, launch). An access races with an earlier one of another agent when the
two are unordered and not both reads; when they belong to different launches it is a **cross-launch hazard**.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

Snap = tuple["npt.NDArray[np.int32] | None", "npt.NDArray[np.int32]", "npt.NDArray[np.int32]"]
MAX_REPORTED = 20


class Cells:
    """A physical buffer of one rank in granules: values, LL packets (scratch), and the shadow state."""

    def __init__(self, cells: int, rng: np.random.Generator, packets: bool) -> None:
        self.val = rng.integers(0, 1 << 63, size=cells, dtype=np.uint64)
        self.wa = np.full(cells, -1, np.int32)  # last writer
        self.wt = np.zeros(cells, np.int32)  # its clock
        self.wl = np.zeros(cells, np.int16)  # launch of the last write
        self.ra = np.full(cells, -1, np.int32)  # last reader since the write
        self.rt = np.zeros(cells, np.int32)
        self.rl = np.zeros(cells, np.int16)
        self.extra: dict[
            int, list[tuple[int, int, int]]
        ] = {}  # cell -> earlier readers (agent, clock, launch)
        npk = cells // 2 if packets else 0
        self.pval = np.zeros(npk, np.uint64)
        self.pflag = np.zeros(npk, np.int64)
        self.psnap = np.full(npk, -1, np.int64)


class HappensBefore:
    """The clocks of ``na`` agents and the race checks of cell accesses."""

    def __init__(
        self, na: int, grain: int, name_of: Callable[[int], str], err: Callable[[str], None]
    ) -> None:
        self.vc = np.zeros((na, na), np.int32)
        self.vcc = np.zeros((na, na), np.int32)
        np.fill_diagonal(self.vc, 1)
        np.fill_diagonal(self.vcc, 1)
        self.grain = grain
        self.name_of = name_of
        self.err = err
        self.races = 0
        self.where: dict[tuple[int, int], str] = {}  # (agent, own clock) -> what it was doing

    # ------------------------------------------------------------------ clocks
    def tick(self, a: int) -> None:
        self.vc[a, a] += 1
        self.vcc[a, a] += 1

    def snap(self, a: int) -> Snap:
        v = self.vc[a].copy()
        return v, v, self.vcc[a].copy()

    def join(self, a: int, vd: npt.NDArray[np.int32] | None, vcc: npt.NDArray[np.int32]) -> None:
        # every snapshot's data part is covered by its control part, so vc <= vcc stays true
        if vd is not None:
            np.maximum(self.vc[a], vd, out=self.vc[a])
        np.maximum(self.vcc[a], vcc, out=self.vcc[a])

    # ------------------------------------------------------------------ accesses
    def record(
        self, b: Cells, lo: int, hi: int, agent: int, launch: int, r: int, buf: str, write: bool, what: str
    ) -> None:
        """Check the access of cells [lo, hi) of ``b`` (rank ``r``'s ``buf``) against the earlier ones, then
        make it the latest."""
        vc, vcc = self.vc[agent], self.vcc[agent]
        now = int(vc[agent])
        self.where[(agent, now)] = what
        if hi - lo <= 4:
            self.record_small(b, lo, hi, agent, now, launch, r, buf, write)
            return
        wa = b.wa[lo:hi]
        wmin, wmax = int(wa.min()), int(wa.max())
        if wmin == wmax and (wmin < 0 or wmin == agent or vc[wmin] >= b.wt[lo:hi].max()):
            pass  # one earlier writer (or none), ordered before this access: the common case
        elif wmax >= 0:
            okm = wa >= 0
            bad = okm & (wa != agent) & (vc[np.where(okm, wa, 0)] < b.wt[lo:hi])
            if bad.any():
                c = lo + int(np.flatnonzero(bad)[0])
                self.report(
                    agent, launch, int(b.wa[c]), int(b.wt[c]), int(b.wl[c]), r, buf, c, write, "written"
                )
        if write:
            self.write_wide(b, lo, hi, agent, now, launch, r, buf, vcc)
        else:
            prev = b.ra[lo:hi]
            keep = (prev >= 0) & (prev != agent)
            if keep.any():
                for jj in np.flatnonzero(keep).tolist():
                    b.extra.setdefault(lo + jj, []).append(
                        (int(prev[jj]), int(b.rt[lo + jj]), int(b.rl[lo + jj]))
                    )
            b.ra[lo:hi] = agent
            b.rt[lo:hi] = now
            b.rl[lo:hi] = launch

    def write_wide(
        self,
        b: Cells,
        lo: int,
        hi: int,
        agent: int,
        now: int,
        launch: int,
        r: int,
        buf: str,
        vcc: npt.NDArray[np.int32],
    ) -> None:
        """A write of many cells: against the readers since the last write (control clock), then the shadow."""
        ra = b.ra[lo:hi]
        rmin, rmax = int(ra.min()), int(ra.max())
        if rmin == rmax and (rmin < 0 or rmin == agent or vcc[rmin] >= b.rt[lo:hi].max()):
            bad = None
        else:
            okm = ra >= 0
            bad = okm & (ra != agent) & (vcc[np.where(okm, ra, 0)] < b.rt[lo:hi])
        if bad is not None and bad.any():
            c = lo + int(np.flatnonzero(bad)[0])
            self.report(agent, launch, int(b.ra[c]), int(b.rt[c]), int(b.rl[c]), r, buf, c, True, "read")
        elif b.extra:
            for c in range(lo, hi):
                for q, tq, lq in b.extra.pop(c, ()):
                    if q != agent and vcc[q] < tq:
                        self.report(agent, launch, q, tq, lq, r, buf, c, True, "read")
                        break
        b.wa[lo:hi] = agent
        b.wt[lo:hi] = now
        b.wl[lo:hi] = launch
        b.ra[lo:hi] = -1
        if b.extra:
            for c in range(lo, hi):
                b.extra.pop(c, None)

    def record_small(
        self, b: Cells, lo: int, hi: int, agent: int, now: int, launch: int, r: int, buf: str, write: bool
    ) -> None:
        """:meth:`record` for a few cells, without numpy slicing (most accesses here are one chunk)."""
        vc, vcc = self.vc[agent], self.vcc[agent]
        wa, wt, ra, rt = b.wa, b.wt, b.ra, b.rt
        for c in range(lo, hi):
            w = int(wa[c])
            if w >= 0 and w != agent and vc[w] < wt[c]:
                self.report(agent, launch, w, int(wt[c]), int(b.wl[c]), r, buf, c, write, "written")
                break
        if write:
            raced = False
            for c in range(lo, hi):
                readers = [(int(ra[c]), int(rt[c]), int(b.rl[c]))] if ra[c] >= 0 else []
                if b.extra:
                    readers += b.extra.pop(c, [])
                for q, tq, lq in readers:
                    if not raced and q != agent and vcc[q] < tq:
                        self.report(agent, launch, q, tq, lq, r, buf, c, write, "read")
                        raced = True
            wa[lo:hi] = agent
            wt[lo:hi] = now
            b.wl[lo:hi] = launch
            ra[lo:hi] = -1
        else:
            for c in range(lo, hi):
                q = int(ra[c])
                if q >= 0 and q != agent:
                    b.extra.setdefault(c, []).append((q, int(rt[c]), int(b.rl[c])))
            ra[lo:hi] = agent
            rt[lo:hi] = now
            b.rl[lo:hi] = launch

    def report(
        self,
        agent: int,
        launch: int,
        other: int,
        t_other: int,
        l_other: int,
        r: int,
        buf: str,
        cell: int,
        write: bool,
        prev: str,
    ) -> None:
        self.races += 1
        if self.races > MAX_REPORTED:
            return
        mine = self.where.get((agent, int(self.vc[agent, agent])), self.name_of(agent))
        theirs = self.where.get((other, t_other), self.name_of(other))
        byte = cell * self.grain
        verb = "writes" if write else "reads"
        if l_other != launch:
            self.err(
                f"cross-launch hazard: {mine} (launch {launch + 1}) {verb} rank {r} {buf} byte {byte}, which "
                f"{theirs} (launch {l_other + 1}) {prev}, with nothing ordering the two"
            )
        else:
            self.err(
                f"race: {mine} (launch {launch + 1}) {verb} rank {r} {buf} byte {byte} {prev} by {theirs} without "
                "ordering"
            )
