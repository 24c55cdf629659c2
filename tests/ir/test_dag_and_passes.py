"""The op-order invariant, the DAG helpers and the Program -> Program passes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import a2acc
from a2acc.errors import VerificationError
from a2acc.ir import Buf, Op, ProgramBuilder, replace_ops
from a2acc.ir.dag import HappensBefore, levels, topological_order
from a2acc.ir.passes import get_pass, run_passes
from a2acc.ir.verify import verify_program
from a2acc.model.traffic import generate
from tests.conftest import staged_relay_program
from tests.helpers import tiered

IN, OUT, SCR = Buf.INPUT, Buf.OUTPUT, Buf.SCRATCH


def _two_op_backwards():
    """Rank 0 stages its chunk through scratch; the copy is op 1 and the send that reads it op 0."""
    counts = np.array([[0, 1], [0, 0]], dtype=np.int64)
    b = ProgramBuilder("back", "manual", counts, 16)
    b.scratch[0] = 1
    prog = b.build()
    ops = [
        Op(0, 0, SCR, 0, 1, OUT, 0, 1, deps=(1,)),  # depends on a LATER op
        Op(1, 0, IN, 0, 0, SCR, 0, 1),
    ]
    return replace_ops(prog, ops)


def test_dependency_on_a_later_op_fails_verification():
    rep = verify_program(_two_op_backwards())
    assert not rep.ok
    assert any("op 0 depends on op 1, which comes later" in e for e in rep.errors)


def test_toposort_pass_repairs_the_order_and_the_plan_then_verifies():
    fixed = get_pass("toposort")(_two_op_backwards())
    assert [op.deps for op in fixed.ops] == [(), (0,)]
    assert verify_program(fixed).ok


def test_cycle_is_reported_as_a_deadlock_and_toposort_refuses_it():
    prog = _two_op_backwards()
    ops = list(prog.ops)
    ops[1] = ops[1]._replace(deps=(0,))
    cyc = replace_ops(prog, ops)
    rep = verify_program(cyc)
    assert rep.errors[0].startswith("dependency cycle (the plan would deadlock): op 0 -> op 1 -> op 0")
    with pytest.raises(VerificationError, match="deadlock"):
        get_pass("toposort")(cyc)


def test_ordered_program_is_unchanged_by_toposort():
    prog = staged_relay_program(np.full((4, 4), 2, dtype=np.int64))
    assert get_pass("toposort")(prog) is prog
    assert topological_order(prog.ops) == list(range(len(prog.ops)))


def _hb_matrix(ops):
    hb = HappensBefore(ops)
    n = len(ops)
    return [[hb.before(a, b) for b in range(n)] for a in range(n)]


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 4), st.integers(0, 2**31 - 1), st.sampled_from(["fast", "hierarchical", "spreadout"]))
def test_reduce_deps_keeps_happens_before_and_the_verdict(servers, seed, algorithm):
    topo = tiered(servers, 2)
    m = generate("zipf", topo.nranks, 1 << 14, seed)
    prog = a2acc.plan(topo, m, algorithm, unit=256)
    reduced = run_passes(prog, ["reduce-deps"])
    assert sum(len(o.deps) for o in reduced.ops) <= sum(len(o.deps) for o in prog.ops)
    assert verify_program(reduced).ok
    if len(prog.ops) <= 80:
        assert _hb_matrix(prog.ops) == _hb_matrix(reduced.ops)


def test_reduce_deps_drops_an_implied_edge():
    counts = np.array([[0, 1], [0, 0]], dtype=np.int64)
    b = ProgramBuilder("chain", "manual", counts, 16)
    s1 = b.alloc_scratch(0, 1)
    s2 = b.alloc_scratch(0, 1)
    a = b.add((0, IN, 0), (0, SCR, s1), 1)
    c = b.add((0, SCR, s1), (0, SCR, s2), 1, [a])
    b.add((0, SCR, s2), (1, OUT, 0), 1, [a, c])  # a is implied by c
    red = get_pass("reduce-deps")(b.build())
    assert red.ops[2].deps == (c,)
    assert levels(red.ops) == [0, 1, 2]
