from __future__ import annotations

import json

import pytest
import yaml

from a2acc.errors import TopologyError
from a2acc.model.topology import PRESETS, load_topology, parse_topology

# (preset, n, m, B_intra per GPU, B_inter per GPU) from the sources cited in each preset file
EXPECTED = {
    "dgx-h100": (4, 8, 450.0, 50.0),
    "dgx-h200-fast": (4, 8, 450.0, 50.0),
    "dgx-a100": (4, 8, 300.0, 25.0),
    "mi300x": (4, 8, 7 * 64.0, 50.0),
    "mi300x-100g": (4, 8, 7 * 64.0, 12.5),
    "ndv2": (2, 8, 6 * 25.0, 12.5 / 8),
    "dgx2": (2, 16, 125.0, 12.5 * 8 / 16),
    "alps": (4, 4, 3 * 150.0, 25.0),
    "nvl72": (1, 72, 900.0, 50.0),
}


@pytest.mark.parametrize("name", PRESETS)
def test_every_preset_loads_with_cited_numbers(name):
    t = load_topology(name)
    n, m, bi, bo = EXPECTED[name]
    s = t.summary()
    assert (s.n, s.m) == (n, m)
    assert s.b_intra == pytest.approx(bi)
    assert s.b_inter == pytest.approx(bo)
    assert t.nranks == n * m
    # every GPU reaches every other GPU through the graph
    for dst in range(1, min(t.nranks, 20)):
        links, alpha = t.route(0, dst)
        assert links and alpha > 0


def test_servers_scales_a_preset():
    t = load_topology("dgx-h100", servers=16)
    assert t.nranks == 128 and t.summary().n == 16
    with pytest.raises(TopologyError, match="--servers"):
        load_topology("dgx-h100", servers=0)


def test_routes_follow_fabric():
    t = load_topology("dgx-h100", servers=2)
    names = t.link_names
    intra, _ = t.route(0, 3)
    assert [names[i] for i in intra] == [("g0", "sw0"), ("sw0", "g3")]
    cross, alpha = t.route(1, 9)
    assert [names[i] for i in cross] == [
        ("g1", "nic0.1"),
        ("nic0.1", "rail1"),
        ("rail1", "nic1.1"),
        ("nic1.1", "g9"),
    ]
    assert alpha == pytest.approx(0.7e-6 * 0 + 2.6e-6)
    cube = load_topology("ndv2")
    links, _ = cube.route(0, 6)  # not adjacent in the DGX-1 cube-mesh: two NVLink hops
    assert len(links) == 2
    assert cube.route(0, 1)[0] and len(cube.route(0, 1)[0]) == 1


BASE = {
    "version": 1,
    "servers": 2,
    "gpus_per_server": 4,
    "intra": {"fabric": "switch", "bandwidth": 100, "latency": 1},
    "inter": {"nics_per_server": 4, "bandwidth": "100Gbps", "latency": "2us"},
}


def _with(path: str, value):
    data = json.loads(json.dumps(BASE))
    cur = data
    keys = path.split(".")
    for k in keys[:-1]:
        cur = cur[k]
    if value is KeyError:
        del cur[keys[-1]]
    else:
        cur[keys[-1]] = value
    return data


def test_unit_strings_are_parsed():
    t = parse_topology(BASE, "x.yaml")
    assert t.inter is not None and t.inter.bandwidth == pytest.approx(12.5)
    assert t.inter.latency == pytest.approx(2.0)


@pytest.mark.parametrize(
    ("path", "value", "fragment"),
    [
        ("intra.bandwidth", KeyError, "intra.bandwidth"),
        ("intra.bandwidth", -5, "intra.bandwidth: value -5"),
        ("intra.bandwidth", 0, "must be a finite number > 0"),
        ("inter.bandwidth", "fast", "inter.bandwidth: value 'fast'"),
        ("intra.fabric", "torus3d", "allowed fabrics"),
        ("version", 2, "version: value 2"),
        ("gpus_per_server", 0, "gpus_per_server"),
        ("inter.wiring", "fat_tree", "inter.wiring"),
        ("colour", "blue", "unknown field"),
    ],
)
def test_bad_topologies_name_field_and_value(path, value, fragment):
    with pytest.raises(TopologyError) as exc:
        parse_topology(_with(path, value), "bad.yaml")
    msg = str(exc.value)
    assert msg.startswith("bad.yaml: ")
    assert fragment in msg


def test_link_to_missing_gpu_is_rejected():
    data = _with("intra", {"fabric": "links", "bandwidth": 50, "links": [[0, 1], [1, 2], [2, 3], [3, 9]]})
    with pytest.raises(TopologyError, match=r"intra.links\[3\].*0\.\.3"):
        parse_topology(data, "bad.yaml")


def test_explicit_links_and_disconnected_fabric():
    ok = _with("intra", {"fabric": "links", "bandwidth": 50, "links": [[0, 1], [1, 2], [2, 3, 25]]})
    t = parse_topology(ok, "ok.yaml")
    assert len(t.route(0, 3)[0]) == 3
    bad = _with("intra", {"fabric": "links", "bandwidth": 50, "links": [[0, 1], [2, 3]]})
    with pytest.raises(TopologyError, match="disconnected"):
        parse_topology(bad, "bad.yaml")


def test_files_yaml_and_json(tmp_path):
    y = tmp_path / "t.yaml"
    y.write_text(yaml.safe_dump(BASE))
    j = tmp_path / "t.json"
    j.write_text(json.dumps(BASE))
    assert load_topology(str(y)).summary() == load_topology(str(j)).summary()
    broken = tmp_path / "broken.yaml"
    broken.write_text("version: 1\nservers: [unclosed\n")
    with pytest.raises(TopologyError, match="broken.yaml"):
        load_topology(str(broken))
    with pytest.raises(TopologyError, match="not a file and not a preset"):
        load_topology(str(tmp_path / "missing.yaml"))


@pytest.mark.parametrize(
    ("direct", "nodes", "edges"),
    [
        ({"kind": "torus", "dims": [4, 4], "bandwidth": 25}, 16, 64),
        ({"kind": "torus", "dims": [2, 3], "bandwidth": 25}, 6, 18),
        ({"kind": "hypercube", "dimension": 3, "bandwidth": 25}, 8, 24),
        ({"kind": "genkautz", "n": 12, "degree": 3, "bandwidth": 25}, 12, None),
        ({"kind": "edges", "nodes": 3, "edges": [[0, 1], [1, 2, 10]], "bandwidth": 25}, 3, 4),
    ],
)
def test_direct_connect_graphs(direct, nodes, edges):
    t = parse_topology({"version": 1, "direct": direct}, "d.yaml")
    assert t.nranks == nodes and not t.is_tiered
    if edges is not None:
        assert len(t.link_names) == edges
    for dst in range(1, nodes):
        assert t.route(0, dst)[0]


def test_genkautz_is_imase_itoh():
    t = parse_topology(
        {"version": 1, "direct": {"kind": "genkautz", "n": 10, "degree": 2, "bandwidth": 1}}, "k"
    )
    assert t.direct is not None
    for u, v, _ in t.direct.edges:
        assert v in {(-u * 2 - q) % 10 for q in (1, 2)}
