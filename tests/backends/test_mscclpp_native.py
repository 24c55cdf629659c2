"""The compiled MSCCL++ check (``a2acc._mscclpp.check``) agrees with the pure-Python reference.

- it accepts what a2acc lowers, on every layout, protocol and output mode, and the reference accepts the same
  texts with the same summary;
- it never accepts a text the reference rejects: hypothesis-generated mutations of lowered plans (operations
  dropped, duplicated, swapped, retargeted; offsets, sizes, ids, tables, message sizes changed), and one case
  per defect class the interpreter reports (deadlock, race, cross-launch hazard, wrong output, unbalanced
  counters, missing nops, load errors);
- a 16x8 packed plan is accepted (its clocks are per rank's neighbourhood, not over all thread blocks).
"""

from __future__ import annotations

import copy
import json
from functools import cache

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from a2acc.backends.mscclpp import check as mcheck
from a2acc.backends.mscclpp.reader import read_plan
from a2acc.backends.mscclpp.target import Options
from a2acc.backends.target import CheckReport
from a2acc.ir.layout import Manifest
from a2acc.ir.quantize import UnitPolicy
from a2acc.model.topology import load_topology
from a2acc.model.traffic import generate
from a2acc.native import mscclpp as native
from a2acc.pipeline import Request, compile

pytestmark = pytest.mark.skipif(native is None, reason="a2acc._mscclpp was not built (no C compiler)")

BASES = [
    ("dgx-h100", 1, "fast", {}),
    ("dgx-h100", 1, "direct", {"protocol": "LL"}),
    ("mi300x", 1, "spreadout", {"tb_layout": "packed"}),
    ("dgx-h100", 2, "fast", {"tb_layout": "combined"}),
    ("dgx-h100", 2, "hierarchical", {"output_writes": "direct", "deps": "all"}),
    ("ndv2", 2, "fast", {"tb_layout": "packed"}),
]


@cache
def _lowered(i: int) -> tuple[str, Manifest]:
    preset, servers, algorithm, opts = BASES[i]
    topo = load_topology(preset, servers)
    m = generate("zipf", topo.nranks, 1 << 20, 3, skew=0.8)
    res = compile(
        Request(
            topo, m, algorithm, target="mscclpp-json", target_options=opts, units=UnitPolicy(max_padding=0.3)
        )
    )
    ((_name, text),) = res.lowered.files.items()
    return text, res.lowered.manifest


def _reference(text: str, manifest: Manifest | None) -> CheckReport:
    rr = read_plan(text, "plan.json")
    if rr.plan is None or not rr.plan.gpus:
        return CheckReport(False, tuple(rr.errors) or ("unreadable",), tuple(rr.notes))
    return mcheck.check_plan_obj(rr.plan, "plan.json", manifest, Options(), rr.errors, rr.notes)


def _native(text: str, manifest: Manifest | None) -> CheckReport | str:
    return mcheck.fast_check(text, "plan.json", manifest, Options())


@pytest.mark.parametrize("i", range(len(BASES)))
def test_accepts_what_a2acc_lowers_with_the_reference_summary(i):
    text, man = _lowered(i)
    fast = _native(text, man)
    assert isinstance(fast, CheckReport), fast
    ref = _reference(text, man)
    assert ref.ok and not ref.notes
    assert fast.summary == ref.summary
    # without the manifest the postcondition is the standard all-to-all, which an all-to-all-v layout is not
    assert isinstance(_native(text, None), CheckReport) == _reference(text, None).ok


# ---------------------------------------------------------------------- mutations
_MUT = st.tuples(
    st.sampled_from(["drop", "dup", "swap", "nop", "field", "field", "rename", "gpu", "table", "top"]),
    st.integers(0, 10**6),
    st.integers(0, 10**6),
    st.integers(-3, 3),
)
_NAMES = ["nop", "signal", "wait", "put", "copy", "sem_acquire", "sem_release"]


def _ops(doc: dict) -> list[tuple[list, int]]:
    return [(tb["ops"], i) for g in doc["gpus"] for tb in g["threadblocks"] for i in range(len(tb["ops"]))]


def _mutate(doc: dict, muts: list[tuple[str, int, int, int]]) -> dict:
    doc = copy.deepcopy(doc)
    for kind, a, b, d in muts:
        ops = _ops(doc)
        if not ops:
            break
        lst, i = ops[a % len(ops)]
        op = lst[i]
        if kind == "drop":
            del lst[i]
        elif kind == "dup":
            lst.insert(i, copy.deepcopy(op))
        elif kind == "swap" and i + 1 < len(lst):
            lst[i], lst[i + 1] = lst[i + 1], lst[i]
        elif kind == "nop":
            if op["name"] == "nop":
                del lst[i]
            else:
                lst.insert(i, {"name": "nop"})
        elif kind == "rename":
            op["name"] = _NAMES[b % len(_NAMES)]
        elif kind == "field":
            keys = [k for k in ("src_buff", "dst_buff", "channel_ids", "semaphore_ids") if k in op]
            if not keys:
                continue
            k = keys[b % len(keys)]
            if k in ("channel_ids", "semaphore_ids"):
                j = b % len(op[k])
                op[k][j] = max(0, op[k][j] + (d or 1))
            else:
                ref = op[k][b % len(op[k])]
                f = ["index", "size", "type", "buffer_id"][b % 4]
                if f == "type" and "type" in ref:
                    ref["type"] = "ios"[(("ios".index(ref["type"])) + 1 + b) % 3]
                elif f in ref:
                    ref[f] = max(0, ref[f] + (d or 1))
        elif kind == "gpu":
            g = doc["gpus"][a % len(doc["gpus"])]
            f = [
                "input_chunks",
                "output_chunks",
                "scratch_chunks",
                "connected_to",
                "remote_buffers",
                "semaphores",
            ][b % 6]
            if f == "connected_to" and g["channels"] and g["channels"][0]["connected_to"]:
                lstc = g["channels"][b % len(g["channels"])]["connected_to"]
                j = b % len(lstc)
                lstc[j] = (lstc[j] + (d or 1)) % len(doc["gpus"])
            elif f == "remote_buffers" and g["remote_buffers"]:
                rb = g["remote_buffers"][b % len(g["remote_buffers"])]
                rb["type"] = "ios"[("ios".index(rb["type"]) + 1) % 3]
            elif f == "semaphores" and g["semaphores"]:
                g["semaphores"][b % len(g["semaphores"])]["init_value"] += abs(d) or 1
            elif isinstance(g.get(f), int):
                g[f] = max(0, g[f] + (d or 1))
        elif kind == "table":
            tbs = [tb for g in doc["gpus"] for tb in g["threadblocks"] if tb["channels"]]
            if tbs:
                tb = tbs[b % len(tbs)]
                ids = tb["channels"][0]["channel_ids"]
                ids[b % len(ids)] = max(0, ids[b % len(ids)] + (d or 1))
        elif kind == "top":
            f = ["min_message_size", "max_message_size", "buffer_alignment"][b % 3]
            doc[f] = max(0, doc[f] + 16 * (d or 1))
    return doc


@settings(
    max_examples=90, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(st.integers(0, len(BASES) - 1), st.lists(_MUT, min_size=1, max_size=3), st.booleans())
def test_never_accepts_what_the_reference_rejects(i, muts, with_manifest):
    text, man = _lowered(i)
    mutated = json.dumps(_mutate(json.loads(text), muts))
    manifest = man if with_manifest else None
    fast = _native(mutated, manifest)
    if isinstance(fast, CheckReport):
        ref = _reference(mutated, manifest)
        assert ref.ok and not ref.notes, (muts, ref.errors[:3], ref.notes[:2])
        assert fast.summary == ref.summary


# ---------------------------------------------------------------------- one case per defect class
def _doc(i: int = 0) -> tuple[dict, Manifest]:
    text, man = _lowered(i)
    return json.loads(text), man


def _first(doc: dict, pred) -> tuple[list, int]:
    for lst, i in _ops(doc):
        if pred(lst[i]):
            return lst, i
    raise AssertionError("no such operation")


def _defect_deadlock(doc):  # a wait whose signal never comes
    lst, i = _first(doc, lambda o: o["name"] == "wait")
    lst.insert(i, copy.deepcopy(lst[i]))


def _defect_race(doc):  # the copy of staged data no longer waits for its data signal
    lst, i = _first(doc, lambda o: o["name"] == "copy" and o["src_buff"][0]["type"] == "s")
    j = max(k for k in range(i) if lst[k]["name"] == "wait")
    del lst[j]


def _defect_cross_launch(doc):  # every ready handshake removed: a peer may overwrite scratch still read
    for g in doc["gpus"]:
        for tb in g["threadblocks"]:
            if tb["ops"] and tb["ops"][0]["name"] == "signal":
                del tb["ops"][0]
            while tb["ops"] and tb["ops"][0]["name"] in ("wait", "nop"):
                del tb["ops"][0]


def _defect_wrong_output(doc):
    lst, i = _first(doc, lambda o: o["name"] == "copy")
    lst[i]["dst_buff"][0]["index"] += 1 if lst[i]["dst_buff"][0]["index"] == 0 else -1


def _defect_unbalanced(doc):  # one signal too many
    lst, i = _first(doc, lambda o: o["name"] == "signal")
    lst.insert(i + 1, copy.deepcopy(lst[i]))


def _defect_missing_nop(doc):
    lst, i = _first(doc, lambda o: o["name"] == "nop")
    del lst[i]


def _defect_load(doc):
    doc["gpus"][0]["input_chunks"] += 1


DEFECTS = [
    _defect_deadlock,
    _defect_race,
    _defect_cross_launch,
    _defect_wrong_output,
    _defect_unbalanced,
    _defect_missing_nop,
    _defect_load,
]


@pytest.mark.parametrize("defect", DEFECTS, ids=lambda f: f.__name__[8:])
def test_every_defect_class_is_left_to_the_reference(defect):
    doc, man = _doc(0)
    defect(doc)
    text = json.dumps(doc)
    assert not _reference(text, man).ok
    assert isinstance(_native(text, man), str)


def test_a_16x8_packed_plan_is_accepted():
    topo = load_topology("dgx-h100", 16)
    m = generate("zipf", topo.nranks, 256 << 20, 1, skew=0.8)
    res = compile(
        Request(topo, m, "fast", target="mscclpp-json", target_options={"tb_layout": "packed"},
                units=UnitPolicy(max_padding="auto"))
    )  # fmt: skip
    assert res.check.ok and "128 GPUs" in res.check.summary
    ((_n, text),) = res.lowered.files.items()
    counts = np.ascontiguousarray(res.lowered.manifest.chunk_layout.counts)
    got = native.check(text, counts, res.lowered.manifest.chunk_bytes, 2, 132)
    assert isinstance(got, tuple) and len(got) == 7
    # one thread block fewer than the plan's busiest rank has: that rank, before anything is executed
    most = got[3]
    crowded = native.check(text, counts, res.lowered.manifest.chunk_bytes, 2, most - 1)
    assert isinstance(crowded, tuple) and len(crowded) == 2 and crowded[1] == most


# ---------------------------------------------------------------------- the compiled lowering
from a2acc.backends.mscclpp.emit_json import to_json  # noqa: E402
from a2acc.backends.mscclpp.lower import LowerOptions, lower, lower_text  # noqa: E402
from a2acc.errors import LoweringError  # noqa: E402
from a2acc.native import mscclpp_lower  # noqa: E402
from tests.backends.test_mscclpp import programs  # noqa: E402

needs_lower = pytest.mark.skipif(mscclpp_lower is None, reason="a2acc._mscclpp_lower was not built")


def _both(prog, opts):
    """(text or refusal) of the reference and of the compiled lowering."""
    try:
        ref = to_json(lower(prog, opts)[0])
    except LoweringError as exc:
        ref = f"refused: {exc}"
    try:
        got = lower_text(prog, opts)
        fast = "undecided" if got is None else got.text
    except LoweringError as exc:
        fast = f"refused: {exc}"
    return ref, fast


_OPTS = st.fixed_dictionaries(
    {
        "tb_layout": st.sampled_from(["split", "combined", "packed"]),
        "output_writes": st.sampled_from(["scratch", "direct"]),
        "deps": st.sampled_from(["data", "all"]),
        "max_threadblocks": st.sampled_from([2, 3, 5, 108]),
    }
)


@needs_lower
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(), _OPTS, st.booleans())
def test_compiled_lowering_is_byte_identical_on_random_programs(prog, kw, ll):
    opts = LowerOptions(name="a2acc_h", protocol="LL" if ll else "Simple", **kw)
    ref, fast = _both(prog, opts)
    assert fast == ref


@needs_lower
@pytest.mark.parametrize(
    ("preset", "servers", "algorithm"),
    [
        ("dgx-h100", 2, "fast"),
        ("mi300x", 2, "hierarchical"),
        ("ndv2", 2, "spreadout"),
        ("dgx-h100", 4, "fast"),
    ],
)
@pytest.mark.parametrize("layout", ["split", "combined", "packed"])
def test_compiled_lowering_is_byte_identical_on_presets(preset, servers, algorithm, layout):
    topo = load_topology(preset, servers)
    m = generate("zipf", topo.nranks, 16 << 20, 2, skew=0.8)
    prog = compile(Request(topo, m, algorithm, units=UnitPolicy(max_padding=0.05))).program
    for mtb in (108, 12):  # 12: the packed layout repacks and repairs, the others refuse
        ref, fast = _both(prog, LowerOptions(name="a2acc_p", tb_layout=layout, max_threadblocks=mtb))
        assert fast == ref
