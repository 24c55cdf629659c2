from __future__ import annotations

import numpy as np
import pytest

from a2acc.analysis.bounds import (
    alps_b_near,
    flash_theorem1,
    lower_bounds,
    peak_model,
    peak_model_per_gpu,
    transpose_2d_time,
)
from a2acc.model.topology import load_topology
from a2acc.model.traffic import generate

GIB = 1 << 30


def test_peak_model_vista_alps_nvl72():
    m = float(GIB)
    # Vista: 1 GH200 per node, far 50 GB/s, self 4 TB/s: near term vanishes (n = 1)
    t, bw = peak_model(8, 1, m, 4e12, 0.0, 50e9)
    assert t == pytest.approx(7 * (m / 8) / 50e9)
    assert bw == pytest.approx(m / t)
    # Alps: 4 GPUs per node, B_near(n) = (n - 1) * 150 GB/s, far 25 GB/s
    assert alps_b_near(4) == pytest.approx(450e9)
    t, _ = peak_model(16, 4, m, 4e12, alps_b_near(4), 25e9)
    assert t == pytest.approx(12 * (m / 16) / 25e9)
    t_in_node, _ = peak_model(4, 4, m, 4e12, alps_b_near(4), 25e9)
    assert t_in_node == pytest.approx(3 * (m / 4) / 450e9)
    # NVL72: one 72-GPU near group at 900 GB/s; far 50 GB/s beyond it; self 8 TB/s
    t72, _ = peak_model(72, 72, m, 8e12, 900e9, 50e9)
    assert t72 == pytest.approx(71 * (m / 72) / 900e9)
    t144, _ = peak_model(144, 72, m, 8e12, 900e9, 50e9)
    assert t144 == pytest.approx(72 * (m / 144) / 50e9)
    # 2D transpose P = 2 x 8 on 4 GPUs per node: t = t(P=8, n=4) + t(P=2, n=1)
    t2d = transpose_2d_time(m, 2, 8, 4, 1, 4e12, alps_b_near(4), 25e9)
    assert t2d == pytest.approx(
        peak_model(8, 4, m, 4e12, alps_b_near(4), 25e9)[0] + peak_model(2, 1, m, 4e12, 0.0, 25e9)[0]
    )


def test_topology_peak_model_matches_closed_form_on_alps():
    topo = load_topology("alps")
    per_rank = 1 << 28
    m = generate("balanced", 16, per_rank, 0)
    t_closed, _ = peak_model(16, 4, float(m[0].sum()), 4000e9, alps_b_near(4), 25e9)
    assert peak_model_per_gpu(m, topo) == pytest.approx(t_closed)


def test_ndv2_cut_bound_matches_taccl_table():
    """NDv2 2x8, 1 GB per GPU: one 12.5 GB/s NIC per server -> 3.125 GB/s algbw (TACCL's measured number)."""
    topo = load_topology("ndv2")
    m = generate("balanced", 16, 10**9, 0, align=1)
    rep = lower_bounds(m, topo)
    assert rep.best.name == "flash-thm1"
    assert rep.algbw_GBps == pytest.approx(3.125, rel=1e-3)


def test_mcf_lp_agrees_with_theorem1_and_is_a_valid_bound():
    topo = load_topology("dgx-h100", servers=2)
    m = generate("zipf", 16, 1 << 26, 4)
    rep = lower_bounds(m, topo, mcf=True)
    terms = {t.name: t for t in rep.terms}
    assert terms["mcf"].seconds == pytest.approx(flash_theorem1(m, topo), rel=1e-4)
    assert terms["mcf"].seconds >= terms["gpu-cut"].seconds * (1 - 1e-6)
    assert not terms["peak-model"].valid
    assert rep.best.seconds == max(t.seconds for t in rep.terms if t.valid)


def test_gpu_cut_binds_when_one_gpu_floods_its_server():
    topo = load_topology("dgx-h100", servers=1)
    m = np.zeros((8, 8), dtype=np.int64)
    m[0, 1:] = 450 * 10**6
    rep = lower_bounds(m, topo)
    assert rep.best.name == "gpu-cut"
    assert rep.seconds == pytest.approx(7 * 450e6 / 450e9)
