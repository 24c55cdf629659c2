"""The packed all-to-all call selects the lowered file under every executor's selection rule, for every element
type the manifest claims; a size_range the packing cannot honour is refused."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from a2acc.errors import InputError, LoweringError
from a2acc.ir.quantize import DTYPE_BYTES, UnitPolicy, quantize
from a2acc.model.topology import load_topology
from a2acc.model.traffic import generate
from a2acc.pipeline import Request, compile

PRESETS = [("dgx-h100", 1), ("dgx-h100", 2), ("mi300x", 2), ("ndv2", 2), ("dgx-a100", 4), ("nvl72", None)]


def _attrs(xml: str) -> dict[str, int]:
    head = xml[xml.index("<algo") : xml.index(">", xml.index("<algo"))]
    return {k: int(v) for k, v in re.findall(r'(\w+)="(-?\d+)"', head)}


def _assert_selected(res) -> None:
    man = res.lowered.manifest
    ((_name, text),) = res.lowered.files.items()
    a = _attrs(text)
    c, n, b = a["nchunksperloop"], a["ngpus"], man.buffer_bytes
    assert c == man.buffer_chunks and n == man.ngpus and man.dtypes
    for d in man.dtypes:
        s = DTYPE_BYTES[d]
        assert b % (n * s) == 0
        count = b // (n * s)  # ncclAllToAll's count: elements per peer
        assert count == man.count_per_peer(s) > 0
        assert count % c == 0  # RCCL before 2024-10, Azure msccl-scheduler
        assert (count * n) % c == 0  # msccl-executor-nccl, RCCL since 2024-10 (sizeMultiplier = ngpus)
        assert a["minBytes"] <= count * s * n <= (a["maxBytes"] or 2**63)
        assert (
            count * n * s // c == man.chunk_bytes
        )  # the executor's chunk is the manifest's: the packing holds


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(PRESETS),
    st.sampled_from(["direct", "fast", "spreadout", "hierarchical"]),
    st.sampled_from(["zipf", "uniform", "balanced"]),
    st.integers(0, 10_000),
    st.sampled_from([1 << 18, 8 << 20, 256 << 20]),
    st.sampled_from(["nccl", "rccl"]),
)
def test_every_claimed_dtype_selects_the_xml_under_every_rule(preset, planner, kind, seed, size, dialect):
    topo = load_topology(*preset)
    m = (
        generate(kind, topo.nranks, size, seed, skew=0.8)
        if kind == "zipf"
        else generate(kind, topo.nranks, size, seed)
    )
    try:
        res = compile(
            Request(topo, m, planner, target="msccl-xml", target_options={"dialect": dialect},
                    units=UnitPolicy(max_padding="auto"))
        )  # fmt: skip
    except LoweringError:
        return  # a layout the executors cannot hold (e.g. RCCL's 64 thread blocks on 72 GPUs): nothing written
    assert res.lowered.manifest.dtypes == tuple(DTYPE_BYTES)  # compile chose a unit that serves every type
    _assert_selected(res)


@given(st.integers(1, 64), st.sampled_from(["all", "bfloat16,float32", "uint8", "float64"]))
@settings(max_examples=30, deadline=None)
def test_a_fixed_unit_claims_only_the_types_it_serves(mult, dtypes):
    """The JIT's fixed units (multiples of 16): the manifest lists the types whose call selects the file, and a
    unit that serves none of the requested ones is refused, never written."""
    topo = load_topology("dgx-h100", 2)
    m = generate("zipf", 16, 1 << 16, 3, skew=0.8)
    unit = 16 * mult
    req = Request(topo, m, "fast", target="msccl-xml", target_options={"dtypes": dtypes},
                  counts=quantize(m, unit), units=UnitPolicy(unit=unit))  # fmt: skip
    wanted = list(DTYPE_BYTES) if dtypes == "all" else dtypes.split(",")
    served = [d for d in wanted if unit % (16 * DTYPE_BYTES[d]) == 0]
    if not served:
        with pytest.raises(LoweringError, match="would select the XML"):
            compile(req)
        return
    res = compile(req)
    assert list(res.lowered.manifest.dtypes) == served
    _assert_selected(res)


@pytest.mark.parametrize("target", ["msccl-xml", "mscclpp-json"])
def test_a_size_range_the_packing_cannot_honour_is_an_error(target):
    topo = load_topology("dgx-h100", 1)
    m = generate("zipf", 8, 8 << 20, 1, skew=0.8)
    req = Request(topo, m, "fast", target=target, units=UnitPolicy(max_padding="auto"))
    b = compile(req).lowered.manifest.buffer_bytes
    with pytest.raises(InputError, match="packing holds for"):
        compile(Request(topo, m, "fast", target=target, target_options={"size_range": "1M:1G"},
                        units=UnitPolicy(max_padding="auto")))  # fmt: skip
    ok = compile(Request(topo, m, "fast", target=target, target_options={"size_range": f"{b - 1}:{b + 1}"},
                         units=UnitPolicy(max_padding="auto")))  # fmt: skip
    assert ok.lowered.manifest.buffer_bytes == b


def test_manifest_round_trips_the_claimed_types(tmp_path):
    from a2acc.ir.layout import manifest_from_json

    topo = load_topology("mi300x", 1)
    m = generate("uniform", 8, 1 << 20, 4)
    res = compile(Request(topo, m, "fast", target="msccl-xml", target_options={"dtypes": "bfloat16,float32"},
                          units=UnitPolicy(max_padding="auto")))  # fmt: skip
    man = res.lowered.manifest
    back = manifest_from_json(man.to_json())
    assert back.dtypes == ("bfloat16", "float32") and back.selection == man.selection
    assert np.array_equal(back.chunk_layout.counts, man.chunk_layout.counts)
