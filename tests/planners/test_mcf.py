"""The mcf planner: verified plans on direct-connect graphs (punctured too) and presets, beats direct on skew,
honours the time limit, identical plans from local and Dask child solves."""

from __future__ import annotations

import numpy as np
import pytest

import a2acc
from a2acc.analysis.simulate import simulate
from a2acc.cli import main
from a2acc.errors import InputError
from a2acc.model.topology import load_topology, parse_topology
from a2acc.model.traffic import generate


def _torus(dims, removed=None):
    direct = {"kind": "torus", "dims": dims, "bandwidth": 50, "latency": 1}
    if removed:
        direct["removed"] = removed
    return parse_topology({"version": 1, "name": "torus", "direct": direct}, "torus")


@pytest.mark.parametrize("formulation", ["link", "path", "time"])
def test_plans_verify_and_beat_direct_on_a_skewed_torus(formulation):
    t = _torus([4, 4])
    m = generate("zipf", t.nranks, 64 << 20, 1)
    prog = a2acc.plan(t, m, "mcf", formulation=formulation)  # verified by the pipeline
    assert prog.meta["lp_time_us"] > 0
    sim = simulate(prog, t).time_s
    assert sim < 0.6 * simulate(a2acc.plan(t, m, "direct"), t).time_s
    assert sim <= 1.45 * prog.meta["lp_time_us"] * 1e-6
    assert {op.link for op in prog.ops if op.src_rank != op.dst_rank} == {"direct"}


def test_punctured_torus_still_plans():
    t = _torus([3, 3], removed=[[0, 1], [4, 5]])
    prog = a2acc.plan(t, generate("uniform", 9, 1 << 20, 2), "mcf")
    edges = {(u, v) for u, v, _w in t.direct.edges}
    assert (0, 1) not in edges and (1, 0) not in edges
    assert all((op.src_rank, op.dst_rank) in edges for op in prog.ops if op.src_rank != op.dst_rank)


def test_presets_lower_to_verified_xml():
    topo = load_topology("dgx-h100", 2)
    m = generate("zipf", 16, 32 << 20, 4)
    res = a2acc.compile(topo, m, "mcf", backend="msccl-xml")
    assert res.check is not None and res.check.ok


def test_time_limit_falls_back_and_says_so(tmp_path, capsys):
    t = _torus([4, 4])
    np.save(tmp_path / "m.npy", generate("zipf", 16, 1 << 20, 1))
    topo_file = tmp_path / "t.yaml"
    topo_file.write_text("version: 1\ndirect: {kind: torus, dims: [4, 4], bandwidth: 50, latency: 1}\n")
    rc = main(
        [
            "plan",
            "-t",
            str(topo_file),
            "-m",
            str(tmp_path / "m.npy"),
            "-a",
            "mcf",
            "--time-limit",
            "1e-6",
            "-o",
            str(tmp_path / "p.json"),
        ]
    )
    assert rc == 0
    assert "not proven optimal" in capsys.readouterr().out
    assert main(["verify", str(tmp_path / "p.json")]) == 0
    del t


def test_decomposed_plan_verifies_and_is_deterministic():
    t = _torus([4, 4])
    m = generate("zipf", 16, 8 << 20, 5)
    a = a2acc.plan(t, m, "mcf", groups=4, rounds=2)
    b = a2acc.plan(t, m, "mcf", groups=4, rounds=2)
    assert a.to_json() == b.to_json() and a.meta["lp_bound_us"] <= a.meta["lp_time_us"]


@pytest.mark.slow
def test_local_processes_and_dask_give_byte_identical_plans():
    distributed = pytest.importorskip("distributed")
    t = _torus([4, 4])
    m = generate("zipf", 16, 8 << 20, 6)
    inline = a2acc.plan(t, m, "mcf", groups=4, rounds=2).to_json()
    assert a2acc.plan(t, m, "mcf", groups=4, rounds=2, workers="2").to_json() == inline
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cl:
        addr = cl.scheduler_address.removeprefix("tcp://")
        assert a2acc.plan(t, m, "mcf", groups=4, rounds=2, workers=f"dask://{addr}").to_json() == inline


def test_bad_options_are_refused():
    t = _torus([3, 3])
    m = generate("uniform", 9, 1 << 20, 1)
    for opts, frag in (
        ({"workers": "lots"}, "workers"),
        ({"pipeline": "0"}, "pipeline"),
        ({"formulation": "x"}, "allowed"),
    ):
        with pytest.raises(InputError, match=frag):
            a2acc.plan(t, m, "mcf", **opts)
    with pytest.raises(InputError, match="direct-connect"):
        a2acc.plan(
            load_topology("dgx-h100", 1), generate("uniform", 8, 1 << 20, 1), "mcf", formulation="time"
        )
