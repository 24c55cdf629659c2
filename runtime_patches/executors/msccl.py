"""Glue for the MSCCL executors (msccl-executor-nccl, RCCL with MSCCL kernels) (``src/misc/msccl/``).

Two ways to get a2acc's XML to the executor:

1. **Directory mode** (the supported one): the executors parse ``MSCCL_ALGO_DIR`` once, when the first
   communicator is created, so :func:`prepare_algo_dir` writes the bucket's XMLs there (XML files only;
   manifests stay outside) and :func:`msccl_env` returns the variables to set **before** the first
   ``ncclCommInitRank``/``init_process_group``: ``MSCCL_ALGO_DIR``, ``NCCL_MSCCL_ENABLE=1``,
   ``RCCL_MSCCL_ENABLE=1`` and ``RCCL_MSCCL_FORCE_ENABLE=1`` (RCCL enables MSCCL by itself only on flagged
   MI300X topologies). No hot reload exists: buckets first seen at run time serve the next job (warm start).
2. **ctypes bindings** of the public ``mscclLoadAlgo`` / ``mscclRunAlgo`` / ``mscclUnloadAlgo`` with the exact C
   signatures of ``nccl.h.in``::

       ncclResult_t mscclLoadAlgo(const char *path, mscclAlgoHandle_t *handle, int rank);
       ncclResult_t mscclRunAlgo(const void *sendBuff, const size_t sendCounts[], const size_t sDisPls[],
                                 void *recvBuff, const size_t recvCounts[], const size_t rDisPls[],
                                 size_t count, ncclDataType_t dataType, int root, int peer, ncclRedOp_t op,
                                 mscclAlgoHandle_t handle, ncclComm_t comm, cudaStream_t stream);
       ncclResult_t mscclUnloadAlgo(mscclAlgoHandle_t handle);

   ``mscclAlgoHandle_t`` is ``int``; the enums are ``int``; comm and stream are pointers. Upstream notes that
   ``mscclRunAlgo`` does not set up connections at msccl-executor-nccl's HEAD, so this path is for
   schedulers that know their build supports it.

**What has run where:** nothing here has run on a GPU. The bindings are tested against a small C library with
the same ABI that records its calls (``tests/runtime/test_msccl_glue.py``); directory mode is tested up to the
files and variables it produces.
"""

from __future__ import annotations

import ctypes
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from a2acc.errors import PlanFormatError, RuntimeHookError
from a2acc.fileio import atomic_write_text
from a2acc.ir.layout import Manifest, find_manifest, load_manifest, manifest_from_json
from a2acc.runtime.executors import Regions, bind_arena
from a2acc.runtime.launch.arena import ArenaLaunch
from a2acc.runtime.launch.post import Posted

NCCL_DTYPES = {
    "int8": 0,
    "uint8": 1,
    "int32": 2,
    "uint32": 3,
    "int64": 4,
    "uint64": 5,
    "float16": 6,
    "float32": 7,
    "float64": 8,
    "bfloat16": 9,
}
NCCL_SUM = 0


def prepare_algo_dir(files: Mapping[str, str], directory: str | os.PathLike[str]) -> Path:
    """Write XML files into ``directory`` (created); refuses non-XML names and non-XML files already there."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    for name in files:
        if not name.endswith(".xml") or "/" in name:
            raise RuntimeHookError(
                f"{name!r}: only plain *.xml files may go into an MSCCL algorithm directory"
            )
    for p in d.iterdir():
        if p.is_file() and not p.name.endswith(".xml"):
            raise RuntimeHookError(
                f"{d} holds {p.name}: every file there is parsed as XML and init would fail"
            )
    for name, text in sorted(files.items()):
        atomic_write_text(d / name, text)
    return d


def msccl_env(directory: str | os.PathLike[str]) -> dict[str, str]:
    """Environment for the executors to load ``directory`` at communicator init."""
    return {
        "MSCCL_ALGO_DIR": str(Path(directory).resolve()),
        "NCCL_MSCCL_ENABLE": "1",
        "RCCL_MSCCL_ENABLE": "1",
        "RCCL_MSCCL_FORCE_ENABLE": "1",
    }


class MscclLibrary:
    """ctypes bindings of the MSCCL algorithm API in ``libnccl.so`` / ``librccl.so`` (or a test double)."""

    def __init__(self, path: str) -> None:
        try:
            self.lib = ctypes.CDLL(path)
        except OSError as exc:
            raise RuntimeHookError(f"cannot load {path}: {exc}") from exc
        for sym in ("mscclLoadAlgo", "mscclRunAlgo", "mscclUnloadAlgo"):
            if not hasattr(self.lib, sym):
                raise RuntimeHookError(f"{path} has no {sym}: not an MSCCL-enabled NCCL/RCCL build")
        sz = ctypes.POINTER(ctypes.c_size_t)
        self.lib.mscclLoadAlgo.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_int), ctypes.c_int]
        self.lib.mscclLoadAlgo.restype = ctypes.c_int
        self.lib.mscclRunAlgo.argtypes = [
            ctypes.c_void_p,
            sz,
            sz,
            ctypes.c_void_p,
            sz,
            sz,
            ctypes.c_size_t,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_void_p,
            ctypes.c_void_p,
        ]
        self.lib.mscclRunAlgo.restype = ctypes.c_int
        self.lib.mscclUnloadAlgo.argtypes = [ctypes.c_int]
        self.lib.mscclUnloadAlgo.restype = ctypes.c_int

    def load_algo(self, xml_path: str, rank: int) -> int:
        handle = ctypes.c_int(-1)
        rc = self.lib.mscclLoadAlgo(str(xml_path).encode(), ctypes.byref(handle), rank)
        if rc != 0:
            raise RuntimeHookError(f"mscclLoadAlgo({xml_path}) returned ncclResult {rc}")
        return handle.value

    def run_alltoall(
        self,
        handle: int,
        send_ptr: int,
        recv_ptr: int,
        count: int,
        dtype: str,
        comm: int,
        stream: int,
        nranks: int,
        send_counts: Sequence[int] | None = None,
        recv_counts: Sequence[int] | None = None,
    ) -> None:
        """``mscclRunAlgo`` for an all-to-all of ``count`` elements per peer over ``nranks`` ranks. The count and
        displacement arrays are always passed (``count`` per peer unless given): RCCL's ``mscclRunAlgo``
        dereferences them, so NULL is never an option."""
        if dtype not in NCCL_DTYPES:
            raise RuntimeHookError(f"dtype {dtype!r} has no NCCL equivalent")
        if nranks < 1:
            raise RuntimeHookError(f"nranks {nranks}: must be >= 1")
        sends = list(send_counts) if send_counts is not None else [count] * nranks
        recvs = list(recv_counts) if recv_counts is not None else [count] * nranks
        if len(sends) != nranks or len(recvs) != nranks:
            raise RuntimeHookError(f"send/recv counts must list {nranks} peers")

        def arr(xs: Sequence[int]) -> ctypes.Array[ctypes.c_size_t]:
            return (ctypes.c_size_t * len(xs))(*xs)

        def displs(xs: Sequence[int]) -> ctypes.Array[ctypes.c_size_t]:
            out, acc = [], 0
            for x in xs:
                out.append(acc)
                acc += x
            return arr(out)

        rc = self.lib.mscclRunAlgo(
            ctypes.c_void_p(send_ptr),
            arr(sends),
            displs(sends),
            ctypes.c_void_p(recv_ptr),
            arr(recvs),
            displs(recvs),
            count,
            NCCL_DTYPES[dtype],
            0,
            -1,
            NCCL_SUM,
            handle,
            ctypes.c_void_p(comm),
            ctypes.c_void_p(stream),
        )
        if rc != 0:
            raise RuntimeHookError(f"mscclRunAlgo returned ncclResult {rc}")

    def unload_algo(self, handle: int) -> None:
        rc = self.lib.mscclUnloadAlgo(handle)
        if rc != 0:
            raise RuntimeHookError(f"mscclUnloadAlgo({handle}) returned ncclResult {rc}")


# MSCCL_ALGO_DIR as it was when this process started: the executors read it once, at communicator creation
_ALGO_DIR_AT_START = os.environ.get("MSCCL_ALGO_DIR")
_ATTR = re.compile(r'\b(ngpus|nchunksperloop|minBytes|maxBytes|coll)="([^"]*)"')


@dataclass(frozen=True)
class AlgoFile:
    """One XML in ``MSCCL_ALGO_DIR``: its ``<algo>`` attributes and, when a2acc wrote it, its manifest."""

    name: str
    text: str
    attrs: dict[str, str]
    manifest: Manifest | None

    def int_attr(self, key: str) -> int:
        try:
            return int(self.attrs.get(key, "0"))
        except ValueError:
            return 0

    def selected_for(self, nranks: int, nbytes: int) -> bool:
        """Would the executor consider this file for an all-to-all of ``nbytes`` per rank over ``nranks``?"""
        lo, hi = self.int_attr("minBytes"), self.int_attr("maxBytes")
        return (
            self.attrs.get("coll") == "alltoall"
            and self.int_attr("ngpus") == nranks
            and lo <= nbytes
            and (hi == 0 or nbytes <= hi)
        )


def scan_algo_dir(directory: str | os.PathLike[str]) -> list[AlgoFile]:
    """Every ``*.xml`` in ``directory`` (what the executor loads at init), with the manifest a2acc wrote beside
    it (``DIR.manifest.json`` from ``a2acc compile``, ``DIR.manifests/`` from ``a2acc cache export``)."""
    d = Path(directory)
    out: list[AlgoFile] = []
    try:
        files = sorted(p for p in d.iterdir() if p.suffix == ".xml" and p.is_file())
    except OSError:
        return out
    for p in files:
        try:
            text = p.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        head = text[: text.find(">") + 1] if "<algo" in text else ""
        attrs = dict(_ATTR.findall(head[head.find("<algo") :])) if head else {}
        man_path = find_manifest(p)
        man = load_manifest(man_path) if man_path is not None else None
        out.append(AlgoFile(p.name, text, attrs, man))
    return out


class MscclExecutor:
    """Runs a bucket's plan through the MSCCL executor loaded in NCCL/RCCL (directory mode).

    The executors load ``MSCCL_ALGO_DIR`` once, when the first communicator is created. A bucket runs here
    when that directory holds an a2acc XML for exactly its layout: the JIT's own (``a2acc cache export`` of an
    earlier job) or ``a2acc compile`` output whose manifest (``DIR.manifest.json``) gives the same chunk
    layout, chunk size and buffer; those layouts are offered to the bucket index first (:meth:`layouts`), so a
    job whose matrices fit a compiled layout uses it. The stock ``all_to_all_single`` over the packed uniform
    buffer is then what the executor replaces by that XML, provided (checked in :meth:`unavailable`) the file
    verifies against its manifest, it is the only XML the executor would select for that size, the selection
    rule of the file's dialect accepts the call (uint8 elements: msccl-executor-nccl ``(count * nranks) %
    nchunksperloop == 0``, RCCL ``count % nchunksperloop == 0`` with ``count`` bytes per peer), the group is
    NCCL, and torch is a ROCm build (CUDA PyTorch lowers an equal-split ``all_to_all_single`` to grouped
    send/recv, which MSCCL never sees; ROCm PyTorch calls RCCL's ``ncclAllToAll``). Otherwise the engine runs
    the ``p2p`` executor and says why, once. Nothing here has run on a GPU.
    """

    name = "msccl"

    def __init__(self, algo_dir: str | None = _ALGO_DIR_AT_START) -> None:
        self.algo_dir = algo_dir
        self._files: list[AlgoFile] | None = None
        self._checked: dict[str, str | None] = {}

    def files(self) -> list[AlgoFile]:
        if self._files is None:
            self._files = scan_algo_dir(self.algo_dir) if self.algo_dir else []
        return self._files

    def layouts(self, nranks: int) -> list[tuple[np.ndarray, int]]:
        """(chunk counts, chunk bytes) of every a2acc XML in the directory for ``nranks`` ranks."""
        return [
            (np.asarray(f.manifest.counts, dtype=np.int64), f.manifest.chunk_bytes)
            for f in self.files()
            if f.manifest is not None and f.manifest.ngpus == nranks and f.manifest.target == "msccl-xml"
        ]

    def _match(self, man: Manifest, entry: Any) -> AlgoFile | None:
        xml = {k: v for k, v in entry.files.items() if k.endswith(".xml")}
        for f in self.files():
            if f.text in xml.values():
                return f
            m = f.manifest
            if (
                m is not None
                and m.target == "msccl-xml"
                and m.counts == man.counts
                and m.chunk_bytes == man.chunk_bytes
                and m.buffer_chunks == man.buffer_chunks
            ):
                return f
        return None

    def _verified(self, f: AlgoFile) -> str | None:
        """None when the file verifies against its manifest (a2acc's reader and interpreter), else why not."""
        if f.name not in self._checked:
            from a2acc.backends import get_target
            from a2acc.options import parse_options

            target = get_target("msccl-xml")
            why = None
            if f.manifest is None:
                why = f"{f.name} has no a2acc manifest beside MSCCL_ALGO_DIR"
            else:
                opts: Any = parse_options(target.Options, dict(f.manifest.options))
                chk = target.check_text(f.text, f.name, f.manifest, opts)
                why = None if chk.ok else f"{f.name} does not verify ({'; '.join(chk.errors[:2])})"
            self._checked[f.name] = why
        return self._checked[f.name]

    def unavailable(self, entry: Any, group: Any) -> str | None:
        man = _entry_manifest(entry)
        if man is None:
            return "the cached plan has no MSCCL XML manifest (set A2ACC_BACKEND=msccl-xml)"
        if not self.algo_dir:
            return "MSCCL_ALGO_DIR was not set when the job started (a2acc compile or a2acc cache export, then MSCCL_ALGO_DIR=DIR)"
        f = self._match(man, entry)
        if f is None:
            return f"no XML in MSCCL_ALGO_DIR={self.algo_dir} has this bucket's layout (a new bucket: it serves the next job)"
        why = self._verified(f) or _selection(f, man, self.files())
        if why is not None:
            return why
        return _group_problem(group)

    def prepare(self, prog: Any, entry: Any) -> Any:
        return prog

    def regions(self, prog: Any, rank: int) -> Regions:
        b = prog.layout.buffer_chunks * prog.unit_bytes
        return Regions((0, b), (b, 2 * b), 2 * b)

    def bind(
        self,
        prog: Any,
        prepared: Any,
        position: int,
        ranks: Sequence[int] | None,
        row_bytes: int,
        device: Any,
        groups: tuple[Any, Any],
        global_ranks: Sequence[int],
        backend: str,
        stock: Any,
        posted: Posted,
        buffers: Any = None,
    ) -> ArenaLaunch:
        """The packed uniform buffer through the stock ``all_to_all_single``, which the MSCCL executor loaded in
        NCCL/RCCL replaces by the bucket's XML."""
        r = self.regions(prog, position)
        nbytes = r.input[1] - r.input[0]

        def start(arena: Any, counter: Posted) -> Callable[[], None]:
            counter.add(prog.nranks - 1, prog.nranks - 1, nbytes, nbytes)
            stock(arena[r.output[0] : r.output[1]], arena[r.input[0] : r.input[1]], group=groups[0])
            return lambda: None

        return bind_arena(start, r, prog, position, ranks, row_bytes, device, posted)


def _entry_manifest(entry: Any) -> Manifest | None:
    raw = getattr(entry, "manifest", None)
    if not raw or not any(k.endswith(".xml") for k in getattr(entry, "files", {})):
        return None
    try:
        return manifest_from_json(raw, "cache entry manifest")
    except PlanFormatError:
        return None


def _selection(f: AlgoFile, man: Manifest, files: list[AlgoFile]) -> str | None:
    """None when the executor would select exactly ``f`` for the packed call (uint8, one buffer per rank)."""
    n, nbytes, c = man.ngpus, man.buffer_bytes, man.buffer_chunks
    others = [g.name for g in files if g is not f and g.selected_for(n, nbytes)]
    if not f.selected_for(n, nbytes):
        return f"{f.name} does not cover {nbytes} bytes per rank (minBytes/maxBytes)"
    if others:
        return f"{len(others)} other XML in MSCCL_ALGO_DIR also cover {nbytes} bytes ({others[0]}): the executor's choice is ambiguous"
    count = nbytes // n  # uint8 elements per peer
    dialect = dict((f.manifest or man).options).get("dialect", "nccl")
    ok = (count % c == 0) if dialect == "rccl" else ((count * n) % c == 0)
    if not ok:
        return f"{dialect}'s selection rule rejects {count} bytes per peer with nchunksperloop={c}"
    return None


def _group_problem(group: Any) -> str | None:
    try:
        import torch.distributed as dist

        backend = str(dist.get_backend(group))
    except Exception as exc:  # no process group: cannot be the MSCCL path
        return f"no process group backend ({exc})"
    if backend != "nccl":
        return f"process group backend is {backend}, not nccl (NCCL/RCCL with MSCCL)"
    import torch

    if not getattr(torch.version, "hip", None):
        # CUDA PyTorch lowers an equal-split all_to_all_single to grouped ncclSend/ncclRecv, which MSCCL's
        # algorithm selection never sees; ROCm PyTorch calls RCCL's ncclAllToAll, which it does
        return "CUDA PyTorch issues grouped send/recv, not ncclAllToAll, so MSCCL cannot select the XML"
    return None


EXECUTOR = MscclExecutor()
