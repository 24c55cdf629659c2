"""The ``mscclpp`` executor: run a bucket's MSCCL++ JSON plan through ``mscclpp.Executor`` + ``ExecutionPlan``.

MSCCL++'s NCCL shim never routes ``ncclAllToAll`` to an execution plan (its ``src/ext/nccl`` serves allreduce,
allgather, reducescatter and broadcast from plans; all-to-all returns an error), so a2acc drives the executor
itself, through the documented Python API (microsoft/mscclpp ``python/csrc/executor_py.cpp``,
``python/mscclpp/_core/comm.py``, ``python/test/executor_test.py``)::

    plan = mscclpp.ExecutionPlan(path, rank)
    comm = mscclpp.CommGroup(torch_group=group).communicator     # one per process group
    ex = mscclpp.Executor(comm)
    ex.execute(rank, send_ptr, recv_ptr, B, B, mscclpp.DataType.uint32, plan, stream)   # PacketType.LL16

Per call: the engine packs the caller's rows into the uniform buffer of the manifest (``buffers = "uniform"``:
``B = buffer_chunks x chunk_bytes`` bytes in and out); this executor copies it into a persistent send buffer
(one pair per plan and device), runs the plan on the current stream and copies the result out. Persistent
buffers keep the executor's context cache (keyed by buffer addresses and plan name) at one context per plan: the
first ``execute`` of a context is collective (connections, memory registration), which every rank reaches
together because the engine's agreement step precedes it. The plan file is written once per plan into
``plan_dir`` (``$A2ACC_CACHE_DIR/mscclpp-plans`` by default) and loaded once per rank.

Plans lowered with ``output_writes=direct`` write peers' receive buffers directly, which the executor supports
only when every rank's buffers sit at the same offset in their allocations; torch's caching allocator does not
promise that, so such plans are refused here (the default ``scratch`` plans reference only executor scratch).

**What has run where:** nothing here has run on a GPU. The calls above are tested against a test double that
records them and checks the plan file (re-verified with a2acc's interpreter) and the buffer sizes
(``tests/runtime/test_mscclpp_executor.py``).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from a2acc.errors import PlanFormatError, RuntimeHookError
from a2acc.fileio import atomic_write_text
from a2acc.ir.layout import Manifest, manifest_from_json
from a2acc.runtime.executors import Regions, bind_arena
from a2acc.runtime.launch.arena import ArenaLaunch
from a2acc.runtime.launch.post import Posted

NOT_IMPORTABLE = (
    "mscclpp is not importable: build MSCCL++ (v0.9.0 or later) with its Python bindings (pip install . in "
    "microsoft/mscclpp) to use A2ACC_EXECUTOR=mscclpp"
)
MIN_VERSION = (0, 9, 0)  # CommGroup(torch_group=...) and the Executor API this module calls
API = ("CommGroup", "Executor", "ExecutionPlan", "DataType")


def _version_tuple(text: str) -> tuple[int, ...] | None:
    parts = []
    for p in text.split("+")[0].split("."):
        digits = "".join(ch for ch in p if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts) if parts else None


def api_problem(mod: Any) -> str | None:
    """Why the installed mscclpp cannot serve this executor (None: it can): the version (>= 0.9.0) and the
    names and parameters called, checked before the first call."""
    import inspect

    raw = getattr(mod, "__version__", None)
    if raw is None:
        try:
            from importlib.metadata import version

            raw = version("mscclpp")
        except Exception:  # no distribution metadata: judged by the API alone
            raw = None
    v = _version_tuple(str(raw)) if raw is not None else None
    if v is not None and v < MIN_VERSION:
        return f"mscclpp {raw} is older than 0.9.0 (CommGroup(torch_group=...) and Executor.execute as used here)"
    missing = [n for n in API if not hasattr(mod, n)]
    if missing:
        return f"mscclpp {raw or '(unknown version)'} has no {', '.join(missing)}"
    try:
        params = inspect.signature(mod.CommGroup).parameters
    except (TypeError, ValueError):  # a compiled class without a signature: trust the version
        return None
    if "torch_group" not in params and not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return f"mscclpp {raw or '(unknown version)'}: CommGroup takes no torch_group (needs >= 0.9.0)"
    return None


def _module() -> Any:
    try:
        return importlib.import_module("mscclpp")
    except ImportError:
        return None


def mscclpp_available() -> bool:
    return _module() is not None


def executor_for(comm: Any, module: Any = None) -> Any:
    """An ``mscclpp.Executor`` over ``comm`` (an ``mscclpp.Communicator``); RuntimeHookError when mscclpp is
    not importable."""
    mod = module if module is not None else _module()
    if mod is None:
        raise RuntimeHookError(NOT_IMPORTABLE)
    return mod.Executor(comm)


def _plan_file(entry: Any) -> tuple[str, str] | None:
    files = {k: v for k, v in (getattr(entry, "files", None) or {}).items() if k.endswith(".json")}
    if len(files) != 1:
        return None
    ((name, text),) = files.items()
    return name, text


def _manifest(entry: Any) -> Manifest | None:
    raw = getattr(entry, "manifest", None)
    if not raw:
        return None
    try:
        return manifest_from_json(raw, "cache entry manifest")
    except PlanFormatError:
        return None


class MscclppExecutor:
    """Runs cached MSCCL++ JSON plans (see the module docstring). ``module`` replaces ``import mscclpp`` (tests
    pass a recording double); ``stream`` returns the stream handle to launch on (default: torch's current
    CUDA/HIP stream)."""

    name = "mscclpp"
    buffers = "uniform"

    def __init__(
        self, module: Any = None, plan_dir: str | os.PathLike[str] | None = None, stream: Any = None
    ) -> None:
        self.module = module
        self.plan_dir = Path(plan_dir) if plan_dir is not None else None
        self.stream = stream
        self._plans: dict[tuple[str, int], Any] = {}
        self._executors: dict[int, Any] = {}
        self._bufs: dict[tuple[str, str], tuple[Any, Any]] = {}

    def mod(self) -> Any:
        return self.module if self.module is not None else _module()

    def unavailable(self, entry: Any, group: Any) -> str | None:
        pf = _plan_file(entry)
        if pf is None:
            return "the cached plan has no MSCCL++ JSON plan (set A2ACC_BACKEND=mscclpp-json)"
        man = _manifest(entry)
        if man is None:
            return "the cached MSCCL++ plan has no readable manifest"
        if dict(man.options).get("output_writes") == "direct":
            return (
                "the plan writes peers' receive buffers directly (output_writes=direct), which needs buffers at "
                "equal offsets in their allocations on every rank; lower with output_writes=scratch"
            )
        mod = self.mod()
        if mod is None:
            return NOT_IMPORTABLE
        problem = api_problem(mod)
        if problem is not None:
            return problem
        if self.module is None:
            problem = group_problem(group)
            if problem is not None:
                return problem
            try:
                import torch
            except ImportError:
                return "torch is not importable"
            if not torch.cuda.is_available():
                return "no CUDA/HIP device: MSCCL++ runs on GPU buffers"
        return None

    # ------------------------------------------------------------------ the call
    def plan_path(self, name: str, text: str) -> Path:
        d = self.plan_dir
        if d is None:
            base = os.environ.get("A2ACC_CACHE_DIR") or str(Path.home() / ".cache" / "a2acc")
            d = Path(base) / "mscclpp-plans"
        path = d / name
        try:
            same = path.read_text(encoding="utf-8") == text
        except OSError:
            same = False
        if not same:
            atomic_write_text(path, text)
        return path

    def executor(self, group: Any) -> Any:
        """One ``mscclpp.Executor`` per process group, over a communicator bootstrapped through that group
        (``CommGroup(torch_group=...)`` broadcasts its unique id as a CPU tensor over the group, so the group
        must carry CPU tensors: gloo, or a ``cpu:gloo,cuda:nccl`` group)."""
        key = id(group)
        ex = self._executors.get(key)
        if ex is None:
            mod = self.mod()
            if group is None:  # the default group, which CommGroup needs by name
                import torch.distributed as dist

                group = dist.group.WORLD
            comm = mod.CommGroup(torch_group=group).communicator
            ex = self._executors[key] = executor_for(comm, mod)
        return ex

    def prepare(self, prog: Any, entry: Any) -> Any:
        return (prog, entry)

    def regions(self, prepared: Any, rank: int) -> Regions:
        prog, entry = prepared
        man = _manifest(entry)
        b = man.buffer_bytes if man is not None else prog.layout.buffer_chunks * prog.unit_bytes
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
        r = self.regions(prepared, position)
        nbytes = r.input[1] - r.input[0]

        def start(arena: Any, counter: Posted) -> Callable[[], None]:
            counter.add(prog.nranks - 1, prog.nranks - 1, nbytes, nbytes)
            self.run(
                prepared[1],
                position,
                arena[r.input[0] : r.input[1]],
                arena[r.output[0] : r.output[1]],
                groups[0],
            )
            return lambda: None

        return bind_arena(start, r, prog, position, ranks, row_bytes, device, posted)

    def run(self, entry: Any, rank: int, send_in: Any, recv_out: Any, group: Any) -> None:
        """Copy in, execute on the stream, copy out; everything is enqueued on the current stream, so nothing is
        left pending for the caller (stream order makes its unpacking wait)."""
        why = self.unavailable(entry, group)
        if why is not None:
            raise RuntimeHookError(why)
        mod = self.mod()
        pf = _plan_file(entry)
        man = _manifest(entry)
        if pf is None or man is None:
            raise RuntimeHookError("the cached plan has no MSCCL++ JSON plan")
        name, text = pf
        nbytes = man.buffer_bytes
        for what, t in (("input", send_in), ("output", recv_out)):
            got = int(t.numel()) * int(t.element_size())
            if got != nbytes:
                raise RuntimeHookError(
                    f"{what} buffer of {got} bytes; the plan {name} runs on exactly {nbytes} bytes per rank"
                )
        key = (name, rank)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = mod.ExecutionPlan(str(self.plan_path(name, text)), rank)
        bkey = (name, str(send_in.device))
        pair = self._bufs.get(bkey)
        if pair is None:
            pair = self._bufs[bkey] = (send_in.new_empty(send_in.shape), recv_out.new_empty(recv_out.shape))
        send, recv = pair
        send.copy_(send_in)
        stream = self.stream() if self.stream is not None else _current_stream()
        self.executor(group).execute(
            rank, send.data_ptr(), recv.data_ptr(), nbytes, nbytes, mod.DataType.uint32, plan, stream
        )
        recv_out.copy_(recv)


def group_problem(group: Any) -> str | None:
    """``CommGroup(torch_group=)`` broadcasts its bootstrap id as a CPU tensor over the group: the group must
    accept CPU tensors (gloo, or ``backend="cpu:gloo,cuda:nccl"``)."""
    try:
        import torch

        from a2acc.runtime.decide.exchange import accepted_devices

        devices = accepted_devices(group, torch.device("cpu"))
    except Exception as exc:  # no process group
        return f"no process group ({exc})"
    if "cpu" not in devices:
        return (
            "mscclpp's CommGroup(torch_group=...) broadcasts a CPU tensor over the group, which this group's "
            f"backend ({'/'.join(devices)}) rejects: create it with backend='cpu:gloo,cuda:nccl'"
        )
    return None


def _current_stream() -> int:
    import torch

    return int(torch.cuda.current_stream().cuda_stream)


EXECUTOR = MscclppExecutor()
