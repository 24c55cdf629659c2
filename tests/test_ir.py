from __future__ import annotations

import json

import numpy as np
import pytest

from a2acc import plan
from a2acc.errors import PlanFormatError
from a2acc.ir import load_program, program_from_json
from a2acc.model.topology import load_topology
from a2acc.model.traffic import generate
from tests.conftest import staged_relay_program


def test_json_round_trip_is_byte_identical(tmp_path):
    t = load_topology("dgx-h100", servers=2)
    prog = plan(t, generate("zipf", t.nranks, 1 << 24, 5), "direct")
    text = prog.to_json()
    again = program_from_json(text)
    assert again.to_json() == text
    np.testing.assert_array_equal(again.counts, prog.counts)
    path = tmp_path / "p.json"
    prog.save(path)
    assert path.read_text() == text
    assert load_program(path).ops == prog.ops


def test_layout_offsets_are_alltoallv():
    counts = np.array([[1, 2, 0], [3, 0, 4], [5, 6, 7]])
    p = staged_relay_program(counts)
    assert [p.input_offset(1, d) for d in range(3)] == [0, 3, 3]
    assert [p.output_offset(2, s) for s in range(3)] == [0, 0, 4]
    assert p.input_chunks(2) == 18 and p.output_chunks(0) == 9


def _doc():
    counts = np.array([[1, 1], [1, 1]])
    return json.loads(staged_relay_program(counts).to_json())


@pytest.mark.parametrize(
    ("mutate", "fragment"),
    [
        (lambda d: d.update(version=7), "version: value 7"),
        (lambda d: d.update(format="other"), "format"),
        (lambda d: d["ops"][1][8].append(99), "op 1 deps: value 99 is invalid; dangling dependency"),
        (lambda d: d["ops"][1].__setitem__(2, "x"), "ops[1].src_buf"),
        (lambda d: d["ops"][0].__setitem__(0, 5), "ops[0].id"),
        (lambda d: d.update(counts=[[1, 1]]), "counts"),
        (lambda d: d["ops"][0].__setitem__(7, 0), "ops[0].cnt"),
    ],
)
def test_bad_plan_json_is_rejected_with_field(mutate, fragment):
    d = _doc()
    mutate(d)
    with pytest.raises(PlanFormatError) as exc:
        program_from_json(json.dumps(d), "plan.json")
    assert fragment in str(exc.value)
    assert str(exc.value).startswith("plan.json")


def test_truncated_plan_file(tmp_path):
    text = staged_relay_program(np.array([[1, 2], [3, 4]])).to_json()
    p = tmp_path / "p.json"
    p.write_text(text[: len(text) // 2])
    with pytest.raises(PlanFormatError, match="truncated or corrupt"):
        load_program(p)
