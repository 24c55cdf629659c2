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
