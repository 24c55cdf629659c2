"""``a2acc.fileio``: the strict readers of hand-written files."""

from __future__ import annotations

import json

import pytest
import yaml

from a2acc.fileio import load_yaml, loads_json, read_text


def test_yaml_refuses_a_repeated_key_but_keeps_merges():
    assert load_yaml("base: &b {x: 1, y: 2}\nd:\n  <<: *b\n  y: 3\n")["d"] == {"x": 1, "y": 3}
    with pytest.raises(yaml.YAMLError, match="'a' appears twice"):
        load_yaml("a: 1\nb: 2\na: 3\n")
    with pytest.raises(yaml.YAMLError, match="appears twice"):
        load_yaml("outer:\n  k: 1\n  k: 2\n")


def test_json_refuses_a_repeated_key_only_when_asked():
    assert loads_json('{"a": 1, "a": 2}') == {"a": 2}  # plans, caches: written by a2acc, never repeated
    with pytest.raises(json.JSONDecodeError, match="'a' appears twice"):
        loads_json('{"x": {"a": 1, "a": 2}}', unique_keys=True)


def test_read_text_refuses_nul_bytes_from_the_head(tmp_path):
    p = tmp_path / "z.json"
    p.write_bytes(b"{" + b"\x00" * 10)
    with pytest.raises(UnicodeDecodeError, match="NUL"):
        read_text(p)
    p.write_text('{"ok": "\u00e9"}')
    assert read_text(p) == '{"ok": "\u00e9"}'


def test_text_inputs_read_from_a_pipe(tmp_path):
    """A topology or params file given as ``<(...)`` or ``/dev/stdin`` is a pipe: no seek back to the head."""
    import subprocess
    import sys

    from a2acc.fileio import TooLarge, read_text

    code = (
        "import sys; from a2acc.fileio import read_text; "
        "print(read_text('/dev/stdin', 1 << 20) == 'version: 1\\n' * 5000)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], input="version: 1\n" * 5000, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "True"
    p = tmp_path / "t.yaml"
    p.write_text("x" * 100, encoding="utf-8")
    assert read_text(p, 100) == "x" * 100
    with pytest.raises(TooLarge):
        read_text(p, 99)


@pytest.mark.parametrize(
    "argv",
    [
        ["plan", "-t", "dgx-h100", "-n", "1", "-m", "M", "-a", "direct", "-o", "OUT"],
        ["compile", "-t", "dgx-h100", "-n", "1", "-m", "M", "-a", "direct", "-o", "OUT"],
        ["traffic", "gen", "zipf", "--ranks", "8", "--size", "1M", "-o", "OUT"],
        ["compare", "-t", "dgx-h100", "-n", "1", "--traffic", "M", "-J", "OUT"],
    ],
)
def test_an_output_under_a_file_says_the_file_is_no_directory(tmp_path, capsys, argv):
    """-o notes.txt/OUT.json where notes.txt is a file: that file is named as what is wrong (it exists, as a
    file), not reported missing; nothing is written and the file is untouched."""
    import numpy as np

    from a2acc.cli import main
    from a2acc.model.traffic import generate

    m = tmp_path / "m.npy"
    np.save(m, generate("zipf", 8, 1 << 20, 1))
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    for out, why in ((notes / "OUT.json", "notes.txt is a file, not a directory"),
                     (notes / "sub" / "OUT.json", "notes.txt is a file, not a directory"),
                     (tmp_path / "nodir" / "OUT.json", "nodir does not exist")):  # fmt: skip
        args = [str(m) if a == "M" else str(out) if a == "OUT" else a for a in argv]
        assert main(args) == 2
        err = capsys.readouterr().err
        assert why in err and "does not exist" not in err.replace(
            f"{tmp_path / 'nodir'} does not exist", ""
        ), err
        assert len(err.strip().splitlines()) == 1
    assert notes.read_text() == "my notes\n" and sorted(p.name for p in tmp_path.iterdir()) == [
        "m.npy",
        "notes.txt",
    ]
