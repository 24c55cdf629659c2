"""Bad topology files and units: `a2acc topo show` and every command that loads a topology."""

from __future__ import annotations

import json

import pytest

from tests.cli.bad_inputs.common import one_clear_line, run


@pytest.mark.parametrize(
    ("doc", "fragment"),
    [
        ({"direct": {"kind": "hypercube", "dimension": 40, "bandwidth": 10}}, "direct.dimension"),
        ({"servers": 2, "direct": {"kind": "torus", "dims": [4, 4], "bandwidth": 10}}, "servers"),
        ({"direct": {"kind": "torus", "dims": [1000, 1000], "bandwidth": 10}}, "direct.dims"),
        ({"direct": {"kind": "genkautz", "n": 10**6, "degree": 4, "bandwidth": 10}}, "direct.n"),
        (
            {"servers": 1, "gpus_per_server": 10**6, "intra": {"fabric": "full_mesh", "bandwidth": 10}},
            "16384 GPUs",
        ),
        (
            {"servers": 1, "gpus_per_server": 4096, "intra": {"fabric": "full_mesh", "bandwidth": 10}},
            "gpus_per_server",
        ),
        (
            {
                "servers": 2,
                "gpus_per_server": 4,
                "intra": {"fabric": "switch", "bandwidth": 100},
                "inter": {"nics_per_server": 4, "bandwidth": "400gbps"},
            },
            "Gbps",
        ),
        (
            {
                "servers": 2,
                "gpus_per_server": 8,
                "intra": {"fabric": "switch", "bandwidth": 100},
                "inter": {"nics_per_server": 1000000, "bandwidth": 50},
            },
            "inter.nics_per_server",
        ),
    ],
)
def test_bad_topologies_fail_fast(tmp_path, capsys, doc, fragment):
    path = tmp_path / "t.yaml"
    path.write_text(json.dumps({"version": 1, **doc}))
    rc, err, dt = run(capsys, ["topo", "show", str(path)])
    assert rc == 2 and dt < 1.0
    one_clear_line(err)
    assert fragment in err and "t.yaml" in err


# nine anchors in one value, each level nine aliases of the one before
LAUGHS = (
    "[&a [x, x, x, x, x, x, x, x, x], "
    + ", ".join(f"&{c} [{', '.join(['*' + p] * 9)}]" for p, c in zip("abcdefgh", "bcdefghi"))
    + "]"
)


@pytest.mark.parametrize("where", ["extra", "name"])
def test_a_yaml_alias_bomb_is_one_short_line(tmp_path, capsys, where):
    """Nine levels of nine aliases expand to 387 M strings: naming the value must not expand it (its full repr,
    shortened afterwards, took gigabytes), and a list is no topology name."""
    path = tmp_path / "t.yaml"
    body = "version: 1\nservers: 1\ngpus_per_server: 4\nintra: {fabric: switch, bandwidth: 5}\n"
    path.write_text(body + ("bogus: " if where == "extra" else "name: ") + LAUGHS + "\n")
    rc, err, dt = run(capsys, ["topo", "show", str(path)])
    assert rc == 2 and dt < 5.0 and len(err) < 600, err[:600]
    one_clear_line(err)
    assert ("bogus: value" if where == "extra" else "name: value") in err


def test_yaml_syntax_error_is_one_line(tmp_path, capsys):
    path = tmp_path / "t.yaml"
    path.write_text("version: 1\nservers: [1, 2\ngpus_per_server: 8\n")
    rc, err, _dt = run(capsys, ["topo", "show", str(path)])
    assert rc == 2
    one_clear_line(err)
    assert "line" in err


def test_bandwidth_units_mean_what_network_people_mean():
    from a2acc.model.units import parse_bandwidth, parse_size

    assert parse_bandwidth("400Gbps", source="", field="") == 50.0
    assert parse_bandwidth("400Gb/s", source="", field="") == 50.0
    assert parse_bandwidth("50GB/s", source="", field="") == 50.0
    for bad in ("400gbps", "400GBPS", "400 gb/s"):
        with pytest.raises(Exception, match="B = bytes, b = bits"):
            parse_bandwidth(bad, source="t", field="bw")
    assert parse_size("1.5K") == 1536
    with pytest.raises(Exception, match="whole bytes"):
        parse_size("100.7", field="--unit")


def test_a_listed_link_without_a_bandwidth_needs_one_somewhere(tmp_path, capsys):
    """[a, b] takes intra.bandwidth; with none given it silently got a 1 GB/s placeholder."""
    path = tmp_path / "t.yaml"
    doc = {"version": 1, "servers": 1, "gpus_per_server": 4, "memory_bandwidth": 100}
    doc["intra"] = {"fabric": "links", "latency": 1, "links": [[0, 1], [1, 2, 50], [2, 3, 50]]}
    path.write_text(json.dumps(doc))
    rc, err, _dt = run(capsys, ["topo", "show", str(path)])
    assert rc == 2 and "intra.links[0]" in err, err
    one_clear_line(err)
    doc["intra"]["bandwidth"] = 25
    path.write_text(json.dumps(doc))
    rc, err, _dt = run(capsys, ["topo", "show", str(path)])
    assert rc == 0, err


@pytest.mark.parametrize(
    ("name", "text"),
    [
        (
            "dup.yaml",
            "version: 1\nname: t\nservers: 2\ngpus_per_server: 8\nintra: {fabric: switch, bandwidth: 50}\n"
            "intra: {fabric: ring, bandwidth: 1}\ninter: {nics_per_server: 8, bandwidth: 25}\n",
        ),
        (
            "dup.json",
            '{"version": 1, "name": "t", "servers": 2, "servers": 4, "gpus_per_server": 8, '
            '"intra": {"fabric": "switch", "bandwidth": 50}, "inter": {"nics_per_server": 8, "bandwidth": 25}}',
        ),
    ],
)
def test_a_key_given_twice_is_refused(tmp_path, capsys, name, text):
    """YAML and JSON keep the last of a repeated key: a second ``intra:`` silently turned a 50 GB/s switch into
    a 1 GB/s ring."""
    path = tmp_path / name
    path.write_text(text)
    rc, err, _dt = run(capsys, ["topo", "show", str(path)])
    assert rc == 2 and "appears twice" in err
    one_clear_line(err)


def test_a_model_parameter_given_twice_is_refused(tmp_path):
    """A repeated ``alpha_us`` in a ``--model`` file changed a simulated time from 5217 to 9364 us silently."""
    from a2acc.analysis.model import load_model
    from a2acc.errors import InputError

    path = tmp_path / "m.yaml"
    path.write_text("alpha_us: 5\nalpha_us: 9\n")
    with pytest.raises(InputError, match="appears twice"):
        load_model(path)


def test_show_gives_the_bandwidth_of_summed_parallel_links(tmp_path, capsys):
    path = tmp_path / "e.yaml"
    path.write_text(
        "version: 1\nname: e\ndirect: {kind: edges, nodes: 3, edges: [[0, 1, 25], [0, 1, 35], [1, 2], [2, 0]], "
        "bandwidth: 25}\n"
    )
    from a2acc.cli import main

    assert main(["topo", "show", str(path)]) == 0
    assert "6 directed edges of 25 to 60 GB/s" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("version: 1\nservers: " + "9" * 5000 + "\ngpus_per_server: 4\n", "more than 4300 digits"),
        ("version: 1\n? [1, 2]\n: 3\n", "a key must be a name"),
        ("version: true\nservers: 1\ngpus_per_server: 4\n", "version"),
    ],
)
def test_numbers_too_long_keys_that_are_lists_and_a_boolean_version_are_refused(
    tmp_path, capsys, text, fragment
):
    p = tmp_path / "t.yaml"
    p.write_text(text, encoding="utf-8")
    rc, err, _ = run(capsys, ["topo", "show", str(p)])
    assert rc == 2 and fragment in err
    one_clear_line(err)


def test_a_topology_file_past_the_limit_is_refused_before_it_is_read(tmp_path, capsys, monkeypatch):
    import a2acc.model.topology as topology

    monkeypatch.setattr(topology, "MAX_TOPOLOGY_FILE_BYTES", 1000)
    p = tmp_path / "t.yaml"
    p.write_text("# " + "x" * 2000 + "\nversion: 1\n", encoding="utf-8")
    rc, err, _ = run(capsys, ["topo", "show", str(p)])
    assert rc == 2 and "larger than 1000 bytes" in err
    one_clear_line(err)
    rc, err, _ = run(capsys, ["topo", "show", "/dev/zero"])  # no size to check first: the NUL refuses it
    assert rc == 2 and "NUL" in err
