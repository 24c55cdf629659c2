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
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from a2acc.errors import RuntimeHookError
from a2acc.fileio import atomic_write_text

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
        send_counts: Sequence[int] | None = None,
        recv_counts: Sequence[int] | None = None,
    ) -> None:
        """``mscclRunAlgo`` for an all-to-all: ``count`` elements per peer (counts/displacements unused by the
        kernels; passed when given for executors that record them)."""
        if dtype not in NCCL_DTYPES:
            raise RuntimeHookError(f"dtype {dtype!r} has no NCCL equivalent")

        def arr(xs: Sequence[int] | None) -> ctypes.Array[ctypes.c_size_t] | None:
            return None if xs is None else (ctypes.c_size_t * len(xs))(*xs)

        def displs(xs: Sequence[int] | None) -> ctypes.Array[ctypes.c_size_t] | None:
            if xs is None:
                return None
            out, acc = [], 0
            for x in xs:
                out.append(acc)
                acc += x
            return (ctypes.c_size_t * len(out))(*out)

        rc = self.lib.mscclRunAlgo(
            ctypes.c_void_p(send_ptr),
            arr(send_counts),
            displs(send_counts),
            ctypes.c_void_p(recv_ptr),
            arr(recv_counts),
            displs(recv_counts),
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


class MscclExecutor:
    """Runs a bucket's plan through the MSCCL executor loaded in NCCL/RCCL (directory mode).

    The XML must already be in ``MSCCL_ALGO_DIR`` when the communicator is created (``a2acc cache export DIR``
    from an earlier job or an offline ``a2acc compile``); then the stock ``all_to_all_single`` over the packed
    uniform buffer of ``buffer_chunks x unit`` bytes per rank is what the executor replaces by that XML. The
    executor is used only when that is provably so for this plan: an NCCL process group of a ROCm PyTorch (whose
    ``all_to_all_single`` calls RCCL's ``ncclAllToAll``; CUDA PyTorch issues grouped send/recv instead), and the
    directory holding a byte-identical copy of the bucket's XML. Otherwise :meth:`unavailable` says why and the engine
    runs the reference executor instead (the stock call on a packed buffer would not be this plan's
    all-to-all-v). Nothing here has run on a GPU.
    """

    name = "msccl"
    buffers = "uniform"

    def __init__(self, algo_dir: str | None = _ALGO_DIR_AT_START) -> None:
        self.algo_dir = algo_dir

    def unavailable(self, entry: Any, group: Any) -> str | None:
        xmls = {k: v for k, v in entry.files.items() if k.endswith(".xml")}
        if len(xmls) != 1:
            return "the cached plan has no MSCCL XML (set A2ACC_BACKEND=msccl-xml)"
        if not self.algo_dir:
            return "MSCCL_ALGO_DIR was not set when the job started (a2acc cache export DIR, then MSCCL_ALGO_DIR=DIR)"
        ((name, text),) = xmls.items()
        try:
            on_disk = (Path(self.algo_dir) / name).read_text(encoding="utf-8")
        except OSError:
            return f"{name} is not in MSCCL_ALGO_DIR={self.algo_dir} (a new bucket: it serves the next job)"
        if on_disk != text:
            return f"{name} in MSCCL_ALGO_DIR differs from the cached plan"
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

    def run(
        self, prog: Any, entry: Any, rank: int, bufs: dict[int, Any], group: Any, stock: Any
    ) -> list[Any]:
        from a2acc.ir.program import Buf

        stock(bufs[int(Buf.OUTPUT)], bufs[int(Buf.INPUT)], group=group)
        return []


EXECUTOR = MscclExecutor()
