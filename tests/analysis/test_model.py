"""The simulator's model: defaults per transport, the params file, and the topology's transport fields."""

from __future__ import annotations

import math

import pytest

from a2acc.analysis.incast import ROCE_RTO_S, IncastModel
from a2acc.analysis.model import CALIBRATED_ROCE, ModelFileError, default_model, load_model, parse_model
from a2acc.errors import TopologyError
from a2acc.model.topology import PRESETS, load_topology, parse_topology


def test_every_preset_names_its_transport_and_says_where_parameters_come_from():
    for name in PRESETS:
        topo = load_topology(name, 2 if name != "nvl72" else 1)
        assert topo.inter is not None and topo.inter.transport in ("roce", "ib", "nvlink", "slingshot")
        model = default_model(topo)
        if topo.inter.transport == "roce":
            assert model.incast.enabled and "calibrated" in model.source
        else:  # lossless fabrics: no incast loss, and the file says the parameters are defaults
            assert not model.incast.enabled and "defaults" in model.source
            text = (
                load_topology.__globals__["resources"].files("a2acc.topologies") / f"{name}.yaml"
            ).read_text()
            assert "defaults" in text


def test_a_topology_without_transport_is_simulated_ideally():
    data = {
        "version": 1,
        "servers": 2,
        "gpus_per_server": 2,
        "intra": {"fabric": "switch", "bandwidth": 100},
        "inter": {"bandwidth": 10},
    }
    model = default_model(parse_topology(data, "t"))
    assert model.transport == "ideal" and model.alpha_s == 0 and not model.incast.enabled


def test_transport_and_switch_buffer_fields_are_checked():
    base = {"version": 1, "servers": 2, "gpus_per_server": 2, "intra": {"fabric": "switch", "bandwidth": 100}}
    with pytest.raises(TopologyError, match="inter.transport.*allowed: roce, ib, nvlink"):
        parse_topology({**base, "inter": {"bandwidth": 10, "transport": "ethernet"}}, "f.yaml")
    with pytest.raises(TopologyError, match="inter.switch_buffer"):
        parse_topology({**base, "inter": {"bandwidth": 10, "switch_buffer": True}}, "f.yaml")
    topo = parse_topology(
        {**base, "inter": {"bandwidth": 10, "transport": "roce", "switch_buffer": "16MiB"}}, "f"
    )
    assert topo.inter is not None and topo.inter.switch_buffer == 16 * 2**20
    assert default_model(topo).incast.buffer_bytes == 16 * 2**20  # the file's switch overrides the default
    plain = parse_topology({**base, "inter": {"bandwidth": 10}}, "f")
    # plans chosen under a model (auto, syccl's simulated pick, a shared JIT cache) depend on the transport
    assert plain.fingerprint != topo.fingerprint


def test_params_file_round_trip(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(CALIBRATED_ROCE.to_yaml("a header\nline two"), encoding="utf-8")
    back = load_model(path)
    assert back.name == CALIBRATED_ROCE.name and back.transport == "roce"
    for a, b in ((back.alpha_s, CALIBRATED_ROCE.alpha_s), (back.stage_s, CALIBRATED_ROCE.stage_s)):
        assert a == pytest.approx(b)
    assert back.incast.buffer_bytes == pytest.approx(CALIBRATED_ROCE.incast.buffer_bytes, rel=1e-9)
    assert back.incast.rto_s == pytest.approx(ROCE_RTO_S)
    for name in ("inter_efficiency", "intra_efficiency", "fill_bytes", "eager_bytes", "onset_bytes"):
        assert getattr(back, name) == pytest.approx(getattr(CALIBRATED_ROCE, name), rel=1e-6)
    assert back.incast.fanin_loss == pytest.approx(CALIBRATED_ROCE.incast.fanin_loss)
    assert path.read_text().startswith("# a header\n# line two\n")
    tweaked = parse_model({"version": 1, "transport": "roce", "incast": {"fanin_loss": 0.5}}, "p.yaml")
    assert tweaked.incast.fanin_loss == 0.5 and tweaked.fill_bytes == CALIBRATED_ROCE.fill_bytes


@pytest.mark.parametrize(
    ("doc", "field", "allowed"),
    [
        ([1, 2], "", "mapping"),
        ({"version": 2, "transport": "ib"}, "version", "version 1"),
        ({"version": 1, "transport": "tcp"}, "transport", "one of ideal, roce"),
        ({"version": 1, "transport": "ib", "alpha_us": -1}, "alpha_us", "a number in"),
        ({"version": 1, "transport": "ib", "alpha_us": "fast"}, "alpha_us", "a number in"),
        ({"version": 1, "transport": "ib", "speed": 3}, "speed", "unknown field"),
        (
            {"version": 1, "transport": "roce", "incast": {"buffer_bytes": -5}},
            "incast.buffer_bytes",
            "a number",
        ),
        ({"version": 1, "transport": "roce", "incast": {"bufer": 5}}, "incast.bufer", "unknown field"),
        ({"version": 1, "transport": "roce", "incast": {"fanin_loss": 9}}, "incast.fanin_loss", "[0, 4]"),
        ({"version": 1, "transport": "ib", "fill_bytes": -1}, "fill_bytes", "a number in"),
        ({"version": 1, "transport": "roce", "onset_bytes": "2M"}, "onset_bytes", "a number in"),
        ({"version": True, "transport": "ib"}, "version", "version 1"),  # (True == 1 in Python)
        ({"version": 1, "transport": "ib", "source": {"a": 1}}, "source", "a string"),
        ({"version": 1, "transport": "roce", "incast": {"name": [7]}}, "incast.name", "a non-empty string"),
    ],
)
def test_bad_params_files_name_file_field_value_and_what_is_allowed(doc, field, allowed):
    with pytest.raises(ModelFileError) as exc:
        parse_model(doc, "params.yaml")
    msg = str(exc.value)
    assert msg.startswith("params.yaml: ") and field in msg and allowed in msg


def test_unreadable_and_invalid_yaml_params(tmp_path):
    with pytest.raises(ModelFileError, match="cannot read"):
        load_model(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: [1\n", encoding="utf-8")
    with pytest.raises(ModelFileError, match="not valid YAML"):
        load_model(bad)
    bad.write_text("version: 1\ntransport: ib\nfit: " + "[" * 1000 + "]" * 1000 + "\n", encoding="utf-8")
    with pytest.raises(ModelFileError, match="nested too deeply"):  # not a RecursionError's traceback
        load_model(bad)


@pytest.mark.parametrize("text", ["off", "false", "no"])
def test_incast_off_in_a_params_file_turns_incast_off(text):
    """YAML reads an unquoted ``off`` as false: ``incast: off`` means no incast loss (as ``--incast off``),
    not the transport's incast model; a value that is neither a mapping nor off is refused."""
    import yaml

    model = parse_model(yaml.safe_load(f"version: 1\ntransport: roce\nincast: {text}\n"), "p.yaml")
    assert not model.incast.enabled and parse_model({"version": 1, "transport": "roce"}, "p").incast.enabled
    for bad in (0, None, []):
        with pytest.raises(ModelFileError, match="or off"):
            parse_model({"version": 1, "transport": "roce", "incast": bad}, "p.yaml")


def test_incast_physics():
    inc = IncastModel("roce", 25 * 2**20, 4 * 2**20, 1.0, 1.0, ROCE_RTO_S, 0.3, 4.0, 1.0)
    assert inc.port_share(24) == pytest.approx(25 * 2**20 / 25)
    assert inc.efficiency(1, 1e12, 24) == 1.0  # one sender: no incast
    assert inc.efficiency(16, 0.5 * 2**20, 24) == 1.0  # in flight fits the buffer share
    assert inc.efficiency(16, 64 * 2**20, 24) == pytest.approx(1 / (1 + (1 - 1 / 64)))
    assert inc.exposure_rate(16) == 15.0 and inc.exposure_rate(1) == 0.0
    assert inc.timeout_probability([]) == 0.0
    p = inc.timeout_probability([0.3])
    assert p == pytest.approx(1 - math.exp(-1.0))
    assert not IncastModel.off().enabled and IncastModel.off().efficiency(16, 1e12) == 1.0
    # the go-back-N waste may grow with the fan-in: (k - 1)^fanin_loss more per overflowing byte
    steep = IncastModel("roce", 25 * 2**20, 4 * 2**20, 1.0, 1.0, ROCE_RTO_S, 0.3, 4.0, 1.0, 0.5)
    assert steep.waste(16) == pytest.approx(15**0.5) and steep.waste(2) == pytest.approx(1.0)
    assert steep.efficiency(16, 64 * 2**20, 24) == pytest.approx(1 / (1 + 15**0.5 * (1 - 1 / 64)))


def test_lossless_transports_keep_the_software_costs_but_not_mi300xs_scale_up_goodput():
    from a2acc.analysis.model import transport_defaults

    for transport in ("ib", "nvlink", "slingshot"):
        m = transport_defaults(transport)
        assert m.alpha_s == CALIBRATED_ROCE.alpha_s and m.fill_bytes == CALIBRATED_ROCE.fill_bytes
        assert m.inter_efficiency == CALIBRATED_ROCE.inter_efficiency and m.intra_efficiency == 1.0
        assert not m.incast.enabled
        assert (
            m.onset_bytes == 0.0
        )  # incast onset is RoCE's congestion control: lossless fabrics do not pay it
