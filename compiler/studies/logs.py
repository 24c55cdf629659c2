"""Measured all-to-all runs, read for calibration and accuracy checks.

Inputs, recognised by content:

- **FAST's benchmark logs** (FAST repository ``amd/test_alltoall.cpp``, published as ``amd-result/*.txt``): one
  run per line, 16 numbers: total bytes over all GPUs, Zipf skew (0 = none), FLASH / fan-out / FLASH-ablation /
  SpreadOut algbw (GB/s), FLASH time and its load-balance / cross-node / restore phases, fan-out time, the
  ablation's four times, SpreadOut time (ms). The traffic comes from the file name as FAST names its runs:
  ``*fixed_sz*`` every off-diagonal entry equal (diagonal 0), ``*random*`` uniform entries
  (``uniform_distribution2``: ``rand() % 1024``, scaled), ``*skew*`` Zipf entries over 1..1024 with the line's
  skew (``zipf_distribution2``); ``<n>n_`` gives the number of servers, which must match the topology.
  Columns used: FLASH time -> planner ``fast``, fan-out time -> ``direct`` (RCCL grouped send/recv),
  SpreadOut time -> ``spreadout``; the matrices are drawn again with the same distributions (seeded), since
  the logs record only their totals.
- **nccl-tests** ``alltoall_perf`` / ``alltoallv_perf`` output: the ``#  Rank`` lines give the number of ranks
  (it must match the topology), each data row a size and its out-of-place time (us). alltoall sends
  ``size / nranks`` to every rank including itself; alltoallv needs the matrix the run used (``--traffic``),
  rescaled to each size. Both are NCCL's grouped send/recv: planner ``direct``. Real output varies, and all of
  these are read: the columns of current versions (``redop root ... #wrong``) and of old ones (no ``root``, a
  blank ``redop``, a float ``error``), with the columns current ones may append (timestamps, ``#bitdiff``,
  per-iteration statistics); launcher prefixes (Open MPI's ``[1,0]<stdout>:``, srun's ``0: ``); lines that
  are not rows (the command echo, NCCL INFO and UCX warnings: anything whose first field is not a size).
  Output of another collective (a ``Collective test starting`` line naming another test, or rows whose
  ``redop`` is a reduction) is refused.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from a2acc.errors import InputError
from a2acc.fileio import TooLarge, read_text, size_words
from a2acc.model.topology import Topology
from a2acc.model.traffic import MAX_RANK_BYTES

FAST_COLUMNS = 16
#: FAST's column -> (planner, column index of its time in ms)
FAST_TIMES = {"fast": 6, "direct": 10, "spreadout": 15}


class LogFormatError(InputError):
    """A measurement log is malformed, of an unknown format, or does not fit the topology."""


@dataclass(frozen=True)
class Traffic:
    """How a measured run's matrix was drawn: ``fixed`` (FAST: equal entries, diagonal 0), ``balanced``
    (nccl-tests alltoall: ``size / N`` to every rank including itself), ``uniform``/``zipf`` (FAST's random
    workloads), ``matrix`` (a given matrix, rescaled)."""

    kind: str
    skew: float = 0.0
    matrix: npt.NDArray[np.int64] | None = field(default=None, compare=False, repr=False)

    def label(self) -> str:
        return f"zipf {self.skew:g}" if self.kind == "zipf" else self.kind


@dataclass(frozen=True)
class Measurement:
    """One configuration: the median time over its repeated runs."""

    source: str
    algorithm: str
    traffic: Traffic
    size: int  # mean bytes one GPU sends (FAST: total / N; nccl-tests: the size column)
    time_s: float
    runs: int
    #: iterations each run averages (FAST: 10; nccl-tests: its ``iters``); 0 when unknown. A run that times out
    #: in some iterations reports their mean, and the median over runs is what a prediction is compared with
    iterations: int = 0
    #: servers of the topology the run was read against (a calibration may mix server counts); 0 when unknown
    servers: int = 0


#: FAST's benchmark times ``perf_iters = 10`` back-to-back iterations per logged run, after 10 warm-up ones
#: (FAST repository ``amd/test_alltoall.cpp``, ``perftest_*``)
FAST_ITERATIONS = 10
_ITERS_RE = re.compile(r"\biters:\s*(\d+)")

# ---------------------------------------------------------------------------------------------- readers
Warn = Callable[[str], None]


def read_logs(
    paths: Sequence[str],
    topo: Topology,
    *,
    traffic: npt.NDArray[np.int64] | None = None,
    warn: Warn | None = None,
) -> list[Measurement]:
    """Every measurement in ``paths`` (format recognised by content), grouped and reduced to medians.

    A row that is no measurement (nccl-tests' ``#wrong`` column non-zero, a time of ``N/A`` or 0) is left out
    and ``warn`` is told the file, the line and why; a file with nothing left is an error."""
    say: Warn = warn if warn is not None else (lambda _msg: None)
    raw: list[tuple[str, str, Traffic, float, float]] = []
    iterations: dict[str, int] = {}
    for p in paths:
        text = _read(p)
        if _is_nccl_tests(text):
            raw += _nccl_tests(text, p, topo, traffic, say)
            got = _ITERS_RE.search(text)
            iterations[p] = int(got.group(1)) if got else 0
        else:
            raw += _fast(text, p, topo, say)
            iterations[p] = FAST_ITERATIONS
    return _group(raw, iterations, topo.servers)


def servers_named(path: str) -> int | None:
    """The server count a FAST log's file name gives (``<n>n_``, as FAST names its runs), or None - also for
    nccl-tests output (recognised by content), whose count is its ``#  Rank`` lines, whatever its name says."""
    m = _SERVERS_RE.search(Path(path).name)
    if m is None or _is_nccl_tests(_read(path)):
        return None
    return int(m.group(1))


#: the largest log read (FAST's logs are ~10 KiB, a long nccl-tests sweep with NCCL INFO lines a few MiB)
MAX_LOG_BYTES = 256 << 20


def _read(path: str) -> str:
    try:
        return read_text(path, MAX_LOG_BYTES)
    except TooLarge:
        raise LogFormatError(
            path, "", Path(path).name, f"larger than {size_words(MAX_LOG_BYTES)}: not a measurement log"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise LogFormatError(path, "", path, f"cannot read the file ({exc.__class__.__name__})") from exc


#: launcher prefixes on every line: Open MPI's ``--tag-output`` (``[1,0]<stdout>:``), srun's ``--label`` (``0: ``)
_PREFIX_RE = re.compile(r"^(?:\[\d+,\d+\]<std(?:out|err)>:\s?|\s*\d+: )")


def _lines(text: str) -> list[str]:
    return [_PREFIX_RE.sub("", line, count=1) for line in text.splitlines()]


def _is_nccl_tests(text: str) -> bool:
    return any(line.lstrip().startswith("#") and "size" in line and "count" in line for line in _lines(text))


_SERVERS_RE = re.compile(r"(?:^|[^0-9])(\d+)n_")


def _fast(text: str, path: str, topo: Topology, warn: Warn) -> list[tuple[str, str, Traffic, float, float]]:
    """The runs of one FAST log (module docstring): the traffic from the file name, one row per planner column
    of every line."""
    name = Path(path).name
    kind = _fast_traffic_kind(name, path, topo)
    out: list[tuple[str, str, Traffic, float, float]] = []
    for no, line in enumerate(text.splitlines(), 1):
        if line.strip():
            out += _fast_line(line, no, path, name, kind, topo.nranks, warn)
    if not out:
        raise LogFormatError(path, "", name, "no measurements in the file")
    return out


def _fast_traffic_kind(name: str, path: str, topo: Topology) -> str:
    """The traffic FAST's file name gives (``fixed``, ``uniform``, ``zipf``, or "" when it does not say), after
    checking its ``<n>n_`` server count against the topology."""
    m = _SERVERS_RE.search(name)
    if m and int(m.group(1)) != topo.servers:
        raise LogFormatError(
            path,
            "file name",
            name,
            f"the run used {m.group(1)} servers ('{m.group(1)}n_'), the topology has {topo.servers} "
            f"(give --servers {m.group(1)}, or leave -n out to read each log on the count its name gives)",
        )
    low = name.lower()
    if "fixed" in low:
        return "fixed"
    if "random" in low or "uniform" in low:
        return "uniform"
    if "skew" in low:
        return "zipf"
    return ""


def _fast_line(
    line: str, no: int, path: str, name: str, kind: str, n: int, warn: Warn
) -> list[tuple[str, str, Traffic, float, float]]:
    """The measurements of line ``no`` (non-blank) of a FAST log: one per column of :data:`FAST_TIMES`, a time of
    0 left out with a warning."""
    parts = line.split()
    if len(parts) != FAST_COLUMNS:
        raise LogFormatError(
            path,
            f"line {no}",
            line.strip()[:60],
            f"FAST's log format has {FAST_COLUMNS} numbers per line (amd/test_alltoall.cpp); "
            "nccl-tests output has a '# size count type' header",
        )
    try:
        vals = [float(x) for x in parts]
    except ValueError:
        raise LogFormatError(path, f"line {no}", line.strip()[:60], "every column must be a number") from None
    total, skew = vals[0], vals[1]
    if not (math.isfinite(total) and 0 < total <= MAX_RANK_BYTES * n) or not (
        math.isfinite(skew) and 0 <= skew < 10
    ):
        raise LogFormatError(
            path,
            f"line {no}",
            line.strip()[:60],
            f"column 1 is total bytes in (0, {MAX_RANK_BYTES} x GPUs], column 2 a skew in [0, 10)",
        )
    k = kind or ("zipf" if skew > 0 else "")
    if not k:
        raise LogFormatError(
            path,
            "file name",
            name,
            "cannot tell the traffic: FAST names its runs *fixed_sz*, *random_*, *skew*",
        )
    tr = Traffic(k, skew if k == "zipf" else 0.0)
    out: list[tuple[str, str, Traffic, float, float]] = []
    for alg, col in FAST_TIMES.items():
        t = vals[col]
        if t == 0:
            warn(f"{path}: line {no}: {alg} time is 0: left out (no measurement)")
            continue
        if not (math.isfinite(t) and 0 < t <= MAX_TIME_S * 1e3):
            raise LogFormatError(
                path,
                f"line {no}, column {col + 1}",
                parts[col],
                f"times are ms in (0, {MAX_TIME_S * 1e3:g}]",
            )
        out.append((path, alg, tr, total / n, t * 1e-3))
    return out


_RANK_RE = re.compile(r"^#\s*Rank\s+\d+\s")
#: a data row whatever its size column says: a size starting like a number, then an element count and a type
#: name (``64M 16777216 float ...``); NCCL INFO and launcher lines never have this shape
_ROW_SHAPE = re.compile(r"^[-+.]?\d\S*\s+[-+]?\d+\s+[A-Za-z_][A-Za-z0-9_]*(?:\s|$)")
_TEST_RE = re.compile(r"^#\s*Collective test starting:\s*(\S+)", re.IGNORECASE)
_ROOT_RE = re.compile(r"^-?\d+$")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _test_name(binary: str) -> str:
    """The collective a test binary runs: ``alltoall_perf``, ``alltoall_perf_mpi`` (nccl-tests' ``NAME_SUFFIX``)
    -> ``alltoall``."""
    return binary.lower().split("_perf", 1)[0]


#: reductions: a row naming one is from a reducing collective (alltoall rows say ``none``, or leave it blank)
_REDOPS = frozenset({"sum", "prod", "min", "max", "avg", "premulsum", "mulsum"})


def _nccl_tests(
    text: str, path: str, topo: Topology, traffic: npt.NDArray[np.int64] | None, warn: Warn
) -> list[tuple[str, str, Traffic, float, float]]:
    lines = _lines(text)
    for line in lines:
        got = _TEST_RE.match(line)
        if got and _test_name(got.group(1)) not in ("alltoall", "alltoallv"):
            raise LogFormatError(
                path, "Collective test starting", got.group(1), "an alltoall_perf or alltoallv_perf log"
            )
    ranks = sum(1 for line in lines if _RANK_RE.match(line))
    if ranks and ranks != topo.nranks:
        m = topo.gpus_per_server
        fix = (
            f"give --servers {ranks // m} ({ranks // m} servers of {m} GPUs)"
            if topo.is_tiered and ranks % m == 0
            else f"give a topology of {ranks} GPUs"
        )
        raise LogFormatError(
            path,
            "#  Rank lines",
            ranks,
            f"the run used {ranks} ranks, the topology has {topo.nranks} GPUs: {fix}",
        )
    alltoallv = "alltoallv" in Path(path).name.lower() or any(
        "alltoallv" in line for line in lines if line.startswith("#")
    )
    if alltoallv and traffic is None:
        raise LogFormatError(
            path, "--traffic", None, "an alltoallv_perf log needs the matrix the run used (--traffic FILE)"
        )
    tr = Traffic("matrix", 0.0, traffic) if alltoallv else Traffic("balanced")
    out: list[tuple[str, str, Traffic, float, float]] = []
    left_out = 0
    for no, line in enumerate(lines, 1):
        parts = line.split()
        if not parts or parts[0].startswith("#"):
            continue
        if not parts[0].isdigit():
            if _ROW_SHAPE.match(line.strip()):  # a row whose size is no byte count: never dropped silently
                raise LogFormatError(
                    path,
                    f"line {no}, size",
                    parts[0][:60],
                    "the size in bytes: a whole number >= 0, as nccl-tests prints it (no unit suffix)",
                )
            continue  # what is no row: the command echo, NCCL INFO lines, UCX warnings
        row = _nccl_row(parts, path, no, topo.nranks)
        if isinstance(row, str):
            warn(f"{path}: line {no}: {row}: left out")
            left_out += 1
            continue
        out.append((path, "direct", tr, float(row[0]), row[1]))
    if not out:
        why = f" ({left_out} rows left out: wrong results, N/A or zero times or sizes)" if left_out else ""
        raise LogFormatError(
            path, "", Path(path).name, f"no usable data rows (size count type redop root time ...){why}"
        )
    return out


#: the longest measured time a log may report (a day): larger values are corrupt, not slow
MAX_TIME_S = 86400.0
_NCCL_ROW = (
    "nccl-tests rows are: size count type [redop root] time(us) algbw busbw #wrong (out-of-place, then "
    "in-place)"
)


def _nccl_row(parts: list[str], path: str, no: int, nranks: int) -> tuple[int, float] | str:
    """One nccl-tests data row as (bytes, seconds), or why it is no measurement (a size of 0 included).

    The columns after ``type`` differ between versions, and current ones may append more after the in-place
    block (``-Z`` timestamps, bitwise ``#bitdiff``, per-iteration statistics), so the layout is told from the
    left: ``redop root time ... #wrong`` (a word, then an integer root: current versions), ``redop time ... error`` (a
    word, no root: old versions), ``time ... error`` (old alltoall rows, whose redop is blank)."""
    try:
        size = int(parts[0])
    except ValueError:
        raise LogFormatError(path, f"line {no}, size", parts[0][:60], _NCCL_ROW) from None
    if size > MAX_RANK_BYTES:
        raise LogFormatError(path, f"line {no}, size", parts[0][:60], f"bytes per rank <= {MAX_RANK_BYTES}")
    if len(parts) < 11:
        raise LogFormatError(path, f"line {no}", " ".join(parts)[:60], _NCCL_ROW)
    if parts[3].lower() in _REDOPS:  # the redop column, where a row has one (blank in old alltoall rows)
        raise LogFormatError(
            path, f"line {no}, redop", parts[3], "an alltoall or alltoallv log (rows with redop none)"
        )
    if size <= 0:
        return "size 0 (nothing moved)"
    t = 3 if _is_number(parts[3]) else 5 if _ROOT_RE.match(parts[4]) else 4  # where the time column is
    time_s, wrong = parts[t], parts[t + 3]
    if wrong != "N/A":  # N/A: the run did not check (-c 0), not a wrong result
        try:
            # #wrong counts wrong elements; old versions print the largest error instead (a float)
            nwrong = float(wrong) if any(c in wrong for c in ".eE") else int(wrong)
        except ValueError:
            raise LogFormatError(
                path, f"line {no}, #wrong", wrong, "a count of wrong results, an error, or N/A"
            ) from None
        if isinstance(nwrong, int) and nwrong != 0:
            return f"{nwrong} wrong results (#wrong)"
        if not math.isfinite(nwrong) or nwrong != 0:
            return f"wrong results (error {wrong})"
    if time_s == "N/A":
        return "time is N/A"
    try:
        time_us = float(time_s)
    except ValueError:
        raise LogFormatError(path, f"line {no}, time", time_s, "a time in us, or N/A") from None
    if time_us == 0:
        return "time is 0"
    if not (math.isfinite(time_us) and 0 < time_us <= MAX_TIME_S * 1e6):
        raise LogFormatError(path, f"line {no}, time", time_s, f"a time in us in (0, {MAX_TIME_S * 1e6:g}]")
    return size, time_us * 1e-6


def _group(
    raw: list[tuple[str, str, Traffic, float, float]], iterations: dict[str, int], servers: int
) -> list[Measurement]:
    """Runs of one (algorithm, traffic, size within 1 %) configuration -> one median measurement."""
    groups: dict[tuple[str, str, float, int, int], list[tuple[str, float, float]]] = {}
    for src, alg, tr, size, t in raw:
        key = (
            alg,
            tr.kind,
            tr.skew,
            id(tr.matrix) if tr.matrix is not None else 0,
            round(math.log2(size) * 4),
        )
        groups.setdefault(key, []).append((src, size, t))
    out = []
    for key, rows in groups.items():
        alg, kind, skew, _mid, _sz = key
        srcs = sorted({r[0] for r in rows})
        tr = next(t for s, a, t, _z, _t in raw if a == alg and t.kind == kind and t.skew == skew)
        out.append(
            Measurement(
                source=", ".join(Path(s).name for s in srcs),
                algorithm=alg,
                traffic=tr,
                size=round(float(np.median([r[1] for r in rows]))),
                time_s=float(np.median([r[2] for r in rows])),
                runs=len(rows),
                iterations=min(iterations.get(s, 0) for s in srcs),
                servers=servers,
            )
        )
    out.sort(key=lambda m: (m.algorithm, m.traffic.kind, m.traffic.skew, m.size))
    return out


# ---------------------------------------------------------------------------------------------- matrices
#: FAST's benchmark counts int32 elements and aligns every entry up to 512 of them (``mem_align``, FAST repository
#: ``amd/src/include/fast_alltoall/alltoall_define.h``): entries are multiples of 2 KiB
FAST_ELEMENT = 4
FAST_ALIGN = 512 * FAST_ELEMENT
#: FAST's random workloads draw entries from 1..1024 (uniform: ``rand() % 1024``, 0..1023; Zipf: over 1..1024)
FAST_SPAN = 1024


def matrix_for(tr: Traffic, n: int, size: int, seed: int = 0) -> npt.NDArray[np.int64]:
    """A matrix drawn like the measured run's (mean bytes per GPU ``size``).

    FAST's workloads (FAST repository ``amd/test_alltoall.cpp``, ``fixed_distribution``, ``uniform_distribution2``,
    ``zipf_distribution2``): the diagonal is 0; random entries are weights ``w`` (uniform ``rand() % 1024``; Zipf
    through FAST's approximate inverse CDF, :func:`fast_zipf_weights`) times the integer multiplier
    ``floor(per_gpu * n * (n - 1) / sum(w))`` (``per_gpu`` elements per destination), aligned up to 512 elements;
    the log records only the total, so ``per_gpu`` is taken from it (the power of two FAST used when the total
    is within 3 % of one: the multiplier's truncation makes the logged total a little smaller). nccl-tests ``balanced``: ``size / n`` to
    every rank including itself; ``matrix``: the given matrix rescaled."""
    rng = np.random.default_rng(seed)
    if tr.kind == "balanced":
        return np.full((n, n), max(size // n, 1), dtype=np.int64)
    if tr.kind == "matrix":
        assert tr.matrix is not None
        given = tr.matrix.astype(np.float64)
        mean = float(given.sum(axis=1).mean())
        return (
            np.asarray(np.rint(given * (size / mean) / 16) * 16, dtype=np.int64)
            if mean > 0
            else given.astype(np.int64)
        )
    off = ~np.eye(n, dtype=bool)
    if tr.kind == "fixed":
        entry = -(-max(size // max(n - 1, 1), 1) // FAST_ALIGN) * FAST_ALIGN
        return np.where(off, entry, 0).astype(np.int64)
    w: npt.NDArray[np.int64]
    if tr.kind == "uniform":
        w = rng.integers(0, FAST_SPAN, (n, n), dtype=np.int64)
    elif tr.kind == "zipf":
        w = fast_zipf_weights(tr.skew, rng.random((n, n)))
    else:  # pragma: no cover - Traffic kinds are fixed by the readers
        raise ValueError(tr.kind)
    w = np.where(off, w, 0).astype(np.int64)
    per_gpu = max(size / (FAST_ELEMENT * max(n - 1, 1)), 1.0)  # elements per destination
    pow2 = 2.0 ** round(math.log2(per_gpu))
    if abs(per_gpu / pow2 - 1.0) < 0.03:  # FAST's runs use powers of two; the logged total is a little less
        per_gpu = pow2
    mult = max(int(per_gpu * n * (n - 1) // max(int(w.sum()), 1)), 1)
    elems = -(-(w * mult) // 512) * 512  # mem_align: up to 512 elements
    return np.asarray(elems * FAST_ELEMENT, dtype=np.int64)


def _zipf_cdf(s: float, x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """12 x the Euler-Maclaurin estimate of sum_{k<x} k^-s that FAST's ``zipf_inverse_cdf_fast`` inverts (0 at 1)."""
    head = np.log(x) * 12.0 if abs(1.0 - s) < 1e-9 else 12.0 * (x ** (1.0 - s) - 1.0) / (1.0 - s)
    return np.asarray(head + 6.0 * (1.0 - x**-s) + s * (1.0 - x ** (-1.0 - s)), dtype=np.float64)


def fast_zipf_weights(s: float, p: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
    """Zipf weights as FAST draws them: the real ``x`` in [1, 1024] with ``cdf(x) = p cdf(1024)`` (the estimate
    of :func:`_zipf_cdf`), truncated to an integer - so ``k`` has probability ``(cdf(k+1) - cdf(k)) / cdf(1024)``,
    close to ``k^-s`` normalised over 1..1023. ``p`` are uniform draws in [0, 1]."""
    grid = np.arange(1, FAST_SPAN + 1, dtype=np.float64)
    cdf = _zipf_cdf(s, grid)
    k = np.searchsorted(cdf / cdf[-1], np.clip(p, 0.0, 1.0), side="right")
    return np.asarray(np.clip(k, 1, FAST_SPAN), dtype=np.int64)
