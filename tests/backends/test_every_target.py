"""Every registered target, the same way (networkx's ``flow_funcs`` / ``validate_flows`` pattern in
``networkx/algorithms/flow/tests/test_maxflow.py``): parametrized over :data:`a2acc.backends.TARGETS`, so a new
target is exercised by adding its registry line.

For each target, on a few planners and presets: lower -> check -> emit -> detect (by content) -> read back (with
the manifest written beside it) -> check; the same inputs give the same bytes; names change with every option
that changes the text; a truncated file is rejected, not crashed on; a second emit into the same place works.
"""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path

import pytest

from a2acc.backends import TARGETS, detect, get_target
from a2acc.ir.layout import find_manifest, load_manifest
from a2acc.ir.quantize import UnitPolicy
from a2acc.model.topology import load_topology
from a2acc.model.traffic import generate
from a2acc.options import parse_options
from a2acc.pipeline import Request, compile

CASES = [  # (preset, servers, planner, traffic)
    ("dgx-h100", 1, "fast", "zipf"),
    ("mi300x", 1, "spreadout", "balanced"),
    ("dgx-h100", 2, "direct", "zipf"),
    ("dgx-h100", 2, "hierarchical", "balanced"),
]


def _matrix(kind: str, n: int):
    return generate(kind, n, 8 << 20, 5, skew=0.8) if kind == "zipf" else generate(kind, n, 8 << 20, 5)


def _compile(target: str, case: tuple[str, int, str, str], options: object = None):
    preset, servers, planner, traffic = case
    topo = load_topology(preset, servers)
    return compile(
        Request(
            topo,
            _matrix(traffic, topo.nranks),
            planner,
            target=target,
            target_options=options,
            units=UnitPolicy(max_padding="auto"),
        )
    )


def _out(tmp_path: Path, target_name: str) -> Path:
    kind = get_target(target_name).output_kind
    return tmp_path / ("out" if kind == "dir" else "out.plan")


@pytest.fixture(params=sorted(TARGETS))
def target(request):
    return request.param


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}x{c[1]}-{c[2]}-{c[3]}")
def test_lower_check_emit_detect_read_back_check(target, case, tmp_path):
    res = _compile(target, case)
    assert res.check is not None and res.check.ok, res.check.errors[:3] if res.check else None
    tg = get_target(target)
    out = _out(tmp_path, target)
    paths = tg.emit(res.lowered, out)
    assert paths and all(p.exists() for p in paths)
    for name, text in res.lowered.files.items():
        written = out / name if tg.output_kind == "dir" else out
        assert written.read_text(encoding="utf-8") == text  # the checked text is what was written
        found = detect(text[:4096])
        assert found is not None and found.name == tg.name, f"{name}: detected as {found}"
        man_path = find_manifest(written) if tg.output_kind == "dir" else Path(f"{written}.manifest.json")
        assert man_path is not None and man_path.exists()
        man = load_manifest(man_path)
        assert man.file == written.name and man.target == tg.name
        opts = parse_options(tg.Options, dict(man.options), where="manifest")
        rep = tg.check_text(written.read_text(encoding="utf-8"), str(written), man, opts)
        assert rep.ok, rep.errors[:3]
    again = tg.emit(res.lowered, out)  # the same output again: a2acc's own files are replaced, not refused
    assert [p.name for p in again] == [p.name for p in paths]


@pytest.mark.parametrize("case", CASES[:2], ids=lambda c: f"{c[0]}-{c[2]}")
def test_same_inputs_same_bytes(target, case):
    a, b = _compile(target, case), _compile(target, case)
    assert a.lowered is not None and b.lowered is not None
    assert dict(a.lowered.files) == dict(b.lowered.files)
    assert a.lowered.manifest.to_json() == b.lowered.manifest.to_json()


def _variants(options_type: type) -> list[dict[str, str]]:
    """One option changed at a time: every other value of every Literal option."""
    out = []
    hints = typing.get_type_hints(options_type)
    for f in dataclasses.fields(options_type):
        tp = hints[f.name]
        if typing.get_origin(tp) is typing.Literal:
            out += [{f.name: str(v)} for v in typing.get_args(tp) if v != f.default]
    return out


def test_names_change_with_every_option_that_changes_the_text(target):
    """Two lowerings that differ in content never share a file name (nor, inside the text, a plan name)."""
    tg = get_target(target)
    case = ("dgx-h100", 1, "fast", "zipf")
    seen: dict[str, str] = {}
    for variant in [{}, *_variants(tg.Options)]:
        try:
            res = _compile(target, case, variant or None)
        except Exception:  # a variant this case cannot use (e.g. a protocol across servers) is skipped
            continue
        assert res.lowered is not None
        for name, text in res.lowered.files.items():
            if name in seen:
                assert seen[name] == text, f"{name} names two different texts (options {variant})"
            seen[name] = text
    if _variants(tg.Options):  # a target with options that change the text showed two names
        assert len(seen) >= 2
    else:
        assert len(seen) == 1


def test_a_truncated_file_is_rejected_with_errors(target):
    res = _compile(target, CASES[0])
    tg = get_target(target)
    assert res.lowered is not None
    ((name, text),) = list(res.lowered.files.items())[:1]
    for cut in (len(text) // 3, 2 * len(text) // 3):
        rep = tg.check_text(text[:cut], name, res.lowered.manifest, res.lowered.options)
        assert not rep.ok and rep.errors


def test_names_digest_the_installed_version():
    """default_name reads the version from the package metadata (the backends cannot import the package root):
    it is the version a2acc reports."""
    import a2acc
    from a2acc.backends.target import _version

    assert _version() == a2acc.__version__
