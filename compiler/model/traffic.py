"""Traffic matrices: N x N non-negative integer bytes, row = sender, column = receiver.

Formats (chosen by extension): ``.npy``; ``.csv`` (comma separated, no header); ``.json``
(``{"units": "bytes", "matrix": [[...]]}`` or a bare list of lists); ``.txt``/anything else: the
whitespace-separated square matrix of bytes that nccl-tests' ``alltoallv_perf`` reads through
``NCCL_TESTS_ALLTOALLV_MATRIX_FILE`` (row i = sender i).

Generators (all seeded with ``numpy.random.default_rng(seed)``, so the same arguments give the same matrix
on every machine) and what ``size`` means for each:

- ``balanced``: every entry ``size // N`` (nccl-tests ``alltoall``: size = per-rank send buffer, self included).
- ``uniform``: FAST's simulator workload: every off-diagonal entry ``rand() % 10000``, diagonal 0, scaled so
  the mean row sum is ``size``.
- ``zipf``: FAST's skewed workload: i.i.d. Zipf(s) entries over {1..10000}, diagonal 0, scaled likewise.
- ``lognormal``: i.i.d. log-normal(0, sigma) entries (DeepEP pull request 393 found log-normal fits measured
  per-rank token counts best), or with ``gini``: the sigma whose draws give the off-diagonal entries exactly that
  Gini coefficient (what ``a2acc traffic show`` prints; measured MoE routing has Gini 0.10-0.38, DODOCO,
  arXiv 2605.20982), found by bisection on the seeded draws (the Gini of ``exp(sigma z)`` grows with sigma).
- ``w0`` ... ``w7``: Megatron-LM's token-imbalance workloads (:mod:`a2acc.model.workloads`), generated there.
- ``moe``: MoE routing: each rank routes ``tokens`` tokens to ``top_k`` distinct experts drawn from a
  Zipf(skew) popularity over ``experts`` experts (experts are spread evenly over ranks, popularity order is a
  seeded permutation); entry = tokens routed x hidden x dtype bytes. If ``size`` is given, ``tokens`` is set so
  a rank sends about ``size`` bytes.

Entries are rounded to multiples of ``align`` bytes (default 16, as nccl-tests aligns alltoallv entries).
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from a2acc.defaults import GENERATORS as GENERATORS
from a2acc.defaults import MAX_RANK_BYTES as MAX_RANK_BYTES
from a2acc.errors import TrafficMatrixError
from a2acc.fileio import TooLarge, atomic_write_bytes, loads_json, read_text, size_words
from a2acc.model.topology import MAX_RANKS

Matrix = npt.NDArray[np.int64]
# size limits, checked before anything is allocated from a matrix: ranks (MAX_RANKS, as topologies), and bytes a
# rank sends or receives, MAX_RANK_BYTES (a2acc.defaults: 2**50 = 1 PiB keeps every sum exact in float64 and far
# from int64 overflow)
#: the MoE generator's limits: experts, and Gumbel draws (ranks x tokens per rank x experts, ~10 ns each: a few
#: minutes at the limit, which 1 GiB per rank on 256 ranks with 2 experts each stays well within)
MAX_EXPERTS = 1 << 16
MAX_MOE_DRAWS = 2e10


def validate_matrix(raw: Any, source: str, expect_ranks: int | None = None) -> Matrix:
    """Check that ``raw`` is a square matrix of finite non-negative integers within the size limits
    (:data:`MAX_RANKS` ranks, :data:`MAX_RANK_BYTES` bytes sent or received per rank); return it as int64.

    Strings, booleans and mixed lists are refused (a JSON matrix of ``"1"`` is not bytes); unsigned and float
    entries are range-checked before any conversion, so nothing wraps silently. The shape is checked before
    any entry is read (a memory-mapped ``.npy`` is refused from its header alone)."""
    try:
        arr = raw if isinstance(raw, np.ndarray) else np.asarray(raw)
        unread = None
    except (ValueError, TypeError) as exc:
        unread = exc
    if isinstance(raw, list) and (unread or arr.dtype.kind not in "iuf"):  # only then a pass over every entry
        _name_a_bad_entry(raw, source)
    if unread is not None:
        raise TrafficMatrixError(
            source, "matrix", "ragged or non-numeric", f"need an N x N numeric matrix ({unread})"
        ) from unread
    _check_shape(arr, source)
    if expect_ranks is not None and arr.shape[0] != expect_ranks:  # before any entry is read or converted
        raise TrafficMatrixError(
            source,
            "shape",
            tuple(arr.shape),
            f"the topology has {expect_ranks} GPUs, so the matrix must be {expect_ranks} x {expect_ranks}",
        )
    _check_entries(arr, source)
    out = np.ascontiguousarray(arr, dtype=np.int64)
    _check_rank_sums(out, source)
    return out


def _check_shape(arr: npt.NDArray[Any], source: str) -> None:
    """Square, at least 1 x 1, at most :data:`MAX_RANKS` ranks."""
    if arr.ndim != 2 or arr.shape[0] != arr.shape[1] or arr.shape[0] == 0:
        raise TrafficMatrixError(
            source, "shape", tuple(arr.shape), "the matrix must be square N x N with N >= 1"
        )
    if arr.shape[0] > MAX_RANKS:
        raise TrafficMatrixError(source, "shape", tuple(arr.shape), f"at most {MAX_RANKS} ranks")


def _first(mask: npt.NDArray[np.bool_]) -> tuple[int, int]:
    """(row, column) of the first True entry of ``mask``."""
    i, j = (int(x) for x in np.argwhere(mask)[0])
    return i, j


#: the most entries of a JSON matrix looked through for the first one that is no number of bytes (a 4096-rank
#: matrix); past it, numpy's reading of the whole names the kind of entry found instead
MAX_NAMED_ENTRIES = 1 << 24


def _name_a_bad_entry(rows: list[Any], source: str) -> None:
    """The first entry of a JSON matrix that is not a number of bytes, by its place: a string, a null, or an
    integer past int64 (numpy would keep the whole matrix as strings or objects and name only that kind)."""
    seen = 0
    for i, row in enumerate(rows):
        if not isinstance(row, list):
            return  # the shape check names it
        seen += len(row)
        if seen > MAX_NAMED_ENTRIES:
            return
        for j, x in enumerate(row):
            if isinstance(x, bool) or not isinstance(x, (int, float)):
                raise TrafficMatrixError(
                    source,
                    f"entry [{i}][{j}]",
                    x,
                    "a number of bytes (an integer, not a string, boolean or null)",
                )
            if isinstance(x, int) and not 0 <= x <= MAX_RANK_BYTES:
                raise TrafficMatrixError(
                    source, f"entry [{i}][{j}]", x, f"a number of bytes from 0 to {MAX_RANK_BYTES} (2**50)"
                )


def _check_entries(arr: npt.NDArray[Any], source: str) -> None:
    """Numbers of whole bytes in ``[0, MAX_RANK_BYTES]``, checked in the entries' own type (no conversion that
    could wrap: an unsigned 2**63 + 5 or a float 1e30 is reported as written)."""
    if arr.dtype.kind not in "iuf":
        raise TrafficMatrixError(
            source,
            "dtype",
            str(arr.dtype),
            "entries must be numbers of bytes (integers, not strings or booleans)",
        )
    if arr.dtype.kind in "iu":
        big = arr > MAX_RANK_BYTES
        if big.any():
            i, j = _first(big)
            raise TrafficMatrixError(
                source,
                f"entry [{i}][{j}]",
                int(arr[i, j]),
                f"at most {MAX_RANK_BYTES} bytes (2**50) per entry",
            )
    if arr.dtype.kind == "f":
        _check_float_entries(arr, source)
    neg = arr < 0
    if neg.any():
        i, j = _first(neg)
        raise TrafficMatrixError(source, f"entry [{i}][{j}]", arr[i, j].item(), "entries must be >= 0 bytes")


def _check_float_entries(arr: npt.NDArray[np.floating[Any]], source: str) -> None:
    """Finite, whole and at most :data:`MAX_RANK_BYTES` in magnitude (the sign is checked by the caller)."""
    bad = ~np.isfinite(arr)
    if bad.any():
        i, j = _first(bad)
        raise TrafficMatrixError(source, f"entry [{i}][{j}]", float(arr[i, j]), "entries must be finite")
    frac = arr != np.floor(arr)
    if frac.any():
        i, j = _first(frac)
        raise TrafficMatrixError(source, f"entry [{i}][{j}]", float(arr[i, j]), "entries must be whole bytes")
    if (
        float(np.finfo(arr.dtype).max) <= MAX_RANK_BYTES
    ):  # float16 holds no such value (comparing would overflow)
        return
    big = np.abs(arr) > MAX_RANK_BYTES
    if big.any():
        i, j = _first(big)
        raise TrafficMatrixError(
            source,
            f"entry [{i}][{j}]",
            float(arr[i, j]),
            f"at most {MAX_RANK_BYTES} bytes (2**50) per entry",
        )


def _check_rank_sums(out: Matrix, source: str) -> None:
    """No rank sends or receives more than :data:`MAX_RANK_BYTES` (sums in float64, exact below 2**53: an
    int64 sum could wrap)."""
    sums = (out.astype(np.float64).sum(axis=1), out.astype(np.float64).sum(axis=0))
    for what, s in zip(("row", "column"), sums):
        if float(s.max()) > MAX_RANK_BYTES:
            r = int(np.argmax(s))
            raise TrafficMatrixError(
                source,
                f"{what} {r}",
                int(s[r]),
                f"a rank sends and receives at most {MAX_RANK_BYTES} bytes (2**50)",
            )


#: the largest JSON matrix read (4096 ranks of 12-digit entries take ~200 MB; .npy is memory-mapped instead), and
#: the longest line of a CSV or text matrix (16384 entries of up to 64 characters)
MAX_JSON_BYTES = 1 << 30
MAX_LINE_CHARS = 1 << 20


def load_matrix(path: str | Path, expect_ranks: int | None = None) -> Matrix:
    """Read a matrix file (format by extension, see module doc) and validate it."""
    p = Path(path)
    src = str(p)
    suffix = p.suffix.lower()
    try:
        if suffix == ".npy":
            try:
                # memory-mapped: the header's shape is checked (validate_matrix) before the data is read
                with np.errstate(all="ignore"):  # a header's shape past int64 overflows while it is sized
                    raw: Any = np.load(p, allow_pickle=False, mmap_mode="r")
            except OSError:
                raise
            except (
                Exception
            ) as exc:  # numpy's header parser: ValueError, EOFError, SyntaxError, TokenError...
                why = str(exc) or "empty"
                raise TrafficMatrixError(
                    src,
                    "",
                    p.name,
                    f"not a valid .npy array file ({why[:200]}{'...' if len(why) > 200 else ''})",
                ) from exc
        elif suffix == ".json":
            try:
                text = read_text(p, MAX_JSON_BYTES)
            except TooLarge:
                raise TrafficMatrixError(
                    src, "", p.name, f"larger than {size_words(MAX_JSON_BYTES)}: use .npy for large matrices"
                ) from None
            try:
                doc = loads_json(text, unique_keys=True)  # "matrix" twice: the last would silently win
            except json.JSONDecodeError as exc:
                raise TrafficMatrixError(src, "", p.name, f"not valid JSON ({exc})") from exc
            if isinstance(doc, dict):
                units = doc.get("units", "bytes")
                if units != "bytes":
                    raise TrafficMatrixError(src, "units", units, "only 'bytes' is supported")
                if "matrix" not in doc:
                    raise TrafficMatrixError(src, "matrix", None, "the JSON object needs a 'matrix' list")
                raw = doc["matrix"]
            else:
                raw = doc
            if "true" in text or "false" in text:  # numpy would read them as 1 and 0 bytes
                _refuse_booleans(raw, src)
        else:
            raw = _read_rows(p, src, csv_cells=suffix == ".csv")
    except OSError as exc:
        raise TrafficMatrixError(src, "", str(p), f"cannot read the file ({exc.__class__.__name__})") from exc
    except UnicodeDecodeError as exc:
        raise TrafficMatrixError(src, "", p.name, "not a text file; use .npy for binary matrices") from exc
    return validate_matrix(raw, src, expect_ranks)


def _refuse_booleans(raw: object, src: str) -> None:
    """The first JSON boolean among the matrix's entries, as an error (only looked for when the text has one)."""
    for i, row in enumerate(raw if isinstance(raw, list) else ()):
        for j, x in enumerate(row if isinstance(row, list) else ()):
            if isinstance(x, bool):
                raise TrafficMatrixError(
                    src, f"entry [{i}][{j}]", x, "entries must be numbers of bytes (not booleans)"
                )


def _read_rows(p: Path, src: str, *, csv_cells: bool) -> npt.NDArray[np.float64]:
    """The rows of a CSV or whitespace-separated text matrix, read line by line (blank lines and, in text,
    ``#`` comments skipped). A row is refused before it is split when it has more entries than
    :data:`MAX_RANKS` or than row 0, and the file once it has more rows than row 0 has entries, so what is held
    stays within the N x N matrix the limits allow (8 bytes per entry), whatever the file holds."""
    rows: list[npt.NDArray[np.float64]] = []
    n = MAX_RANKS
    with open(p, encoding="utf-8", newline="" if csv_cells else None) as fh:
        for line in iter(lambda: fh.readline(MAX_LINE_CHARS + 1), ""):
            if len(line) > MAX_LINE_CHARS:  # (a file of NULs or one endless line: refused at this length)
                raise TrafficMatrixError(
                    src,
                    f"row {len(rows)}",
                    f"a line of more than {MAX_LINE_CHARS} characters",
                    f"one row of at most {MAX_RANKS} entries per line",
                )
            if csv_cells:
                too_long = line.count(",") >= n  # counting allocates nothing: refused before it is split
                if not line.strip(", \t\r\n"):
                    continue
                cells = [] if too_long else [c.strip() for c in next(csv.reader([line]), [])]
            else:
                text = line.strip()
                if not text or text.startswith("#"):
                    continue
                cells = text.split(None, n)  # at most n + 1 pieces
                too_long = len(cells) > n
            i = len(rows)
            if too_long:
                if i == 0:
                    raise TrafficMatrixError(src, "row 0", f"more than {n} entries", f"at most {n} ranks")
                raise TrafficMatrixError(
                    src, f"row {i}", f"more than {n} entries", f"every row needs {n} entries (row 0 has {n})"
                )
            if i == 0:
                n = len(cells)
            elif len(cells) != n:
                raise TrafficMatrixError(
                    src, f"row {i}", len(cells), f"every row needs {n} entries (row 0 has {n})"
                )
            if i >= n:
                raise TrafficMatrixError(
                    src, "shape", f"more than {n} rows of {n}", "the matrix must be square N x N with N >= 1"
                )
            rows.append(_row_values(cells, i, src))
    if not rows:
        raise TrafficMatrixError(src, "matrix", "empty", "the file holds no matrix rows")
    return np.stack(rows)


#: what a matrix cell may spell (inf and nan too: the matrix check then says they must be finite)
_NUMBER = re.compile(
    r"\A[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|inf|infinity|nan)\Z", re.IGNORECASE
)


def _row_values(cells: list[str], i: int, src: str) -> npt.NDArray[np.float64]:
    vals: list[float] = []
    for j, c in enumerate(cells):
        try:
            if not _NUMBER.match(c):  # float() also takes "1_000", Arabic-Indic and full-width digits
                raise ValueError(c)
            vals.append(float(c))
        except ValueError:
            raise TrafficMatrixError(
                src, f"entry [{i}][{j}]", c, "entries must be numbers of bytes"
            ) from None
    return np.array(vals, dtype=np.float64)


#: the "format" key of a2acc's JSON matrices: what tells a later ``traffic gen -o`` that a2acc wrote the file
MATRIX_FORMAT = "a2acc.matrix"


def matrix_bytes(matrix: Matrix, suffix: str, source: str = "matrix") -> bytes:
    """The file content of a matrix in the format named by ``suffix`` (.npy, .json, .csv, else nccl-tests'
    whitespace-separated text)."""
    m = validate_matrix(matrix, source)
    suffix = suffix.lower()
    if suffix == ".npy":
        buf = io.BytesIO()
        np.save(buf, m, allow_pickle=False)
        return buf.getvalue()
    if suffix == ".json":
        return (json.dumps({"format": MATRIX_FORMAT, "units": "bytes", "matrix": m.tolist()}) + "\n").encode()
    sep = "," if suffix == ".csv" else " "
    return "".join(sep.join(str(int(x)) for x in row) + "\n" for row in m).encode()


def owned_matrix(head: bytes) -> bool:
    """Whether a file starting with ``head`` is a matrix a2acc wrote (only JSON carries the mark; .npy, .csv
    and text matrices are recognised only when their bytes are exactly what would be written)."""
    return head.lstrip().startswith(b'{"format": "' + MATRIX_FORMAT.encode() + b'"')


def save_matrix(matrix: Matrix, path: str | Path) -> None:
    """Write a matrix atomically in the format named by the extension."""
    p = Path(path)
    atomic_write_bytes(p, matrix_bytes(matrix, p.suffix, str(p)))


# ---------------------------------------------------------------------- generators
@dataclass(frozen=True)
class MoeSpec:
    """Parameters of the MoE routing generator (see module doc)."""

    tokens: int = 4096
    experts: int = 0  # 0 -> 2 experts per rank
    top_k: int = 2
    hidden: int = 4096
    dtype_bytes: int = 2
    skew: float = 0.8


def _align(x: npt.NDArray[np.float64], align: int) -> Matrix:
    return (np.rint(x / align) * align).astype(np.int64)


def _scale_rows(raw: npt.NDArray[np.float64], size: int, align: int) -> Matrix:
    mean_row = raw.sum(axis=1).mean()
    if mean_row <= 0:
        return np.zeros(raw.shape, dtype=np.int64)
    return _align(raw * (size / mean_row), align)


def _zipf_entries(rng: np.random.Generator, s: float, shape: tuple[int, int], vmax: int = 10000) -> Any:
    ranks = np.arange(1, vmax + 1, dtype=np.float64)
    p = ranks ** (-s)
    p /= p.sum()
    return rng.choice(ranks, size=shape, p=p)


#: the widest log-normal spread generated: exp(20 x 6 standard deviations) is ~1e52, still a float, and one
#: entry then carries all of a row
MAX_SIGMA = 20.0


def gini(values: npt.ArrayLike) -> float:
    """The Gini coefficient of non-negative ``values`` (0: all equal; towards 1: one value holds everything;
    Gini 1912): ``sum_i (2i - k - 1) x_(i) / (k sum x)`` over the ``k`` values sorted ascending."""
    vals = np.sort(np.asarray(values, dtype=np.float64).ravel())
    k, total = len(vals), float(vals.sum())
    if k == 0 or total <= 0:
        return 0.0
    return float((2 * np.arange(1, k + 1) - k - 1).dot(vals) / (k * total))


def sigma_for_gini(z: npt.NDArray[np.float64], target: float) -> float | None:
    """The sigma at which ``exp(sigma z)`` has Gini coefficient ``target`` (bisection to 1e-12: the Gini of
    ``exp(sigma z)`` grows with sigma for fixed draws ``z``, from 0 at sigma 0); None when even
    :data:`MAX_SIGMA` stays below it (few draws: two values never pass 0.5)."""
    lo, hi = 0.0, MAX_SIGMA
    if len(z) == 0 or gini(np.exp(hi * (z - z.max()))) < target:
        return None
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if gini(np.exp(mid * (z - z.max()))) < target:  # (z - max: no overflow; the Gini ignores a scale)
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12:
            break
    return 0.5 * (lo + hi)


def generate(
    kind: str,
    nranks: int,
    size: int | None,
    seed: int = 0,
    *,
    skew: float = 0.8,
    sigma: float = 1.0,
    gini_target: float | None = None,
    align: int = 16,
    moe: MoeSpec | None = None,
) -> Matrix:
    """Generate a seeded traffic matrix (see module doc for each kind and what ``size`` means)."""
    src = f"traffic gen {kind}"
    if kind not in GENERATORS:
        raise TrafficMatrixError(src, "KIND", kind, f"allowed generators: {', '.join(GENERATORS)}")
    if nranks < 1 or nranks > MAX_RANKS:
        raise TrafficMatrixError(src, "--ranks", nranks, f"must be in 1..{MAX_RANKS}")
    if not 1 <= align <= MAX_RANK_BYTES:
        raise TrafficMatrixError(src, "--align", align, f"must be 1 to {MAX_RANK_BYTES} bytes")
    if size is not None and not 0 <= size <= MAX_RANK_BYTES:
        raise TrafficMatrixError(src, "--size", size, f"must be 0 to {MAX_RANK_BYTES} bytes per rank")
    if kind != "moe" and size is None:
        raise TrafficMatrixError(src, "--size", None, "bytes per rank are required for this generator")
    if not (skew >= 0 and math.isfinite(skew)):
        raise TrafficMatrixError(src, "--skew", skew, "must be a finite number >= 0")
    rng = np.random.default_rng(seed)
    n = nranks
    if kind == "balanced":
        assert size is not None
        return np.full((n, n), (size // n) // align * align, dtype=np.int64)
    if kind == "moe":
        return _moe(rng, n, size, align, moe or MoeSpec(skew=skew), src)
    if kind == "uniform":
        raw = rng.integers(0, 10000, size=(n, n)).astype(np.float64)
    elif kind == "zipf":
        raw = _zipf_entries(rng, skew, (n, n))
    else:
        z = rng.standard_normal(size=(n, n))  # exp(sigma z) is numpy's lognormal(0, sigma), bit for bit
        if gini_target is not None:
            if not 0 < gini_target < 1:
                raise TrafficMatrixError(src, "--gini", gini_target, "a Gini coefficient in (0, 1)")
            found = sigma_for_gini(z[~np.eye(n, dtype=bool)], gini_target)
            if found is None:
                raise TrafficMatrixError(
                    src,
                    "--gini",
                    gini_target,
                    f"more than {n * (n - 1)} entries off the diagonal reach (sigma {MAX_SIGMA:g}); more ranks",
                )
            sigma = found
        elif not 0 < sigma <= MAX_SIGMA:
            raise TrafficMatrixError(
                src,
                "--sigma",
                sigma,
                f"must be in (0, {MAX_SIGMA:g}] (past that the entries overflow a float)",
            )
        raw = np.exp(sigma * z)
    if n > 1:
        np.fill_diagonal(raw, 0.0)
    assert size is not None
    return _scale_rows(raw, size, align)


def _moe(rng: np.random.Generator, n: int, size: int | None, align: int, spec: MoeSpec, src: str) -> Matrix:
    experts = spec.experts or 2 * n
    if not 1 <= experts <= MAX_EXPERTS:
        raise TrafficMatrixError(src, "--experts", experts, f"must be in 1..{MAX_EXPERTS}")
    if experts % n != 0:
        raise TrafficMatrixError(src, "--experts", experts, f"must be a multiple of the rank count {n}")
    if not 1 <= spec.top_k <= experts:
        raise TrafficMatrixError(src, "--top-k", spec.top_k, f"must be in 1..{experts}")
    for name, v in (
        ("--hidden", spec.hidden),
        ("--dtype-bytes", spec.dtype_bytes),
        ("--tokens", spec.tokens),
    ):
        if v < 1:
            raise TrafficMatrixError(src, name, v, "must be >= 1")
    tokens = spec.tokens
    per_token = spec.top_k * spec.hidden * spec.dtype_bytes
    if size is not None:
        tokens = max(1, round(size / per_token))
    if n * tokens * experts > MAX_MOE_DRAWS:  # one Gumbel draw per (rank, token, expert): bounded before work
        what, value = ("--size", size) if size is not None else ("--tokens", spec.tokens)
        raise TrafficMatrixError(
            src,
            what,
            value,
            f"at most {MAX_MOE_DRAWS:.3g} draws (ranks x tokens per rank x experts; this is {n * tokens * experts:.3g}):"
            " fewer tokens (a larger --hidden or --top-k carries the same bytes in fewer) or experts",
        )
    order = rng.permutation(experts)
    pop = np.empty(experts, dtype=np.float64)
    pop[order] = np.arange(1, experts + 1, dtype=np.float64) ** (-spec.skew)
    logp = np.log(pop / pop.sum())
    per_rank = experts // n
    out = np.zeros((n, n), dtype=np.int64)
    chunk = max(1, 2_000_000 // experts)
    for r in range(n):
        counts = np.zeros(experts, dtype=np.int64)
        left = tokens
        while left > 0:
            t = min(left, chunk)
            # Gumbel-top-k: k distinct experts per token, drawn proportionally to popularity
            g = logp + rng.gumbel(size=(t, experts))
            top = np.argpartition(-g, spec.top_k - 1, axis=1)[:, : spec.top_k]
            counts += np.bincount(top.ravel(), minlength=experts)
            left -= t
        per_dst = counts.reshape(n, per_rank).sum(axis=1)
        out[r] = per_dst * spec.hidden * spec.dtype_bytes
    return (out // align) * align


# ---------------------------------------------------------------------- statistics
@dataclass(frozen=True)
class MatrixStats:
    """Summary statistics printed by ``a2acc traffic show``."""

    n: int
    total: int
    row_sums: tuple[int, ...]
    col_sums: tuple[int, ...]
    max_entry: int
    median_entry: float
    p90_entry: float
    zero_fraction: float
    gini: float
    cv: float

    @property
    def max_over_median(self) -> float:
        return self.max_entry / self.median_entry if self.median_entry > 0 else float("inf")

    @property
    def send_max_over_mean(self) -> float:
        """The busiest sender's bytes over the mean rank's (1: every rank sends as much)."""
        return _max_over_mean(self.row_sums)

    @property
    def recv_max_over_mean(self) -> float:
        """The busiest receiver's bytes over the mean rank's (MoE: the hottest rank's load)."""
        return _max_over_mean(self.col_sums)

    @property
    def recv_gini(self) -> float:
        """The Gini coefficient of the bytes each rank receives (MoE: of the per-rank load)."""
        return gini(self.col_sums)


def _max_over_mean(sums: tuple[int, ...]) -> float:
    mean = sum(sums) / len(sums) if sums else 0.0
    return max(sums) / mean if mean > 0 else 0.0


def stats(m: Matrix) -> MatrixStats:
    off = m[~np.eye(m.shape[0], dtype=bool)] if m.shape[0] > 1 else m.ravel()
    vals = np.sort(off.astype(np.float64))
    k = len(vals)
    mean = vals.mean() if k else 0.0
    cv = float(vals.std() / mean) if mean > 0 else 0.0
    return MatrixStats(
        n=int(m.shape[0]),
        total=int(m.sum()),
        row_sums=tuple(int(x) for x in m.sum(axis=1)),
        col_sums=tuple(int(x) for x in m.sum(axis=0)),
        max_entry=int(m.max()),
        median_entry=float(np.median(vals)) if k else 0.0,
        p90_entry=float(np.percentile(vals, 90)) if k else 0.0,
        zero_fraction=float((vals == 0).mean()) if k else 0.0,
        gini=gini(vals),
        cv=cv,
    )


def moe_stream(
    nranks: int,
    steps: int,
    seed: int = 0,
    *,
    tokens: int = 8192,
    experts: int = 0,
    top_k: int = 2,
    hidden: int = 4096,
    dtype_bytes: int = 2,
    skew_lo: float = 0.4,
    skew_hi: float = 0.9,
    period: int = 400,
    drift: float = 0.02,
) -> Iterator[Matrix]:
    """A synthetic MoE routing stream (FLASH §2: skew drifts, every call differs).

    The router's Zipf skew oscillates between ``skew_lo`` and ``skew_hi`` over ``period`` calls; the expert
    popularity order drifts by a small random walk in log-popularity (``drift`` per call); every call samples
    ``tokens`` tokens per rank afresh (top-k distinct experts per token), so consecutive matrices differ by
    sampling noise as real dispatches do.
    """
    rng = np.random.default_rng(seed)
    e = experts or 2 * nranks
    if e % nranks:
        raise TrafficMatrixError("moe_stream", "experts", e, f"must be a multiple of {nranks}")
    base = rng.permutation(e).astype(np.float64)
    walk = np.zeros(e)
    per_rank = e // nranks
    for t in range(steps):
        s = skew_lo + (skew_hi - skew_lo) * 0.5 * (1 - math.cos(2 * math.pi * t / period))
        walk += rng.normal(0.0, drift, size=e)
        logp = -s * np.log1p(base) + walk
        logp -= logp.max()
        p = np.exp(logp)
        p /= p.sum()
        counts = rng.multinomial(tokens * top_k, p, size=nranks)
        yield (counts.reshape(nranks, nranks, per_rank).sum(axis=2) * hidden * dtype_bytes).astype(np.int64)
