"""FAST against the paper's and slides' worked examples, FLASH Theorem 3 in the simulator, and step order."""

from __future__ import annotations

import numpy as np
import pytest

from a2acc import plan
from a2acc.analysis.bounds import flash_theorem1, lower_bounds
from a2acc.analysis.fastsim import simulate_fast
from a2acc.analysis.incast import IncastModel
from a2acc.analysis.model import SimModel
from a2acc.analysis.simulate import simulate
from a2acc.ir import Buf
from a2acc.model.topology import load_topology
from a2acc.model.traffic import generate
from a2acc.planners.birkhoff import decompose
from a2acc.planners.fast import MAX_TAIL_SPLITS, order_steps
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


def _ideal_ratio(topo, m, **opts):
    opts.setdefault("shape", "staged")
    prog = plan(topo, m, "fast", model=SimModel(), **opts)
    return simulate_fast(prog, topo, model=SimModel()).time_s / lower_bounds(m, topo).seconds, prog


@pytest.mark.parametrize(("kind", "size"), [("balanced", 128 << 20), ("zipf", 512 << 20)])
def test_light_steps_last_close_the_tail(kind, size):
    """Heaviest stage first, the last step split: within 2 % of the bound (ideal model), ascending was not."""
    topo = load_topology("dgx-h100", servers=4)
    m = generate(kind, topo.nranks, size, 1, skew=0.8)
    ratio, prog = _ideal_ratio(topo, m)
    ratio_asc, prog_asc = _ideal_ratio(topo, m, order="ascending")
    w = prog.meta["stage_weights"]
    assert w[-1] < w[0]
    assert prog_asc.meta["stage_weights"] == sorted(prog_asc.meta["stage_weights"])
    assert ratio <= 1.02 < ratio_asc


def test_order_steps_keeps_every_pair_total():
    """Folding and splitting move weight between steps of the same server pair, never across pairs."""
    rng = np.random.default_rng(7)
    for trial in range(20):
        n = int(rng.integers(2, 9))
        s = rng.integers(0, 40, (n, n)) * (rng.random((n, n)) < 0.7)
        s[np.arange(n), np.arange(n)] = 0
        if trial % 3 == 0:
            s[s > 0] += 200  # heavy stages: the last one gets split
        dec = decompose(s)
        own = rng.integers(0, 40, (n, n, 2))
        steps = order_steps(list(dec.stages), s, 1e-6, 5e-6, 0.1, own, own + 5)
        assert len(steps) <= len(dec.stages) + MAX_TAIL_SPLITS
        got = np.zeros((n, n), dtype=np.int64)
        for st in steps:
            for a in range(n):
                if st.perm[a] != a:
                    got[a, st.perm[a]] += st.caps[a]
        pad = dec.padded.copy()
        pad[np.arange(n), np.arange(n)] = 0
        real = s > 0  # a dissolved stage drops its padding-only pairs, which never carry data
        assert (got[real] == pad[real]).all()
        assert (got <= pad).all()
        assert order_steps(list(dec.stages), s, 1e-6, 5e-6, 0.1, own, own + 5) == steps


def test_gpus_sharing_a_nic_step_together():
    """ndv2: 8 GPUs share one NIC; without per-NIC step synchronisation the GPU with many small pieces takes
    the NIC's per-flow fair share, runs ahead and starves its siblings (measured 1.05x the bound)."""
    topo = load_topology("ndv2", servers=4)
    m = generate("zipf", topo.nranks, 128 << 20, 1, skew=0.8)
    ratio, prog = _ideal_ratio(topo, m)
    assert ratio <= 1.02
    ops = prog.ops
    senders = {op.src_rank for op in ops if op.link == "inter" and op.stage == 1}
    later = [op for op in ops if op.link == "inter" and op.stage == 2]
    # a step-2 transfer waits for the step-1 sends of every GPU on its NIC (ndv2: its whole server)
    for op in later:
        server = set(range(op.src_rank - op.src_rank % 8, op.src_rank - op.src_rank % 8 + 8))
        waited = {ops[d].src_rank for d in op.deps if ops[d].stage == 1}
        assert waited >= senders & server
    assert later


@pytest.mark.parametrize(
    ("preset", "servers", "kind", "size"),
    [
        ("dgx-h100", 2, "zipf", 1 << 20),
        ("dgx-h100", 3, "moe", None),
        ("mi300x-100g", 2, "balanced", 64 << 20),
        ("dgx-h100", 2, "balanced", 16 << 20),
    ],
)
def test_fast_is_never_behind_direct_under_its_model(preset, servers, kind, size):
    """The cost-aware shape keeps the fastest candidate; one direct step is always among them. Ranked by the
    simulator the pick is never behind the direct planner under the model; ranked by the estimate (the
    default) it is never behind under the estimate, and in these cases under the simulator too."""
    topo = load_topology(preset, servers)
    m = generate(kind, topo.nranks, size, 1)
    direct = simulate_fast(plan(topo, m, "direct"), topo).time_s
    for rank in ("auto", "simulate"):
        prog = plan(topo, m, "fast", rank=rank)
        cands = prog.meta["candidates_us"]
        ranked = [t for t in cands.values() if t is not None]  # null: stopped by the bound, slower
        assert {"staged", "direct"} <= set(cands) and prog.meta["ranked_us"] == min(ranked)
        assert simulate_fast(prog, topo).time_s <= direct * (1 + 1e-9)


def test_fast_keeps_its_ideal_quality_at_large_sizes():
    """Under the ideal model the search keeps FAST's quality: within 2 % of the bound from 512 MiB/GPU."""
    topo = load_topology("dgx-h100", 4)
    m = generate("zipf", topo.nranks, 512 << 20, 1, skew=0.8)
    prog = plan(topo, m, "fast", model=SimModel())
    ratio = simulate_fast(prog, topo, model=SimModel()).time_s / lower_bounds(m, topo).seconds
    assert ratio <= 1.02, (ratio, prog.meta["candidates_us"])


def test_fixed_shapes_and_the_search_budget():
    topo = load_topology("dgx-h100", 4)
    m = generate("zipf", topo.nranks, 64 << 20, 1)
    staged = plan(topo, m, "fast", shape="staged")
    assert staged.meta["shape"] == "staged" and "candidates_us" not in staged.meta
    grouped = plan(topo, m, "fast", shape="grouped", groups=2)
    assert grouped.meta["shape"] == "grouped:2" and grouped.meta["stages"] == 2
    assert plan(topo, m, "fast", shape="direct").meta["shape"] == "direct"
    assert "candidates_us" not in plan(topo, m, "fast", search_ops=0).meta  # no search: FAST's sequence


def test_a_targets_peer_limit_keeps_fast_off_shapes_it_must_refuse():
    """RCCL's MSCCL runs at most 63 peers per GPU: at 16 x 8 fast's direct shape (127 peers) is left out, and
    compile for RCCL with the default shape succeeds where FAST's sequence fits."""
    from a2acc.ir.program import program_peers
    from a2acc.ir.quantize import UnitPolicy
    from a2acc.pipeline import Request, compile

    topo = load_topology("dgx-h100", 16)
    m = generate("zipf", 128, 64 << 20, 2, skew=0.8)
    free = compile(Request(topo, m, "fast")).program
    res = compile(
        Request(topo, m, "fast", target="msccl-xml", target_options={"dialect": "rccl"},
                units=UnitPolicy(max_padding="auto"))
    )  # fmt: skip
    assert res.check is not None and res.check.ok
    assert program_peers(res.program) <= 63
    assert "direct" in free.meta["candidates_us"]  # ranked when free (127 peers), left out for RCCL
    assert "direct" in res.program.meta["shapes_over_peer_limit"]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_fast_is_never_behind_its_staged_sequence_under_the_ideal_model(seed):
    """The coarse ranking cannot drop FAST's sequence: under the ideal model (shapes within ~1 % of each other)
    fast's pick simulates no slower than the staged shape."""
    topo = load_topology("dgx-h100", 8)
    m = generate("zipf", topo.nranks, 512 << 20, seed, skew=0.8)
    ideal = SimModel()
    chosen = simulate_fast(plan(topo, m, "fast", model=ideal), topo, model=ideal).time_s
    staged = simulate_fast(plan(topo, m, "fast", model=ideal, shape="staged"), topo, model=ideal).time_s
    assert chosen <= staged * (1 + 1e-9)


def test_the_search_lets_the_model_decide_intra_server_balancing():
    """``balance=auto`` decides per tile by a closed form that knows no message costs or incast; the search
    ranks every shape with the other balancing choices too (each that balances other tiles). On the RoCE
    preset, MoE 16 MiB/GPU, those shapes are ranked and the fastest of all is chosen."""
    topo = load_topology("mi300x-100g", 4)
    m = generate("moe", topo.nranks, 16 << 20, 1)
    prog = plan(topo, m, "fast", rank="simulate")  # every candidate timed (the estimate stops slower ones)
    cands = prog.meta["candidates_us"]
    flips = {k.split("+balance=")[1].split("+")[0] for k in cands if "+balance=" in k}
    assert flips and flips <= {"always", "never"}
    assert cands[prog.meta["shape"]] == min(t for t in cands.values() if t is not None)
    for flip in flips:  # the other choice's shapes, every one
        assert f"grouped:1+balance={flip}" in cands and f"staged+balance={flip}" in cands
    fixed = plan(topo, m, "fast", balance="always")  # a fixed choice is the user's: no other
    assert not any("+balance=" in k for k in fixed.meta["candidates_us"])


def test_the_search_splits_a_grouped_shape_when_the_overlap_pays():
    """A grouped winner is also timed with each GPU's share to a peer in two messages, forwarded data first:
    concurrent transfers end together, so without the split every forward waits for the group's last byte. On
    dgx-h100 4x8 under the InfiniBand defaults the split wins for MoE at 1 MiB/GPU (the hot GPU's forwards
    overlap the aligned data) and loses for Zipf(0.8) at 1 MiB/GPU (a message and a latency more per peer)."""
    topo = load_topology("dgx-h100", 4)
    moe = plan(topo, generate("moe", topo.nranks, 1 << 20, 1), "fast", rank="simulate")
    cands = moe.meta["candidates_us"]
    assert moe.meta["shape"].endswith("+split")
    base = moe.meta["shape"].removesuffix("+split")
    assert cands[moe.meta["shape"]] < cands[base]
    # aligned pieces wait for their queue's forwarded transfers: two messages per peer and group
    ops = moe.ops
    chained = [
        o
        for o in ops
        if o.link == "inter"
        and o.dst_buf == Buf.OUTPUT
        and any(
            ops[d].link == "inter"
            and ops[d].dst_buf == Buf.SCRATCH
            and (ops[d].src_rank, ops[d].dst_rank) == (o.src_rank, o.dst_rank)
            for d in o.deps
        )
    ]
    assert chained
    zipf = plan(topo, generate("zipf", topo.nranks, 1 << 20, 1), "fast", rank="simulate")
    zc = zipf.meta["candidates_us"]
    assert any(k.endswith("+split") for k in zc) and not zipf.meta["shape"].endswith("+split")
    assert zc[zipf.meta["shape"]] <= min(zc.values())


def test_descending_order_runs_every_stage_heaviest_first():
    """order=descending is FAST's implementation's order (its scheduler walks the ascending list from the end):
    the same unfolded stages as order=ascending, in reverse weight order."""
    topo = load_topology("mi300x-100g", servers=3)
    m = generate("zipf", topo.nranks, 64 << 20, 2, skew=0.8)
    asc = plan(topo, m, "fast", model=SimModel(), shape="staged", order="ascending").meta["stage_weights"]
    desc = plan(topo, m, "fast", model=SimModel(), shape="staged", order="descending").meta["stage_weights"]
    assert list(desc) == sorted(desc, reverse=True) and sorted(desc) == sorted(asc) and len(desc) > 1


def test_how_the_search_ranks_follows_the_fabric():
    """rank=auto: the estimate on a lossless fabric with step costs, the estimate's shortlist confirmed by the
    simulator on a lossy one, the simulator under a model without step costs; a given rank is kept."""
    from a2acc.analysis.model import default_model
    from a2acc.planners.fast import Options
    from a2acc.planners.fast.search import CONFIRM, ranking

    assert ranking(Options(), default_model(load_topology("dgx-h100", 2))) == "estimate"
    assert ranking(Options(), default_model(load_topology("mi300x-100g", 2))) == "confirm"
    assert ranking(Options(), SimModel()) == "simulate"
    assert ranking(Options(rank="estimate"), SimModel()) == "estimate"
    topo = load_topology("mi300x-100g", 4)
    m = generate("zipf", topo.nranks, 16 << 20, 1)
    prog = plan(topo, m, "fast")
    est, sim = prog.meta["candidates_us"], prog.meta["simulated_us"]
    best = min(t for t in est.values() if t is not None)
    assert set(sim) == {k for k, t in est.items() if t is not None and t <= best * (1 + CONFIRM)}
    assert sim[prog.meta["shape"]] == min(sim.values()) == prog.meta["ranked_us"]
    assert simulate_fast(prog, topo).time_s * 1e6 == pytest.approx(prog.meta["ranked_us"], rel=1e-6)


@pytest.mark.parametrize(("preset", "servers", "kind"), [("dgx-h100", 4, "zipf"), ("mi300x", 2, "moe")])
def test_a_plan_whose_link_floor_is_past_the_best_is_not_built(preset, servers, kind, monkeypatch):
    """Every shape of one plan has the same ops, so the same floor under the simulator (its busiest link's
    time); once the best so far is below it, none of the plan's other shapes is built or ranked. Ranked by
    the simulator that is exact: the same pick, at the same time, as ranking every shape."""
    from a2acc.planners import forget
    from a2acc.planners.fast import search

    topo = load_topology(preset, servers)
    m = generate(kind, topo.nranks, 256 << 20, 2, skew=0.8)
    forget()
    built: list[str] = []
    for maker in ("shape", "draft"):  # a candidate is built as a Program or as a draft of one
        made = getattr(search.emit, maker)
        monkeypatch.setattr(search.emit, maker, lambda *a, made=made, **k: built.append("x") or made(*a, **k))
    floored = plan(topo, m, "fast", rank="simulate")
    n_floored = len(built)
    cands = floored.meta["candidates_us"]
    skipped = [k for k, t in cands.items() if t is None]
    assert skipped, cands  # the direct step and the other balancing choice's plan are past the floor here
    monkeypatch.setattr(search, "link_bound", lambda *a, **k: 0.0)  # no floor: every shape ranked
    forget()  # planned again, not remembered
    built.clear()
    every = plan(topo, m, "fast", rank="simulate")
    assert len(built) > n_floored
    assert all(t is not None for t in every.meta["candidates_us"].values())
    assert every.meta["shape"] == floored.meta["shape"]
    assert every.meta["ranked_us"] == floored.meta["ranked_us"]
    for k in skipped:  # what the floor skipped was slower than the pick
        assert every.meta["candidates_us"][k] > floored.meta["ranked_us"]


@pytest.mark.parametrize(("preset", "servers", "kind"), [("dgx-h100", 4, "zipf"), ("mi300x", 2, "moe")])
def test_the_direct_steps_floor_and_peers_from_the_matrix_are_its_programs(preset, servers, kind):
    """The search prices the direct step off the matrix before building it: the same link floor and estimate,
    to the bit, and the same peer count as the direct Program it builds if it keeps it."""
    from a2acc.analysis.estimate import estimate, link_bound, prices_drafts
    from a2acc.analysis.model import default_model
    from a2acc.ir.program import program_peers
    from a2acc.planners.fast import search

    topo = load_topology(preset, servers)
    m = generate(kind, topo.nranks, 64 << 20, 3, skew=0.8)
    m[0, 1] = 0  # a pair with nothing to send: no op
    req = _request(topo, m)
    model = default_model(topo)
    draft = search.DirectDraft.of(req)
    prog = draft.program()
    assert prog.meta["shape"] == "direct"
    assert len(draft.table) == len(prog.table)
    assert link_bound(draft, topo, model) == link_bound(prog, topo, model) > 0
    assert program_peers(draft) == program_peers(prog)
    if prices_drafts():
        assert estimate(draft, topo, model) == estimate(prog, topo, model)


def test_a_balancing_choice_is_compared_by_its_stage_plan_alone():
    """The search leaves out a balancing choice that balances the tiles of a plan already listed, deciding it
    from the stage plan before preparing anything else: the stage plan's tiles are the prepared plan's."""
    from dataclasses import replace

    from a2acc.planners.fast import Options, emit

    topo = load_topology("dgx-h100", 4)
    req = _request(topo, generate("zipf", topo.nranks, 256 << 20, 1, skew=0.8))
    for balance in ("auto", "always", "never"):
        opts = replace(Options(), balance=balance)
        stages = emit.plan_stages(req, opts)
        prepared = emit.prepare(req, opts, stages=stages)
        assert np.array_equal(stages.balanced, prepared.balanced)
        assert np.array_equal(emit.prepare(req, opts).balanced, prepared.balanced)


def _request(topo, traffic):
    """fast's request for ``traffic`` at its chunk size, with fast's default options."""
    from a2acc.ir.quantize import choose_unit, quantize
    from a2acc.planners import PlanRequest
    from a2acc.planners.fast import Options

    unit = choose_unit(traffic)
    return PlanRequest(topo, traffic, quantize(traffic, unit), unit, Options())
