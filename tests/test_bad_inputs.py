"""Bad inputs of every kind: one clear line naming file/field/value/allowed, exit 2, no traceback, and no file
left behind or deleted. Each case also finishes fast (size limits are checked before anything is allocated)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time

import numpy as np
import pytest

from a2acc.cli import main
from a2acc.model.topology import load_topology
from a2acc.model.traffic import generate

NPY = {
    "zero-bytes.npy": None,
    "empty.npy": np.zeros((0, 0)),
    "uint64-wraps.npy": np.full((16, 16), 2**63 + 5, dtype=np.uint64),
    "int64-max.npy": np.full((16, 16), 2**63 - 1, dtype=np.int64),
    "row-overflow.npy": np.full((16, 16), 2**47, dtype=np.int64),
    "bool.npy": np.ones((16, 16), dtype=bool),
    "float-frac.npy": np.full((16, 16), 1.5),
}
TEXT = {
    "strings.json": json.dumps([["1"] * 16] * 16),
    "mixed.json": json.dumps([[1, "x"], [3, 4]]),
    "ragged.csv": "1,2\n3\n",
    "neg.csv": "\n".join(",".join(["-1"] * 16) for _ in range(16)),
}


def _run(capsys, argv):
    t0 = time.perf_counter()
    rc = main(argv)
    dt = time.perf_counter() - t0
    err = capsys.readouterr().err
    return rc, err, dt


def _one_clear_line(err: str) -> None:
    lines = [ln for ln in err.strip().splitlines() if ln]
    assert len(lines) == 1, err
    assert lines[0].startswith("a2acc: error: ") and "Traceback" not in err
    assert "invalid" in lines[0] or "cannot" in lines[0] or "not" in lines[0], lines[0]


@pytest.fixture
def files(tmp_path):
    for name, arr in NPY.items():
        if arr is None:
            (tmp_path / name).write_bytes(b"")
        else:
            np.save(tmp_path / name, arr)
    for name, text in TEXT.items():
        (tmp_path / name).write_text(text)
    return tmp_path


@pytest.mark.parametrize("name", [*NPY, *TEXT])
@pytest.mark.parametrize("cmd", ["show", "plan", "compile"])
def test_bad_matrices(files, capsys, name, cmd):
    before = sorted(p.name for p in files.iterdir())
    path = str(files / name)
    argv = {
        "show": ["traffic", "show", path],
        "plan": ["plan", "-t", "dgx-h100", "-n", "2", "-m", path, "-o", str(files / "p.json")],
        "compile": ["compile", "-t", "dgx-h100", "-n", "2", "-m", path, "-o", str(files / "out")],
    }[cmd]
    rc, err, dt = _run(capsys, argv)
    assert rc == 2 and dt < 2.0
    _one_clear_line(err)
    assert name in err
    assert sorted(p.name for p in files.iterdir()) == before


@pytest.mark.parametrize(
    ("doc", "fragment"),
    [
        ({"direct": {"kind": "hypercube", "dimension": 40, "bandwidth": 10}}, "direct.dimension"),
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
    ],
)
def test_bad_topologies_fail_fast(tmp_path, capsys, doc, fragment):
    path = tmp_path / "t.yaml"
    path.write_text(json.dumps({"version": 1, **doc}))
    rc, err, dt = _run(capsys, ["topo", "show", str(path)])
    assert rc == 2 and dt < 1.0
    _one_clear_line(err)
    assert fragment in err and "t.yaml" in err


def test_yaml_syntax_error_is_one_line(tmp_path, capsys):
    path = tmp_path / "t.yaml"
    path.write_text("version: 1\nservers: [1, 2\ngpus_per_server: 8\n")
    rc, err, _dt = _run(capsys, ["topo", "show", str(path)])
    assert rc == 2
    _one_clear_line(err)
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


def test_generator_and_flag_limits(tmp_path, capsys):
    rc, err, dt = _run(
        capsys, ["traffic", "gen", "zipf", "--ranks", "200000", "--size", "1M", "-o", str(tmp_path / "x.npy")]
    )
    assert rc == 2 and dt < 1.0 and "--ranks" in err
    np.save(tmp_path / "m.npy", generate("zipf", 16, 1 << 20, 1))
    rc, err, _ = _run(
        capsys,
        [
            "plan",
            "-t",
            "dgx-h100",
            "-n",
            "2",
            "-m",
            str(tmp_path / "m.npy"),
            "--unit",
            "100.7",
            "-o",
            str(tmp_path / "p.json"),
        ],
    )
    assert rc == 2 and "whole bytes" in err
    for opt, frag in (
        ("instances=0", "instances"),
        ("size_range=1M:1K", "MIN must be <= MAX"),
        ("size_range=1K:2K", "buffer size"),
    ):
        rc, err, _ = _run(
            capsys,
            [
                "compile",
                "-t",
                "dgx-h100",
                "-n",
                "2",
                "-m",
                str(tmp_path / "m.npy"),
                "--opt",
                opt,
                "-o",
                str(tmp_path / "o"),
            ],
        )
        assert rc == 2 and frag in err, err
        _one_clear_line(err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.npy"]


def test_all_zero_matrix_plans_and_compile_refuses_cleanly(tmp_path, capsys):
    np.save(tmp_path / "z.npy", np.zeros((16, 16), dtype=np.int64))
    assert (
        main(
            [
                "plan",
                "-t",
                "dgx-h100",
                "-n",
                "2",
                "-m",
                str(tmp_path / "z.npy"),
                "-o",
                str(tmp_path / "p.json"),
            ]
        )
        == 0
    )
    assert main(["verify", str(tmp_path / "p.json")]) == 0
    capsys.readouterr()
    rc, err, _ = _run(
        capsys,
        ["compile", "-t", "dgx-h100", "-n", "2", "-m", str(tmp_path / "z.npy"), "-o", str(tmp_path / "out")],
    )
    assert rc == 2 and "empty all-to-all" in err
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.manifest.json").exists()


XML_HEAD = '<algo name="x" proto="Simple" nchannels="1" {c} ngpus="2" coll="alltoall" inplace="0" outofplace="1" minBytes="0" maxBytes="0">\n'


@pytest.mark.parametrize(
    ("chunks", "fragment"),
    [('nchunksperloop="4000000000"', "not interpreted"), ("", "nchunksperloop")],
)
def test_bad_xml_sizes_fail_fast(tmp_path, capsys, chunks, fragment):
    gpu = '<gpu id="{i}" i_chunks="{n}" o_chunks="{n}" s_chunks="0">\n</gpu>\n'
    n = "4000000000" if chunks else "2"
    text = XML_HEAD.format(c=chunks) + "".join(gpu.format(i=i, n=n) for i in range(2)) + "</algo>\n"
    (tmp_path / "x.xml").write_text(text)
    t0 = time.perf_counter()
    rc = main(["verify", str(tmp_path / "x.xml")])
    assert rc == 1 and time.perf_counter() - t0 < 1.0
    assert fragment in capsys.readouterr().err


def _manifest(tmp_path):
    from a2acc.ir.layout import manifest_for

    counts = np.array([[1, 2], [3, 4]])
    return json.loads(
        manifest_for(counts, 64, None, target="msccl-xml", file="x.xml", algo_name="x").to_json()
    )


@pytest.mark.parametrize(
    ("mutate", "fragment"),
    [
        (lambda d: d.update(ngpus=3), "counts"),
        (lambda d: d["ranks"].pop(), "ranks"),
        (lambda d: d["ranks"][0]["input"][1].__setitem__(0, 99), "contiguous layout"),
        (lambda d: d.update(buffer_chunks=1), "buffer_chunks"),
        (lambda d: d.update(ngpus=10**9), "ngpus"),
    ],
)
def test_bad_manifests(tmp_path, capsys, mutate, fragment):
    doc = _manifest(tmp_path)
    mutate(doc)
    (tmp_path / "m.json").write_text(json.dumps(doc))
    (tmp_path / "x.xml").write_text("<algo/>")
    rc, err, _ = _run(capsys, ["verify", str(tmp_path / "x.xml"), "--manifest", str(tmp_path / "m.json")])
    assert rc == 2 and fragment in err
    _one_clear_line(err)


@pytest.mark.parametrize("value", [2**70, 10**12])
def test_plan_counts_beyond_limits(tmp_path, capsys, value):
    from a2acc import plan

    topo = load_topology("dgx-h100", 2)
    doc = json.loads(plan(topo, generate("zipf", 16, 1 << 20, 1), "direct").to_json())
    doc["counts"][0][1] = value
    (tmp_path / "p.json").write_text(json.dumps(doc))
    rc, err, dt = _run(capsys, ["verify", str(tmp_path / "p.json")])
    assert rc == 2 and dt < 1.0 and "counts" in err
    _one_clear_line(err)


def test_unwritable_output(tmp_path, capsys):
    np.save(tmp_path / "m.npy", generate("zipf", 16, 1 << 20, 1))
    rc, err, _ = _run(
        capsys,
        ["plan", "-t", "dgx-h100", "-n", "2", "-m", str(tmp_path / "m.npy"), "-o", "/proc/nope/p.json"],
    )
    assert rc == 2 and "/proc/nope" in err
    _one_clear_line(err)


def test_outputs_respect_the_umask(tmp_path):
    np.save(tmp_path / "m.npy", generate("zipf", 16, 1 << 20, 1))
    old = os.umask(0o022)
    try:
        assert (
            main(
                [
                    "plan",
                    "-t",
                    "dgx-h100",
                    "-n",
                    "2",
                    "-m",
                    str(tmp_path / "m.npy"),
                    "-o",
                    str(tmp_path / "p.json"),
                ]
            )
            == 0
        )
        assert (
            main(
                [
                    "compile",
                    "-t",
                    "dgx-h100",
                    "-n",
                    "2",
                    "-m",
                    str(tmp_path / "m.npy"),
                    "-o",
                    str(tmp_path / "out"),
                ]
            )
            == 0
        )
    finally:
        os.umask(old)
    for p in [tmp_path / "p.json", tmp_path / "out.manifest.json", *(tmp_path / "out").iterdir()]:
        assert stat.S_IMODE(p.stat().st_mode) == 0o644, p


def test_compile_refuses_foreign_files_and_replaces_its_own_as_a_set(tmp_path, capsys):
    np.save(tmp_path / "m.npy", generate("zipf", 16, 1 << 20, 1))
    args = [
        "compile",
        "-t",
        "dgx-h100",
        "-n",
        "2",
        "-m",
        str(tmp_path / "m.npy"),
        "-o",
        str(tmp_path / "out"),
    ]
    assert main([*args, "-a", "fast"]) == 0
    assert main([*args, "-a", "direct", "--opt", "dialect=rccl"]) == 0
    (xml,) = (tmp_path / "out").iterdir()  # the first XML was a2acc's: replaced, not left beside
    assert xml.name.endswith("-rccl.xml") and "direct" in xml.name
    capsys.readouterr()
    assert main(["verify", str(xml)]) == 0  # finds the manifest beside the directory, and its dialect
    assert "manifest" in capsys.readouterr().out
    (tmp_path / "out" / "theirs.xml").write_text("<algo/>")
    rc, err, _ = _run(capsys, [*args, "-a", "fast"])
    assert rc == 2 and "theirs.xml" in err and "--force" in err
    assert main([*args, "-a", "fast", "--force"]) == 0
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert "theirs.xml" in names and len(names) == 2
    (tmp_path / "out" / "notes.txt").write_text("mine")
    rc, err, _ = _run(capsys, [*args, "-a", "fast", "--force"])
    assert rc == 2 and "notes.txt" in err
    assert (tmp_path / "out" / "notes.txt").read_text() == "mine"


def test_cache_commands_never_touch_unrelated_files(tmp_path, capsys):
    from a2acc.jit.cache import CacheEntry, PlanCache

    home = tmp_path / "home"
    (home / "videos").mkdir(parents=True)
    (home / "videos" / "holiday.json").write_text("{}")
    (home / "venv").mkdir()
    (home / "venv" / "x.json").write_text("{}")
    (tmp_path / "victim.json").write_text("precious")
    cache = PlanCache(home)
    cache.put(CacheEntry("k" * 32, "{}", {}, None, {}))
    (cache.dir / "notes.json").write_text("{}")  # a file that is not an a2acc entry, in a2acc's version dir
    for argv in (["show", "../../victim"], ["show", "../victim"], ["show", "a/b"]):
        rc, err, _ = _run(capsys, ["cache", "--dir", str(home), *argv])
        assert rc == 2 and "cache key" in err
    assert (tmp_path / "victim.json").read_text() == "precious"
    assert main(["cache", "--dir", str(home), "clear"]) == 0
    assert "removed 1 files" in capsys.readouterr().out
    assert (home / "videos" / "holiday.json").exists() and (home / "venv" / "x.json").exists()
    assert (cache.dir / "notes.json").exists()


def test_simulate_refuses_a_plan_for_another_topology(tmp_path, capsys):
    np.save(tmp_path / "m.npy", generate("zipf", 16, 1 << 20, 1))
    assert (
        main(
            [
                "plan",
                "-t",
                "dgx-h100",
                "-n",
                "2",
                "-m",
                str(tmp_path / "m.npy"),
                "-o",
                str(tmp_path / "p.json"),
            ]
        )
        == 0
    )
    rc, err, _ = _run(capsys, ["simulate", str(tmp_path / "p.json"), "-t", "dgx-a100", "-n", "2"])
    assert rc == 2 and "another topology" in err


@pytest.mark.slow
@pytest.mark.parametrize(
    ("value", "active"), [("false", False), ("no", False), ("off", False), ("maybe", False)]
)
def test_jit_switch_values(value, active):
    code = "import sys; print('a2acc.runtime.torch_patch' in sys.modules)"
    env = {k: v for k, v in os.environ.items() if not k.startswith("A2ACC_")}
    env.update({"A2ACC_JIT": value, "A2ACC_TOPOLOGY": "dgx-h100:1"})
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == str(active)
    assert ("is not one of" in out.stderr) == (value == "maybe")
    assert "Traceback" not in out.stderr


def test_failed_install_leaves_nothing_installed():
    pytest.importorskip("torch")
    from a2acc.runtime import torch_patch
    from a2acc.runtime.settings import JitSettings

    with pytest.raises(Exception):  # noqa: B017 - any error: the topology cannot be loaded
        torch_patch.install(JitSettings(topology="no-such-topology"))
    assert not torch_patch.is_installed()


def test_plan_does_not_overwrite_a_file_it_did_not_write(tmp_path, capsys):
    from a2acc.cli import main

    mine = tmp_path / "notes.json"
    mine.write_text("my notes\n", encoding="utf-8")
    m = tmp_path / "m.npy"
    np.save(m, np.full((8, 8), 1 << 20, dtype=np.int64))
    args = ["plan", "-t", "dgx-h100", "-n", "1", "--traffic", str(m), "-a", "direct"]
    if main([*args, "-o", str(mine)]) == 2:
        err = capsys.readouterr().err
        assert "not written by a2acc" in err and mine.read_text() == "my notes\n"
    else:  # pragma: no cover - the failure this test is for
        pytest.fail("plan -o replaced a file a2acc did not write")
    out = tmp_path / "p.json"
    assert main([*args, "-o", str(out)]) == 0 and main([*args, "-o", str(out)]) == 0
    assert main([*args, "-o", str(mine), "--force"]) == 0
