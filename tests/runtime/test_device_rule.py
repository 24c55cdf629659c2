"""Device-correct collectives, tested with a double that enforces NCCL's device rule over Gloo, and capture."""

from __future__ import annotations

import pytest

from tests.runtime.test_torch_jit import TWO, _env, _run_world

torch = pytest.importorskip("torch")

TWO_BY_TWO = """version: 1
name: two-by-two
servers: 2
gpus_per_server: 2
intra: {fabric: switch, bandwidth: 150}
inter: {nics_per_server: 2, bandwidth: 25}
"""


@pytest.mark.slow
@pytest.mark.parametrize("report", ["fakegpu:gloo", "nccl"])
def test_every_tensor_is_on_the_groups_device_and_at_most_one_host_sync_per_call(tmp_path, report):
    """Data on ``fakegpu`` behind a group that accepts nothing else: every call a2acc serves hands only
    ``fakegpu`` tensors to collectives (the double raises otherwise), results equal the stock call's, and an
    exchanged call makes exactly one host sync (the split-size exchange), a call the adaptive exchange runs
    without one none; with each matrix announced, a call whose
    plan every rank has makes none, a stale announcement (the same on every rank) still gives the stock call's
    result, and tensors a2acc cannot serve in place raise on an announced call."""
    topo = tmp_path / "t.yaml"
    topo.write_text(TWO_BY_TWO)
    env = _env(tmp_path, A2ACC_TOPOLOGY=str(topo), A2ACC_LOG="error", A2ACC_TEST_REPORT=report)
    results, errs = _run_world(tmp_path, 4, env, mode="nccl")
    for res, err in zip(results, errs):
        got = res["checks"]
        assert got["refused"], "the double must refuse a CPU tensor"
        assert got["rejected"] == 1  # that one, nothing a2acc did
        assert got["devices"] == "fakegpu:0"
        calls = got["calls"]
        assert all(c["same"] for c in calls), [c for c in calls if not c["same"]]
        served = [c for c in calls if c["served"]]
        assert len(served) >= len(calls) // 2  # a rotating hot expert: one canonical bucket
        # one sync per exchanged call; the hot expert rotates with a period of 4 calls, and the adaptive exchange
        # runs the calls it predicts from one period back without one
        assert all(c["syncs"] == (0 if c["predicted"] else 1) for c in calls), calls
        predicted = sum(c["predicted"] for c in calls)
        assert predicted > 0  # the rotation repeats every 4 calls
        # announced matrices: plans every rank has run with no exchange and no host sync
        ann = got["announced"]
        assert all(c["same"] for c in ann)
        assert sum(c["skipped"] for c in ann) >= len(ann) // 2, ann  # new buckets still exchange
        assert all(c["syncs"] == (0 if c["skipped"] else 1) for c in ann), ann
        assert got["stale"]["same"] and got["stale"]["skipped"], got["stale"]
        assert res["stats"]["exchanges_skipped"] == sum(c["skipped"] for c in ann) + 1 + predicted
        assert res["stats"]["predicted"] == predicted
        assert res["stats"]["host_syncs"] == res["stats"]["calls"] - res["stats"]["exchanges_skipped"] - 1
        assert "cannot serve in place" in got["mismatch"]
        # the exchange's branch: an all-gather when the group reports nccl, Gloo's all-to-all otherwise
        exchanged = res["stats"]["calls"] - res["stats"]["exchanges_skipped"] - 1
        assert got["double"].get("all_gather", 0) == (exchanged if report == "nccl" else 0)
        assert "DeviceRuleError" not in err


@pytest.mark.slow
def test_capture_and_compile_get_the_stock_call_untouched_with_one_warning(tmp_path):
    topo = tmp_path / "two.yaml"
    topo.write_text(TWO)
    env = _env(tmp_path, A2ACC_JIT="1", A2ACC_TOPOLOGY=str(topo), A2ACC_MISS="wait")
    results, errs = _run_world(tmp_path, 2, env, mode="capture")
    for res in results:
        got = res["checks"]
        assert [c["what"] for c in got["calls"]] == ["graph"] * 3 + ["compile"] * 3
        assert all(c["same"] and c["untouched"] for c in got["calls"])
        assert got["fallbacks"].get("capture") == 6
        assert got["engine_after"]
    assert errs[0].count("a2acc does not exchange, allocate or sync inside it") == 1
    assert "a CUDA graph is being captured" in errs[0]
    assert "inside it" not in errs[1]


@pytest.mark.slow
def test_a_plan_bound_at_a_fixed_capacity_replays_with_no_sync_and_fixed_shapes(tmp_path):
    """a2acc.runtime.capture on fakegpu data behind the NCCL double: the served path, run under a dispatch-level
    detector, reads nothing back to the host, copies nothing up with a blocking copy and makes no op whose
    output shape depends on the counts (four calls with different counts give the same op-and-shape trace);
    within the capacity the result is the stock call's; beyond it the rows that did not fit are zeros, counted,
    raised by check() under overflow='flag' and reported under 'drop'; a patched call under capture replays
    the group's binding."""
    topo = tmp_path / "t.yaml"
    topo.write_text(TWO_BY_TWO)
    env = _env(tmp_path, A2ACC_TOPOLOGY=str(topo), A2ACC_LOG="error", A2ACC_TEST_REPORT="nccl")
    results, errs = _run_world(tmp_path, 4, env, mode="capture_ready")
    for rank, (res, err) in enumerate(zip(results, errs)):
        got = res["checks"]
        assert got["bad"] == [], got["bad"]
        assert got["traces_equal"] and got["trace_len"] > 10
        assert all(c["same"] and c["got"] and c["syncs"] == 0 for c in got["calls"]), got["calls"]
        assert "not moved" in got["flag"] and "bind a larger capacity" in got["flag"]
        # the one overflowing call of the 'drop' binding: every rank sent rank 1 three rows too many
        assert got["drop"] == {"dropped": [0, 3, 0, 0], "missed": [3, 3, 3, 3] if rank == 1 else [0, 0, 0, 0]}
        assert got["patched"] == {"served": True, "same": True}
        assert "Traceback" not in err
