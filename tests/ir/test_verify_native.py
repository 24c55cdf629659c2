"""The compiled verifier core agrees with the pure-Python reference, report for report; the other column paths
(compiled JSON rows and Op views, bulk adds, the column-wise plan reader, levels) agree with theirs.

Random Programs (valid, racy, half-written, structurally broken) and planner Programs with every defect class the
verifier reports injected: both engines must return the same report (verdict, every message in order, chunks
moved, depth, race count), also when ``max_errors`` cuts the list short.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import a2acc
from a2acc.errors import PlanFormatError
from a2acc.ir import OP_FIELDS, Buf, Op, Program, ProgramBuilder, replace_ops
from a2acc.ir.dag import levels
from a2acc.ir.passes import run_passes
from a2acc.ir.program import _COLUMNS, OpTable
from a2acc.ir.serial import _op_lines, _ops_by_row, _ops_fast, op_lines_py
from a2acc.ir.verify import native_available, verify_program
from a2acc.model.traffic import generate
from tests.conftest import staged_relay_program
from tests.helpers import tiered

needs_native = pytest.mark.skipif(not native_available(), reason="a2acc._verify was not built")

IN, OUT, SCR = int(Buf.INPUT), int(Buf.OUTPUT), int(Buf.SCRATCH)


def _same(prog: Program, max_errors: int = 200) -> None:
    ref = verify_program(prog, max_errors=max_errors, engine="python")
    got = verify_program(prog, max_errors=max_errors, engine="native")
    assert got == ref


@st.composite
def random_programs(draw, *, valid_ranges: bool = True):
    """Ops that mostly stay in bounds (so the symbolic execution runs) with random dependencies."""
    n = draw(st.integers(1, 4))
    counts = np.array(
        draw(st.lists(st.integers(0, 3), min_size=n * n, max_size=n * n)), dtype=np.int64
    ).reshape(n, n)
    scratch = tuple(draw(st.lists(st.integers(0, 4), min_size=n, max_size=n)))
    in_cap = counts.sum(axis=1)
    out_cap = counts.sum(axis=0)

    def place(bufs: list[int]) -> tuple[int, int, int, int] | None:
        opts = [(r, b) for r in range(n) for b in bufs if (in_cap, out_cap, scratch)[b][r] > 0]
        if not opts:
            return None
        r, b = draw(st.sampled_from(opts))
        cap = int((in_cap, out_cap, scratch)[b][r])
        off = draw(st.integers(0, cap - 1))
        return r, b, off, cap - off

    ops: list[Op] = []
    for i in range(draw(st.integers(0, 24))):
        src = place([IN, OUT, SCR])
        dst = place([OUT, SCR])
        if src is None or dst is None:
            break
        cnt = draw(st.integers(1, min(src[3], dst[3])))
        pool = draw(st.lists(st.integers(0, i - 1), max_size=4)) if i else []
        if not valid_ranges and draw(st.integers(0, 9)) == 0:
            cnt = draw(st.integers(-1, 9))
        ops.append(Op(i, src[0], src[1], src[2], dst[0], dst[1], dst[2], cnt, tuple(sorted(set(pool)))))
    b = ProgramBuilder("random", "random", counts, 16)
    b.scratch[:] = list(scratch)
    return replace_ops(b.build(), ops)


@needs_native
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_programs(), st.sampled_from([1, 2, 5, 200]))
def test_random_programs_same_report(prog, max_errors):
    _same(prog, max_errors)


@needs_native
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_programs(valid_ranges=False))
def test_random_programs_with_bad_counts_same_report(prog):
    _same(prog)


def _break(op: Op, kind: str, nops: int, n: int) -> Op:
    """One defect of the given class in one op."""
    if kind == "rank":
        return op._replace(dst_rank=n + 3)
    if kind == "buffer":
        return op._replace(src_buf=7)
    if kind == "bounds":
        return op._replace(dst_off=op.dst_off + 10_000)
    if kind == "count":
        return op._replace(cnt=0)
    if kind == "input-write":
        return op._replace(dst_buf=IN)
    if kind == "dangling":
        return op._replace(deps=(*op.deps, nops + 5))
    if kind == "self-dep":
        return op._replace(deps=(*op.deps, op.id))
    if kind == "id":
        return op._replace(id=op.id + 1)
    if kind == "forward":
        return op._replace(deps=(*op.deps, nops - 1)) if op.id < nops - 1 else op
    if kind == "drop-deps":
        return op._replace(deps=())
    if kind == "src-shift":
        return op._replace(src_off=max(op.src_off - 1, 0))
    if kind == "dst-shift":
        return op._replace(dst_off=max(op.dst_off - 1, 0))
    raise AssertionError(kind)


KINDS = [
    "rank",
    "buffer",
    "bounds",
    "count",
    "input-write",
    "dangling",
    "self-dep",
    "id",
    "forward",
    "drop-deps",
    "src-shift",
    "dst-shift",
]


def _planned(servers: int, seed: int, algorithm: str) -> Program:
    topo = tiered(servers, 2)
    m = generate("zipf", topo.nranks, 1 << 14, seed)
    return a2acc.plan(topo, m, algorithm, unit=256, verify=False)


@needs_native
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(1, 3),
    st.integers(0, 2**31 - 1),
    st.sampled_from(["fast", "hierarchical", "spreadout", "direct"]),
    st.sampled_from(KINDS),
    st.data(),
)
def test_every_defect_class_same_report(servers, seed, algorithm, kind, data):
    prog = _planned(servers, seed, algorithm)
    _same(prog)
    if not prog.ops:
        return
    ops = list(prog.ops)
    k = data.draw(st.integers(0, len(ops) - 1))
    ops[k] = _break(ops[k], kind, len(ops), prog.nranks)
    _same(replace_ops(prog, ops))


@needs_native
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(1, 3),
    st.integers(0, 2**31 - 1),
    st.sampled_from(["fast", "hierarchical", "spreadout"]),
    st.data(),
)
def test_dropped_duplicated_and_swapped_ops_same_report(servers, seed, algorithm, data):
    """Missing writes (never written), duplicate writes (write-write races), reordered ops."""
    prog = _planned(servers, seed, algorithm)
    if len(prog.ops) < 2:
        return
    ops = list(prog.ops)
    k = data.draw(st.integers(0, len(ops) - 1))
    action = data.draw(st.sampled_from(["drop", "duplicate", "cycle"]))
    if action == "drop":
        keep = [op for op in ops if op.id != k]
        remap = {op.id: i for i, op in enumerate(keep)}
        ops = [
            op._replace(id=remap[op.id], deps=tuple(remap[d] for d in op.deps if d in remap)) for op in keep
        ]
    elif action == "duplicate":
        ops.append(ops[k]._replace(id=len(ops), deps=()))
    else:
        j = data.draw(st.integers(0, len(ops) - 1))
        if j != k:
            ops[min(j, k)] = ops[min(j, k)]._replace(deps=(*ops[min(j, k)].deps, max(j, k)))
    _same(replace_ops(prog, ops))


@needs_native
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(2, 4), st.integers(0, 2**31 - 1), st.sampled_from(["fast", "hierarchical", "spreadout"]))
def test_transitive_orderings_same_report(servers, seed, algorithm):
    """After reduce-deps many orderings are only transitive: the core's search must prove them."""
    prog = run_passes(_planned(servers, seed, algorithm), ["reduce-deps"])
    _same(prog)


@needs_native
def test_write_after_read_and_reader_lists():
    """Several readers of one chunk, then an overwrite ordered after some of them only."""
    counts = np.array([[0, 1], [0, 0]], dtype=np.int64)
    b = ProgramBuilder("war", "manual", counts, 16)
    s = b.alloc_scratch(0, 2)
    w = b.add((0, IN, 0), (0, SCR, s), 1)
    r1 = b.add((0, SCR, s), (0, SCR, s + 1), 1, [w])
    r2 = b.add((0, SCR, s), (1, OUT, 0), 1, [w])
    b.add((0, IN, 0), (0, SCR, s), 1, [r1])  # not after r2: write races read
    b.add((0, SCR, s), (0, SCR, s), 1)  # reads and writes the same chunk, unordered with everything
    prog = b.build()
    assert any(f"that op {r2} reads" in e for e in verify_program(prog, engine="native").errors)
    _same(prog)
    _same(prog, 1)


@needs_native
def test_relay_programs_with_dependencies_same_report():
    for counts in (np.array([[0, 4], [2, 0]]), np.full((5, 5), 3), np.eye(3, dtype=np.int64)):
        _same(staged_relay_program(counts))


@needs_native
def test_forced_python_engine(monkeypatch):
    prog = staged_relay_program(np.array([[1, 2], [3, 4]]))
    monkeypatch.setenv("A2ACC_VERIFY", "python")
    assert verify_program(prog) == verify_program(prog, engine="native")


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_programs(), st.lists(st.sampled_from(["intra", "", 'q"uote', "é", "x\\n"]), max_size=24))
def test_compiled_column_helpers_match_python(prog, labels):
    """The plan JSON's op rows and the Op views, compiled vs Python (odd link labels included)."""
    ops = [op._replace(link=labels[k % len(labels)] if labels else op.link) for k, op in enumerate(prog.ops)]
    t = OpTable.from_ops(ops)
    assert ",\n".join(_op_lines(t)) == ",\n".join(op_lines_py(t))
    got, ref = t.to_ops(), t.to_ops_py()
    assert got == ref and all(type(a) is Op for a in got)
    assert [tuple(map(type, a)) for a in got] == [tuple(map(type, a)) for a in ref]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(1, 4),
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(1, 3)), max_size=30),
    st.data(),
)
def test_add_many_matches_add(n, rows, data):
    """A bulk add gives the same table as the same ops added one at a time (deps sorted, de-duplicated)."""
    counts = np.full((n, n), 3, dtype=np.int64)
    one = ProgramBuilder("a", "t", counts, 16)
    bulk = ProgramBuilder("a", "t", counts, 16)
    rows = [(s % n, d % n, c) for s, d, c in rows]
    deps = [data.draw(st.lists(st.integers(0, k - 1), max_size=4)) if k else [] for k in range(len(rows))]
    for k, (s, d, c) in enumerate(rows):
        one.add((s, IN, 0), (d, OUT, k % 3), c, deps[k], stage=k)
    if rows:
        s, d, c = (np.array(x, dtype=np.int64) for x in zip(*rows))
        ids = bulk.add_many(
            (s, IN, 0),
            (d, OUT, np.arange(len(rows)) % 3),
            c,
            stage=np.arange(len(rows)),
            deps=([len(x) for x in deps], [y for x in deps for y in x]),
        )
        assert ids.tolist() == list(range(len(rows)))
    assert one.build().to_json() == bulk.build().to_json()


@needs_native
def test_long_transitive_chains_and_side_branches():
    """Orderings only through long chains (the core's labels and pruned search), next to unordered branches."""
    counts = np.array([[0, 1], [0, 0]], dtype=np.int64)
    b = ProgramBuilder("chain", "manual", counts, 16)
    s = b.alloc_scratch(0, 64)
    first = b.add((0, IN, 0), (0, SCR, s), 1)
    prev = first
    side = []
    for k in range(1, 60):
        prev = b.add((0, IN, 0), (0, SCR, s + 1 + k % 3), 1, [prev])
        if k % 7 == 0:
            side.append(b.add((0, IN, 0), (0, SCR, s + 10 + k % 5), 1))  # unordered with the chain
    b.add((0, SCR, s), (1, OUT, 0), 1, [prev])  # reads what `first` wrote: ordered through 59 ops
    b.add((0, IN, 0), (0, SCR, s), 1, [side[-1]])  # overwrites it: ordered after the reader? no
    prog = b.build()
    rep = verify_program(prog, engine="native")
    assert not any(f"written by op {first}" in e for e in rep.errors)
    assert any("overwrites rank 0 scratch chunk 0" in e for e in rep.errors)
    _same(prog)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_programs())
def test_levels_of_the_table_match_the_op_views(prog):
    assert levels(prog.table) == levels(prog.ops)


def _tables_equal(a: OpTable, b: OpTable) -> bool:
    return a.links == b.links and all(
        np.array_equal(getattr(a, f), getattr(b, f)) for f in (*_COLUMNS, "link", "dep_ptr", "dep_ids")
    )


MUTANTS = [
    lambda r: r.__setitem__(3, -1),
    lambda r: r.__setitem__(7, 0),
    lambda r: r.__setitem__(7, True),
    lambda r: r.__setitem__(2, "x"),
    lambda r: r.__setitem__(5, ["o"]),
    lambda r: r.__setitem__(10, "wire"),
    lambda r: r.__setitem__(9, 1 << 40),
    lambda r: r.__setitem__(9, -5),
    lambda r: r.__setitem__(1, 2**70),
    lambda r: r.__setitem__(8, [*r[8], r[0]]),
    lambda r: r.__setitem__(8, [*r[8], 10**6]),
    lambda r: r.__setitem__(8, [*r[8], *r[8]]),
    lambda r: r.__setitem__(8, [1.0]),
    lambda r: r.__setitem__(8, 3),
    lambda r: r.__setitem__(0, r[0] + 1),
    lambda r: r.append(0),
]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 2), st.integers(0, 2**31 - 1), st.sampled_from(["fast", "hierarchical"]), st.data())
def test_column_reader_accepts_exactly_what_the_row_reader_accepts(servers, seed, algorithm, data):
    """The plan reader's column path never accepts a row the row-by-row path rejects, nor reads it differently."""
    doc = json.loads(_planned(servers, seed, algorithm).to_json())
    rows = doc["ops"]
    if rows and data.draw(st.booleans()):
        data.draw(st.sampled_from(MUTANTS))(rows[data.draw(st.integers(0, len(rows) - 1))])
    fast = _ops_fast(rows, 11)
    try:
        slow = _ops_by_row(rows, list(OP_FIELDS), 2, "p.json")
    except PlanFormatError:
        assert fast is None
        return
    assert fast is not None and _tables_equal(fast, slow)
