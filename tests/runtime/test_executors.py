"""Executors are chosen per plan: each says why it cannot run one, and the engine falls back to reference."""

from __future__ import annotations

from a2acc.jit.cache import CacheEntry
from a2acc.runtime.executors import EXECUTORS, get_executor
from a2acc.runtime.executors.msccl import MscclExecutor


def _entry(files):
    return CacheEntry("k", "{}", files, None, {})


def test_registry_names_every_executor():
    assert set(EXECUTORS) == {"reference", "msccl", "mscclpp"}
    assert get_executor("reference").unavailable(_entry({}), None) is None
    assert get_executor("mscclpp").unavailable(_entry({}), None) is not None  # no plan, no GPU here


def test_msccl_executor_needs_the_exact_xml_in_the_algo_dir(tmp_path):
    entry = _entry({"00-a2acc-x-rccl.xml": "<algo/>"})
    assert "no MSCCL XML" in (MscclExecutor(str(tmp_path)).unavailable(_entry({}), None) or "")
    assert "was not set" in (MscclExecutor(None).unavailable(entry, None) or "")
    assert "not in MSCCL_ALGO_DIR" in (MscclExecutor(str(tmp_path)).unavailable(entry, None) or "")
    (tmp_path / "00-a2acc-x-rccl.xml").write_text("<algo other/>")
    assert "differs" in (MscclExecutor(str(tmp_path)).unavailable(entry, None) or "")
    (tmp_path / "00-a2acc-x-rccl.xml").write_text("<algo/>")
    # with the file in place, what is left is the process group: none here (no init_process_group)
    why = MscclExecutor(str(tmp_path)).unavailable(entry, None)
    assert why is not None and ("process group" in why or "not nccl" in why)
