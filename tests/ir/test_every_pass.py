"""The test net over every registered pass (networkx's ``flow_funcs`` / ``validate_flows`` pattern): a pass never
changes what a Program computes. For every pass in :data:`a2acc.ir.passes.PASSES` and every Program here (each
planner's plans on a few presets, random DAGs, racy programs), the verifier's verdict is the same before and
after, and every rank's output buffer holds the same chunks. A new pass is tested by adding its registry line.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import a2acc
from a2acc.ir import Buf, Op, Program, ProgramBuilder, replace_ops
from a2acc.ir.passes import PASSES, get_pass
from a2acc.ir.verify import verify_program
from a2acc.model.topology import load_topology
from a2acc.model.traffic import generate
from a2acc.planners import available
from tests.conftest import staged_relay_program

PASS_NAMES = PASSES.names()


def outputs(prog: Program) -> list[np.ndarray]:
    """Run the Program in op order on tagged chunks: rank r's input chunk i is ``r << 32 | i``; -1 is unset.
    Returns every rank's output buffer (what an executor would leave there)."""
    lay = prog.layout
    bufs = []
    for r in range(prog.nranks):
        inp = (np.int64(r) << 32) | np.arange(int(lay.input_chunks(r)), dtype=np.int64)
        out = np.full(int(lay.output_chunks(r)), -1, dtype=np.int64)
        scr = np.full(int(prog.scratch[r]), -1, dtype=np.int64)
        bufs.append({Buf.INPUT: inp, Buf.OUTPUT: out, Buf.SCRATCH: scr})
    for op in prog.ops:
        src = bufs[op.src_rank][Buf(op.src_buf)][op.src_off : op.src_off + op.cnt]
        bufs[op.dst_rank][Buf(op.dst_buf)][op.dst_off : op.dst_off + op.cnt] = src
    return [b[Buf.OUTPUT] for b in bufs]


def _same_meaning(before: Program, after: Program) -> None:
    v0, v1 = verify_program(before), verify_program(after)
    assert v0.ok == v1.ok, (v0.errors[:3], v1.errors[:3])
    if v0.ok:  # a verified Program's result does not depend on which valid order runs it
        for r, (a, b) in enumerate(zip(outputs(before), outputs(after))):
            assert np.array_equal(a, b), f"rank {r}'s output changed"


def _planned() -> list[tuple[str, Program]]:
    cases = []
    for preset, servers in (("dgx-h100", 2), ("mi300x", 1), ("ndv2", 2)):
        topo = load_topology(preset, servers)
        m = generate("zipf", topo.nranks, 8 << 20, seed=3)
        for info in available():
            if a2acc.planners.applies(info.name, topo) is None:
                cases.append((f"{info.name}-{preset}x{servers}", a2acc.plan(topo, m, info.name)))
    return cases


PLANNED = _planned()


@pytest.mark.parametrize("name", PASS_NAMES)
@pytest.mark.parametrize(("case", "prog"), PLANNED, ids=[c for c, _p in PLANNED])
def test_every_pass_keeps_every_planners_result(name, case, prog):
    _same_meaning(prog, get_pass(name)(prog))


@st.composite
def random_dags(draw) -> Program:
    """A relay through scratch per pair, plus random extra dependencies on earlier ops (still a DAG in op
    order), sometimes with a dependency dropped (a race the verifier must keep reporting)."""
    n = draw(st.integers(2, 4))
    counts = np.array([[draw(st.integers(0, 3)) for _d in range(n)] for _s in range(n)], dtype=np.int64)
    prog = staged_relay_program(counts)
    ops = list(prog.ops)
    extra = draw(st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 10**6)), max_size=8))
    for a, b in extra:
        if len(ops) > 1:
            i = 1 + a % (len(ops) - 1)
            j = b % i
            ops[i] = ops[i]._replace(deps=tuple(sorted({*ops[i].deps, j})))
    if draw(st.booleans()):
        racy = [i for i, o in enumerate(ops) if o.deps]
        if racy:
            i = racy[draw(st.integers(0, len(racy) - 1))]
            ops[i] = ops[i]._replace(deps=())
    return replace_ops(prog, [Op(i, *o[1:]) for i, o in enumerate(ops)])


@pytest.mark.parametrize("name", PASS_NAMES)
@settings(max_examples=40, deadline=None)
@given(prog=random_dags())
def test_every_pass_keeps_the_verdict_and_outputs_of_random_programs(name, prog):
    _same_meaning(prog, get_pass(name)(prog))


def test_the_interpreter_sees_a_wrong_program():
    """The net can fail: a program that drops a chunk changes a rank's output."""
    counts = np.array([[0, 2], [1, 0]], dtype=np.int64)
    b = ProgramBuilder("t", "manual", counts, 16)
    b.add((0, Buf.INPUT, int(b.in_off[0, 1])), (1, Buf.OUTPUT, int(b.out_off[1, 0])), 2)
    b.add((1, Buf.INPUT, int(b.in_off[1, 0])), (0, Buf.OUTPUT, int(b.out_off[0, 1])), 1)
    good = b.build()
    bad = replace_ops(good, [good.ops[0]._replace(cnt=1), good.ops[1]])
    assert not all(np.array_equal(x, y) for x, y in zip(outputs(good), outputs(bad)))
