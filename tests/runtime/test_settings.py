"""JIT settings: every option checked at activation, said once by rank 0 (torchrun or mp.spawn), and the rank in
every log line taken from torch.distributed once it is initialised."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from a2acc.runtime.settings import JitSettings
from tests.runtime.test_torch_jit import TWO, _env

torch = pytest.importorskip("torch")


@pytest.mark.parametrize(
    ("var", "value", "fragment"),
    [
        ("A2ACC_PLANNER_OPTS", "birkhof=kuhn", "known options: balance"),
        ("A2ACC_PLANNER_OPTS", "birkhoff=hungarian", "allowed: bottleneck, kuhn"),
        ("A2ACC_BACKEND_OPTS", "dialect=hip", "allowed: nccl, rccl"),
        ("A2ACC_EXECUTOR_OPTS", "overlap=maybe", "a boolean"),
        ("A2ACC_EXECUTOR_OPTS", "lanes=2", "known options: overlap"),
        ("A2ACC_BUCKETS", "canonical", "use one of symmetric, plain"),
        ("A2ACC_EXCHANGE", "never", "use one of adaptive, every"),
        ("A2ACC_TUNE", "always", "use one of measure, off"),
        ("A2ACC_MIN_BYTES", "-4K", "a size in bytes"),
        ("A2ACC_MIN_BYTES", "lots", "e.g. 0, 65536 or 256K"),
    ],
)
def test_every_option_is_checked_when_the_settings_are_read(var, value, fragment):
    env = {"A2ACC_TOPOLOGY": "alps:1", "A2ACC_BACKEND": "msccl-xml", var: value}
    s, problems = JitSettings.from_env(env)
    assert s is None and len(problems) == 1
    assert var in problems[0] and fragment in problems[0]


def test_valid_options_pass():
    env = {
        "A2ACC_TOPOLOGY": "alps:1",
        "A2ACC_PLANNER_OPTS": "birkhoff=kuhn",
        "A2ACC_BACKEND": "msccl-xml",
        "A2ACC_BACKEND_OPTS": "dialect=rccl",
        "A2ACC_EXECUTOR_OPTS": "overlap=true",
    }
    s, problems = JitSettings.from_env(env)
    assert s is not None, problems
    assert s.executor == "p2p" and s.executor_opts == (("overlap", "true"),) and s.buckets == "symmetric"


BAD = {"A2ACC_PLANNER_OPTS": "birkhof=kuhn"}


@pytest.mark.slow
@pytest.mark.parametrize(("rank", "lines"), [("0", 1), ("1", 0)])
def test_torchrun_rank_zero_reports_a_bad_option_once_at_activation(tmp_path, rank, lines):
    code = "import torch.distributed as d; print(d.all_to_all_single.__module__)"
    env = _env(tmp_path, A2ACC_JIT="1", A2ACC_TOPOLOGY="alps:1", RANK=rank, **BAD)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "torch.distributed.distributed_c10d"  # nothing patched
    assert out.stderr.count("a2acc: A2ACC_JIT is set but") == lines
    if lines:
        assert "A2ACC_PLANNER_OPTS" in out.stderr and "known options" in out.stderr


SPAWN = textwrap.dedent(
    """
    import os, sys, torch, torch.distributed as dist, torch.multiprocessing as mp

    def run(rank, init):
        dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
        x = torch.arange(8.0).reshape(8, 1) + rank
        y = torch.empty_like(x)
        dist.all_to_all_single(y, x)
        dist.barrier()
        dist.destroy_process_group()

    if __name__ == "__main__":
        mp.spawn(run, args=(sys.argv[1],), nprocs=2)
    """
)


@pytest.mark.slow
def test_mp_spawn_prints_once_from_rank_zero(tmp_path):
    """torch.multiprocessing.spawn sets no RANK: the problem is held back until init_process_group, then said by
    rank 0 only (not by every process)."""
    script = tmp_path / "spawn.py"
    script.write_text(SPAWN)
    init = f"file://{tmp_path / 'store'}"
    env = _env(tmp_path, A2ACC_JIT="1", A2ACC_TOPOLOGY="alps:1", **BAD)
    env.pop("RANK", None)
    out = subprocess.run(
        [sys.executable, str(script), init], env=env, capture_output=True, text=True, timeout=240
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stderr.count("a2acc: A2ACC_JIT is set but") == 1


@pytest.mark.slow
def test_mp_spawn_logs_name_the_rank(tmp_path):
    """With valid settings under mp.spawn, the active line is printed once, by rank 0, labelled with its rank."""
    script = tmp_path / "spawn.py"
    script.write_text(SPAWN)
    topo = tmp_path / "two.yaml"
    topo.write_text(TWO)
    env = _env(tmp_path, A2ACC_JIT="1", A2ACC_TOPOLOGY=str(topo), A2ACC_LOG="info")
    env.pop("RANK", None)
    init = f"file://{tmp_path / 'store'}"
    out = subprocess.run(
        [sys.executable, str(script), init], env=env, capture_output=True, text=True, timeout=240
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stderr.count("hook active") == 1
    assert "a2acc[rank 0] INFO: hook active" in out.stderr
    assert "rank -" not in out.stderr


def test_jit_default_planner_is_the_compilers_and_auto_searches_only_the_quick_planners():
    from a2acc.defaults import DEFAULT_ALGORITHM

    s, problems = JitSettings.from_env({"A2ACC_TOPOLOGY": "alps:1"})
    assert s is not None and s.algorithm == DEFAULT_ALGORITHM, problems
    s, problems = JitSettings.from_env({"A2ACC_TOPOLOGY": "alps:1", "A2ACC_ALGORITHM": "auto"})
    assert s is not None and dict(s.planner_opts) == {"budget_s": "0"}, problems
    env = {"A2ACC_TOPOLOGY": "alps:1", "A2ACC_ALGORITHM": "auto", "A2ACC_PLANNER_OPTS": "budget_s=5"}
    s, problems = JitSettings.from_env(env)
    assert s is not None and dict(s.planner_opts) == {"budget_s": "5"}, problems


def test_an_executor_and_a_backend_that_cannot_work_together_are_refused():
    """``A2ACC_EXECUTOR=msccl A2ACC_BACKEND=none`` was accepted; every call then fell back (the executor has no
    XML to run)."""
    env = {"A2ACC_TOPOLOGY": "dgx-h100", "A2ACC_EXECUTOR": "msccl", "A2ACC_BACKEND": "none"}
    s, problems = JitSettings.from_env(env)
    assert s is None and "runs msccl-xml files only" in problems[0]
    s, problems = JitSettings.from_env({**env, "A2ACC_BACKEND": "msccl-xml"})
    assert s is not None and not problems
    # p2p runs from the plan itself; lowering files beside it (for a later cache export) is allowed
    s, problems = JitSettings.from_env({**env, "A2ACC_EXECUTOR": "p2p", "A2ACC_BACKEND": "msccl-xml"})
    assert s is not None and s.backend == "msccl-xml"


def test_names_ignore_case_and_option_errors_name_the_variable():
    s, problems = JitSettings.from_env(
        {
            "A2ACC_TOPOLOGY": "dgx-h100",
            "A2ACC_ALGORITHM": "FAST",
            "A2ACC_BACKEND": "NONE",
            "A2ACC_MISS": "WAIT",
        }
    )
    assert s is not None and (s.algorithm, s.backend, s.miss) == ("fast", "none", "wait"), problems
    _s, problems = JitSettings.from_env(
        {"A2ACC_TOPOLOGY": "dgx-h100", "A2ACC_ALGORITHM": "mcf", "A2ACC_PLANNER_OPTS": "k=0"}
    )
    assert problems and problems[0].startswith("A2ACC_PLANNER_OPTS") and "--opt" not in problems[0]


def test_the_size_threshold_reads_sizes_and_has_a_measured_default():
    from a2acc.runtime.settings import DEFAULT_MIN_BYTES

    s, problems = JitSettings.from_env({"A2ACC_TOPOLOGY": "alps:1"})
    assert s is not None and s.min_bytes == DEFAULT_MIN_BYTES == 512 << 10, problems
    for text, value in (("0", 0), ("64K", 64 << 10), ("1.5M", 3 << 19), ("4096", 4096)):
        s, problems = JitSettings.from_env({"A2ACC_TOPOLOGY": "alps:1", "A2ACC_MIN_BYTES": text})
        assert s is not None and s.min_bytes == value, problems
