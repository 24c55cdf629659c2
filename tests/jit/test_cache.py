"""Plan cache: racing writers, corrupt and truncated entries, version isolation."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from a2acc.cli import main
from a2acc.jit.cache import CacheEntry, PlanCache


def _entry(key: str, size: int = 1000) -> CacheEntry:
    return CacheEntry(key, '{"plan": ' + "1" * size + "}", {"00-x.xml": "<algo/>"}, "{}", {"unit": 16})


def test_memory_then_disk_then_compile(tmp_path):
    c = PlanCache(tmp_path)
    calls = []
    e, where = c.get_or_compile("k1", lambda: calls.append(1) or _entry("k1"))
    assert where == "compiled" and calls == [1]
    assert c.get_or_compile("k1", lambda: pytest.fail("recompiled"))[1] == "memory"
    fresh = PlanCache(tmp_path)  # another process: finds it on disk
    e2, where = fresh.get_or_compile("k1", lambda: pytest.fail("recompiled"))
    assert where == "disk" and e2 == e


def test_truncated_entry_is_discarded_and_recompiled(tmp_path, caplog):
    c = PlanCache(tmp_path)
    c.put(_entry("k2"))
    path = c.dir / "k2.json"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    fresh = PlanCache(tmp_path)
    with caplog.at_level("WARNING", logger="a2acc.jit.cache"):
        _e, where = fresh.get_or_compile("k2", lambda: _entry("k2"))
    assert where == "compiled" and "torn cache entry" in caplog.text
    assert json.loads(path.read_text())["key"] == "k2"  # rewritten whole


def test_checksum_mismatch_detected(tmp_path):
    c = PlanCache(tmp_path)
    c.put(_entry("k3"))
    path = c.dir / "k3.json"
    doc = json.loads(path.read_text())
    doc["payload"]["program"] = doc["payload"]["program"].replace("1", "2", 1)
    path.write_text(json.dumps(doc))
    edited = path.read_bytes()
    assert PlanCache(tmp_path).get("k3") is None
    assert path.read_bytes() == edited  # reading never deletes (cache show and export read this way)
    assert PlanCache(tmp_path).clear() == 0 and path.exists()  # not provably a2acc's: clear leaves it too
    _e, where = PlanCache(tmp_path).get_or_compile("k3", lambda: _entry("k3"))
    assert where == "compiled" and json.loads(path.read_text())["key"] == "k3"  # a recompile replaces it


def test_a_copy_of_an_entry_under_another_name_survives_show_and_clear(tmp_path, capsys):
    c = PlanCache(tmp_path)
    c.put(_entry("k1"))
    backup = c.dir / "k1-backup.json"
    backup.write_bytes((c.dir / "k1.json").read_bytes())
    assert main(["cache", "--dir", str(tmp_path), "show", "k1-backup"]) == 2
    assert main(["cache", "--dir", str(tmp_path), "clear"]) == 0
    assert backup.exists() and not (c.dir / "k1.json").exists()


def test_other_version_is_ignored(tmp_path):
    old = PlanCache(tmp_path, version="0.0.1")
    old.put(_entry("k4"))
    new = PlanCache(tmp_path)
    assert new.get("k4") is None
    assert ("k4", (old.dir / "k4.json").stat().st_size, "v0.0.1") in new.list_entries()
    # a file placed in this version's directory but claiming another version is rejected too
    (new.dir).mkdir(parents=True, exist_ok=True)
    (new.dir / "k4.json").write_text((old.dir / "k4.json").read_text())
    assert new.get("k4") is None


def _racer(root, key: str, program: int, file: int) -> str:
    """A process that waits for the start time in argv[1], then gets or compiles ``key`` (a plan of ``program``
    bytes and one file of ``file`` bytes) and prints where it came from and the plan's length."""
    return textwrap.dedent(
        f"""
        import sys, time
        from a2acc.jit.cache import CacheEntry, PlanCache
        c = PlanCache({str(root)!r})
        while time.time() < float(sys.argv[1]):
            pass
        e, where = c.get_or_compile({key!r}, lambda: CacheEntry({key!r}, "P" * {program}, {{"a.xml": "x" * {file}}}, None, {{}}))
        print(where, len(e.program_json))
        """
    )


@pytest.mark.slow
def test_eight_processes_racing_on_one_key_leave_one_valid_entry(tmp_path):
    script = _racer(tmp_path, "race", 2_000_000, 100_000)
    import time

    start = str(time.time() + 3.0)
    procs = [
        subprocess.Popen([sys.executable, "-c", script, start], stdout=subprocess.PIPE, text=True)
        for _ in range(8)
    ]
    outs = [p.communicate(timeout=120)[0].split() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert all(o[1] == "2000000" for o in outs)
    files = sorted(p.name for p in (tmp_path / f"v{PlanCache(tmp_path).version}").iterdir())
    assert files == ["race.json"]  # no temp files left behind, one entry
    e = PlanCache(tmp_path).get("race")
    assert e is not None and len(e.program_json) == 2_000_000


def test_cache_and_bucket_commands(tmp_path, capsys):
    import numpy as np

    from a2acc.cli import main
    from a2acc.jit.bucket import BucketIndex
    from a2acc.model.topology import load_topology
    from a2acc.model.traffic import generate
    from a2acc.runtime.decide.compiling import compile_entry

    topo = load_topology("mi300x", 1)
    m = generate("moe", 8, 1 << 22, 3)
    np.save(tmp_path / "m.npy", m)
    assert main(["bucket", "-t", "mi300x", "-n", "1", "-m", str(tmp_path / "m.npy")]) == 0
    out = capsys.readouterr().out
    b = BucketIndex(topo, "fast", "none", symmetric=True).lookup(m)  # as the JIT (and the command) look it up
    assert f"key        : {b.key}" in out and "padding" in out and "residual" in out
    assert ("relabelled" in out) == (b.ranks is not None)
    # the msccl-xml backend caches the Program, the verified XML and the manifest together
    entry = compile_entry(topo, b.layout, b.unit, "fast", "msccl-xml", b.key)
    assert len(entry.files) == 1 and next(iter(entry.files)).endswith(".xml") and entry.manifest
    cache = PlanCache(tmp_path / "c")
    cache.put(entry)
    assert main(["cache", "--dir", str(tmp_path / "c"), "ls"]) == 0
    assert b.key in capsys.readouterr().out
    assert main(["cache", "--dir", str(tmp_path / "c"), "show", b.key]) == 0
    assert ".xml" in capsys.readouterr().out
    assert main(["cache", "--dir", str(tmp_path / "c"), "show", "nope"]) == 2
    assert main(["cache", "--dir", str(tmp_path / "c"), "clear"]) == 0
    assert PlanCache(tmp_path / "c").list_entries() == []


# ---------------------------------------------------------------------- nothing but entries is touched
def _version_dir(root):
    return root / f"v{PlanCache(root).version}"


def _forged(key: str, files: dict[str, str]) -> str:
    """An entry with a valid checksum, as a2acc would frame it (but with file names a2acc never writes)."""
    from a2acc.jit.cache import ENTRY_FORMAT, _digest

    payload = CacheEntry(key, "{}", files, "{}", {"backend": "msccl-xml"}).payload()
    doc = {
        "format": ENTRY_FORMAT,
        "a2acc_version": PlanCache(".").version,
        "key": key,
        "sha256": _digest(payload),
        "payload": payload,
    }
    return json.dumps(doc)


def test_show_leaves_a_users_json_alone(tmp_path, capsys):
    from a2acc.cli import main

    vdir = _version_dir(tmp_path)
    vdir.mkdir(parents=True)
    mine = vdir / "notes.json"
    mine.write_text('{"mine": true}')
    assert main(["cache", "--dir", str(tmp_path), "show", "notes"]) == 2
    assert mine.read_text() == '{"mine": true}'
    # a miss on that key compiles and keeps the plan in memory; the user's file is not overwritten
    c = PlanCache(tmp_path)
    _e, where = c.get_or_compile("notes", lambda: _entry("notes"))
    assert where == "compiled" and mine.read_text() == '{"mine": true}'
    assert c.get_or_compile("notes", lambda: pytest.fail("recompiled"))[1] == "memory"


@pytest.mark.parametrize(
    "text",
    [
        '{"note": "mentions", "format": "a2acc.cache-entry", "mine": true}',  # the words, not at the start
        '// my file\n{"format": "a2acc.cache-entry", "a2acc_version": "x"}',
    ],
)
def test_a_file_naming_the_entry_format_somewhere_is_not_an_entry(tmp_path, capsys, text):
    """Only the exact first bytes put() writes make a file an entry: show, ls and clear leave the others."""
    from a2acc.cli import main

    vdir = _version_dir(tmp_path)
    vdir.mkdir(parents=True)
    mine = vdir / "handmade.json"
    mine.write_text(text)
    assert main(["cache", "--dir", str(tmp_path), "show", "handmade"]) == 2
    assert main(["cache", "--dir", str(tmp_path), "ls"]) == 0
    assert "handmade" not in capsys.readouterr().out
    assert main(["cache", "--dir", str(tmp_path), "clear"]) == 0
    assert mine.read_text() == text


def test_symlinked_version_directory_is_not_followed(tmp_path):
    from a2acc.cli import main

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    real_entry_dir = tmp_path / "other-cache"
    PlanCache(real_entry_dir).put(_entry("k1"))  # a genuine entry, but reached through a symlink below
    target = _version_dir(real_entry_dir)
    (elsewhere / "k2.json").write_text("user data")
    root = tmp_path / "cache"
    root.mkdir()
    _version_dir(root).symlink_to(target)  # this version's directory points out of the cache
    (root / "v9.9.9").symlink_to(elsewhere)  # a symlink named like another version
    assert main(["cache", "--dir", str(root), "show", "k1"]) == 2  # not read through the link
    assert main(["cache", "--dir", str(root), "show", "k2"]) == 2
    assert main(["cache", "--dir", str(root), "clear"]) == 0
    assert (target / "k1.json").exists() and (elsewhere / "k2.json").read_text() == "user data"
    c = PlanCache(root)
    c.put(_entry("k3"))  # kept in memory, nothing written through the link
    assert not (target / "k3.json").exists()
    assert c.list_entries() == []


def test_symlinked_entry_file_is_neither_read_nor_removed(tmp_path):
    outside = tmp_path / "outside.json"
    outside.write_text(_forged("k5", {}))
    vdir = _version_dir(tmp_path / "c")
    vdir.mkdir(parents=True)
    (vdir / "k5.json").symlink_to(outside)
    c = PlanCache(tmp_path / "c")
    assert c.get("k5") is None and c.list_entries() == []
    assert c.clear() == 0
    assert outside.exists() and (vdir / "k5.json").is_symlink()


def test_export_keeps_non_entry_json(tmp_path, capsys):
    from a2acc.cli import main

    root = tmp_path / "cache"
    vdir = _version_dir(root)
    vdir.mkdir(parents=True)
    (vdir / "readme.json").write_text('{"not": "an entry"}')
    assert main(["cache", "--dir", str(root), "export", str(tmp_path / "algos")]) == 2  # nothing to export
    assert (vdir / "readme.json").read_text() == '{"not": "an entry"}'


def test_export_never_writes_outside_its_directory(tmp_path, capsys):
    """A checksum-valid entry whose XML is named ``../escape-nccl.xml`` (a real, verifying XML otherwise)."""
    from a2acc.cli import main
    from a2acc.jit.bucket import BucketIndex
    from a2acc.model.topology import load_topology
    from a2acc.model.traffic import generate
    from a2acc.runtime.decide.compiling import compile_entry

    topo = load_topology("mi300x", 1)
    b = BucketIndex(topo, "fast", "msccl-xml").lookup(generate("moe", 8, 1 << 22, 3))
    real = compile_entry(topo, b.layout, b.unit, "fast", "msccl-xml", "escape", None, {"dialect": "rccl"})
    ((name, text),) = real.files.items()
    from a2acc.jit.cache import ENTRY_FORMAT, _digest

    payload = CacheEntry(
        "escape", real.program_json, {f"../escape-{name}": text}, real.manifest, real.meta
    ).payload()
    doc = {
        "format": ENTRY_FORMAT,
        "a2acc_version": PlanCache(".").version,
        "key": "escape",
        "sha256": _digest(payload),
        "payload": payload,
    }
    root = tmp_path / "cache"
    vdir = _version_dir(root)
    vdir.mkdir(parents=True)
    (vdir / "escape.json").write_text(json.dumps(doc))
    out = tmp_path / "sub" / "algos"
    main(["cache", "--dir", str(root), "export", str(out)])
    assert not (tmp_path / "sub" / f"escape-{name}").exists()
    assert not out.exists() or not any(out.iterdir())
    assert (vdir / "escape.json").exists()  # refused, not removed


@pytest.mark.parametrize("name", ["../x.xml", "a/b.xml", "x.sh", "", ".xml", "..", "x.xml/"])
def test_entry_file_names_are_one_plain_component_with_a_known_suffix(name):
    from a2acc.errors import InternalError
    from a2acc.jit.cache import check_file_name

    assert check_file_name(name) is not None
    with pytest.raises(InternalError):
        PlanCache(None).put(CacheEntry("k", "{}", {name: "x"}, None, {}))
    assert check_file_name("00-a2acc-fast-8r-nccl.xml") is None


def _torn_variants(data: bytes) -> dict[str, bytes]:
    """What an interrupted write of the entry ``data`` can leave at its path."""
    return {
        "empty": b"",
        "part of the header": data[:20],
        "header prefix then unwritten blocks": data[:30] + b"\0" * 4096,
        "unwritten blocks only": b"\0" * len(data),
        "cut in the JSON": data[: len(data) // 2],
    }


@pytest.mark.parametrize("variant", list(_torn_variants(b"x" * 100)))
def test_a_torn_entry_is_replaced_by_the_recompiled_plan(tmp_path, caplog, variant):
    """A torn entry at an entry's own path is a2acc's: every later job recompiles the plan and the complete
    entry replaces it (before, torn headers were 'left in place' on every rank of every job)."""
    c = PlanCache(tmp_path)
    c.put(_entry("k5"))
    path = c.dir / "k5.json"
    data = path.read_bytes()
    path.write_bytes(_torn_variants(data)[variant])
    with caplog.at_level("WARNING", logger="a2acc.jit.cache"):
        _e, where = PlanCache(tmp_path).get_or_compile("k5", lambda: _entry("k5"))
    assert where == "compiled" and "torn cache entry" in caplog.text
    assert path.read_bytes() == data  # healed: the next job reads it from disk
    assert PlanCache(tmp_path).get_or_compile("k5", lambda: pytest.fail("recompiled"))[1] == "disk"


def test_cache_clear_removes_torn_entries_and_nothing_a2acc_cannot_prove_its_own(tmp_path, capsys):
    c = PlanCache(tmp_path)
    c.put(_entry("k6"))
    data = (c.dir / "k6.json").read_bytes()
    torn = _torn_variants(data)
    for i, variant in enumerate(torn.values()):
        (c.dir / f"torn{i}.json").write_bytes(variant)
    kept = {
        "notes.json": b"my notes",  # a user's file at an entry path: not an entry, not torn
        "edited.json": data.replace(b"1111", b"2222", 1).rstrip(b"\n"),  # complete JSON, wrong checksum
        "zeros-then-text.json": b"\0" * 10 + b"text",
    }
    for name, content in kept.items():
        (c.dir / name).write_bytes(content)
    assert main(["cache", "--dir", str(tmp_path), "clear"]) == 0
    assert f"removed {1 + len(torn)} files" in capsys.readouterr().out
    assert sorted(p.name for p in c.dir.iterdir()) == sorted(kept)
    assert all((c.dir / n).read_bytes() == b for n, b in kept.items())


@pytest.mark.slow
def test_two_processes_healing_one_torn_entry_at_once(tmp_path):
    """Two real processes find the same torn entry at the same moment, each recompiles and writes: both get the
    plan, one complete entry is left (no temporary file), and a third process reading all the while only ever
    sees the torn bytes or the complete entry, never a half-written one."""
    import time

    big = CacheEntry("heal", "P" * 4_000_000, {"a.xml": "x" * 200_000}, None, {})
    c = PlanCache(tmp_path)
    c.put(big)
    path = c.dir / "heal.json"
    whole = path.read_bytes()
    torn = whole[:60]
    path.write_bytes(torn)
    writer = _racer(tmp_path, "heal", 4_000_000, 200_000)
    reader = textwrap.dedent(
        f"""
        import sys, time
        path, end = {str(path)!r}, float(sys.argv[1]) + 6.0
        seen = set()
        while time.time() < end:
            try:
                with open(path, "rb") as fh:
                    data = fh.read()
            except FileNotFoundError:
                seen.add("missing")
                continue
            seen.add(len(data))
        print(" ".join(str(s) for s in sorted(seen, key=str)))
        """
    )
    start = str(time.time() + 3.0)
    procs = [
        subprocess.Popen([sys.executable, "-c", writer, start], stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    watch = subprocess.Popen([sys.executable, "-c", reader, start], stdout=subprocess.PIPE, text=True)
    outs = [p.communicate(timeout=120)[0].split() for p in procs]
    seen = watch.communicate(timeout=120)[0].split()
    assert all(p.returncode == 0 for p in procs) and watch.returncode == 0
    assert outs == [["compiled", "4000000"], ["compiled", "4000000"]], outs
    assert set(seen) <= {str(len(torn)), str(len(whole))}, seen  # never a partial write, never missing
    assert sorted(p.name for p in c.dir.iterdir()) == ["heal.json"] and path.read_bytes() == whole


def test_a_plan_made_in_a_call_reaches_the_disk_only_when_stored(tmp_path):
    """``store=False`` (the JIT's calling thread) keeps a compiled entry in memory; the disk copy is written by
    :meth:`PlanCache.put` later (its compile thread), and a new process then reads it from disk."""
    key = "ab" * 32
    c = PlanCache(tmp_path)
    e, where = c.get_or_compile(key, lambda: _entry(key), store=False)
    assert where == "compiled" and not list(tmp_path.rglob("*.json"))
    assert c.get_or_compile(key, lambda: _entry("x" * 64))[1] == "memory"
    c.put(e)
    assert PlanCache(tmp_path).get_or_compile(key, lambda: _entry(key))[1] == "disk"
