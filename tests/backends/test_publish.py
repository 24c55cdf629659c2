"""Writing an algorithm directory and its manifest as one set: interrupts and a full disk at every step."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from a2acc.backends import publish
from a2acc.cli import main
from a2acc.ir.layout import load_manifest
from a2acc.model.traffic import generate, save_matrix


def _matrices(tmp_path: Path) -> tuple[str, str]:
    a, b = tmp_path / "a.npy", tmp_path / "b.npy"
    save_matrix(generate("zipf", 8, 1 << 20, 1, skew=0.8), a)
    save_matrix(generate("zipf", 8, 1 << 20, 2, skew=0.8), b)
    return str(a), str(b)


def _compile(m: str, out: Path) -> int:
    return main(["compile", "-t", "dgx-h100", "-n", "1", "-m", m, "-a", "fast", "-o", str(out)])


def _state(out: Path) -> tuple[list[str], str | None]:
    """The XML files in ``out`` and the file its manifest names (None: no manifest)."""
    man = out.parent / f"{out.name}.manifest.json"
    files = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
    return files, (load_manifest(man).file if man.exists() else None)


def _hidden(tmp_path: Path) -> list[str]:
    return [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]


def _consistent(out: Path) -> None:
    files, named = _state(out)
    assert files == [named], (files, named)


def test_interrupt_while_writing_keeps_the_previous_set_and_a_rerun_works(tmp_path, monkeypatch):
    a, b = _matrices(tmp_path)
    out = tmp_path / "algos"
    assert _compile(a, out) == 0
    before = _state(out)

    def interrupted(path: Path, text: str) -> None:
        raise KeyboardInterrupt

    with monkeypatch.context() as mp:
        mp.setattr(publish, "_write", interrupted)
        assert _compile(b, out) == 130  # a2acc: interrupted
    assert _state(out) == before and not _hidden(tmp_path)
    assert _compile(b, out) == 0  # the same compile again: accepted, replaces the set
    _consistent(out)
    assert _state(out) != before


def test_interrupt_at_the_manifest_switch_puts_the_previous_directory_back(tmp_path, monkeypatch):
    a, b = _matrices(tmp_path)
    out = tmp_path / "algos"
    assert _compile(a, out) == 0
    before = _state(out)

    def interrupted(path: object, text: str) -> None:
        raise KeyboardInterrupt

    with monkeypatch.context() as mp:
        mp.setattr(publish, "atomic_write_text", interrupted)
        assert _compile(b, out) == 130  # a2acc: interrupted
    assert _state(out) == before and not _hidden(tmp_path)
    assert _compile(b, out) == 0
    _consistent(out)


def test_interrupt_after_the_manifest_switch_completes_the_new_set(tmp_path, monkeypatch):
    a, b = _matrices(tmp_path)
    out = tmp_path / "algos"
    assert _compile(a, out) == 0
    real = os.rename
    calls = []

    def rename(src: object, dst: object) -> None:
        calls.append((src, dst))
        if (
            Path(str(dst)) == out
            and ".a2acc-new-" in str(src)
            and len([c for c in calls if c[1] == dst]) == 1
        ):
            raise KeyboardInterrupt  # the first try of the staging directory -> OUT
        real(str(src), str(dst))

    with monkeypatch.context() as mp:
        mp.setattr(publish.os, "rename", rename)
        assert _compile(b, out) == 130  # a2acc: interrupted
    _consistent(out)  # the interrupted switch was completed: the new XML with the new manifest
    assert _compile(b, out) == 0
    _consistent(out)


def test_a_full_disk_leaves_no_output_directory_and_names_the_output(tmp_path, monkeypatch, capsys):
    a, _b = _matrices(tmp_path)
    out = tmp_path / "algos"

    def full(path: Path, text: str) -> None:
        with open(path, "wb") as fh:
            fh.write(text[: len(text) // 2].encode())  # part of the file reached the disk
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with monkeypatch.context() as mp:
        mp.setattr(publish, "_write", full)
        assert _compile(a, out) == 2
    err = capsys.readouterr().err
    assert f"{out}: cannot read or write it (No space left on device)" in err
    assert not out.exists() and not (tmp_path / "algos.manifest.json").exists()
    assert not _hidden(tmp_path)
    assert _compile(a, out) == 0  # space again: the same compile works
    _consistent(out)


def test_a_full_disk_on_a_rerun_keeps_the_previous_set(tmp_path, monkeypatch):
    a, b = _matrices(tmp_path)
    out = tmp_path / "algos"
    assert _compile(a, out) == 0
    before = _state(out)

    def full(path: Path, text: str) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with monkeypatch.context() as mp:
        mp.setattr(publish, "_write", full)
        assert _compile(b, out) == 2
    assert _state(out) == before and not _hidden(tmp_path)


def test_export_files_of_other_manifests_stay_in_the_directory(tmp_path):
    """A directory that also holds files of ``cache export`` (named by DIR.manifests/): a compile replaces only
    its own previous file and keeps them."""
    a, b = _matrices(tmp_path)
    out = tmp_path / "algos"
    assert _compile(a, out) == 0
    ((first,),) = [_state(out)[0]]
    # make the first file an export file: its manifest moves to DIR.manifests/
    man = tmp_path / "algos.manifest.json"
    (tmp_path / "algos.manifests").mkdir()
    man.rename(tmp_path / "algos.manifests" / f"{first}.manifest.json")
    assert _compile(b, out) == 0
    files, named = _state(out)
    assert first in files and named in files and len(files) == 2
    assert not _hidden(tmp_path)


def test_an_interrupted_first_compile_leaves_nothing(tmp_path, monkeypatch):
    a, _b = _matrices(tmp_path)
    out = tmp_path / "algos"

    def interrupted(path: Path, text: str) -> None:
        raise KeyboardInterrupt

    with monkeypatch.context() as mp:
        mp.setattr(publish, "_write", interrupted)
        assert _compile(a, out) == 130  # a2acc: interrupted
    assert not out.exists() and not (tmp_path / "algos.manifest.json").exists() and not _hidden(tmp_path)
    assert _compile(a, out) == 0
    _consistent(out)


def test_a_directory_or_link_in_the_output_is_never_moved_aside(tmp_path, monkeypatch, capsys):
    """The switch renames the previous directory aside: a subdirectory, a symbolic link (and what they hold)
    would go with it, so a directory holding one is refused, as is an output that is itself a link or '.';
    nothing is moved or written."""
    a, _b = _matrices(tmp_path)
    out = tmp_path / "algos"
    (out / "sub").mkdir(parents=True)
    (out / "sub" / "keep.txt").write_text("the user's")
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    before = sorted(p.name for p in tmp_path.iterdir())
    assert _compile(a, out) == 2
    assert "'sub'" in capsys.readouterr().err and (out / "sub" / "keep.txt").read_text() == "the user's"
    (out / "sub" / "keep.txt").unlink()
    (out / "sub").rmdir()
    (out / "sub").symlink_to(real)
    assert _compile(a, out) == 2 and (out / "sub").is_symlink()
    assert _compile(a, tmp_path / "link") == 2 and (tmp_path / "link").is_symlink()
    assert "not a symbolic link" in capsys.readouterr().err
    monkeypatch.chdir(out)
    assert _compile(a, Path(".")) == 2 and "'.'" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == before and list(real.iterdir()) == []
