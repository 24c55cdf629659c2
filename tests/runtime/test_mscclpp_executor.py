"""The mscclpp executor up to the mscclpp API boundary: a recording test double stands in for ``import mscclpp``
and checks what it is handed (the plan file re-verified with a2acc's interpreter, buffer sizes, call order)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from a2acc.backends import get_target
from a2acc.errors import RuntimeHookError
from a2acc.ir import Buf
from a2acc.ir.layout import manifest_from_json
from a2acc.jit.cache import CacheEntry
from a2acc.model.topology import load_topology
from a2acc.runtime.decide.compiling import compile_entry
from a2acc.runtime.executors import get_executor
from a2acc.runtime.executors.mscclpp import NOT_IMPORTABLE, MscclppExecutor, executor_for, mscclpp_available

torch = pytest.importorskip("torch")


class FakeMscclpp:
    """Records the documented calls: ExecutionPlan(path, rank), CommGroup(torch_group=).communicator,
    Executor(comm).execute(rank, send, recv, send_size, recv_size, dtype, plan, stream)."""

    class DataType:
        uint32 = "uint32"

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        fake = self

        class ExecutionPlan:
            def __init__(self, path: str, rank: int) -> None:
                fake.calls.append(("plan", path, rank))
                self.path = path
                text = Path(path).read_text()
                self.name = __import__("json").loads(text)["name"]

        class CommGroup:
            def __init__(self, torch_group: Any = None) -> None:
                fake.calls.append(("commgroup", torch_group))
                self.communicator = ("comm", torch_group)

        class Executor:
            def __init__(self, comm: Any) -> None:
                fake.calls.append(("executor", comm))

            def execute(self, rank, send, recv, ssize, rsize, dtype, plan, stream):
                fake.calls.append(("execute", rank, send, recv, ssize, rsize, dtype, plan, stream))
                fake.last = (send, recv, ssize)
                # stand-in for the kernel: the receive buffer gets a recognisable pattern
                fake.fill(recv, rsize)

        self.ExecutionPlan = ExecutionPlan
        self.CommGroup = CommGroup
        self.Executor = Executor
        self.buffers: dict[int, Any] = {}

    def fill(self, ptr: int, n: int) -> None:
        t = self.buffers[ptr]
        t.copy_(torch.arange(n, dtype=torch.int64).remainder(251).to(torch.uint8))


def _entry(backend: str = "mscclpp-json", **opts: str) -> CacheEntry:
    topo = load_topology("dgx-h100", 1)
    layout = np.full((8, 8), 2, dtype=np.int64)
    layout[0, 3] = 5
    return compile_entry(topo, layout, 64, "direct", backend, "k" * 32, None, opts or None)


def _bufs(nbytes: int) -> dict[int, Any]:
    return {
        int(Buf.INPUT): torch.arange(nbytes, dtype=torch.int64).remainder(13).to(torch.uint8),
        int(Buf.OUTPUT): torch.zeros(nbytes, dtype=torch.uint8),
        int(Buf.SCRATCH): torch.zeros(0, dtype=torch.uint8),
    }


def test_run_hands_mscclpp_the_verified_plan_and_exact_buffers(tmp_path):
    entry = _entry()
    man = manifest_from_json(entry.manifest or "")
    fake = FakeMscclpp()
    ex = MscclppExecutor(fake, tmp_path / "plans", stream=lambda: 1234)
    assert ex.unavailable(entry, "group") is None
    b = _bufs(man.buffer_bytes)
    # the double needs to find the persistent buffers behind the pointers it is given
    orig_new_empty = torch.Tensor.new_empty

    def track(t: Any, *a: Any, **k: Any) -> Any:
        out = orig_new_empty(t, *a, **k)
        fake.buffers[out.data_ptr()] = out
        return out

    torch.Tensor.new_empty = track  # type: ignore[method-assign]
    try:
        ex.run(entry, 3, b[int(Buf.INPUT)], b[int(Buf.OUTPUT)], "group")
        ex.run(
            entry, 3, b[int(Buf.INPUT)], b[int(Buf.OUTPUT)], "group"
        )  # second call: plan and executor reused
    finally:
        torch.Tensor.new_empty = orig_new_empty  # type: ignore[method-assign]
    kinds = [c[0] for c in fake.calls]
    assert kinds == ["plan", "commgroup", "executor", "execute", "execute"]
    _k, path, rank = fake.calls[0]
    assert rank == 3 and Path(path).parent == tmp_path / "plans"
    text = Path(path).read_text()
    ((fname, cached),) = entry.files.items()
    assert Path(path).name == fname and text == cached
    chk = get_target("mscclpp-json").check_text(text, path, man, None)
    assert chk.ok, chk.errors[:3]
    _e, r, send, recv, ssize, rsize, dtype, plan, stream = fake.calls[3]
    assert (r, ssize, rsize, dtype, stream) == (3, man.buffer_bytes, man.buffer_bytes, "uint32", 1234)
    assert plan.name == man.algo_name and send != recv
    assert send != b[int(Buf.INPUT)].data_ptr()  # persistent buffers, not the engine's per-call ones
    assert torch.equal(fake.buffers[send], b[int(Buf.INPUT)])  # the packed input was copied in
    want = torch.arange(man.buffer_bytes, dtype=torch.int64).remainder(251).to(torch.uint8)
    assert torch.equal(b[int(Buf.OUTPUT)], want)  # and the result copied out


def test_wrong_buffer_size_is_refused(tmp_path):
    entry = _entry()
    man = manifest_from_json(entry.manifest or "")
    ex = MscclppExecutor(FakeMscclpp(), tmp_path, stream=lambda: 0)
    b = _bufs(man.buffer_bytes - 16)
    with pytest.raises(RuntimeHookError, match=f"exactly {man.buffer_bytes} bytes"):
        ex.run(entry, 0, b[int(Buf.INPUT)], b[int(Buf.OUTPUT)], "g")


def test_arena_regions_are_the_manifests_uniform_buffers(tmp_path):
    entry = _entry()
    man = manifest_from_json(entry.manifest or "")
    ex = MscclppExecutor(FakeMscclpp(), tmp_path, stream=lambda: 0)
    prepared = ex.prepare(None, entry)
    r = ex.regions(prepared, 0)
    b = man.buffer_bytes
    assert (r.input, r.output, r.total) == ((0, b), (b, 2 * b), 2 * b)


def _module(version: str | None, **drop: bool) -> object:
    fake = FakeMscclpp()
    if version is not None:
        fake.__version__ = version
    for name in drop:
        delattr(fake, name)
    return fake


@pytest.mark.parametrize(
    ("version", "drop", "fragment"),
    [
        ("0.8.0", {}, "older than 0.9.0"),
        ("0.7.1+cu12", {}, "older than 0.9.0"),
        ("0.10.0", {"Executor": True}, "has no Executor"),
        ("0.9.0", {}, None),
        ("0.10.1.dev3", {}, None),
        (None, {}, None),  # no version: judged by the API
    ],
)
def test_installed_version_and_api_are_checked_before_the_first_call(tmp_path, version, drop, fragment):
    ex = MscclppExecutor(_module(version, **drop), tmp_path, stream=lambda: 0)
    why = ex.unavailable(_entry(), "group")
    if fragment is None:
        assert why is None
    else:
        assert why is not None and fragment in why


def test_commgroup_without_torch_group_is_refused(tmp_path):
    fake = FakeMscclpp()

    class OldCommGroup:  # v0.8's constructor: mpi_comm or an interface triple, no torch_group
        def __init__(self, mpi_comm=None, interfaceIpPortTrio="", rank=None, size=None):
            pass

    fake.CommGroup = OldCommGroup
    why = MscclppExecutor(fake, tmp_path).unavailable(_entry(), "group")
    assert why is not None and "torch_group" in why


def test_groups_that_refuse_cpu_tensors_are_refused(monkeypatch):
    """CommGroup(torch_group=) broadcasts a CPU tensor over the group: an NCCL-only group cannot carry it."""
    import torch.distributed as dist

    from a2acc.runtime.executors.mscclpp import group_problem

    monkeypatch.setattr(dist, "get_backend", lambda group=None: "nccl")
    why = group_problem("g")
    assert why is not None and "cpu:gloo,cuda:nccl" in why
    monkeypatch.setattr(dist, "get_backend", lambda group=None: "cpu:gloo,cuda:nccl")
    assert group_problem("g") is None


def test_unavailable_says_why(tmp_path):
    fake = FakeMscclpp()
    assert "no MSCCL++ JSON plan" in (
        MscclppExecutor(fake).unavailable(CacheEntry("k", "{}", {}, None, {}), None) or ""
    )
    xml = _entry("msccl-xml")
    assert "no MSCCL++ JSON plan" in (MscclppExecutor(fake).unavailable(xml, None) or "")
    direct = _entry(output_writes="direct")
    assert "output_writes=direct" in (MscclppExecutor(fake).unavailable(direct, None) or "")
    nomani = dataclasses.replace(_entry(), manifest=None)
    assert "manifest" in (MscclppExecutor(fake).unavailable(nomani, None) or "")
    if not mscclpp_available():
        assert MscclppExecutor().unavailable(_entry(), None) == NOT_IMPORTABLE
        with pytest.raises(RuntimeHookError, match="mscclpp is not importable"):
            executor_for(None)
    assert get_executor("mscclpp").name == "mscclpp"


@pytest.mark.slow
def test_jit_with_mscclpp_executor_caches_json_plans_and_falls_back(tmp_path):
    """A2ACC_EXECUTOR=mscclpp on Gloo without mscclpp: every bucket is lowered to an MSCCL++ JSON plan and cached,
    the executor says why it cannot run here (once, naming the p2p executor that runs instead), and the results
    are the stock call's bytes."""
    from tests.runtime.test_torch_jit import TWO, _env, _run_world

    topo = tmp_path / "two.yaml"
    topo.write_text(TWO)
    env = _env(tmp_path, A2ACC_JIT="1", A2ACC_TOPOLOGY=str(topo), A2ACC_EXECUTOR="mscclpp", A2ACC_MISS="wait")
    results, errs = _run_world(tmp_path, 2, env)
    for res in results:
        assert all(c["same"] for c in res["checks"])
    if not mscclpp_available():
        assert errs[0].count("A2ACC_EXECUTOR=mscclpp cannot run here") == 1 and "not importable" in errs[0]
        assert "running a2acc's plans with the p2p executor instead" in errs[0]
    for res in results:
        assert res["stats"]["by_executor"] == {"p2p": res["stats"]["handled"]}
    cached = list((tmp_path / "cache").rglob("*.json"))
    payloads = [__import__("json").loads(p.read_text())["payload"] for p in cached]
    assert payloads and all(any(k.endswith(".json") for k in p["files"]) for p in payloads)
    for p in payloads:
        ((name, text),) = p["files"].items()
        man = manifest_from_json(p["manifest"])
        assert get_target("mscclpp-json").check_text(text, name, man, None).ok
