"""The accuracy benchmark (benchmarks/calibration.py) on the held-back logs, asserted: fails if the model regresses.

Held back = FAST's fixed-size 3-server MI300X runs (FAST repository, ``amd-result/3n_fixed_sz_*.txt``), never
used to fit the shipped RoCE parameters (docs/simulator.md: they were fitted on the random- and skewed-size
runs). Figures from 8 MB per GPU up.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from a2acc.analysis.model import CALIBRATED_ROCE
from a2acc.model.topology import load_topology
from a2acc.studies.calibrate import accuracy, build_cases, evaluate, fast_log_split, summarise
from a2acc.studies.logs import read_logs

SHARED = Path(os.environ.get("A2ACC_SHARED", Path(__file__).resolve().parents[3] / "shared"))
FAST_LOGS = SHARED / "reference" / "peers" / "FAST" / "amd-result"

# docs/simulator.md reports, for the shipped parameters: fast median 1.3 %, worst 4.1 %; SpreadOut median 5.7 %,
# worst 11.8 %; both asserted at the accuracy targets (fast within 10 %, SpreadOut within 15 %; medians 5 % and
# 7.5 %); fan-out's collapse within a factor 2 of the measured size.
FAST_MEDIAN, FAST_WORST = 0.05, 0.10
SPREADOUT_MEDIAN, SPREADOUT_WORST = 0.075, 0.15


@pytest.fixture(scope="module")
def held_back():
    if not FAST_LOGS.is_dir():
        pytest.fail(f"FAST's logs not found under {FAST_LOGS} (CI must have ../shared beside the clone)")
    topo = load_topology("mi300x-100g", 3)
    fit_logs, test_logs = fast_log_split(FAST_LOGS)
    assert len(test_logs) == 4 and not set(fit_logs) & set(test_logs)
    return accuracy(build_cases(read_logs(test_logs, topo), topo), CALIBRATED_ROCE)


@pytest.mark.slow
def test_fast_meets_the_accuracy_target_on_held_back_logs(held_back):
    s = held_back.summary("fast")
    assert s.runs == 10
    assert s.median_abs_error <= FAST_MEDIAN and s.worst_abs_error <= FAST_WORST


@pytest.mark.slow
def test_spreadout_meets_the_accuracy_target_on_held_back_logs(held_back):
    s = held_back.summary("spreadout")
    assert s.runs == 10
    assert s.median_abs_error <= SPREADOUT_MEDIAN and s.worst_abs_error <= SPREADOUT_WORST


@pytest.mark.slow
def test_fan_out_collapse_predicted_within_a_factor_two(held_back):
    measured, predicted = held_back.collapse_measured, held_back.collapse_predicted
    assert measured is not None and predicted is not None
    assert measured / 2 <= predicted <= measured * 2


# FAST's own schedule on its random- and skewed-size runs where MoE all-to-alls live (8 MB to 100 MiB per GPU):
# within 15 % (SpreadOut within 20 %). These 3-server runs are part of the fit; benchmarks/calibration.py reports
# every size, and the 4-server runs (of which the uniform-random ones are held out of the fit), which are not
# shipped with a2acc's reference data (docs/simulator.md).
RANDOM_FAST_WORST, RANDOM_SPREADOUT_WORST = 0.15, 0.20


@pytest.mark.slow
def test_fast_and_spreadout_on_the_random_and_skewed_runs():
    topo = load_topology("mi300x-100g", 3)
    fit_logs, _test = fast_log_split(FAST_LOGS)
    meas = [
        m for m in read_logs(fit_logs, topo) if m.algorithm != "direct" and 8_000_000 <= m.size <= 100 * 2**20
    ]
    assert {m.algorithm for m in meas} == {"fast", "spreadout"} and len(meas) >= 16
    worst = {
        s.algorithm: s.worst_abs_error for s in summarise(evaluate(build_cases(meas, topo), CALIBRATED_ROCE))
    }
    assert worst["fast"] <= RANDOM_FAST_WORST and worst["spreadout"] <= RANDOM_SPREADOUT_WORST, worst
