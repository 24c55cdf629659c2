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
