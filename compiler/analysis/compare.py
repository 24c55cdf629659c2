"""Side-by-side comparison of planners on one topology over message sizes (``a2acc compare``).

For each size and algorithm: plan through :func:`a2acc.pipeline.compile` (timed: the planner phase; the pipeline
verifies every plan and raises on a wrong one, so the ``#wrong`` column is 0 in every table it prints), simulate, and set against the lower bound. Sizes are the mean bytes
per rank (nccl-tests' ``size`` for all-to-all is the per-rank send buffer); a matrix file is rescaled to each size.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import numpy.typing as npt

from a2acc.analysis.bounds import lower_bounds
from a2acc.analysis.incast import IncastModel
from a2acc.analysis.simulate import simulate
from a2acc.model.topology import Topology
from a2acc.model.traffic import generate
from a2acc.pipeline import Request, compile


@dataclass(frozen=True)
class Row:
    algorithm: str
    size: int
    count: int
    time_s: float
    algbw_GBps: float
    busbw_GBps: float
    bound_s: float
    bound_term: str
    schedule_s: float
    stages: int
    ops: int
    nwrong: int
    padding_bytes: int

    @property
    def pct_of_bound(self) -> float:
        return 100.0 * self.bound_s / self.time_s if self.time_s > 0 else 0.0

    def to_json(self) -> dict[str, object]:
        d = asdict(self)
        d["pct_of_bound"] = self.pct_of_bound
        # nccl-tests -J keys, for scripts that already parse those
        d["type"] = "float"
        d["redop"] = "none"
        d["root"] = -1
        d["out_of_place"] = {
            "time": self.time_s * 1e6,
            "alg_bw": self.algbw_GBps,
            "bus_bw": self.busbw_GBps,
            "nwrong": self.nwrong,
        }
        return d


def scale_matrix(m: npt.NDArray[np.int64], size: int, align: int = 16) -> npt.NDArray[np.int64]:
    """Rescale so the mean row sum is ``size`` bytes (entries rounded to ``align``)."""
    mean = float(m.sum(axis=1).mean())
    if mean <= 0:
        return m.copy()
    return (np.rint(m * (size / mean) / align) * align).astype(np.int64)


def matrix_for(
    traffic: str | npt.NDArray[np.int64], topo: Topology, size: int, seed: int, skew: float
) -> npt.NDArray[np.int64]:
    if isinstance(traffic, str):
        return generate(traffic, topo.nranks, size, seed, skew=skew)
    return scale_matrix(traffic, size)


def run_compare(
    topo: Topology,
    traffic: str | npt.NDArray[np.int64],
    sizes: Sequence[int],
    algorithms: Sequence[str],
    *,
    seed: int = 0,
    skew: float = 0.8,
    incast: IncastModel | None = None,
    mcf: bool = False,
    progress: Callable[[str], None] | None = None,
) -> list[Row]:
    rows: list[Row] = []
    total = len(sizes) * len(algorithms)
    k = 0
    for size in sizes:
        m = matrix_for(traffic, topo, size, seed, skew)
        bound = lower_bounds(m, topo, mcf=mcf)
        for alg in algorithms:
            k += 1
            if progress:
                progress(f"[{k}/{total}] {alg} @ {size} B")
            res = compile(Request(topo, m, alg))  # verified, or it raises: a wrong plan is a bug
            prog = res.program
            sched = res.timings["plan"]
            rep = res.verify
            sim = simulate(prog, topo, incast=incast, record_timeline=False, payload_bytes=int(m.sum()))
            rows.append(
                Row(
                    algorithm=alg,
                    size=size,
                    count=size // 4 // topo.nranks,
                    time_s=sim.time_s,
                    algbw_GBps=sim.algbw_GBps,
                    busbw_GBps=sim.busbw_GBps,
                    bound_s=bound.seconds,
                    bound_term=bound.best.name,
                    schedule_s=sched,
                    stages=_int_meta(prog.meta.get("stages")),
                    ops=len(prog.ops),
                    nwrong=len(rep.errors) if rep is not None else 0,
                    padding_bytes=prog.padding_bytes,
                )
            )
    return rows


def _int_meta(v: object) -> int:
    return int(v) if isinstance(v, (int, float)) else 0


def _num(x: float, width: int) -> str:
    """nccl-tests' getFloatStr: 2 decimals, then 1, then 0, then exponent, to fit the width."""
    for prec in (2, 1, 0):
        s = f"{x:.{prec}f}"
        if len(s) <= width:
            return s.rjust(width)
    return f"{x:.0e}".rjust(width)


def format_table(rows: Sequence[Row], header: str) -> str:
    """nccl-tests-style table (same column widths), one block per algorithm, a2acc columns appended."""
    out = [header]
    for alg in dict.fromkeys(r.algorithm for r in rows):
        out.append(f"# a2acc algorithm: {alg}")
        out.append("#" + " " * 65 + "out-of-place")
        out.append(
            f"# {'size':>10s}  {'count':>12s}  {'type':>8s}  {'redop':>6s}  {'root':>6s}  "
            f"{'time':>7s}  {'algbw':>6s}  {'busbw':>6s}  {'#wrong':>6s}  "
            f"{'sched':>9s}  {'bound':>9s}  {'%bound':>6s}  {'stages':>6s}"
        )
        out.append(
            f"# {'(B)':>10s}  {'(elements)':>12s}  {'':>8s}  {'':>6s}  {'':>6s}  "
            f"{'(us)':>7s}  {'(GB/s)':>6s}  {'(GB/s)':>6s}  {'':>6s}  {'(us)':>9s}  {'(us)':>9s}  {'':>6s}  {'':>6s}"
        )
        for r in (r for r in rows if r.algorithm == alg):
            out.append(
                f"{r.size:>12d}  {r.count:>12d}  {'float':>8s}  {'none':>6s}  {-1:>6d}  "
                f"{_num(r.time_s * 1e6, 7)}  {_num(r.algbw_GBps, 6)}  {_num(r.busbw_GBps, 6)}  {r.nwrong:>6d}  "
                f"{_num(r.schedule_s * 1e6, 9)}  {_num(r.bound_s * 1e6, 9)}  {_num(r.pct_of_bound, 6)}  {r.stages:>6d}"
            )
        avg = sum(r.busbw_GBps for r in rows if r.algorithm == alg) / max(
            1, sum(1 for r in rows if r.algorithm == alg)
        )
        out.append(f"# Avg bus bandwidth    : {avg:g}")
        out.append("#")
    return "\n".join(out)


def plot(rows: Sequence[Row], path: str, title: str) -> None:
    """algbw vs size, one line per algorithm plus the bound (needs the ``plot`` extra: matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from a2acc.fileio import atomic_write_bytes

    fig, ax = plt.subplots(figsize=(7, 4.5))
    sizes = sorted({r.size for r in rows})
    for alg in dict.fromkeys(r.algorithm for r in rows):
        pts = sorted((r.size, r.algbw_GBps) for r in rows if r.algorithm == alg)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=alg)
    bound = {r.size: r.size / r.bound_s / 1e9 if r.bound_s > 0 else 0.0 for r in rows}
    ax.plot(sizes, [bound[s] for s in sizes], "k--", label="bound (best possible algbw)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("bytes per rank")
    ax.set_ylabel("algbw (GB/s, FAST definition)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120, bbox_inches="tight")
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())


def stderr_progress(msg: str) -> None:
    if sys.stderr.isatty():
        print(f"\r\033[K{msg}", end="", file=sys.stderr, flush=True)
