"""Every planner's verified Program lowers to XML that the interpreter accepts, or is refused with a limit
named: random topologies, matrices, dialects and layouts, including layouts that spill past 64 steps."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import a2acc
from a2acc.backends.msccl_xml.target import check_xml_text
from a2acc.backends.msccl_xml.writer import LowerOptions, lower, to_xml
from a2acc.errors import LoweringError
from a2acc.ir.quantize import unit_for_padding
from a2acc.model.topology import load_topology
from a2acc.model.traffic import generate
from a2acc.planners import available

LIMIT_WORDS = ("allows", "limit", "int16", "channels", "steps")


def _lower_and_check(prog, dialect: str, **kw) -> None:
    try:
        algo = lower(prog, LowerOptions(dialect=dialect, **kw))
    except LoweringError as exc:
        message = str(exc)
    else:
        message = ""
    if message:  # refused: the message must name the limit
        assert any(w in message for w in LIMIT_WORDS), message
        return
    chk = check_xml_text(to_xml(algo), "x.xml", dialect=dialect, layout=prog.layout)
    assert chk.ok, chk.errors[:5]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    preset=st.sampled_from(["dgx-h100", "mi300x", "ndv2", "dgx-a100"]),
    servers=st.integers(1, 3),
    kind=st.sampled_from(["zipf", "uniform", "balanced", "moe"]),
    seed=st.integers(0, 10**6),
    algorithm=st.sampled_from([p.name for p in available() if p.name != "mcf"]),
    dialect=st.sampled_from(["nccl", "rccl"]),
    padding=st.sampled_from([0.01, 0.05, 0.3]),
    max_cnt=st.sampled_from([71, 8, 1]),
)
def test_random_programs_lower_to_correct_xml(
    preset, servers, kind, seed, algorithm, dialect, padding, max_cnt
):
    topo = load_topology(preset, servers)
    m = generate(kind, topo.nranks, 48 << 20, seed)
    prog = a2acc.plan(topo, m, algorithm, unit=unit_for_padding(m, padding))
    _lower_and_check(prog, dialect, max_cnt=max_cnt)


def test_spill_regression_hierarchical_32_ranks():
    """Pieces of one op that spill onto another channel's tb must wait there for the op's dependencies
    (this case produced a relay send from scratch not ordered after the receive into it)."""
    topo = load_topology("dgx-h100")
    m = generate("zipf", topo.nranks, 64 << 20, 2)
    res = a2acc.compile(topo, m, "hierarchical", backend="msccl-xml")
    assert res.check is not None and res.check.ok


@pytest.mark.parametrize("dialect", ["nccl", "rccl"])
def test_past_the_step_limit_spills_or_refuses(dialect):
    topo = load_topology("dgx-h100", 2)
    m = generate("zipf", topo.nranks, 64 << 20, 3)
    prog = a2acc.plan(topo, m, "fast", unit=unit_for_padding(m, 0.01))
    _lower_and_check(prog, dialect, max_cnt=1)
    _lower_and_check(prog, dialect, max_cnt=1, max_channels=1)
