"""Bad inputs of `a2acc cache`: keys that leave the cache, files that are not entries."""

from __future__ import annotations

from a2acc.cli import main
from tests.cli.bad_inputs.common import run


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
        rc, err, _ = run(capsys, ["cache", "--dir", str(home), *argv])
        assert rc == 2 and "cache key" in err
    assert (tmp_path / "victim.json").read_text() == "precious"
    assert main(["cache", "--dir", str(home), "clear"]) == 0
    assert "removed 1 files" in capsys.readouterr().out
    assert (home / "videos" / "holiday.json").exists() and (home / "venv" / "x.json").exists()
    assert (cache.dir / "notes.json").exists()


def test_an_entry_with_a_valid_checksum_but_payload_types_a2acc_never_writes_is_refused(tmp_path, capsys):
    """A hand-made (or corrupted) entry whose checksum matches: a file's content a number, the program a number,
    the manifest a list raised TypeError from ``show`` and ``export``; each is now refused and left alone."""
    from a2acc.jit.cache import CacheEntry, PlanCache

    bad = {
        "files": CacheEntry("a" * 32, "{}", {"00-x-nccl.xml": 5}, None, {}),  # type: ignore[dict-item]
        "program": CacheEntry("b" * 32, 5, {}, None, {}),  # type: ignore[arg-type]
        "manifest": CacheEntry("c" * 32, "{}", {"00-x-nccl.xml": "<algo/>"}, [1], {}),  # type: ignore[arg-type]
    }
    for what, entry in bad.items():
        home = tmp_path / what
        cache = PlanCache(home)
        cache.put(entry)
        path = next(cache.dir.glob("*.json"))
        for argv in (["show", entry.key], ["export", str(tmp_path / f"out-{what}")]):
            rc, err, _ = run(capsys, ["cache", "--dir", str(home), *argv])
            said = ("never writes", "no valid entry", "no cached")  # refused: not shown, not exported
            assert rc == 2 and "Traceback" not in err and any(w in err for w in said), err
        assert path.exists()
