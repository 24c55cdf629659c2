"""Megatron-LM's token-imbalance workloads W0-W7: the invariants their descriptions promise (exactly top-k distinct
experts per row; the same logical routing at any EP layout) and what each workload isolates."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from a2acc.errors import TrafficMatrixError
from a2acc.model.workloads import (
    GROUPS,
    PLACEMENTS,
    WORKLOADS,
    EpLayout,
    Workload,
    bytes_per_token_for,
    rank_routing,
    routing,
    source_offsets,
    token_matrix,
    traffic_matrix,
)


def _histogram(w: Workload, step: int, gpus: int) -> np.ndarray:
    rows = routing(w, step, 0, w.tokens * gpus)
    return np.bincount(rows.ravel(), minlength=w.experts)


@st.composite
def cases(draw: st.DrawFn) -> tuple[Workload, int, int, list[EpLayout]]:
    """A workload, a step, a GPU count and a few EP layouts of that GPU count that the workload fits."""
    gpus = draw(st.sampled_from([1, 2, 4, 6, 8, 12]))
    divisors = [d for d in range(1, gpus + 1) if gpus % d == 0]
    lcm = int(np.lcm.reduce(divisors))
    experts = lcm * draw(st.integers(1, 4))
    name = draw(st.sampled_from(WORKLOADS))
    top_k = draw(st.integers(1, min(experts // 2 if name == "w5" else experts, 6)))
    w = Workload(
        name,
        experts=experts,
        top_k=top_k,
        tokens=draw(st.integers(1, 40)),
        seed=draw(st.integers(0, 2**40)),
        hot_experts=draw(st.sampled_from([0, top_k, experts])),
        hot_share=draw(st.sampled_from([0.0, 0.5, 0.75, 1.0])),
        period=draw(st.integers(1, 4)),
        burst_every=draw(st.integers(1, 4)),
        ragged=draw(st.sampled_from([0.0, 0.5, 0.9])),
    )
    layouts = [
        EpLayout(
            gpus,
            draw(st.sampled_from(divisors)),
            draw(st.sampled_from(GROUPS)),
            draw(st.sampled_from(PLACEMENTS)),
        )
        for _ in range(3)
    ]
    return w, draw(st.integers(0, 50)), gpus, layouts


@given(cases())
@settings(max_examples=80, deadline=None)
def test_every_row_carries_top_k_distinct_experts(case):
    w, step, gpus, _layouts = case
    rows = routing(w, step, 0, w.tokens * gpus)
    assert rows.shape == (w.tokens * gpus, w.top_k)
    assert ((rows >= 0) & (rows < w.experts)).all()
    assert (np.diff(np.sort(rows, axis=1), axis=1) > 0).all()


@given(cases())
@settings(max_examples=60, deadline=None)
def test_the_same_logical_routing_at_any_layout(case):
    """Per layout: every GPU's tokens route to the same experts; the matrix is those rows sent to the GPU of the
    token's own EP group that holds each expert; every GPU sends its tokens x top-k rows."""
    w, step, gpus, layouts = case
    off = source_offsets(w, gpus)
    logical = routing(w, step, 0, int(off[-1]))
    for lay in layouts:
        m = token_matrix(w, step, lay)
        expect = np.zeros((gpus, gpus), dtype=np.int64)
        per_rank = w.experts // lay.size
        for g in range(gpus):
            mine = logical[off[g] : off[g + 1]]
            np.testing.assert_array_equal(rank_routing(w, step, lay, g).experts, mine)
            owner = mine // per_rank if lay.placement == "contiguous" else mine % lay.size
            np.add.at(expect[g], lay.members(g)[owner].ravel(), 1)
        np.testing.assert_array_equal(m, expect)
        np.testing.assert_array_equal(m.sum(axis=1), np.diff(off) * w.top_k)


@given(cases())
@settings(max_examples=40, deadline=None)
def test_rank_splits_are_the_matrix_row_and_column(case):
    """What a benchmark passes to all_to_all_single: dispatch sends row r, receives column r; combine the
    transpose."""
    w, step, gpus, layouts = case
    lay = layouts[0]
    m = token_matrix(w, step, lay)
    for r in range(gpus):
        got = rank_routing(w, step, lay, r)
        np.testing.assert_array_equal(got.send, m[r])
        np.testing.assert_array_equal(got.recv, m[:, r])
        np.testing.assert_array_equal(got.combine_send, m[:, r])
        np.testing.assert_array_equal(got.combine_recv, m[r])
        assert (np.isin(got.destinations, lay.members(r))).all()


def test_a_tokens_row_does_not_depend_on_the_tokens_drawn_with_it():
    w = Workload("w1", experts=16, top_k=3, tokens=100, seed=5)
    whole = routing(w, 7, 0, 1000)
    np.testing.assert_array_equal(routing(w, 7, 300, 50), whole[300:350])
    assert not np.array_equal(routing(w, 8, 0, 1000), whole)
    assert not np.array_equal(routing(Workload("w1", 16, 3, 100, seed=6), 7, 0, 1000), whole)


def test_hot_workloads_have_one_heat_and_differ_in_placement():
    """W1, W2 and W3 share their draws: their expert histograms are permutations of one another (the same
    heat); on a contiguous layout W2's hot set sits on the fewest ranks and W3's spreads over them."""
    kw = {"experts": 64, "top_k": 2, "tokens": 512, "seed": 3}
    hist = {n: _histogram(Workload(n, **kw), 1, 8) for n in ("w1", "w2", "w3")}
    for n in ("w2", "w3"):
        np.testing.assert_array_equal(np.sort(hist[n]), np.sort(hist["w1"]))
    lay = EpLayout(8)  # 8 experts per rank, a hot set of 16: two ranks for W2, every rank for W3
    loads = {n: token_matrix(Workload(n, **kw), 1, lay).sum(axis=0) for n in ("w2", "w3")}
    assert (loads["w2"][:2] > 3 * loads["w2"][2:].max()).all()
    assert loads["w3"].max() / loads["w3"].mean() < 1.1
    assert loads["w2"].max() / loads["w2"].mean() > 3.0


def test_w0_is_balanced_and_w5_leaves_half_the_experts_and_their_ranks_idle():
    w0 = Workload("w0", experts=32, top_k=4, tokens=64)
    assert set(_histogram(w0, 3, 8).tolist()) == {64 * 8 * 4 // 32}
    lay = EpLayout(8)
    m0 = token_matrix(w0, 0, lay)
    assert (m0 == m0[0, 0]).all()
    w5 = Workload("w5", experts=32, top_k=4, tokens=64)
    assert (_histogram(w5, 2, 8)[:16] == 0).all() and (_histogram(w5, 2, 8)[16:] > 0).all()
    recv = token_matrix(w5, 2, lay).sum(axis=0)
    assert (recv[:4] == 0).all() and (recv[4:] > 0).all()


def test_w4_sources_are_ragged_and_destinations_balanced():
    w = Workload("w4", experts=64, top_k=2, tokens=2000, seed=9, ragged=0.5)
    off = source_offsets(w, 16)
    held = np.diff(off)
    assert held.sum() == 2000 * 16
    assert held.min() == pytest.approx(1000, abs=2) and held.max() == pytest.approx(3000, abs=2)
    m = token_matrix(w, 0, EpLayout(16))
    recv = m.sum(axis=0)
    assert recv.max() / recv.mean() < 1.1
    assert not np.array_equal(held, np.diff(source_offsets(Workload("w4", 64, 2, 2000, seed=10), 16)))


def test_w6_moves_its_hot_block_every_period_and_w7_bursts_once_a_cycle():
    kw = {"experts": 32, "top_k": 2, "tokens": 256, "seed": 1}
    lay = EpLayout(8)  # 4 experts per rank; the hot block of 8 covers two ranks
    w6 = Workload("w6", period=3, **kw)
    hottest = [int(np.argmax(token_matrix(w6, s, lay).sum(axis=0))) // 2 for s in range(12)]
    assert hottest == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    np.testing.assert_array_equal(routing(w6, 1, 0, 2048), routing(Workload("w2", **kw), 1, 0, 2048))
    late = 2**62 - 1  # the largest step: the rotation's base is reduced before it meets the expert ids
    assert routing(w6, late, 0, 8).max() < 32
    w7 = Workload("w7", burst_every=4, burst_share=0.5, **kw)
    peaks = [token_matrix(w7, s, lay).sum(axis=0).max() / (256 * 8 * 2 / 8) for s in range(8)]
    assert [p > 1.8 for p in peaks] == [False, False, False, True] * 2


def test_draws_are_uniform_without_replacement():
    """Cold tokens over 8 experts, 3 each: every expert and every pair of experts equally likely."""
    w = Workload("w4", experts=8, top_k=3, tokens=20000, ragged=0.0)
    rows = routing(w, 0, 0, 20000)
    counts = np.bincount(rows.ravel(), minlength=8)
    assert np.abs(counts - 7500).max() < 5 * np.sqrt(7500)
    pairs = np.bincount((rows[:, 0] * 8 + rows[:, 1]), minlength=64).reshape(8, 8)
    upper = pairs[np.triu_indices(8, 1)]
    # P(pos 0 = a, pos 1 = b) for a < b among sorted triples: (8 - 1 - b) / C(8, 3) per row
    expect = np.array([(7 - b) / 56 * 20000 for a in range(8) for b in range(a + 1, 8)])
    keep = expect > 0
    assert (np.abs(upper[keep] - expect[keep]) < 5 * np.sqrt(expect[keep]) + 1).all()


def test_bytes_and_the_size_that_sets_them():
    w = Workload("w3", experts=16, top_k=2, tokens=1024)
    lay = EpLayout(8)
    m = traffic_matrix(w, 0, lay, 8192)
    np.testing.assert_array_equal(m, token_matrix(w, 0, lay) * 8192)
    bpt = bytes_per_token_for(w, 64 << 20)
    assert bpt % 16 == 0 and traffic_matrix(w, 0, lay, bpt).sum(axis=1).mean() == pytest.approx(
        64 << 20, rel=1e-3
    )


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: Workload("w9", 8), "KIND"),
        (lambda: Workload("w1", 8, top_k=9), "--top-k"),
        (lambda: Workload("w5", 8, top_k=5), "--experts"),
        (lambda: Workload("w1", 8, hot_experts=1, top_k=2), "--hot-experts"),
        (lambda: Workload("w1", 8, hot_share=1.5), "--hot-share"),
        (lambda: Workload("w4", 8, ragged=1.0), "--ragged"),
        (lambda: EpLayout(8, ep=3), "--ep"),
        (lambda: token_matrix(Workload("w1", 12), 0, EpLayout(8)), "--experts"),
        (lambda: token_matrix(Workload("w1", 8, tokens=1 << 24), 0, EpLayout(8)), "--tokens"),
        (lambda: routing(Workload("w1", 8), -1, 0, 4), "--step"),
        (lambda: traffic_matrix(Workload("w1", 8), 0, EpLayout(8), 2**40), "--bytes-per-token"),
        (lambda: rank_routing(Workload("w1", 8), 0, EpLayout(8), 8), "rank"),
    ],
)
def test_bad_parameters_name_their_field(make, field):
    with pytest.raises(TrafficMatrixError) as err:
        make()
    assert err.value.field == field


def test_the_same_matrix_in_another_process():
    code = (
        "from a2acc.model.workloads import *; import hashlib;"
        "m = token_matrix(Workload('w7', 64, 4, 300, seed=12), 3, EpLayout(16, 8, 'strided', 'round-robin'));"
        "print(hashlib.sha256(m.tobytes()).hexdigest())"
    )
    here = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    import hashlib

    m = token_matrix(Workload("w7", 64, 4, 300, seed=12), 3, EpLayout(16, 8, "strided", "round-robin"))
    assert here.strip() == hashlib.sha256(m.tobytes()).hexdigest()
