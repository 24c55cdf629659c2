"""The JIT path on real processes: Gloo over loopback, A2ACC_JIT=1, results byte-identical to the stock call."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

WORKER = Path(__file__).with_name("worker.py")
TWO = """version: 1
name: two
servers: 2
gpus_per_server: 1
intra: {fabric: switch, bandwidth: 100}
inter: {nics_per_server: 1, bandwidth: 25}
"""


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(tmp_path, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("A2ACC_")}
    # the tests' calls move a few KiB: below the default size threshold every one would go to the stock call
    env.update(
        {
            "A2ACC_CACHE_DIR": str(tmp_path / "cache"),
            "PYTHONWARNINGS": "ignore::FutureWarning",
            "A2ACC_MIN_BYTES": "0",
        }
    )
    env.update(extra)
    return env


def _run_world(tmp_path, world, env, seed=7, mode="full"):
    port = _port()
    procs = []
    outs = []
    for r in range(world):
        out = tmp_path / f"rank{r}.json"
        outs.append(out)
        procs.append(
            subprocess.Popen(
                [sys.executable, str(WORKER), str(r), str(world), str(port), str(out), str(seed), mode],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    errs = []
    for p in procs:
        _o, e = p.communicate(timeout=240)
        errs.append(e)
        assert p.returncode == 0, e[-2000:]
    return [json.loads(o.read_text()) for o in outs], errs


TWO_BY_TWO = """version: 1
name: two-by-two
servers: 2
gpus_per_server: 2
intra: {fabric: switch, bandwidth: 150}
inter: {nics_per_server: 2, bandwidth: 25}
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("world", "spec", "executor", "opts"),
    [
        (2, "two", "reference", ""),
        (4, "alps:1", "p2p", ""),
        (4, "2x2", "p2p", "overlap=true"),
    ],
)
def test_jit_matches_stock_and_hits_cache(tmp_path, world, spec, executor, opts):
    topo = tmp_path / "t.yaml"
    topo.write_text(TWO if spec == "two" else TWO_BY_TWO)
    spec = str(topo) if spec in ("two", "2x2") else spec
    env = _env(
        tmp_path,
        A2ACC_JIT="1",
        A2ACC_TOPOLOGY=spec,
        A2ACC_MISS="wait",  # every call through a plan
        A2ACC_EXECUTOR=executor,
        A2ACC_EXECUTOR_OPTS=opts,
    )
    results, _ = _run_world(tmp_path, world, env)
    for res in results:
        assert res["patched"]
        assert res["checks"] and all(c["same"] for c in res["checks"]), [
            c for c in res["checks"] if not c["same"]
        ]
        dtypes = {c["dtype"] for c in res["checks"]}
        assert {"torch.float32", "torch.bfloat16", "torch.int64"} <= dtypes
        assert {c["async"] for c in res["checks"]} == {True, False}
        # async calls return a real torch.distributed.Work, served by a2acc
        assert all(c["work"] is True and c["handled"] for c in res["checks"] if c["async"])
        st = res["stats"]
        assert st["fallbacks"] == {} and st["handled"] == st["calls"]
        assert st["by_executor"] == {executor: st["handled"]}
        if spec == "alps:1":  # one server: the planner's plan is the direct transfers, nothing to measure
            assert set(st["by_algorithm"]) == {"fast"} and set(st["tuned"]) == {"plan"}
        # calls 1..5 reuse call 0's matrix with other dtypes/async: the second call is served from memory
        assert res["checks"][1]["source"] == ["memory"]
        assert st["bucket_hits"] > 0
    # every rank saw the same buckets (the plan-hash agreement never failed)
    assert len({json.dumps(r["stats"]["bucket_hits"]) for r in results}) == 1


@pytest.mark.slow
def test_measured_plan_choice_is_made_alike_on_every_rank(tmp_path):
    """A2ACC_TUNE=measure (the default) on two servers: each bucket's first served calls alternate between the
    planner's plan and the direct plan, then every rank keeps the same one, chosen by the slowest rank's times
    (the worker fixes the times: see its ``tune`` mode); every output byte-identical to the stock call."""
    topo = tmp_path / "t.yaml"
    topo.write_text(TWO_BY_TWO)
    # the staged shape: at these few KiB fast's own choice is its direct shape, the same transfers as the direct
    # plan (then nothing is measured)
    env = _env(
        tmp_path,
        A2ACC_JIT="1",
        A2ACC_TOPOLOGY=str(topo),
        A2ACC_MISS="wait",
        A2ACC_PLANNER_OPTS="shape=staged",
        A2ACC_EXCHANGE="every",  # the decision is made at an exchange: pinned to the call after the trial
    )
    results, errs = _run_world(tmp_path, 4, env, mode="tune")
    ran = [[c["ran"] for c in r["checks"]["calls"]] for r in results]
    assert all(x == ran[0] for x in ran)  # the same plan on every rank, call by call
    for res in results:
        calls = res["checks"]["calls"]
        assert all(c["same"] for c in calls)
        assert all(c["served"] for c in calls if c["phase"] < 2)
        # phase 2: rank 1 stops measuring; every rank sees it at the next exchange and takes the stock call
        assert not any(c["served"] for c in calls if c["phase"] == 2)
        assert res["checks"]["fallbacks"].get("ranks set A2ACC_TUNE differently", 0) >= 1
        for phase, kept in ((0, ["fast"]), (1, ["direct"])):
            seq = [c["ran"] for c in calls if c["phase"] == phase]
            # the first call runs the planner's plan (the direct plan is compared at that call's exchange), then
            # the trial alternates, the planner's plan first, three calls of each; the next exchange decides, by
            # the slowest rank: the planner's plan when one rank measures the direct one slower
            assert seq == [["fast"], *[["fast"], ["direct"]] * 3, *[kept] * 5], (phase, str(seq))
        assert res["stats"]["tuned"] == {"plan": 1, "direct": 1}
    assert errs[0].count("ranks set A2ACC_TUNE differently") == 1 and "A2ACC_TUNE" not in errs[1]


@pytest.mark.slow
def test_a_miss_is_served_by_stock_and_all_ranks_switch_at_the_same_call(tmp_path):
    topo = tmp_path / "two.yaml"
    topo.write_text(TWO)
    results, _ = _run_world(tmp_path, 2, _env(tmp_path, A2ACC_JIT="1", A2ACC_TOPOLOGY=str(topo)), mode="miss")
    served = [r["checks"][0]["served"] for r in results]
    assert served[0] == served[1]  # the same calls on every rank
    assert served[0][0] is False and served[0][-1] is True  # first call: stock while compiling
    assert results[0]["stats"]["stock_while_compiling"] >= 1


@pytest.mark.slow
def test_two_subgroups_run_their_own_plans_at_once(tmp_path):
    env = _env(tmp_path, A2ACC_JIT="1", A2ACC_TOPOLOGY="alps:1", A2ACC_MISS="wait")
    results, _ = _run_world(tmp_path, 4, env, mode="groups")
    for res in results:
        assert res["checks"] and all(c["same"] for c in res["checks"])
        assert all(c["work"] for c in res["checks"] if c["async"])
        st = res["stats"]
        assert st["handled"] == st["calls"] == 8 and st["fallbacks"] == {}


@pytest.mark.slow
def test_msccl_executor_that_cannot_run_falls_back_to_reference_and_lowers_xml(tmp_path):
    """A2ACC_EXECUTOR=msccl on Gloo: every plan is still lowered to XML and cached (for a later export), the
    executor says why it cannot run here, once, and the reference executor gives the stock call's bytes."""
    topo = tmp_path / "two.yaml"
    topo.write_text(TWO)
    env = _env(
        tmp_path,
        A2ACC_JIT="1",
        A2ACC_TOPOLOGY=str(topo),
        A2ACC_EXECUTOR="msccl",
        A2ACC_LOG="warning",
        A2ACC_MISS="wait",
    )
    results, errs = _run_world(tmp_path, 2, env)
    for res in results:
        assert all(c["same"] for c in res["checks"])
        assert res["stats"]["fallbacks"] == {}
    # said once per job: by the first rank only
    assert errs[0].count("A2ACC_EXECUTOR=msccl cannot run here") == 1 and "MSCCL_ALGO_DIR" in errs[0]
    assert "cannot run here" not in errs[1]
    cached = list((tmp_path / "cache").rglob("*.json"))
    assert cached and all(".xml" in json.loads(p.read_text())["payload"]["files"].__repr__() for p in cached)


@pytest.mark.slow
def test_unset_jit_patches_nothing_and_imports_nothing(tmp_path):
    code = (
        "import sys, torch.distributed as d, torch.distributed.distributed_c10d as c;"
        "print(d.all_to_all_single is c.all_to_all_single, d.all_to_all_single.__module__, 'a2acc' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=_env(tmp_path), capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["True", "torch.distributed.distributed_c10d", "False"]
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=_env(tmp_path, A2ACC_JIT="1", A2ACC_TOPOLOGY="alps:1"),
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.split() == ["True", "a2acc.runtime.torch_patch", "True"]


def test_armed_jit_imports_nothing_heavy_at_start(tmp_path):
    """A2ACC_JIT=1 arms a lazy hook: a process that never imports torch.distributed pays nothing for it."""
    code = "import sys; assert 'torch' not in sys.modules and 'numpy' not in sys.modules, sorted(sys.modules)"
    subprocess.run(
        [sys.executable, "-c", code], env=_env(tmp_path, A2ACC_JIT="1", A2ACC_TOPOLOGY="alps:1"), check=True
    )


INVALID_SETTINGS = [
    ({"A2ACC_BACKEND": "nccl"}, "A2ACC_BACKEND='nccl'"),
    ({"A2ACC_EXECUTOR": "cuda"}, "A2ACC_EXECUTOR='cuda'"),
    ({"A2ACC_BACKEND_OPTS": "dialect"}, "use KEY=VALUE"),
    ({"A2ACC_ALGORITHM": "magic"}, "A2ACC_ALGORITHM='magic'"),
    ({}, "A2ACC_TOPOLOGY is not set"),
]


@pytest.mark.slow
def test_invalid_settings_warn_once_and_keep_stock(tmp_path):
    """Each bad setting in its own interpreter (the hook reads the environment at start-up), all started at
    once: one warning naming it, and the stock collective left in place."""
    code = "import torch.distributed as d; print(d.all_to_all_single.__module__)"
    procs = []
    for extra, fragment in INVALID_SETTINGS:
        env = _env(tmp_path, A2ACC_JIT="1", RANK="0", **extra)  # as torchrun sets it
        if "A2ACC_TOPOLOGY" not in extra and fragment != "A2ACC_TOPOLOGY is not set":
            env["A2ACC_TOPOLOGY"] = "alps:1"
        procs.append(
            (
                fragment,
                subprocess.Popen(
                    [sys.executable, "-c", code],
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                ),
            )
        )
    for fragment, proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        assert out.strip() == "torch.distributed.distributed_c10d"
        assert err.count("a2acc: A2ACC_JIT is set but") == 1 and fragment in err, err


@pytest.mark.slow
def test_a_plan_that_fails_on_one_rank_sends_every_rank_to_the_stock_call(tmp_path):
    env = _env(tmp_path, A2ACC_JIT="1", A2ACC_TOPOLOGY="alps:1", A2ACC_LOG="error")
    results, _ = _run_world(tmp_path, 4, env, mode="failrank")
    served = [[c["served"] for c in r["checks"]["calls"]] for r in results]
    assert all(s == served[0] for s in served)  # the same calls on every rank
    for r in results:
        calls = r["checks"]["calls"]
        assert all(c["same"] for c in calls)
        assert not any(c["served"] for c in calls if c["phase"] == 0)  # the failed bucket never runs
        assert any(c["served"] for c in calls if c["phase"] == 1)  # the next one does
        assert r["checks"]["fallbacks"].get("plan failed on a rank", 0) >= 1


def test_a_new_bucket_is_served_by_its_direct_plan_while_the_planners_plan_compiles(tmp_path):
    """A2ACC_TUNE=measure (the default) makes a new bucket's direct plan first, in the call that misses (a group
    of at most QUICK_WORLD ranks): it serves from the bucket's second call, while the planner's plan (held
    back 1.5 s here) compiles; then the planner's plan serves. The same calls on every rank, every output
    byte-identical."""
    topo = tmp_path / "t.yaml"
    topo.write_text(TWO_BY_TWO)
    env = _env(tmp_path, A2ACC_JIT="1", A2ACC_TOPOLOGY=str(topo), A2ACC_LOG="error")
    results, _ = _run_world(tmp_path, 4, env, mode="quick")
    runs = [[c["algorithm"] for c in r["checks"]["calls"]] for r in results]
    assert all(x == runs[0] for x in runs)
    for r in results:
        assert all(c["same"] for c in r["checks"]["calls"])
    algos = runs[0]
    assert algos[0] is None  # the miss: the stock call, while both plans compile
    assert algos[1] == "direct" and "fast" in algos  # the direct plan from call 2, the planner's plan later
    assert algos.index("fast") > 1 and None not in algos[1:]


def test_announce_refuses_malformed_matrices_and_is_a_no_op_without_the_jit(tmp_path):
    import numpy as np

    import a2acc.runtime
    from a2acc.errors import AnnounceError
    from a2acc.runtime.engine import Engine
    from a2acc.runtime.settings import JitSettings

    assert a2acc.runtime.announce(np.ones((2, 2), dtype=np.int64)) is False  # not active: nothing done
    eng = Engine(JitSettings(topology="alps:1", cache_dir=str(tmp_path)))
    for bad, what in (
        (np.ones((2, 3), dtype=np.int64), "square"),
        (np.ones((2, 2)), "non-negative integers"),
        (-np.ones((2, 2), dtype=np.int64), "non-negative integers"),
    ):
        with pytest.raises(AnnounceError, match=what):
            eng.announce(bad)
    good = torch.tensor([[1, 2], [3, 4]])
    eng.announce(good)
    assert eng._take_announced(None, 3) is None  # a 3-rank call does not take a 2-rank matrix
    assert eng._take_announced(None, 2) is not None  # no group named: the next call of a 2-rank group
    assert eng._take_announced(None, 2) is None  # consumed


@pytest.mark.slow
def test_ranks_holding_different_programs_for_a_bucket_all_take_the_stock_call(tmp_path):
    """Rank 1 plans with another planner: without the comparison of Programs the ranks would run mismatched
    plans (a hang or mixed-up data); with it, every rank stops a2acc for the group at the same call."""
    topo = tmp_path / "t.yaml"
    topo.write_text(TWO_BY_TWO)
    env = _env(tmp_path, A2ACC_JIT="1", A2ACC_TOPOLOGY=str(topo))
    results, errs = _run_world(tmp_path, 4, env, mode="content")
    for res in results:
        got = res["checks"]
        assert all(c["same"] for c in got["calls"])
        assert not any(c["served"] for c in got["calls"])
        assert got["fallbacks"].get("ranks hold different plans", 0) >= 1
    assert "ranks hold different Programs" in errs[0]


#: the calls A2ACC_EXCHANGE=adaptive runs without an exchange in the worker's ``adaptive`` sequence (float32 and
#: bfloat16 alternate, so the byte matrices repeat every 2 calls): the period is confirmed at call 2 and the skips
#: grow 1, 2, 4, 8, 8; the jumped hot expert (calls 24-26) falls inside a skip and travels in the plan's direct
#: messages and residual, and the exchange at call 30 sees the first skew again
PREDICTED = [3, 5, 6, 8, 9, 10, 11, 13, 14, 15, 16, 17, 18, 19, 20, 22, 23, 24, 25, 26, 27, 28, 29, 31, 32]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["adaptive", "every", "mixed"])
def test_repeating_calls_run_without_the_exchange_in_lockstep(tmp_path, mode):
    """A2ACC_EXCHANGE=adaptive: once exchanges keep finding the bucket of the call one period back, calls run
    that call's plan with no exchange, the same calls on every rank, and every result is the stock call's.
    ``every`` never skips; ranks that set it differently (``mixed``: rank 1 says every) are seen at the first
    exchange, and then no rank skips (a rank skipping an exchange its peers make would hang them)."""
    topo = tmp_path / "t.yaml"
    topo.write_text(TWO_BY_TWO)  # two servers: plans with relays, so skipped calls carry residual
    exchange = "adaptive" if mode == "mixed" else mode
    env = _env(
        tmp_path,
        A2ACC_JIT="1",
        A2ACC_TOPOLOGY=str(topo),
        A2ACC_EXCHANGE=exchange,
        A2ACC_MISS="wait",  # plans compile in the call: the schedule is the same on every run
        A2ACC_LOG="warning",
    )
    results, errs = _run_world(tmp_path, 4, env, mode="mixed" if mode == "mixed" else "adaptive")
    calls = [r["checks"] for r in results]
    assert all(c["same"] and c["served"] for rank in calls for c in rank)
    predicted = [[i for i, c in enumerate(rank) if c["predicted"]] for rank in calls]
    assert all(p == predicted[0] for p in predicted)  # lockstep: every rank skipped the same calls
    if mode != "adaptive":
        assert predicted[0] == [] and all(r["stats"]["predicted"] == 0 for r in results)
        said = "ranks set A2ACC_EXCHANGE differently"
        assert errs[0].count(said) == (1 if mode == "mixed" else 0) and said not in errs[1]
        return
    assert predicted[0] == PREDICTED
    assert all(not c["stale"] for rank in calls for i, c in enumerate(rank) if i not in PREDICTED)
    assert all(r["stats"]["predicted"] == len(PREDICTED) for r in results)
    assert all(r["stats"]["exchanges_skipped"] == len(PREDICTED) for r in results)


@pytest.mark.slow
@pytest.mark.parametrize("bug", ["", "stock"])
def test_a_served_call_posts_its_plan_and_counts_what_it_posted(tmp_path, bug):
    """What a served call hands to torch.distributed is its plan's exchanges, per peer and byte, and stats()
    counts exactly that. The same check run on a build whose launch moves the data with the stock call (while
    adding the plan's counts) must fail: the test can tell a served plan from the stock collective."""
    topo = tmp_path / "t.yaml"
    topo.write_text(TWO_BY_TWO)
    env = _env(
        tmp_path,
        A2ACC_TOPOLOGY=str(topo),
        A2ACC_MISS="wait",
        A2ACC_EXCHANGE="every",
        A2ACC_TUNE="off",
        A2ACC_PLANNER_OPTS="shape=staged",
        A2ACC_TEST_BUG=bug,
    )
    results, _ = _run_world(tmp_path, 4, env, mode="honest")
    calls = [c for r in results for c in r["checks"]]
    assert all(c["same"] and c["served"] and c["exchange_even"] for c in calls)
    assert all(c["stages"] >= 2 for c in calls)  # a relaying plan: more than the caller's one collective
    honest = all(
        c["plan_matches"]
        and c["sent_counted"] == c["sent_posted"]
        and c["collectives_counted"] == c["collectives_posted"]
        for c in calls
    )
    assert honest == (bug == ""), calls


@pytest.mark.slow
def test_calls_below_the_size_threshold_go_to_the_stock_call(tmp_path):
    """A2ACC_MIN_BYTES: a call without split sizes below it reaches torch.distributed once, as the stock call,
    with no exchange; one with split sizes is exchanged first (no rank can tell alone), then taken by the stock
    call, and once it repeats it is taken without the exchange; calls above it are served. Byte-identical."""
    env = _env(tmp_path, A2ACC_TOPOLOGY="alps:1", A2ACC_MIN_BYTES="4K", A2ACC_MISS="wait", A2ACC_TUNE="off")
    results, _ = _run_world(tmp_path, 4, env, mode="small")
    for res in results:
        calls = res["checks"]
        assert all(c["same"] for c in calls)
        counts = [c for c in calls if c["what"] == "counts"]
        assert all(c["posted"] == 1 and c["small"] == 1 for c in counts)  # the stock call alone
        tiny = [c for c in calls if c["what"] == "tiny"]
        assert all(c["small"] == 1 and not c["served"] for c in tiny)
        assert tiny[0]["posted"] == 2  # exchanged, then the stock call
        assert any(c["posted"] == 1 for c in tiny[1:])  # later: repeated, the stock call without an exchange
        big = [c for c in calls if c["what"] == "big"]
        assert all(c["served"] for c in big[1:])


@pytest.mark.slow
def test_a_small_moe_training_loop_gets_the_same_losses_with_the_jit():
    """examples/moe_train_gloo.py: four Gloo processes train a top-2 MoE layer (dispatch and combine through an
    autograd all-to-all, the counts exchanged first) with and without A2ACC_JIT=1: every loss bit-identical, and
    the JIT served the dispatch and combine calls."""
    script = Path(__file__).resolve().parents[2] / "examples" / "moe_train_gloo.py"
    out = subprocess.run(
        [sys.executable, str(script), "--steps", "8"], capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stdout + out.stderr[-2000:]
    assert "losses bit-identical over 8 steps on 4 ranks: True" in out.stdout
    served = int(out.stdout.split(" served by a2acc plans")[0].rsplit(" ", 1)[1])
    assert served >= 16, out.stdout  # of the 32 dispatch and combine calls, the first few compile
