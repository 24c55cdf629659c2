"""``a2acc cache export``: cached msccl-xml buckets become an MSCCL_ALGO_DIR the strict reader accepts."""

from __future__ import annotations

import numpy as np

from a2acc.backends.msccl_xml.reader import read_xml
from a2acc.cli import main
from a2acc.jit.bucket import BucketIndex
from a2acc.jit.cache import PlanCache
from a2acc.model.topology import load_topology
from a2acc.model.traffic import generate
from a2acc.runtime.decide.compiling import compile_entry


def test_export_writes_xml_only_dir_and_manifests_that_verify(tmp_path, capsys):
    topo = load_topology("mi300x", 1)
    cache = PlanCache(tmp_path / "cache")
    index = BucketIndex(topo, "fast", "msccl-xml")
    keys = set()
    for seed in (1, 2, 3):
        b = index.lookup(generate("moe", 8, 1 << (20 + seed), seed))
        if b.key in keys:
            continue
        keys.add(b.key)
        cache.put(
            compile_entry(topo, b.layout, b.unit, "fast", "msccl-xml", b.key, None, {"dialect": "rccl"})
        )
    ref = index.lookup(generate("moe", 8, 1 << 22, 9))
    cache.put(compile_entry(topo, ref.layout, ref.unit, "fast", None, ref.key))  # reference-only: skipped
    out = tmp_path / "algos"
    assert main(["cache", "--dir", str(tmp_path / "cache"), "export", str(out)]) == 0
    text = capsys.readouterr().out
    assert f"exported {len(keys)} plan(s)" in text and "skipped" in text
    xmls = sorted(out.iterdir())
    assert len(xmls) == len(keys) and all(p.suffix == ".xml" for p in xmls)
    for xml in xmls:
        assert read_xml(xml.read_text(), xml.name).algo is not None
        man = tmp_path / "algos.manifests" / f"{xml.name}.manifest.json"
        assert main(["verify", str(xml), "--manifest", str(man), "--opt", "dialect=rccl"]) == 0
    assert np.all([p.name.endswith("-rccl.xml") for p in xmls])


def test_export_of_an_empty_cache_is_a_clear_error(tmp_path, capsys):
    assert main(["cache", "--dir", str(tmp_path / "none"), "export", str(tmp_path / "algos")]) == 2
    assert "no cached msccl-xml plans to export" in capsys.readouterr().err
    assert not (tmp_path / "algos").exists()


def _two_entries(tmp_path):
    topo = load_topology("mi300x", 1)
    cache = PlanCache(tmp_path / "cache")
    index = BucketIndex(topo, "fast", "msccl-xml")
    names = []
    for seed in (1, 3):
        b = index.lookup(generate("moe", 8, 1 << (20 + seed), seed))
        e = compile_entry(topo, b.layout, b.unit, "fast", "msccl-xml", b.key, None, {"dialect": "rccl"})
        cache.put(e)
        names += list(e.files)
    return str(tmp_path / "cache"), sorted(names)


def test_export_refuses_before_writing_anything(tmp_path, capsys):
    """A conflict found at the second entry used to stop the export after the first entry's XML was written;
    a file in the way left an empty ``.manifests`` directory behind; a missing parent was created."""
    cache, names = _two_entries(tmp_path)
    out = tmp_path / "algos"
    mdir = tmp_path / "algos.manifests"
    mdir.mkdir()
    (mdir / f"{names[-1]}.manifest.json").write_text("my notes\n")
    assert main(["cache", "--dir", cache, "export", str(out)]) == 2
    assert "not an a2acc manifest" in capsys.readouterr().err
    assert not out.exists() and sorted(p.name for p in mdir.iterdir()) == [f"{names[-1]}.manifest.json"]
    afile = tmp_path / "afile"
    afile.write_text("hi\n")
    assert main(["cache", "--dir", cache, "export", str(afile)]) == 2
    assert not (tmp_path / "afile.manifests").exists()
    assert main(["cache", "--dir", cache, "export", str(tmp_path / "nope" / "deeper" / "out")]) == 2
    assert not (tmp_path / "nope").exists()
    (mdir / f"{names[-1]}.manifest.json").unlink()
    assert main(["cache", "--dir", cache, "export", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == names
    assert main(["cache", "--dir", cache, "export", str(out)]) == 0  # again: its own files are replaced
