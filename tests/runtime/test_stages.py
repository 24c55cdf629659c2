"""Stage programs (what the p2p executor runs) simulated on every rank with in-flight messages checked.

The simulator runs all ranks' stage programs step by step and plays the part of the transport adversarially:
a posted send's rows must not change until its wait (its data is snapshotted at post and compared at the
wait), a posted receive's rows are untouchable until its wait (any copy, pack or scatter touching them fails),
and messages are matched per (lane, source, destination) in posting order, as NCCL does (no tags), with equal
sizes. The result must be the layout's all-to-all: every rank's output region from source ``s`` equals ``s``'s
input region for it.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from a2acc.ir import program_from_json
from a2acc.model.topology import load_topology, parse_topology
from a2acc.runtime.engine import compile_entry
from a2acc.runtime.executors.stages import StageProgram, compile_rank, global_steps
from tests.conftest import staged_relay_program

UNIT = 16


class Transport:
    """In-flight messages of all ranks (see module docstring)."""

    def __init__(self, sps: list[StageProgram], arenas: list[np.ndarray]) -> None:
        self.sps, self.arenas = sps, arenas
        self.sends: dict[tuple[int, int, int], list[tuple[int, np.ndarray]]] = defaultdict(list)
        self.recvs: dict[tuple[int, int, int], list[tuple[int, int]]] = defaultdict(list)
        self.locked: list[dict[int, tuple[int, bool]]] = [{} for _ in sps]  # row -> (message, is_recv)
        self.delivered: dict[tuple[int, int], np.ndarray] = {}

    def touch(self, r: int, rows: np.ndarray, write: bool) -> None:
        for row in rows.tolist():
            hit = self.locked[r].get(row)
            assert hit is None or (not write and not hit[1]), (
                f"rank {r} row {row} touched while in flight {hit}"
            )

    def post(self, r: int, k: int) -> None:
        m = self.sps[r].messages[k]
        rows = np.arange(m.lo, m.hi)
        self.touch(r, rows, write=not m.send)
        for row in rows.tolist():
            self.locked[r][row] = (k, not m.send)
        if m.send:
            self.sends[(m.lane, r, m.peer)].append((k, self.arenas[r][m.lo : m.hi].copy()))
        else:
            self.recvs[(m.lane, m.peer, r)].append((k, m.hi - m.lo))
        self._match()

    def _match(self) -> None:
        for key in list(self.sends):
            while self.sends[key] and self.recvs.get(key):
                (ks, data), (kr, nrows) = self.sends[key].pop(0), self.recvs[key].pop(0)
                _lane, src, dst = key
                assert data.shape[0] == nrows, (
                    f"message {src}->{dst}: {data.shape[0]} rows sent, {nrows} expected"
                )
                assert self.sps[src].messages[ks].step == self.sps[dst].messages[kr].step
                self.delivered[(src, ks)] = data
                self.delivered[(dst, kr)] = data

    def wait(self, r: int, k: int) -> None:
        m = self.sps[r].messages[k]
        assert (r, k) in self.delivered, f"rank {r} waits for message {k} that was never matched (deadlock)"
        data = self.delivered.pop((r, k))
        for row in range(m.lo, m.hi):
            del self.locked[r][row]
        if m.send:
            assert np.array_equal(self.arenas[r][m.lo : m.hi], data), "a send's rows changed in flight"
        else:
            self.arenas[r][m.lo : m.hi] = data


def run(sps: list[StageProgram], arenas: list[np.ndarray]) -> None:
    tr = Transport(sps, arenas)
    nsteps = max(len(sp.steps) for sp in sps)
    for s in range(nsteps):
        for r, sp in enumerate(sps):
            if s >= len(sp.steps):
                continue
            st_ = sp.steps[s]
            a = arenas[r]
            for k in st_.waits:
                tr.wait(r, k)
            if st_.scatter is not None:
                tr.touch(r, st_.scatter.dst, write=True)
                a[st_.scatter.dst] = a[st_.scatter.src]
            for c in st_.copies:
                tr.touch(r, c.src, write=False)
                tr.touch(r, c.dst, write=True)
                assert not set(c.src.tolist()) & set(c.dst.tolist()), "a copy reads rows it writes"
                a[c.dst] = a[c.src].copy()
            if st_.pack is not None:
                tr.touch(r, st_.pack.src, write=False)
                a[st_.pack.dst] = a[st_.pack.src]
            for k in st_.posts:
                tr.post(r, k)
    assert all(not v for v in tr.sends.values()) and all(not v for v in tr.recvs.values()), (
        "unmatched messages"
    )
    assert all(not lk for lk in tr.locked), "messages never waited for"


def check_program(prog, overlap: bool) -> list[StageProgram]:
    steps = global_steps(prog)
    n = prog.nranks
    sps = [compile_rank(prog, r, steps, overlap) for r in range(n)]
    rng = np.random.default_rng(5)
    arenas = []
    for sp in sps:
        a = np.full((sp.arena_rows, 2), -1, dtype=np.int64)
        lo, hi = sp.in_rows
        a[lo:hi] = rng.integers(0, 1 << 40, size=(hi - lo, 2))
        arenas.append(a)
    inputs = [a[sp.in_rows[0] : sp.in_rows[1]].copy() for a, sp in zip(arenas, sps)]
    run(sps, arenas)
    lay = prog.layout
    for r, sp in enumerate(sps):  # the self region of a direct local copy is the engine's copy
        if sp.self_direct:
            c = int(lay.counts[r, r])
            src, dst = sp.in_rows[0] + int(lay.in_off[r, r]), sp.out_rows[0] + int(lay.out_off[r, r])
            arenas[r][dst : dst + c] = arenas[r][src : src + c]
    for d in range(n):
        out = arenas[d][sps[d].out_rows[0] : sps[d].out_rows[1]]
        for s in range(n):
            c = int(lay.counts[s, d])
            got = out[int(lay.out_off[d, s]) : int(lay.out_off[d, s]) + c]
            want = inputs[s][int(lay.in_off[s, d]) : int(lay.in_off[s, d]) + c]
            assert np.array_equal(got, want), f"rank {d} from {s}"
    for r, sp in enumerate(sps):  # regions left to pack / unpack: exactly those some non-direct op touches
        assert set(sp.packed) <= set(range(n)) and set(sp.unpacked) <= set(range(n))
        for m in sp.messages:
            if m.direct:
                region = lay.in_off[r] if m.send else lay.out_off[r]
                start = (sp.in_rows if m.send else sp.out_rows)[0] + int(region[m.peer])
                assert (m.lo, m.hi) == (
                    start,
                    start + int(lay.counts[r, m.peer] if m.send else lay.counts[m.peer, r]),
                )
                if not m.send:
                    assert m.peer not in sp.unpacked
    for sp in sps:  # at most one message per peer and direction per transfer step
        for s in {m.step for m in sp.messages}:
            ms = [m for m in sp.messages if m.step == s]
            assert len({(m.peer, m.send) for m in ms}) == len(ms)
        assert sp.sends <= sp.transfer_steps * (n - 1) and sp.recvs <= sp.transfer_steps * (n - 1)
    return sps


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
    st.sampled_from(["fast", "direct", "spreadout", "hierarchical"]),
    st.sampled_from(["2x4", "dgx-h100:2", "mi300x:1"]),
    st.integers(0, 2**31 - 1),
    st.booleans(),
)
def test_stage_programs_are_the_layouts_all_to_all(algorithm, spec, seed, overlap):
    topo = TWO_BY_FOUR if spec == "2x4" else load_topology(spec.split(":")[0], int(spec.split(":")[1]))
    n = topo.nranks
    rng = np.random.default_rng(seed)
    layout = rng.integers(0, 7, size=(n, n))
    layout[rng.integers(n), :] += rng.integers(0, 20)  # a hot sender now and then
    entry = compile_entry(topo, layout, UNIT, algorithm, None, f"k{seed}")
    sps = check_program(program_from_json(entry.program_json), overlap)
    if algorithm == "direct":  # every region moves whole: nothing packed or unpacked, all messages direct
        assert all(m.direct for sp in sps for m in sp.messages)
        assert all(not sp.packed and not sp.unpacked for sp in sps)
    if overlap:
        node = [r // topo.gpus_per_server for r in range(n)]
        for sp in sps:
            assert all((m.lane == 1) == (node[m.peer] == node[sp.rank]) for m in sp.messages)


@pytest.mark.parametrize("overlap", [False, True])
def test_local_copies_before_sends_and_staged_messages(overlap):
    """Every pair staged through the sender's scratch: copy phases, then sends that are not one run."""
    counts = np.array([[2, 3, 1, 0], [1, 0, 2, 2], [0, 4, 1, 1], [3, 1, 0, 2]])
    sps = check_program(staged_relay_program(counts, UNIT), overlap)
    assert any(s.copies for s in sps[0].steps)


def test_steps_follow_dependencies_through_other_ranks():
    """A relaying plan (hierarchical: gather at one GPU, cross, scatter) has several steps and local copies, and
    the same step function on every rank."""
    n = 8
    layout = np.full((n, n), 2)
    layout[0, 4:] = 9
    entry = compile_entry(TWO_BY_FOUR, layout, UNIT, "hierarchical", None, "relay")
    prog = program_from_json(entry.program_json)
    sps = check_program(prog, overlap=True)
    assert max(sp.transfer_steps for sp in sps) >= 2
