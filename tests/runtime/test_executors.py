"""Executors are chosen per plan: each says why it cannot run one, and the engine runs the p2p executor."""

from __future__ import annotations

import numpy as np
import pytest

from a2acc.cli import main
from a2acc.ir.layout import load_manifest
from a2acc.jit.cache import CacheEntry
from a2acc.model.topology import load_topology
from a2acc.model.traffic import generate
from a2acc.runtime.decide.compiling import compile_entry
from a2acc.runtime.executors import DEFAULT_EXECUTOR, EXECUTORS, FALLBACK, get_executor, info, options_type
from a2acc.runtime.executors.msccl import MscclExecutor, scan_algo_dir
from a2acc.runtime.settings import JitSettings


def _entry(files, manifest=None):
    return CacheEntry("k", "{}", files, manifest, {})


def test_one_list_of_executor_names():
    assert list(EXECUTORS) == ["msccl", "mscclpp", "p2p", "reference"]
    assert DEFAULT_EXECUTOR == FALLBACK == "p2p"
    for name in EXECUTORS:
        assert get_executor(name).name == name and info(name).summary
    assert get_executor("reference").unavailable(_entry({}), None) is None
    assert get_executor("mscclpp").unavailable(_entry({}), None) is not None  # no plan, no GPU here
    # settings read the same list: every name is accepted, anything else is refused with the list
    for name in EXECUTORS:
        s, problems = JitSettings.from_env({"A2ACC_TOPOLOGY": "alps:1", "A2ACC_EXECUTOR": name})
        assert s is not None and s.executor == name and s.backend == info(name).backend, problems
    s, problems = JitSettings.from_env({"A2ACC_TOPOLOGY": "alps:1", "A2ACC_EXECUTOR": "nccl"})
    assert s is None and "msccl, mscclpp, p2p, reference" in problems[0]
    assert options_type("p2p")().overlap is False


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """``a2acc compile`` output for one MI300X server (RCCL dialect) and the matrix it was compiled for."""
    d = tmp_path_factory.mktemp("offline")
    m = generate("moe", 8, 1 << 22, 3)
    np.save(d / "m.npy", m)
    out = d / "algos"
    assert (
        main(
            [
                "compile",
                "-t",
                "mi300x",
                "-n",
                "1",
                "-m",
                str(d / "m.npy"),
                "-a",
                "direct",
                "-b",
                "msccl-xml",
                "--opt",
                "dialect=rccl",
                "-o",
                str(out),
            ]
        )
        == 0
    )
    return d, out, load_manifest(d / "algos.manifest.json")


def _jit_entry(man, algorithm="fast"):
    topo = load_topology("mi300x", 1)
    counts = np.asarray(man.counts, dtype=np.int64)
    return compile_entry(
        topo, counts, man.chunk_bytes, algorithm, "msccl-xml", "j" * 32, None, {"dialect": "rccl"}
    )


def test_compile_output_serves_the_jits_bucket_of_the_same_layout(compiled):
    """The JIT's own plan for a layout differs from the offline XML, but the layout, chunk size and buffer match:
    the executor accepts it (what is left here is the process group: none in this test)."""
    _d, out, man = compiled
    ex = MscclExecutor(str(out))
    assert [(c.tolist(), u) for c, u in ex.layouts(8)] == [
        (man.counts, man.chunk_bytes)
    ]  # pinned in the index
    why = ex.unavailable(_jit_entry(man), None)
    assert why is not None and "process group" in why


def test_msccl_executor_says_why_it_cannot_run(compiled, tmp_path):
    _d, out, man = compiled
    entry = _jit_entry(man)
    assert "no MSCCL XML manifest" in (MscclExecutor(str(out)).unavailable(_entry({}), None) or "")
    assert "was not set" in (MscclExecutor(None).unavailable(entry, None) or "")
    other = man.counts[0][1]
    bigger = np.asarray(man.counts)
    bigger[0, 1] = other + 1
    assert "has this bucket's layout" in (
        MscclExecutor(str(out)).unavailable(
            _jit_entry(type(man)(**{**man.__dict__, "counts": bigger.tolist()})), None
        )
        or ""
    )
    # a tampered copy: the file no longer verifies against its manifest
    bad = tmp_path / "algos"
    bad.mkdir()
    (xml,) = out.iterdir()
    (bad / xml.name).write_text(xml.read_text().replace('type="s"', 'type="r"', 1))
    (tmp_path / "algos.manifest.json").write_text((out.parent / "algos.manifest.json").read_text())
    assert "does not verify" in (MscclExecutor(str(bad)).unavailable(entry, None) or "")
    # a second XML covering the same size: the executor's choice is ambiguous
    (bad / xml.name).write_text(xml.read_text())
    (bad / "zz-other.xml").write_text(xml.read_text().replace('name="', 'name="other-', 1))
    assert "ambiguous" in (MscclExecutor(str(bad)).unavailable(entry, None) or "")
    assert len(scan_algo_dir(bad)) == 2
