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
