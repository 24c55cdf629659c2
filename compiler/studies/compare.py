"""Side-by-side comparison of planners on one topology over message sizes (``a2acc compare``).

For each algorithm and size: plan through :func:`a2acc.pipeline.compile` (the pipeline verifies every plan and
raises on a wrong one, so the ``#wrong`` column is 0 in every table it prints), simulate with the fast engine
(:mod:`a2acc.analysis.fastsim`) under the topology's model (:mod:`a2acc.analysis.model`) or ``--model``, and set
against the lower bound. Rows are produced one at a time (:func:`compare_rows` is a generator) so the CLI
prints each as soon as it is computed, like nccl-tests.

**Planners with options.** An entry of ``algorithms`` is a planner's name, or its name with options in
brackets (:class:`Contender`): ``fast[shape=staged]``, ``syccl[time_limit=10]``, ``fast[shape=grouped,groups=2]``.
One planner may be listed several times with different options; each entry is a block of the table, named as
it was written (:attr:`Contender.label`).

Sizes are the mean bytes per rank (nccl-tests' ``size`` for all-to-all is the per-rank send buffer); a matrix
file is rescaled to each size, or used as it is when no size is asked for. Bandwidths, both in GB/s (1e9):

- ``algbw`` (FAST's definition, default): total bytes / N / time - the mean rank's bytes over time;
- ``algbw`` with ``--bw alltoallv`` (nccl-tests ``alltoallv_perf``): the busiest rank's bytes (sent or
  received) over time - what a benchmark reports when it times the slowest rank's buffer;
- ``busbw = algbw * (N-1)/N``, nccl-tests' all-to-all factor (``src/alltoall.cc``: ``AlltoAllGetBw``).

For balanced traffic the two algbw definitions agree; under skew the alltoallv one is larger.

**One chunk pattern for the whole comparison.** Every size is the same traffic shape, so every size is planned
on the same chunk counts when they fit it: the counts of the largest size's matrix under the default unit
policy, with each size's own unit (the smallest 16-byte multiple that covers every entry,
:func:`shared_layout`). A size whose matrix the pattern does not cover, or covers with more than one point of
padding more than its own layout would (the ``moe`` generator, whose token counts change the shape at small
sizes), gets its own layout. The matrix itself is never changed: the padding column shows what the layout
adds. Planners whose search depends only on the counts (syccl's candidates, mcf's flow LP) then do that
search once per comparison and process, and only simulate per size.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import numpy.typing as npt

from a2acc.analysis.bounds import lower_bounds
from a2acc.analysis.fastsim import SimMemoEntry, simulate_fast
from a2acc.analysis.fastsim import memo_export as sim_memo_export
from a2acc.analysis.fastsim import memo_import as sim_memo_import
from a2acc.analysis.incast import IncastModel
from a2acc.analysis.model import SimModel
from a2acc.analysis.simulate import resolve_model
from a2acc.defaults import BW_DEFINITIONS as BW_DEFINITIONS
from a2acc.defaults import PLOT_METRICS as PLOT_METRICS
from a2acc.errors import InputError, InternalError
from a2acc.fileio import atomic_write_bytes, atomic_write_text
from a2acc.ir.quantize import DEFAULT_ALIGN, UnitPolicy, padding_bytes, quantize
from a2acc.model.topology import Topology
from a2acc.model.traffic import generate
from a2acc.pipeline import Request, compile
from a2acc.planners import MemoEntry, applies, available, memo_export, memo_import, memo_keys, options_type

#: a size keeps the comparison's chunk pattern while its padding stays within this share of its payload above
#: what its own layout would pad
SHARED_PADDING_SLACK = 0.01


@dataclass(frozen=True)
class Row:
    """One (algorithm, size) result. ``algbw_GBps``/``busbw_GBps`` follow the chosen ``bw`` definition."""

    algorithm: str
    size: int
    count: int
    time_s: float
    algbw_GBps: float
    busbw_GBps: float
    algbw_fast_GBps: float
    algbw_alltoallv_GBps: float
    bound_s: float
    bound_term: str
    schedule_s: float
    stages: int
    ops: int
    chunks: int
    nwrong: int
    padding_bytes: int
    timeout_probability: float
    bw: str = "fast"
    pick: str = ""  # auto's rows: the planner whose plan auto returned

    @property
    def pct_of_bound(self) -> float:
        return 100.0 * self.bound_s / self.time_s if self.time_s > 0 else 0.0

    def to_json(self) -> dict[str, object]:
        d: dict[str, object] = asdict(self)
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


CSV_FIELDS = (
    "algorithm",
    "size",
    "count",
    "time_us",
    "algbw_GBps",
    "busbw_GBps",
    "algbw_fast_GBps",
    "algbw_alltoallv_GBps",
    "nwrong",
    "sched_us",
    "bound_us",
    "pct_of_bound",
    "bound_term",
    "stages",
    "ops",
    "chunks",
    "padding_bytes",
    "timeout_probability",
    "pick",
    "fastest",
)


def _csv_row(r: Row) -> list[object]:
    return [
        r.algorithm,
        r.size,
        r.count,
        r.time_s * 1e6,
        r.algbw_GBps,
        r.busbw_GBps,
        r.algbw_fast_GBps,
        r.algbw_alltoallv_GBps,
        r.nwrong,
        r.schedule_s * 1e6,
        r.bound_s * 1e6,
        r.pct_of_bound,
        r.bound_term,
        r.stages,
        r.ops,
        r.chunks,
        r.padding_bytes,
        r.timeout_probability,
        r.pick,
    ]


def scale_matrix(m: npt.NDArray[np.int64], size: int, align: int = 16) -> npt.NDArray[np.int64]:
    """Rescale so the mean row sum is ``size`` bytes (entries rounded to ``align``)."""
    mean = float(m.sum(axis=1).mean())
    if mean <= 0:
        return m.copy()
    return (np.rint(m * (size / mean) / align) * align).astype(np.int64)


def own_size(m: npt.NDArray[np.int64]) -> int:
    """A matrix's own size in compare's terms: its mean bytes per rank."""
    return round(float(m.sum(axis=1).mean()))


def matrix_for(
    traffic: str | npt.NDArray[np.int64], topo: Topology, size: int, seed: int, skew: float
) -> npt.NDArray[np.int64]:
    if isinstance(traffic, str):
        return generate(traffic, topo.nranks, size, seed, skew=skew)
    if size == own_size(traffic):
        return traffic
    return scale_matrix(traffic, size)


@dataclass(frozen=True)
class Contender:
    """One entry of a comparison: planner ``planner`` with ``options`` (``KEY=VALUE`` pairs as given), named in
    the table by :attr:`label`: the planner, then its options in brackets when there are any."""

    planner: str
    options: tuple[tuple[str, str], ...] = ()

    @property
    def label(self) -> str:
        opts = ",".join(f"{k}={v}" for k, v in self.options)
        return f"{self.planner}[{opts}]" if opts else self.planner

    @property
    def option_map(self) -> dict[str, str] | None:
        return dict(self.options) if self.options else None


#: how ``--algorithms`` is written, said in every refusal
ALGORITHMS_SYNTAX = "a comma list of NAME or NAME[KEY=VALUE,...], e.g. fast,fast[shape=staged],syccl"


def contenders(texts: Sequence[str], flag: str = "--algorithms") -> list[Contender]:
    """The entries of one or more comma lists (``fast,fast[shape=grouped,groups=2],direct``): each a registered
    planner, its options checked against the planner's options, each entry listed once. Commas inside brackets
    separate options (a list value reads as written, as with ``--opt``). Refusals name the entry and the rule."""
    from a2acc.options import parse_options, split_pairs
    from a2acc.planners import PLANNERS

    out: list[Contender] = []
    for text in texts:
        for item in _top_level_items(text, flag):
            m = re.fullmatch(r"([A-Za-z0-9_.-]+)(?:\[(.*)\])?", item, flags=re.DOTALL)
            if m is None:
                raise InputError("", flag, item, ALGORITHMS_SYNTAX)
            name, inner = m.group(1), m.group(2)
            if name not in PLANNERS:
                raise InputError("", flag, name, f"known planners: {', '.join(PLANNERS.names())}")
            pairs: list[tuple[str, str]] = []
            if inner is not None:
                if not inner.strip():
                    raise InputError("", flag, item, f"options inside the brackets (or just {name})")
                where = f"{flag} {item}"
                if "=" not in inner.split(",", 1)[0]:
                    raise InputError("", flag, item, f"options as KEY=VALUE, e.g. {name}[KEY=VALUE,...]")
                try:
                    pairs = split_pairs([inner], where=where)
                    parse_options(PLANNERS.options(name), dict(pairs), where=where)
                except InputError as exc:  # a planner's own check names --opt: say which entry it was
                    raise InputError(where, exc.field, exc.value, exc.allowed) from None
            entry = Contender(name, tuple(pairs))
            if any(c.label == entry.label for c in out):
                raise InputError("", flag, entry.label, "each entry once (other options make another entry)")
            out.append(entry)
    if not out:
        raise InputError("", flag, ",".join(texts), ALGORITHMS_SYNTAX)
    return out


def _top_level_items(text: str, flag: str) -> list[str]:
    """``text`` split at the commas outside brackets, each item stripped; unbalanced brackets are refused."""
    items: list[str] = []
    depth = 0
    start = 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
            if depth > 1:
                raise InputError("", flag, text, f"brackets do not nest; {ALGORITHMS_SYNTAX}")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise InputError("", flag, text, f"a ']' without its '['; {ALGORITHMS_SYNTAX}")
        elif ch == "," and depth == 0:
            items.append(text[start:i].strip())
            start = i + 1
    if depth:
        raise InputError("", flag, text, f"a '[' without its ']'; {ALGORITHMS_SYNTAX}")
    items.append(text[start:].strip())
    empty = [i for i, x in enumerate(items) if not x]
    if empty and len(items) > 1:
        raise InputError("", flag, text, f"an empty entry between commas; {ALGORITHMS_SYNTAX}")
    return [x for x in items if x]


def compare_rows(
    topo: Topology,
    traffic: str | npt.NDArray[np.int64],
    sizes: Sequence[int],
    algorithms: Sequence[str],
    *,
    model: SimModel | None = None,
    seed: int = 0,
    skew: float = 0.8,
    mcf: bool = False,
    bw: str = "fast",
    jobs: int = 1,
) -> Iterator[Row]:
    """Rows in table order (algorithm blocks, sizes ascending), each yielded as soon as it is computed.
    ``algorithms``: planners, each with options in brackets or not (:func:`contenders`).

    ``jobs`` > 1 computes them in that many worker processes (:func:`_parallel_rows`). Every row is a pure
    function of its request, so the rows are the same as in one process; only the order they are computed in
    changes, and a row is yielded once it and every row before it in table order are done."""
    if bw not in BW_DEFINITIONS:
        raise InputError("", "--bw", bw, f"one of {', '.join(BW_DEFINITIONS)}")
    if jobs < 1:
        raise InputError("", "--jobs", jobs, "an integer >= 1")
    entries = contenders(algorithms)
    pattern = _pattern(traffic, topo, sizes, seed, skew)
    if jobs == 1 or len(set(sizes)) < 2:
        at: dict[int, _SizeInput] = {}
        for entry in entries:
            for size in sizes:
                if size not in at:
                    at[size] = _size_input(traffic, topo, size, seed, skew, mcf, pattern)
                yield _row(topo, at[size], size, entry, model, bw)
        return
    common = _Inputs(topo, traffic, model, seed, skew, mcf, bw, pattern)
    yield from _parallel_rows(tuple(sizes), tuple(entries), common, jobs)


#: planners whose search depends on the chunk counts alone (syccl's candidates, mcf's flow LP), done once per
#: process and pattern: with workers, each runs in one task over every size, so the comparison pays it once
WHOLE_COMPARISON = ("syccl", "mcf")
AUTO = "auto"


@dataclass(frozen=True)
class _Inputs:
    """What every row of a comparison shares (sent to each worker task)."""

    topo: Topology
    traffic: str | npt.NDArray[np.int64]
    model: SimModel | None
    seed: int
    skew: float
    mcf: bool
    bw: str
    pattern: npt.NDArray[np.int64] | None


def _parallel_rows(
    sizes: tuple[int, ...], entries: tuple[Contender, ...], common: _Inputs, jobs: int
) -> Iterator[Row]:
    """The rows from worker processes, in table order. Tasks:

    - each entry of a :data:`WHOLE_COMPARISON` planner: its rows at every size, in one task (its search once);
    - the other entries: one task per size;
    - with ``auto`` listed, the planners it tries (every other one that applies) are planned and simulated
      even where not listed with their default options (their rows are not shown), as ``auto`` in one process
      would plan them: a searching one with auto's budget as its time limit, its plan handed on only when the
      limit did not cut it short (else auto plans it again within what is left of its budget, as in one
      process);
    - each ``auto`` entry at a size, in this process once every task that covers the size is done: the plans and
      simulations those tasks made there are handed to it (:func:`a2acc.planners.memo_import`,
      :func:`a2acc.analysis.fastsim.memo_import`), so it only verifies and compares them, as it does in one
      process after the rows above it (and nothing is sent back to a worker).

    Whole-comparison tasks are submitted first: a worker takes each, the others take the per-size tasks."""
    from concurrent.futures import FIRST_COMPLETED, Future, wait

    from a2acc.flows.parallel import executor

    topo = common.topo
    listed = {e.label for e in entries}
    autos = tuple(e for e in entries if e.planner == AUTO)
    order = [(e.label, size) for e in entries for size in sizes]
    sizes = tuple(dict.fromkeys(sizes))  # a size asked twice is computed once
    # a searching planner run for auto only gets auto's budget as its time limit, as auto gives it in one
    # process; its plan reaches auto only when the limit did not cut it short (a2acc.planners.run remembers it
    # then as the unlimited plan); otherwise auto plans it again within what is left of its own budget
    budget = f"{options_type(AUTO)().budget_s:g}"
    helpers = [
        Contender(name, (("time_limit", budget),) if name in WHOLE_COMPARISON else ())
        for name in (e.name for e in available())
        if autos and name != AUTO and name not in listed and applies(name, topo) is None
    ]
    wanted = [*(e for e in entries if e.planner != AUTO), *helpers]
    whole = [e for e in wanted if e.planner in WHOLE_COMPARISON]
    per_size = tuple(e for e in wanted if e.planner not in WHOLE_COMPARISON)
    done: dict[tuple[str, int], Row] = {}
    seeds: dict[int, list[_Seeds]] = {size: [] for size in sizes}
    waiting = {size: len(whole) + (1 if per_size else 0) for size in sizes}  # tasks before a size's auto rows

    def settle(size: int, made: _Seeds | None) -> None:
        if made is not None:
            if autos:  # (kept only for auto's rows)
                seeds[size].append(made)
            waiting[size] -= 1
        if waiting[size] == 0 and autos:
            rows, _made = _task(autos, (size,), common, seeds.pop(size))
            done.update(((r.algorithm, size), r) for r in rows[0])

    with executor(min(jobs, len(sizes))) as ex:
        if ex is None:  # pragma: no cover - more than one worker asked for
            raise InputError("", "--jobs", jobs, "an integer >= 1")
        tasks: dict[Future[_TaskResult], tuple[int, ...]] = {}
        for e in whole:
            tasks[ex.submit(_task, (e,), sizes, common, [])] = sizes
        if per_size:
            for size in sizes:
                tasks[ex.submit(_task, per_size, (size,), common, [])] = (size,)
        for size in sizes:  # auto with nothing to wait for
            if waiting[size] == 0:
                settle(size, None)
        i = 0
        while i < len(order):
            if order[i] in done:
                yield done[order[i]]
                i += 1
                continue
            if not tasks:  # pragma: no cover - every row has a task
                raise InternalError(f"compare: no task computes the row {order[i]}")
            finished, _ = wait(tasks, return_when=FIRST_COMPLETED)
            for f in finished:
                at = tasks.pop(f)
                rows, made = f.result()
                for size, size_rows, size_made in zip(at, rows, made):
                    done.update(((r.algorithm, size), r) for r in size_rows if r.algorithm in listed)
                    settle(size, size_made)


_Seeds = tuple[list[MemoEntry], list[SimMemoEntry]]  # the plans and simulations a task made at one size
_TaskResult = tuple[list[list[Row]], list[_Seeds]]


def _task(
    entries: tuple[Contender, ...], sizes: tuple[int, ...], common: _Inputs, given: list[_Seeds]
) -> _TaskResult:
    """A worker's task: the rows of ``entries`` at each of ``sizes`` (table order within a size), and per size
    the plans and simulations it made there (for that size's ``auto`` rows); ``given`` are other tasks' ones."""
    c = common
    for plans, sims in given:
        memo_import(plans)
        sim_memo_import(sims)
    rows: list[list[Row]] = []
    made: list[_Seeds] = []
    for size in sizes:
        before = memo_keys()
        at = _size_input(c.traffic, c.topo, size, c.seed, c.skew, c.mcf, c.pattern)
        rows.append([_row(c.topo, at, size, e, c.model, c.bw) for e in entries])
        plans = memo_export(before)
        made.append((plans, sim_memo_export([p for _k, p in plans], c.topo, model=c.model)))
    return rows, made


@dataclass(frozen=True)
class _SizeInput:
    """One size's matrix, its layout (the comparison's pattern and this size's unit, or None: its own) and its
    lower bound (seconds, the binding term)."""

    matrix: npt.NDArray[np.int64]
    layout: tuple[npt.NDArray[np.int64], int] | None
    bound: tuple[float, str]


def _row(topo: Topology, at: _SizeInput, size: int, entry: Contender, model: SimModel | None, bw: str) -> Row:
    """Plan ``entry`` (a planner with its options) for the size's matrix (verified, or it raises: a wrong plan
    is a bug; cost-aware planners price their choices under the model), simulate it, set it against the bound."""
    bound_s, bound_term = at.bound
    m = at.matrix
    n = topo.nranks
    alg, options = entry.planner, entry.option_map
    if at.layout is None:
        req = Request(topo, m, alg, model=model, planner_options=options)
    else:
        counts, unit = at.layout
        req = Request(
            topo, m, alg, model=model, counts=counts, units=UnitPolicy(unit=unit), planner_options=options
        )
    res = compile(req)
    prog = res.program
    rep_v = res.verify
    payload = int(m.sum())
    sim = simulate_fast(prog, topo, model=model, payload_bytes=payload)
    t = sim.time_s
    algbw_fast = payload / n / t / 1e9 if t > 0 else float("inf")
    busiest = float(max(m.sum(axis=1).max(), m.sum(axis=0).max()))
    algbw_v = busiest / t / 1e9 if t > 0 else float("inf")
    algbw = algbw_fast if bw == "fast" else algbw_v
    return Row(
        algorithm=entry.label,
        size=size,
        count=size // 4 // n,
        time_s=t,
        algbw_GBps=algbw,
        busbw_GBps=algbw * (n - 1) / n,
        algbw_fast_GBps=algbw_fast,
        algbw_alltoallv_GBps=algbw_v,
        bound_s=bound_s,
        bound_term=bound_term,
        schedule_s=res.timings.get("plan", 0.0),
        stages=_int_meta(prog.meta.get("stages")),
        ops=len(prog.table),  # (prog.ops would build every op tuple only to count them)
        chunks=int(prog.counts.sum()),
        nwrong=len(rep_v.errors) if rep_v is not None else 0,
        padding_bytes=prog.padding_bytes,
        timeout_probability=sim.timeout_probability,
        bw=bw,
        pick=_auto_pick(prog.meta.get("auto")),
    )


def _size_input(
    traffic: str | npt.NDArray[np.int64],
    topo: Topology,
    size: int,
    seed: int,
    skew: float,
    mcf: bool,
    pattern: npt.NDArray[np.int64] | None,
) -> _SizeInput:
    m = matrix_for(traffic, topo, size, seed, skew)
    rep = lower_bounds(m, topo, mcf=mcf)
    layout = shared_layout(m, pattern) if pattern is not None else None
    return _SizeInput(m, layout, (rep.seconds, rep.best.name))


def _pattern(
    traffic: str | npt.NDArray[np.int64], topo: Topology, sizes: Sequence[int], seed: int, skew: float
) -> npt.NDArray[np.int64] | None:
    """The comparison's chunk pattern: the largest size's matrix in the default unit policy's counts (its
    rounding is the finest); None for a single size."""
    if len(sizes) < 2:
        return None
    m = matrix_for(traffic, topo, max(sizes), seed, skew)
    (_label, unit), *_rest = UnitPolicy().candidates(m, None, DEFAULT_ALIGN)
    return quantize(m, unit)


def shared_layout(
    m: npt.NDArray[np.int64], pattern: npt.NDArray[np.int64], align: int = DEFAULT_ALIGN
) -> tuple[npt.NDArray[np.int64], int] | None:
    """(``pattern``, unit) when ``pattern`` can carry ``m``: the unit is the smallest multiple of ``align``
    with ``pattern * unit >= m`` everywhere, and the padding is at most :data:`SHARED_PADDING_SLACK` of the
    payload above that of ``m``'s own layout under the default unit policy. None otherwise (an entry the
    pattern has no chunk for, or too much padding): the size then gets its own layout."""
    payload = int(m.sum())
    if payload == 0 or (m[pattern == 0] > 0).any():
        return None
    has = pattern > 0
    need = int((-(-m[has] // pattern[has])).max())
    unit = max(-(-need // align) * align, align)
    (_label, own), *_rest = UnitPolicy().candidates(m, None, align)
    own_pad = padding_bytes(m, quantize(m, own), own)
    if padding_bytes(m, pattern, unit) > own_pad + SHARED_PADDING_SLACK * payload:
        return None
    return pattern, unit


def run_compare(
    topo: Topology,
    traffic: str | npt.NDArray[np.int64],
    sizes: Sequence[int],
    algorithms: Sequence[str],
    *,
    seed: int = 0,
    skew: float = 0.8,
    model: SimModel | None = None,
    incast: IncastModel | None = None,
    mcf: bool = False,
    bw: str = "fast",
) -> list[Row]:
    """All rows at once (library use: examples, benchmarks); ``incast`` replaces the model's incast part."""
    mdl = resolve_model(topo, model, incast)
    return list(
        compare_rows(topo, traffic, sizes, algorithms, model=mdl, seed=seed, skew=skew, mcf=mcf, bw=bw)
    )


def _auto_pick(v: object) -> str:
    return str(v.get("pick", "")) if isinstance(v, dict) else ""


def fastest(rows: Sequence[Row]) -> dict[int, Row]:
    """Per size, the fastest row (ties: the first in table order)."""
    out: dict[int, Row] = {}
    for r in rows:
        if r.size not in out or r.time_s < out[r.size].time_s:
            out[r.size] = r
    return out


def summary_lines(rows: Sequence[Row]) -> list[str]:
    """The closing table: per size, the fastest planner and auto's pick (when auto ran)."""
    best = fastest(rows)
    auto: dict[int, Row] = {}
    for r in rows:  # the first auto entry's pick (an entry named auto, with options or not)
        if r.algorithm.split("[", 1)[0] == AUTO:
            auto.setdefault(r.size, r)
    lines = [
        "# fastest per size (simulated):",
        f"# {'size':>10s}  {'fastest':>12s}  {'time (us)':>10s}  auto's pick",
    ]
    for size, r in sorted(best.items()):
        pick = auto[size].pick if size in auto else "(auto not run)"
        lines.append(f"# {size:>10d}  {r.algorithm:>12s}  {_num(r.time_s * 1e6, 10)}  {pick}")
    return lines


def _int_meta(v: object) -> int:
    return int(v) if isinstance(v, (int, float)) else 0


def _num(x: float, width: int) -> str:
    """nccl-tests' getFloatStr: 2 decimals, then 1, then 0, then exponent, to fit the width."""
    for prec in (2, 1, 0):
        s = f"{x:.{prec}f}"
        if len(s) <= width:
            return s.rjust(width)
    return f"{x:.0e}".rjust(width)


def block_header(alg: str) -> str:
    """The nccl-tests column header for one algorithm's block (same widths), a2acc columns appended."""
    return "\n".join(
        [
            f"# a2acc algorithm: {alg}",
            "#" + " " * 65 + "out-of-place",
            f"# {'size':>10s}  {'count':>12s}  {'type':>8s}  {'redop':>6s}  {'root':>6s}  "
            f"{'time':>7s}  {'algbw':>6s}  {'busbw':>6s}  {'#wrong':>6s}  "
            f"{'sched':>9s}  {'bound':>9s}  {'%bound':>6s}  {'stages':>6s}",
            f"# {'(B)':>10s}  {'(elements)':>12s}  {'':>8s}  {'':>6s}  {'':>6s}  "
            f"{'(us)':>7s}  {'(GB/s)':>6s}  {'(GB/s)':>6s}  {'':>6s}  {'(us)':>9s}  {'(us)':>9s}  {'':>6s}  {'':>6s}",
        ]
    )


def format_row(r: Row) -> str:
    return (
        f"{r.size:>12d}  {r.count:>12d}  {'float':>8s}  {'none':>6s}  {-1:>6d}  "
        f"{_num(r.time_s * 1e6, 7)}  {_num(r.algbw_GBps, 6)}  {_num(r.busbw_GBps, 6)}  {r.nwrong:>6d}  "
        f"{_num(r.schedule_s * 1e6, 9)}  {_num(r.bound_s * 1e6, 9)}  {_num(r.pct_of_bound, 6)}  {r.stages:>6d}"
    )


def block_footer(rows: Sequence[Row]) -> str:
    avg = sum(r.busbw_GBps for r in rows) / max(1, len(rows))
    return f"# Avg bus bandwidth    : {avg:g}\n#"


def format_table(rows: Sequence[Row], header: str) -> str:
    """The whole table at once (what the CLI streams row by row)."""
    out = [header]
    for alg in dict.fromkeys(r.algorithm for r in rows):
        block = [r for r in rows if r.algorithm == alg]
        out.append(block_header(alg))
        out.extend(format_row(r) for r in block)
        out.append(block_footer(block))
    return "\n".join(out)


def document(rows: Sequence[Row], meta: dict[str, object]) -> dict[str, object]:
    """The JSON document ``-J`` writes: run metadata, then the rows the table shows (``fastest`` marks the
    fastest row of each size)."""
    best = {id(r) for r in fastest(rows).values()}
    return {**meta, "simulated": True, "rows": [{**r.to_json(), "fastest": id(r) in best} for r in rows]}


#: what the three outputs carry so a later run can tell a2acc wrote them (``a2acc.fileio.check_outputs``)
TOOL = "a2acc compare"


#: how the two text outputs start: the run's metadata opens with the version, then the tool
_JSON_HEAD = re.compile(rb'\{\n "a2acc_version": "[^"\n]*",\n "tool": "' + re.escape(TOOL.encode()) + rb'"')
_CSV_HEAD = re.compile(rb"# a2acc_version: [^\n]*\n# tool: " + re.escape(TOOL.encode()) + rb"\n")


def owned_json(head: bytes) -> bool:
    """Whether a file starts as :func:`write_json`'s output does (the tool's name elsewhere in a user's file is
    not enough)."""
    return _JSON_HEAD.match(head) is not None


def owned_csv(head: bytes) -> bool:
    return _CSV_HEAD.match(head) is not None


def owned_plot(head: bytes) -> bool:
    """A PNG whose ``Software`` text chunk names the tool (what :func:`plot` writes)."""
    return head.startswith(b"\x89PNG") and b"tEXtSoftware\x00" + TOOL.encode() in head


def write_json(path: str, rows: Sequence[Row], meta: dict[str, object]) -> None:
    atomic_write_text(path, json.dumps(document(rows, meta), indent=1) + "\n")


def write_csv(path: str, rows: Sequence[Row], meta: dict[str, object]) -> None:
    """CSV with a commented metadata preamble (``# key: value``), then a header row and the table's rows."""
    buf = io.StringIO()
    for k, v in meta.items():
        buf.write(f"# {k}: {json.dumps(v) if not isinstance(v, str) else v}\n")
    buf.write("# simulated: true\n")
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_FIELDS)
    best = {id(r) for r in fastest(rows).values()}
    for r in rows:
        w.writerow([*_csv_row(r), int(id(r) in best)])
    atomic_write_text(path, buf.getvalue())


def check_plot_backend() -> None:
    """Fail before any work when ``--plot`` cannot be honoured (matplotlib missing: the ``plot`` extra)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise InputError(
            "", "--plot", "matplotlib", "matplotlib is not installed: pip install 'a2acc[plot]'"
        ) from exc


def size_label(b: float) -> str:
    """1024-based size label for plot axes: 512 KiB, 64 MiB, 1 GiB."""
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= div:
            v = b / div
            if abs(v - round(v)) < 1e-9:
                return f"{v:.0f} {unit}"
            return f"{v:.1f} {unit}" if v >= 100 else f"{v:.3g} {unit}"
    return f"{b:.0f} B"


def plot(rows: Sequence[Row], path: str, title: str, metric: str = "busbw") -> None:
    """``metric`` (busbw by default) vs size, one line per algorithm plus the bound; y axis from zero."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if metric not in PLOT_METRICS:
        raise InputError("", "--plot-metric", metric, f"one of {', '.join(PLOT_METRICS)}")
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    sizes = sorted({r.size for r in rows})

    def value(r: Row) -> float:
        return {"busbw": r.busbw_GBps, "algbw": r.algbw_GBps, "time": r.time_s * 1e3}[metric]

    for alg in dict.fromkeys(r.algorithm for r in rows):
        pts = sorted((r.size, value(r)) for r in rows if r.algorithm == alg)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=alg)
    bound = {r.size: r for r in rows}
    if metric == "time":
        ax.plot(sizes, [bound[s].bound_s * 1e3 for s in sizes], "k--", label="lower bound")
    else:
        # the bound's bandwidth in the same definition as the rows: scale by time / bound time
        best = [
            value(bound[s]) * bound[s].time_s / bound[s].bound_s if bound[s].bound_s > 0 else 0.0
            for s in sizes
        ]
        ax.plot(sizes, best, "k--", label="bound (best possible)")
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes)
    ax.set_xticklabels([size_label(s) for s in sizes], rotation=30, ha="right")
    ax.minorticks_off()
    ax.set_xlabel("size per rank")
    bw_def = rows[0].bw if rows else "fast"
    ax.set_ylabel(
        {"busbw": "busbw (GB/s)", "algbw": f"algbw (GB/s, {bw_def} definition)", "time": "time (ms)"}[metric]
    )
    ax.set_ylim(bottom=0)
    ax.set_title(title, fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120, bbox_inches="tight", metadata={"Software": TOOL})
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())
