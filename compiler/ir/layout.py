"""The chunk layout of an all-to-all-v, the manifest that describes it, and pack/unpack: one implementation.

No stock executor has a working all-to-all-v (msccl-executor-nccl, RCCL's MSCCL and MSCCL++ all schedule a
uniform ``alltoall``), so a2acc compiles a plan for a **chunk layout**: ``counts[s][d]`` chunks of ``unit`` bytes
go from rank ``s`` to rank ``d``. Every rank's buffers use the standard contiguous all-to-all-v layout:

- input of rank ``r``: peer ``d``'s region starts at chunk ``in_off[r][d] = sum(counts[r][:d])`` (``sdispls``);
- output of rank ``r``: source ``s``'s region starts at ``out_off[r][s] = sum(counts[:s][r])`` (``rdispls``).

At run time each peer's bytes are **packed** into their chunk region (zero-padded to whole chunks), the
executor runs its uniform collective over ``buffer_chunks`` chunks per rank, and each source's bytes are
**unpacked** from the output. Everything that needs those offsets (the Program, every backend's manifest and
interpreter, the JIT engine) uses :class:`ChunkLayout`; nothing recomputes them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from a2acc.errors import InternalError, PlanFormatError
from a2acc.fileio import loads_json, read_text

# size limits of a layout read from a file (checked before anything is allocated from it)
MAX_LAYOUT_RANKS = 16384
MAX_LAYOUT_CHUNKS = 1 << 26
MANIFEST_FORMAT = "a2acc.manifest"
MANIFEST_VERSION = 1
# manifests written before the layout moved out of the MSCCL backend carry this name; they read the same
LEGACY_MANIFEST_FORMATS = ("a2acc.msccl-manifest",)


@dataclass(frozen=True, eq=False)
class ChunkLayout:
    """The all-to-all-v chunk layout of ``counts`` (N x N, row = sender)."""

    counts: npt.NDArray[np.int64]

    @staticmethod
    def of(counts: Any) -> ChunkLayout:
        return ChunkLayout(np.ascontiguousarray(np.asarray(counts, dtype=np.int64)))

    @property
    def nranks(self) -> int:
        return int(self.counts.shape[0])

    @cached_property
    def in_off(self) -> npt.NDArray[np.int64]:
        """``in_off[r, d]``: first chunk of peer ``d``'s region in rank ``r``'s input."""
        c = self.counts
        return np.concatenate([np.zeros((c.shape[0], 1), np.int64), np.cumsum(c, axis=1)[:, :-1]], axis=1)

    @cached_property
    def out_off(self) -> npt.NDArray[np.int64]:
        """``out_off[r, s]``: first chunk of source ``s``'s region in rank ``r``'s output."""
        c = self.counts
        cs = np.concatenate([np.zeros((1, c.shape[1]), np.int64), np.cumsum(c, axis=0)[:-1, :]], axis=0)
        return np.ascontiguousarray(cs.T)

    @cached_property
    def input_sizes(self) -> npt.NDArray[np.int64]:
        return np.asarray(self.counts.sum(axis=1), dtype=np.int64)

    @cached_property
    def output_sizes(self) -> npt.NDArray[np.int64]:
        return np.asarray(self.counts.sum(axis=0), dtype=np.int64)

    def input_chunks(self, rank: int) -> int:
        return int(self.input_sizes[rank])

    def output_chunks(self, rank: int) -> int:
        return int(self.output_sizes[rank])

    @property
    def buffer_chunks(self) -> int:
        """Chunks per rank of the uniform collective that carries this layout: ``C = N * ceil(need / N)``
        with ``need`` the largest input or output of any rank (``alltoall`` needs ``C`` divisible by N)."""
        n = self.nranks
        need = int(max(self.input_sizes.max(initial=0), self.output_sizes.max(initial=0)))
        return n * max(1, -(-need // n))

    # ------------------------------------------------------------------ pack / unpack
    def pack_segments(
        self,
        rows: npt.NDArray[np.int64],
        row_bytes: int,
        unit: int,
        rank: int,
        ranks: npt.NDArray[np.int64] | None = None,
        peers: Any = None,
    ) -> Segments:
        """Copies that pack rank ``rank``'s contiguous input (``rows[rank][d]`` rows of ``row_bytes`` for peer
        ``d``, as ``all_to_all_single`` lays it out) into the layout: ``(src byte, dst byte, nbytes)``.

        ``ranks[c]`` is the caller's rank that plays layout rank ``c`` (a relabelling under the topology's
        symmetries, :mod:`a2acc.jit.symmetry`; identity when None): ``rows`` and ``rank`` are in the caller's
        ranks, the regions in the layout's. Rows beyond a peer's region (the residual of a skew bucket) are
        left out; see :func:`fitting_rows`. Empty segments are dropped; ``peers`` (the caller's ranks) keeps
        only those peers' segments."""
        if peers is not None and len(peers) == 0:  # every peer's rows travel in direct messages
            return _NO_SEGMENTS
        inv = _inverse(self.nranks, ranks)
        c = int(inv[rank])
        mine = np.asarray(rows[rank], dtype=np.int64)
        fit = _only(_fit(mine, self.counts[c, inv], row_bytes, unit), peers)
        row_off = np.cumsum(mine) - mine
        return _segments(row_off * row_bytes, self.in_off[c, inv] * unit, fit * row_bytes)

    def unpack_segments(
        self,
        rows: npt.NDArray[np.int64],
        row_bytes: int,
        unit: int,
        rank: int,
        ranks: npt.NDArray[np.int64] | None = None,
        peers: Any = None,
    ) -> Segments:
        """Copies from the layout's output to rank ``rank``'s contiguous output: ``(src byte, dst byte, n)``
        (``ranks`` and ``peers``, the sources kept, as in :meth:`pack_segments`)."""
        if peers is not None and len(peers) == 0:
            return _NO_SEGMENTS
        inv = _inverse(self.nranks, ranks)
        c = int(inv[rank])
        theirs = np.asarray(rows[:, rank], dtype=np.int64)
        fit = _only(_fit(theirs, self.counts[inv, c], row_bytes, unit), peers)
        row_off = np.cumsum(theirs) - theirs
        return _segments(self.out_off[c, inv] * unit, row_off * row_bytes, fit * row_bytes)


@dataclass(frozen=True, eq=False)
class Segments:
    """Byte copies ``dst[dst_off[i]:+nbytes[i]] = src[src_off[i]:+nbytes[i]]`` (int64 arrays, no empty ones);
    iterating gives ``(src, dst, nbytes)`` tuples of ints."""

    src: npt.NDArray[np.int64]
    dst: npt.NDArray[np.int64]
    nbytes: npt.NDArray[np.int64]

    def __iter__(self) -> Iterator[tuple[int, int, int]]:
        return zip(self.src.tolist(), self.dst.tolist(), self.nbytes.tolist())

    def __len__(self) -> int:
        return int(self.nbytes.shape[0])

    @property
    def total(self) -> int:
        return int(self.nbytes.sum())


_NO_SEGMENTS = Segments(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))


def _segments(src: Any, dst: Any, nbytes: Any) -> Segments:
    nb = np.asarray(nbytes, dtype=np.int64)
    keep = nb > 0
    return Segments(np.asarray(src, dtype=np.int64)[keep], np.asarray(dst, dtype=np.int64)[keep], nb[keep])


def _only(fit: Any, peers: Any) -> Any:
    """``fit`` with every entry outside ``peers`` zeroed (None: all kept)."""
    if peers is None:
        return fit
    keep = np.zeros(fit.shape[0], dtype=bool)
    keep[np.asarray(list(peers), dtype=np.int64)] = True
    return np.where(keep, fit, 0)


def _inverse(n: int, ranks: npt.NDArray[np.int64] | None) -> npt.NDArray[np.int64]:
    """``inv[r]``: the layout rank that rank ``r`` plays (``ranks`` inverted; identity when None)."""
    if ranks is None:
        return np.arange(n, dtype=np.int64)
    r = np.asarray(ranks, dtype=np.int64)
    if r.shape != (n,) or sorted(r.tolist()) != list(range(n)):
        raise InternalError(f"ranks {r.tolist()[:8]} is not a permutation of 0..{n - 1}")
    inv = np.empty(n, dtype=np.int64)
    inv[r] = np.arange(n, dtype=np.int64)
    return inv


def _fit(rows: npt.NDArray[np.int64], chunks: npt.NDArray[np.int64], row_bytes: int, unit: int) -> Any:
    if row_bytes <= 0:
        return np.asarray(rows, dtype=np.int64)
    return np.minimum(
        np.asarray(rows, dtype=np.int64), (np.asarray(chunks, dtype=np.int64) * unit) // row_bytes
    )


def fitting_rows(
    counts: npt.NDArray[np.int64],
    rows: npt.NDArray[np.int64],
    row_bytes: int,
    unit: int,
    ranks: npt.NDArray[np.int64] | None = None,
) -> npt.NDArray[np.int64]:
    """Rows of each (src, dst) pair that fit the layout's region (whole rows only); the rest is residual.
    ``rows`` (and the result) are in the caller's ranks; ``ranks`` as in :meth:`ChunkLayout.pack_segments`."""
    c = np.asarray(counts, dtype=np.int64)
    if ranks is not None:
        inv = _inverse(c.shape[0], ranks)
        c = c[np.ix_(inv, inv)]
    return np.asarray(_fit(rows, c, row_bytes, unit), dtype=np.int64)


def pack(
    layout: ChunkLayout,
    src: npt.NDArray[np.uint8],
    rows: npt.NDArray[np.int64],
    row_bytes: int,
    unit: int,
    rank: int,
    ranks: npt.NDArray[np.int64] | None = None,
) -> npt.NDArray[np.uint8]:
    """numpy form of packing (tests, tools): the zero-padded input buffer of ``rank``. The torch form, which
    the JIT uses, is :mod:`a2acc.runtime.launch.packing` (same segments)."""
    c = int(_inverse(layout.nranks, ranks)[rank])
    buf = np.zeros(layout.input_chunks(c) * unit, dtype=np.uint8)
    for a, b, nb in layout.pack_segments(rows, row_bytes, unit, rank, ranks):
        buf[b : b + nb] = src[a : a + nb]
    return buf


def unpack(
    layout: ChunkLayout,
    out_buf: npt.NDArray[np.uint8],
    rows: npt.NDArray[np.int64],
    row_bytes: int,
    unit: int,
    rank: int,
    ranks: npt.NDArray[np.int64] | None = None,
) -> npt.NDArray[np.uint8]:
    """numpy form of unpacking: rank ``rank``'s contiguous output (residual rows left zero)."""
    dst = np.zeros(int(rows[:, rank].sum()) * row_bytes, dtype=np.uint8)
    for a, b, nb in layout.unpack_segments(rows, row_bytes, unit, rank, ranks):
        dst[b : b + nb] = out_buf[a : a + nb]
    return dst


# ---------------------------------------------------------------------- manifest
@dataclass(frozen=True)
class Manifest:
    """What a caller needs to use a lowered all-to-all-v: the layout, the chunk size and how to call.

    ``file`` is the lowered file it belongs to, ``target`` the backend that wrote it, ``call`` the call the
    executor needs (backend-specific text), ``buffer_chunks`` the per-rank chunks of that uniform call."""

    target: str
    file: str
    algo_name: str
    ngpus: int
    buffer_chunks: int
    chunk_bytes: int
    counts: list[list[int]]
    traffic_bytes: list[list[int]] | None
    call: str = ""
    options: tuple[tuple[str, str], ...] = ()  # the target options the file was lowered with (e.g. dialect)
    # the element types the packed call may use (the executor selects the file for each; empty: not recorded,
    # or a target that takes bytes), and the selection rule(s) that were checked for them
    dtypes: tuple[str, ...] = ()
    selection: str = ""

    def count_per_peer(self, dtype_bytes: int) -> int:
        """Elements per peer of the packed uniform call for an element of ``dtype_bytes`` bytes."""
        return self.buffer_bytes // (self.ngpus * dtype_bytes)

    @cached_property
    def chunk_layout(self) -> ChunkLayout:
        return ChunkLayout.of(self.counts)

    @property
    def buffer_bytes(self) -> int:
        return self.buffer_chunks * self.chunk_bytes

    def padding_bytes(self) -> int:
        moved = sum(map(sum, self.counts)) * self.chunk_bytes
        payload = sum(map(sum, self.traffic_bytes)) if self.traffic_bytes else moved
        return moved - payload

    def _selection_json(self) -> dict[str, Any]:
        if not self.dtypes and not self.selection:
            return {}
        from a2acc.ir.quantize import DTYPE_BYTES

        return {
            "dtypes": {d: {"count_per_peer": self.count_per_peer(DTYPE_BYTES[d])} for d in self.dtypes},
            "selection": self.selection,
        }

    def to_json(self) -> str:
        lay = self.chunk_layout
        payload = sum(map(sum, self.traffic_bytes)) if self.traffic_bytes else None
        n = self.ngpus
        doc: dict[str, Any] = {
            "format": MANIFEST_FORMAT,
            "version": MANIFEST_VERSION,
            "target": self.target,
            "target_options": dict(self.options),
            "file": self.file,
            "algo_name": self.algo_name,
            "coll": "alltoall",
            "ngpus": n,
            "buffer_chunks": self.buffer_chunks,
            "unit_rules": {
                "chunk_bytes": self.chunk_bytes,
                "buffer_bytes_per_rank": self.buffer_bytes,
                "call": self.call,
                **self._selection_json(),
                "pack": "peer d's bytes go to input chunk offset input[r][d][0], zero-padded to input[r][d][1] chunks",
                "unpack": "source s's bytes come from output chunk offset output[r][s][0]",
            },
            "counts": self.counts,
            "ranks": [
                {
                    "rank": r,
                    "input": [[int(lay.in_off[r, d]), self.counts[r][d]] for d in range(n)],
                    "output": [[int(lay.out_off[r, s]), self.counts[s][r]] for s in range(n)],
                }
                for r in range(n)
            ],
            "traffic_bytes": self.traffic_bytes,
            "padding": {
                "payload_bytes": payload,
                "moved_bytes": sum(map(sum, self.counts)) * self.chunk_bytes,
                "padding_bytes": self.padding_bytes(),
                "buffer_bytes_total": self.buffer_bytes * n,
            },
        }
        return json.dumps(doc, indent=1) + "\n"


def manifest_for(
    counts: npt.NDArray[np.int64],
    unit_bytes: int,
    traffic: npt.NDArray[np.int64] | None,
    *,
    target: str,
    file: str,
    algo_name: str,
    buffer_chunks: int | None = None,
    call: str = "",
    options: dict[str, str] | None = None,
    dtypes: tuple[str, ...] = (),
    selection: str = "",
) -> Manifest:
    lay = ChunkLayout.of(counts)
    return Manifest(
        target=target,
        file=file,
        algo_name=algo_name,
        ngpus=lay.nranks,
        buffer_chunks=lay.buffer_chunks if buffer_chunks is None else buffer_chunks,
        chunk_bytes=int(unit_bytes),
        counts=lay.counts.tolist(),
        traffic_bytes=None if traffic is None else np.asarray(traffic, dtype=np.int64).tolist(),
        call=call,
        options=tuple(sorted((options or {}).items())),
        dtypes=dtypes,
        selection=selection,
    )


def _mfail(path: str, fld: str, value: object, allowed: str) -> PlanFormatError:
    return PlanFormatError(path, fld, value, allowed)


def manifest_from_json(text: str, path: str = "<manifest>") -> Manifest:
    """Parse a manifest; the offsets it lists must be the contiguous layout of its counts (checked)."""
    try:
        doc = loads_json(text)
    except json.JSONDecodeError as exc:
        raise _mfail(path, "", "JSON", f"not valid JSON ({exc})") from exc
    if not isinstance(doc, dict):
        raise _mfail(path, "", type(doc).__name__, "a manifest is a JSON object")
    fmt, ver = doc.get("format"), doc.get("version")
    if fmt not in (MANIFEST_FORMAT, *LEGACY_MANIFEST_FORMATS) or ver != MANIFEST_VERSION:
        raise _mfail(
            path, "format/version", (fmt, ver), f"expected {MANIFEST_FORMAT} version {MANIFEST_VERSION}"
        )
    at = "ngpus"  # the field being read, named if it is missing or of the wrong kind
    try:
        n = int(doc["ngpus"])
        if not 1 <= n <= MAX_LAYOUT_RANKS:
            raise _mfail(path, "ngpus", n, f"must be in 1..{MAX_LAYOUT_RANKS}")
        at = "counts"
        if not isinstance(doc["counts"], list) or len(doc["counts"]) != n:
            raise _mfail(path, "counts", "shape", f"must be an {n} x {n} matrix of integers >= 0")
        counts = [[int(x) for x in row] for row in doc["counts"]]
        if len(counts) != n or any(len(row) != n or min(row, default=0) < 0 for row in counts):
            raise _mfail(path, "counts", "shape", f"must be an {n} x {n} matrix of integers >= 0")
        if sum(map(sum, counts)) > MAX_LAYOUT_CHUNKS:
            raise _mfail(path, "counts", sum(map(sum, counts)), f"at most {MAX_LAYOUT_CHUNKS} chunks in all")
        lay = ChunkLayout.of(counts)
        at = "ranks"
        ranks = doc["ranks"]
        if not isinstance(ranks, list) or sorted(int(e["rank"]) for e in ranks) != list(range(n)):
            raise _mfail(path, "ranks", "rank ids", f"must list ranks 0..{n - 1} once each (ngpus={n})")
        for entry in ranks:
            r = int(entry["rank"])
            want_in = [[int(lay.in_off[r, d]), counts[r][d]] for d in range(n)]
            want_out = [[int(lay.out_off[r, s]), counts[s][r]] for s in range(n)]
            if entry["input"] != want_in or entry["output"] != want_out:
                raise _mfail(
                    path,
                    f"ranks[{r}]",
                    "offsets",
                    "input/output offsets must be the contiguous layout of counts",
                )
        at = "buffer_chunks"
        key = "buffer_chunks" if "buffer_chunks" in doc else "nchunksperloop"
        buffer_chunks = doc.get(key, lay.buffer_chunks)
        if isinstance(buffer_chunks, bool) or not isinstance(buffer_chunks, int):
            raise _mfail(path, key, buffer_chunks, "an integer: the chunks of each rank's buffers")
        need = int(max(lay.input_sizes.max(), lay.output_sizes.max()))
        if buffer_chunks < need:
            raise _mfail(path, key, buffer_chunks, f"must hold the largest rank's {need} chunks")
        at = "target_options"
        target_options = doc.get("target_options") or {}
        if not isinstance(target_options, dict):
            raise _mfail(path, "target_options", target_options, "an object of option names and values")
        at = "unit_rules"
        rules = doc["unit_rules"]
        if not isinstance(rules, dict):
            raise _mfail(path, "unit_rules", rules, "an object (chunk_bytes, call, dtypes, selection)")
        at = "unit_rules.chunk_bytes"
        chunk_bytes = rules["chunk_bytes"]
        if isinstance(chunk_bytes, bool) or not isinstance(chunk_bytes, int) or not 1 <= chunk_bytes <= 2**50:
            raise _mfail(
                path, "unit_rules.chunk_bytes", chunk_bytes, "an integer number of bytes in 1..2**50"
            )
        at = "algo_name"
        return Manifest(
            target=str(doc.get("target", "msccl-xml")),
            file=str(doc.get("file", doc.get("xml", ""))),
            algo_name=str(doc["algo_name"]),
            ngpus=n,
            buffer_chunks=buffer_chunks,
            chunk_bytes=chunk_bytes,
            counts=counts,
            traffic_bytes=doc.get("traffic_bytes"),
            call=str(rules.get("call", "")),
            options=tuple(sorted((str(k), str(v)) for k, v in target_options.items())),
            dtypes=_read_dtypes(rules.get("dtypes"), path),
            selection=str(rules.get("selection", "")),
        )
    except (
        KeyError,
        TypeError,
        ValueError,
        AttributeError,
    ) as exc:  # (a list or number where an object goes)
        what = (
            "missing" if isinstance(exc, KeyError) and at.split(".")[-1] == str(exc.args[0]) else "malformed"
        )
        shown = doc.get(at, "(absent)") if "." not in at else "manifest"
        raise _mfail(path, at, shown, f"{what}; {_MANIFEST_FIELDS[at]}") from exc


#: what each field of a manifest holds, for the error that finds it missing or of another kind
_MANIFEST_FIELDS = {
    "ngpus": f"an integer in 1..{MAX_LAYOUT_RANKS}",
    "counts": "an ngpus x ngpus matrix of integers >= 0 (chunks from each rank to each rank)",
    "ranks": "a list of one {rank, input, output} object per rank",
    "buffer_chunks": "an integer: the chunks of each rank's buffers",
    "target_options": "an object of option names and values",
    "unit_rules": "an object (chunk_bytes, call, dtypes, selection)",
    "unit_rules.chunk_bytes": "an integer number of bytes in 1..2**50",
    "algo_name": "the algorithm's name, a string",
}


def _read_dtypes(raw: Any, path: str) -> tuple[str, ...]:
    """The element types a manifest claims (an object keyed by type name; absent in older manifests)."""
    from a2acc.ir.quantize import DTYPE_BYTES

    if raw is None:
        return ()
    if not isinstance(raw, dict) or any(k not in DTYPE_BYTES for k in raw):
        raise _mfail(
            path, "unit_rules.dtypes", raw, f"an object keyed by element types ({', '.join(DTYPE_BYTES)})"
        )
    return tuple(str(k) for k in raw)


def load_manifest(path: str | Path) -> Manifest:
    try:
        text = read_text(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise _mfail(
            str(path), "", str(path), f"cannot read the manifest ({exc.__class__.__name__})"
        ) from exc
    return manifest_from_json(text, str(path))


# ---------------------------------------------------------------------- where manifests live
# A target that writes a directory (an MSCCL_ALGO_DIR, which must hold executor files only) puts its manifest
# beside it: ``DIR.manifest.json`` for ``a2acc compile -o DIR`` (one file), ``DIR.manifests/FILE.manifest.json``
# for ``a2acc cache export DIR`` (many). ``a2acc verify DIR/FILE`` looks in both places.
def dir_manifest_path(out_dir: Path) -> Path:
    return out_dir.parent / f"{out_dir.name}.manifest.json"


def export_manifest_path(out_dir: Path, file_name: str) -> Path:
    return out_dir.parent / f"{out_dir.name}.manifests" / f"{file_name}.manifest.json"


def manifest_file(path: Path) -> str | None:
    """The ``file`` a manifest at ``path`` describes, or None when it is not a readable a2acc manifest."""
    try:
        return manifest_from_json(path.read_text(encoding="utf-8"), str(path)).file
    except (OSError, UnicodeDecodeError, PlanFormatError):
        return None


def find_manifest(file: Path) -> Path | None:
    """The manifest a2acc wrote for ``file``, if any: a lowered file inside an output directory (``DIR.manifest.json``
    or an export's ``DIR.manifests/``), or a single-file output (``FILE.manifest.json`` beside it)."""
    beside = file.parent / f"{file.name}.manifest.json"
    for cand in (dir_manifest_path(file.parent), export_manifest_path(file.parent, file.name), beside):
        if cand.is_file() and manifest_file(cand) == file.name:
            return cand
    return None


def owned_files(out_dir: Path) -> set[str]:
    """Names of the files in ``out_dir`` that a2acc provably wrote: each named by one of its manifests."""
    names: set[str] = set()
    if not out_dir.is_dir():
        return names
    for p in out_dir.iterdir():
        if p.is_file() and not p.is_symlink() and find_manifest(p) is not None:  # a link is never ours
            names.add(p.name)
    return names
