from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from a2acc import plan, simulate
from a2acc.cli import main
from a2acc.errors import InputError, PlanFormatError
from a2acc.ir import MachineMap, load_program, program_from_json
from a2acc.ir.verify import verify_program
from a2acc.model.topology import load_topology, parse_topology
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


def _as_v1(text: str) -> str:
    """The same plan in the version-1 form: no topology/machine, a twelfth op column 'channel' (-1)."""
    d = json.loads(text)
    d["version"] = 1
    d.pop("topology")
    d.pop("machine")
    d["op_fields"] = [*d["op_fields"], "channel"]
    d["ops"] = [[*row, -1] for row in d["ops"]]
    return json.dumps(d)


def test_version_1_plans_still_read_and_verify():
    t = load_topology("dgx-h100", servers=2)
    prog = plan(t, generate("zipf", t.nranks, 1 << 22, 3), "fast")
    old = program_from_json(_as_v1(prog.to_json()), "old.json")
    assert old.ops == prog.ops and old.machine is None and old.topology == ""
    assert verify_program(old).ok


def test_v2_records_machine_map_and_topology_fingerprint():
    t = load_topology("dgx-h100", servers=2)
    prog = plan(t, generate("zipf", t.nranks, 1 << 22, 3), "spreadout")
    back = program_from_json(prog.to_json())
    assert back.machine == MachineMap.of(t) and back.machine.node[8] == 1 and back.machine.local[9] == 1
    assert back.topology == t.fingerprint
    assert {op.link for op in back.ops} == {"intra", "inter"}  # zipf has no self traffic
    other = load_topology("dgx-a100", servers=2)
    with pytest.raises(InputError, match="built for another topology"):
        simulate(back, other)


def test_direct_connect_edges_are_labelled_direct():
    t = parse_topology(
        {
            "version": 1,
            "name": "ring4",
            "direct": {"kind": "torus", "dims": [4], "bandwidth": 10, "latency": 1},
        },
        "ring4",
    )
    prog = plan(t, generate("uniform", t.nranks, 1 << 16, 1), "direct")
    assert {op.link for op in prog.ops if op.src_rank != op.dst_rank} == {"direct"}


def test_topology_fingerprint_is_versioned_and_its_definition_pinned():
    """The fingerprint carries its definition (``v2-``); the digests are pinned here so a change to what it
    hashes fails this test until FINGERPRINT_VERSION is bumped (and the earlier definition kept for
    recognition). The definition-1 digest is the one an a2acc of that definition wrote for dgx-h100 x4."""
    from a2acc.model.topology import FINGERPRINT_VERSION

    t = load_topology("dgx-h100")
    assert FINGERPRINT_VERSION == 2
    assert t.fingerprint == "v2-6fabc6fa866ff3a1" and t._hash_v1() == "3a58844be7ab03c1"
    torus = parse_topology(
        {"version": 1, "direct": {"kind": "torus", "dims": [4, 4], "bandwidth": 25, "latency": 1.0}}
    )
    assert torus._hash_v1() == "a363d6ad01b7a68c"
    assert t.gpu is not None and load_topology("dgx-a100").fingerprint != t.fingerprint
    # the GPU is not part of it: plans do not depend on it
    assert dataclasses.replace(t, gpu=None).fingerprint == t.fingerprint
    # a Program built in code with no fingerprint at all is answered, not a ValueError
    assert "no topology fingerprint" in (t.plan_mismatch("xyz") or "")


@pytest.mark.parametrize(
    ("recorded", "fragment"),
    [
        ("v1", "made by an earlier a2acc"),  # definition 1, untagged as it was written
        ("v2", None),  # the current definition, untagged (written before the tag): the same topology
        ("0123456789abcdef", "made by an earlier a2acc for another topology"),
        ("v1-0123456789abcdef", "made by an earlier a2acc (topology fingerprint definition v1"),
        ("v3-0123456789abcdef", "made by a later a2acc"),
        ("v2-0123456789abcdef", "built for another topology"),
    ],
)
def test_a_plan_of_an_earlier_fingerprint_definition_says_plan_again(tmp_path, capsys, recorded, fragment):
    """A plan JSON of the same format version whose topology fingerprint was written under another definition
    is told apart from a plan for another topology: 'made by an earlier a2acc: plan again'."""
    t = load_topology("dgx-h100", servers=2)
    prog = plan(t, generate("zipf", t.nranks, 1 << 22, 3), "direct")
    fp = {"v1": t._hash_v1(), "v2": t._hash_v2()}.get(recorded, recorded)
    text = prog.to_json().replace(f'"topology":"{t.fingerprint}"', f'"topology":"{fp}"', 1)
    assert f'"topology":"{fp}"' in text
    path = tmp_path / "old.json"
    path.write_text(text)
    rc = main(["simulate", str(path), "-t", "dgx-h100", "-n", "2"])
    err = capsys.readouterr().err
    if fragment is None:
        assert rc == 0, err
        return
    assert rc == 2 and fragment in err and len(err.strip().splitlines()) == 1, err
    if "earlier" in fragment or "later" in fragment:
        assert "plan again" in err


@pytest.mark.parametrize(
    "bad", ["v2-0123", "x2-0123456789abcdef", "V2-0123456789ABCDEF", "v0-0123456789abcdef"]
)
def test_a_malformed_fingerprint_is_refused_when_read(bad):
    t = load_topology("dgx-h100", servers=2)
    text = plan(t, generate("zipf", t.nranks, 1 << 22, 3), "direct").to_json()
    with pytest.raises(PlanFormatError, match="topology: value .* is invalid; a topology fingerprint"):
        program_from_json(text.replace(f'"topology":"{t.fingerprint}"', f'"topology":"{bad}"', 1), "bad.json")
