"""The shared verifier: accepts correct plans and catches every injected defect with the right message."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from a2acc import plan
from a2acc.errors import VerificationError
from a2acc.ir import Buf, Op, replace_ops
from a2acc.ir.verify import check_program, verify_program
from a2acc.model.topology import load_topology
from tests.conftest import staged_relay_program

TOPO = load_topology("dgx-h100", servers=1)


def _matrices(n: int = 8):
    return arrays(np.int64, (n, n), elements=st.integers(0, 5000))


@settings(max_examples=30, deadline=None)
@given(_matrices())
def test_direct_plans_verify_on_random_matrices(m):
    prog = plan(TOPO, m, "direct", unit=256, verify=False)
    rep = verify_program(prog)
    assert rep.ok, rep.errors
    assert rep.chunks_moved == int(prog.counts.sum())


@settings(max_examples=30, deadline=None)
@given(_matrices(5), st.data())
def test_dropped_op_is_caught(m, data):
    prog = staged_relay_program(np.maximum(m // 1000, 0))
    if not prog.ops:
        return
    # drop a final-delivery op (odd positions) and renumber
    finals = [op for op in prog.ops if op.dst_buf == Buf.OUTPUT]
    victim = data.draw(st.sampled_from(finals))
    keep = [op for op in prog.ops if op.id != victim.id]
    remap = {op.id: i for i, op in enumerate(keep)}
    ops = [op._replace(id=remap[op.id], deps=tuple(remap[d] for d in op.deps)) for op in keep]
    rep = verify_program(replace_ops(prog, ops))
    assert not rep.ok
    assert any("is never written" in e and f"rank {victim.dst_rank} output" in e for e in rep.errors)


def test_wrong_offset_is_caught():
    counts = np.array([[2, 3], [1, 2]])
    prog = staged_relay_program(counts)
    ops = list(prog.ops)
    k = next(i for i, op in enumerate(ops) if op.dst_buf == Buf.OUTPUT and op.cnt == 3)
    ops[k] = ops[k]._replace(src_off=ops[k].src_off + 1, cnt=2)  # off-by-one source, shorter copy
    rep = verify_program(replace_ops(prog, ops))
    assert not rep.ok
    assert any("postcondition" in e and "should hold input chunk" in e for e in rep.errors)


def test_out_of_bounds_offset_is_caught():
    prog = staged_relay_program(np.array([[1, 1], [1, 1]]))
    ops = list(prog.ops)
    ops[1] = ops[1]._replace(dst_off=5)
    rep = verify_program(replace_ops(prog, ops))
    assert any(e.startswith("op 1: destination") and "out of bounds" in e for e in rep.errors)


def test_duplicated_write_is_a_race():
    prog = plan(TOPO, np.full((8, 8), 64), "direct", unit=16)
    dup = prog.ops[9]._replace(id=len(prog.ops))
    rep = verify_program(replace_ops(prog, [*prog.ops, dup]))
    assert not rep.ok
    assert any(f"ops 9 and {dup.id} both write" in e and "not ordered" in e for e in rep.errors)


def test_removed_dependency_is_a_race():
    prog = staged_relay_program(np.array([[0, 4], [2, 0]]))
    ops = list(prog.ops)
    k = next(i for i, op in enumerate(ops) if op.deps)
    writer = ops[k].deps[0]
    ops[k] = ops[k]._replace(deps=())
    rep = verify_program(replace_ops(prog, ops))
    assert not rep.ok
    assert any(
        f"race: op {k} reads" in e and f"written by op {writer}" in e and "missing dependency" in e
        for e in rep.errors
    )


def test_cycle_is_reported_with_op_ids():
    prog = staged_relay_program(np.array([[0, 4], [2, 0]]))
    ops = list(prog.ops)
    ops[0] = ops[0]._replace(deps=(1,))
    rep = verify_program(replace_ops(prog, ops))
    assert rep.errors == ("dependency cycle (the plan would deadlock): op 0 -> op 1 -> op 0",) or any(
        "dependency cycle" in e and "op 0" in e and "op 1" in e for e in rep.errors
    )
    with pytest.raises(VerificationError, match="deadlock"):
        check_program(replace_ops(prog, ops))


def test_uninitialised_scratch_read_and_input_write():
    prog = staged_relay_program(np.array([[0, 2], [0, 0]]))
    ops = [op for op in prog.ops if op.src_buf == Buf.SCRATCH]
    ops = [ops[0]._replace(id=0, deps=())]
    rep = verify_program(replace_ops(prog, ops))
    assert any("reads uninitialised rank 0 scratch chunks [0,2)" in e for e in rep.errors)
    bad = Op(0, 0, Buf.INPUT, 0, 1, Buf.INPUT, 0, 1)
    rep = verify_program(replace_ops(staged_relay_program(np.array([[0, 2], [1, 0]])), [bad]))
    assert any("writes the input buffer" in e for e in rep.errors)


def test_write_after_read_race():
    # op0 fills scratch, op1 reads it, op2 overwrites it without waiting for op1
    prog = staged_relay_program(np.array([[0, 1], [0, 0]]))
    op0, op1 = prog.ops
    op2 = Op(2, 0, Buf.INPUT, 0, 0, Buf.SCRATCH, 0, 1, (0,))
    rep = verify_program(replace_ops(prog, [op0, op1, op2]))
    assert any("op 2 overwrites rank 0 scratch chunk 0 that op 1 reads" in e for e in rep.errors)
    ok = verify_program(replace_ops(prog, [op0, op1, op2._replace(deps=(1,))]))
    assert ok.ok, ok.errors
