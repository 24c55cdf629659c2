"""FAST against the paper's and slides' worked examples, and FLASH Theorem 3 in the simulator."""

from __future__ import annotations

import numpy as np
import pytest

from a2acc import plan
from a2acc.analysis.bounds import flash_theorem1
from a2acc.analysis.incast import IncastModel
from a2acc.analysis.simulate import simulate
from a2acc.model.traffic import generate
from tests.helpers import tiered
from tests.planners.test_birkhoff import SLIDES

GB = 10**9
OFF = IncastModel.off()


def _time(topo, m, alg, **opts):
    prog = plan(topo, m, alg, unit=GB // 4, **opts)
    return simulate(prog, topo, incast=OFF).time_s, prog


def test_slides_4x4_birkhoff_nine_vs_spreadout_fifteen():
    topo = tiered(4, 1, nic_bw=1.0)  # 1 GB/s NICs: one unit (1 GB) takes one second
    m = SLIDES * GB
    t_fast, prog = _time(topo, m, "fast")
    t_spread, _ = _time(topo, m, "spreadout")
    assert sorted(prog.meta["stage_weights"]) == [8, 12, 16]  # 2, 3, 4 GB in 1/4-GB chunks
    assert t_fast == pytest.approx(9.0, rel=1e-6)
    assert t_spread == pytest.approx(15.0, rel=1e-6)  # 3 + 7 + 5 (shift stages 1, 2, 3)


def test_flash_two_server_balancing_lowers_bottleneck_4_to_3():
    topo = tiered(2, 2, nic_bw=1.0, intra_bw=1e5)
    m = np.zeros((4, 4), dtype=np.int64)
    m[0, 2], m[0, 3], m[1, 2], m[1, 3] = 1, 1, 3, 1
    m *= GB
    t_bal, prog = _time(topo, m, "fast", balance="always")
    t_nobal, prog_nb = _time(topo, m, "fast", balance="never")
    assert prog.meta["server_line_sum"] * prog.unit_bytes == 3 * GB
    assert prog_nb.meta["server_line_sum"] * prog_nb.unit_bytes == 4 * GB
    assert t_bal == pytest.approx(3.0, rel=1e-3)
    assert t_nobal == pytest.approx(4.0, rel=1e-3)
    assert _time(topo, m, "direct")[0] >= 4.0 - 1e-9  # receiver B0 gets 4 units


def test_flash_three_server_example_sigma_10_to_8():
    a = [
        [0, 0, 6, 1, 1, 0],
        [0, 0, 1, 4, 1, 2],
        [0, 1, 0, 0, 2, 1],
        [0, 3, 0, 0, 5, 2],
        [4, 2, 2, 0, 0, 0],
        [3, 3, 1, 1, 0, 0],
    ]
    topo = tiered(3, 2, nic_bw=1.0, intra_bw=1e5)
    m = np.array(a, dtype=np.int64) * GB
    _, prog = _time(topo, m, "fast", balance="always")
    _, prog_nb = _time(topo, m, "fast", balance="never")
    assert prog_nb.meta["server_line_sum"] * prog_nb.unit_bytes == 10 * GB
    assert prog.meta["server_line_sum"] * prog.unit_bytes == 8 * GB
    t, _ = _time(topo, m, "fast")
    assert t == pytest.approx(8.0, rel=0.01)


@pytest.mark.parametrize(
    ("kind", "seed", "b1"), [("uniform", 1, 64.0), ("zipf", 2, 64.0), ("zipf", 3, 20.0), ("uniform", 4, 20.0)]
)
def test_flash_theorem3_holds_in_simulator(kind, seed, b1):
    """t_fast <= (1 + B_inter/B_intra * (m + 2)) * t_opt on a full mesh with one NIC per GPU (FLASH §4.4)."""
    n, mm, b2 = 3, 4, 12.5
    topo = tiered(n, mm, fabric="full_mesh", intra_bw=b1, nic_bw=b2)
    m = generate(kind, n * mm, 64 << 20, seed)
    prog = plan(topo, m, "fast")
    padded = prog.counts * prog.unit_bytes
    t_opt = flash_theorem1(padded, topo)
    t_fast = simulate(prog, topo, incast=OFF).time_s
    assert t_fast >= t_opt * (1 - 1e-9)
    assert t_fast <= (1 + b2 / b1 * (mm + 2)) * t_opt


@pytest.mark.parametrize("fabric", ["switch", "full_mesh", "ring", "hybrid_cube_mesh"])
def test_fast_handles_every_fabric_and_beats_spreadout_on_skew(fabric):
    topo = tiered(
        4, 8, fabric=fabric, intra_bw=150.0 if fabric != "switch" else 450.0, nic_bw=50.0, latency=1.0
    )
    m = generate("zipf", 32, 128 << 20, 5, skew=0.8)
    t_fast = simulate(plan(topo, m, "fast"), topo, incast=OFF).time_s
    t_spread = simulate(plan(topo, m, "spreadout"), topo, incast=OFF).time_s
    assert t_fast < t_spread


def test_degenerate_inputs():
    one = tiered(1, 4)
    m = generate("zipf", 4, 1 << 20, 1)
    prog = plan(one, m, "fast")
    assert prog.meta["stages"] == 0
    topo = tiered(3, 2)
    z = np.zeros((6, 6), dtype=np.int64)
    z[0, 1] = 160  # only intra-server traffic, most rows zero
    assert plan(topo, z, "fast").meta["stages"] == 0
    z[5, 0] = 32
    assert plan(topo, z, "fast").meta["stages"] == 1
    assert len(plan(topo, np.zeros((6, 6), dtype=np.int64), "fast").ops) == 0
