"""Launch programs (what the ``p2p`` executor replays) simulated on every rank, the transport adversarial.

The simulator runs every rank's exchanges in order. An exchange's received rows hold garbage until the rank
waits for it (they are filled at the wait, not at the post), so a send or the final gather that reads them
before the wait the program names reads garbage and the comparison fails; a rank's staging rows are checked
untouched until their exchange completes. Sizes are matched pairwise (what rank ``a`` sends to ``b`` in
exchange ``x`` must be what ``b`` expects from ``a``), as ``all_to_all_single`` requires. The result must be the
layout's all-to-all under any relabelling of the ranks: every rank's output region from ``s`` equals ``s``'s
input region for it.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from a2acc.ir import program_from_json
from a2acc.model.topology import load_topology, parse_topology
from a2acc.runtime.decide.compiling import compile_entry
from a2acc.runtime.launch.program import (
    INTRA,
    LaunchProgram,
    compile_launch,
    exchange_set,
    global_steps,
    region_rows,
)
from tests.conftest import staged_relay_program

UNIT = 16
GARBAGE = -7


def simulate(lps: list[LaunchProgram], inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Run ``lps`` (``lps[g]``: the program group rank ``g`` plays) on ``inputs`` (each rank's input region,
    rows x 2 int64) and return each rank's output region."""
    n = len(lps)
    data = []
    for lp, x in zip(lps, inputs):
        a = np.full((lp.data_rows, 2), GARBAGE, dtype=np.int64)
        a[: lp.in_rows] = x
        a[lp.zero_row] = 0
        data.append(a)
    if lps[0].direct:
        assert all(lp.direct for lp in lps)
        return [None] * n  # type: ignore[list-item]
    nex = len(lps[0].exchanges)
    assert all(len(lp.exchanges) == nex for lp in lps), "ranks disagree on the exchanges"
    pending: list[dict[int, np.ndarray]] = [{} for _ in range(n)]  # exchange -> the rows it will deliver
    for x in range(nex):
        blocks = []
        for g, lp in enumerate(lps):
            ex = lp.exchanges[x]
            assert (ex.step, ex.lane, ex.peers) == (
                lps[0].exchanges[x].step,
                lps[0].exchanges[x].lane,
                lps[0].exchanges[x].peers,
            )
            for y in ex.waits:  # the received rows become real only now
                assert y < x, "a wait names a later exchange"
                e = lp.exchanges[y]
                data[g][e.recv_at : e.recv_at + e.recv_rows] = pending[g].pop(y)
            if ex.send_at >= 0:
                block = data[g][ex.send_at : ex.send_at + ex.send_rows].copy()
            else:
                block = data[g][ex.gather].copy()
            blocks.append(block)
        for g, lp in enumerate(lps):
            ex = lp.exchanges[x]
            got = []
            for q in range(n):
                sender = lps[q].exchanges[x]
                assert sender.send[g] == ex.recv[q], (
                    f"exchange {x}: {q} sends {sender.send[g]} rows to {g}, which expects {ex.recv[q]}"
                )
                lo = sum(sender.send[:g])
                got.append(blocks[q][lo : lo + sender.send[g]])
            pending[g][x] = np.concatenate(got) if got else np.zeros((0, 2), np.int64)
            assert pending[g][x].shape[0] == ex.recv_rows
    outs = []
    for g, lp in enumerate(lps):
        for y in lp.final_waits:
            e = lp.exchanges[y]
            data[g][e.recv_at : e.recv_at + e.recv_rows] = pending[g].pop(y)
        assert not pending[g], f"rank {g} never waits for exchanges {sorted(pending[g])}"
        outs.append(data[g][lp.out_rows])
    return outs


def check(prog, overlap: bool, perm: np.ndarray | None = None) -> list[LaunchProgram]:
    steps = global_steps(prog)
    exs = exchange_set(prog, steps, overlap)
    n = prog.nranks
    perm = np.arange(n) if perm is None else perm
    inv = np.argsort(perm)
    lps = [compile_launch(prog, int(inv[g]), steps, exs, perm, overlap) for g in range(n)]
    rng = np.random.default_rng(5)
    inputs = [rng.integers(0, 1 << 40, size=(lp.in_rows, 2)) for lp in lps]
    outs = simulate(lps, inputs)
    if lps[0].direct:
        return lps
    for d, lp in enumerate(lps):
        for s in range(n):
            k = int(lp.out_cap[s])
            assert k == int(lps[s].in_cap[d])
            got = outs[d][int(lp.out_off[s]) : int(lp.out_off[s]) + k]
            want = inputs[s][int(lps[s].in_off[d]) : int(lps[s].in_off[d]) + k]
            assert np.array_equal(got, want), f"rank {d} from {s}"
        for ex in lp.exchanges:  # sizes: at most one message per peer and direction, none to itself
            assert ex.send[d] == 0 and ex.recv[d] == 0
            assert max(sum(1 for k in ex.send if k), sum(1 for k in ex.recv if k)) <= ex.peers
            if ex.send_at < 0:
                assert ex.stage_at + ex.send_rows <= lp.staging_rows and ex.gather.size == ex.send_rows
    return lps


TWO_BY_FOUR = parse_topology(
    {
        "version": 1,
        "name": "2x4",
        "servers": 2,
        "gpus_per_server": 4,
        "intra": {"fabric": "switch", "bandwidth": 150},
        "inter": {"nics_per_server": 4, "bandwidth": 25},
    }
)


@settings(max_examples=25, deadline=None)
@given(
    st.sampled_from(["fast", "fast[shape=staged]", "direct", "spreadout", "hierarchical"]),
    st.sampled_from(["2x4", "dgx-h100:2", "mi300x:1"]),
    st.integers(0, 2**31 - 1),
    st.booleans(),
    st.booleans(),
)
def test_launch_programs_are_the_layouts_all_to_all(algorithm, spec, seed, overlap, relabel):
    topo = TWO_BY_FOUR if spec == "2x4" else load_topology(spec.split(":")[0], int(spec.split(":")[1]))
    n = topo.nranks
    rng = np.random.default_rng(seed)
    layout = rng.integers(0, 7, size=(n, n))
    layout[rng.integers(n), :] += rng.integers(0, 20)  # a hot sender now and then
    name, _, opt = algorithm.partition("[")
    options = dict([opt.rstrip("]").split("=")]) if opt else None
    entry = compile_entry(topo, layout, UNIT, name, None, f"k{seed}", options)
    perm = rng.permutation(n) if relabel else None
    lps = check(program_from_json(entry.program_json), overlap, perm)
    if algorithm == "direct":  # the caller's own all-to-all: one collective over its tensors
        assert all(lp.direct for lp in lps)
    if algorithm == "fast[shape=staged]" and topo.servers > 1:  # FAST's sequence: more than the one step
        assert len(lps[0].exchanges) >= 2
    if overlap and not lps[0].direct:
        node = [r // topo.gpus_per_server for r in range(n)]
        inv = np.argsort(perm) if perm is not None else np.arange(n)
        for g, lp in enumerate(lps):
            for ex in lp.exchanges:
                for q in range(n):
                    if ex.send[q] or ex.recv[q]:  # group ranks g and q play program ranks inv[g], inv[q]
                        same = node[int(inv[q])] == node[int(inv[g])]
                        assert (ex.lane == INTRA) == same


@pytest.mark.parametrize("overlap", [False, True])
def test_local_copies_are_renames_and_sends_are_gathered(overlap):
    """Every pair staged through the sender's scratch: the copies move no bytes (the sends read the input rows
    themselves), and a send that is not one run is gathered."""
    counts = np.array([[2, 3, 1, 0], [1, 0, 2, 2], [0, 4, 1, 1], [3, 1, 0, 2]])
    lps = check(staged_relay_program(counts, UNIT), overlap)
    assert all(lp.data_rows == lp.in_rows + sum(x.recv_rows for x in lp.exchanges) + 1 for lp in lps)


def test_relays_wait_for_what_they_forward():
    """A relaying plan (hierarchical: gather at one GPU, cross, scatter) has several exchanges, and a relay
    waits for the exchange that brought the rows it forwards."""
    n = 8
    layout = np.full((n, n), 2)
    layout[0, 4:] = 9
    entry = compile_entry(TWO_BY_FOUR, layout, UNIT, "hierarchical", None, "relay")
    lps = check(program_from_json(entry.program_json), overlap=True)
    assert max(len(lp.exchanges) for lp in lps) >= 2
    assert any(ex.waits for lp in lps for ex in lp.exchanges)


def test_region_rows_tile_the_regions():
    peer, pos = region_rows(np.array([0, 3, 3, 5]), np.array([3, 0, 2, 1]))
    assert peer.tolist() == [0, 0, 0, 2, 2, 3] and pos.tolist() == [0, 1, 2, 0, 1, 0]
    peer, pos = region_rows(np.array([0, 2]), np.array([1, 0]))  # an empty region after a gap: no one's row
    assert peer.tolist() == [0, 2] and pos.tolist() == [0, 0]
