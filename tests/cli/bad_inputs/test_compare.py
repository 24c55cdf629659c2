"""Bad inputs of `a2acc compare`: sweeps too large to run, malformed size ranges."""

from __future__ import annotations

import json

import pytest

from a2acc.cli import main
from tests.cli.bad_inputs.common import one_clear_line, run

BASE = ["compare", "-t", "dgx-h100", "-n", "2", "--traffic", "zipf", "-a", "direct"]


@pytest.mark.parametrize(
    ("flags", "fragment"),
    [
        (["-b", "1K", "-e", "1G", "-i", "1K"], "at most 64 sizes"),
        (["-b", "1K", "-e", "1G", "-f", "1.0001"], "at most 64 sizes"),
        (["--sizes", ",".join(["1M"] * 65)], "at most 64 sizes"),
        (["--sizes", "1K:1G:xabc"], "a number > 1"),
        (["--sizes", "1K:1G:xinf"], "finite number > 1"),
        (["--sizes", "1G:1K:x2"], "MIN <= MAX"),
    ],
)
def test_sweeps_are_bounded_before_work(tmp_path, capsys, flags, fragment):
    rc, err, dt = run(capsys, [*BASE, *flags, "-J", str(tmp_path / "c.json")])
    assert rc == 2 and dt < 2.0 and fragment in err, err
    one_clear_line(err)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["compare", "-t", "dgx-h100", "-n", "1", "--traffic", "zipf", "-a", "", "-j", "1"], "--algorithms"),
        (["compare", "-t", "dgx-h100", "-n", "1", "--traffic", "zipf", "--sizes", "0", "-j", "1"], "--sizes"),
        (["compare", "-t", "dgx-h100", "-n", "1", "--traffic", "zipf", "--sizes", ",,,"], "--sizes"),
        (
            ["compare", "-t", "dgx-h100", "-n", "1", "--traffic", "zipf", "--sizes", ""],
            "--sizes",
        ),  # not the default
        (["compare", "-t", "dgx-h100", "-n", "1", "--traffic", "zipf", "--skew", "-3"], "--skew"),
        (["compare", "-t", "dgx-h100", "-n", "1", "--traffic", "zipf", "--plot", "p.svg"], "--plot"),
        (["bucket", "-t", "mi300x", "-n", "1", "--traffic", "zipf", "-b", "bogus"], "--backend"),
        (["bucket", "-t", "mi300x", "-n", "1", "--traffic", "zipf", "-a", "bogus"], "--algorithm"),
    ],
)
def test_requests_that_would_do_nothing_or_nothing_known_are_refused(capsys, argv, fragment):
    """An empty planner list or a zero size used to print an empty comparison with exit 0, and an unknown
    backend or planner a bucket key for it: each is one line naming the option."""
    rc, err, _dt = run(capsys, argv)
    assert rc == 2 and fragment in err, err
    one_clear_line(err)


COMPARE = [
    "compare",
    "-t",
    "dgx-h100",
    "-n",
    "1",
    "--traffic",
    "balanced",
    "--sizes",
    "1M",
    "-a",
    "direct",
    "-j",
    "1",
]


@pytest.mark.parametrize(
    ("flag", "name", "text"),
    [
        ("-J", "notes.json", '{"mine": "hand-written", "quoted": {"tool": "a2acc compare"}}\n'),
        ("--csv", "notes.csv", "My notes\n# tool: a2acc compare\nmine\n"),
    ],
)
def test_a_file_that_only_mentions_the_tool_is_not_replaced(tmp_path, capsys, flag, name, text):
    """A file is compare's own only when it starts as compare writes it; the tool's name inside a user's file
    is not enough (it was: the file was replaced without --force)."""
    path = tmp_path / name
    path.write_text(text)
    rc, err, _dt = run(capsys, [*COMPARE, flag, str(path)])
    assert rc == 2 and "--force" in err
    one_clear_line(err)
    assert path.read_text() == text


def test_outputs_it_wrote_are_replaced_and_symlinks_refused(tmp_path, capsys):
    js, csv = tmp_path / "c.json", tmp_path / "c.csv"
    for _ in range(2):  # the second run replaces what the first wrote
        rc, _err, _dt = run(capsys, [*COMPARE, "-J", str(js), "--csv", str(csv)])
        assert rc == 0
    link = tmp_path / "link.json"
    link.symlink_to(js)
    rc, err, _dt = run(capsys, [*COMPARE, "-J", str(link), "--force"])
    assert rc == 2 and "symbolic link" in err and link.is_symlink()
    one_clear_line(err)


def test_a_size_given_twice_with_workers(tmp_path, capsys):
    """Sizes that are one size after de-duplication took the workers' path and failed ("--jobs 2 is invalid")."""
    out = tmp_path / "r.json"
    argv = ["compare", "-t", "dgx-h100", "-n", "1", "--traffic", "uniform", "-a", "direct", "--jobs", "2"]
    assert main([*argv, "--sizes", "1M,1024K", "-J", str(out)]) == 0
    capsys.readouterr()
    assert [r["size"] for r in json.loads(out.read_text())["rows"]] == [1 << 20, 1 << 20]


def test_a_matrix_that_moves_nothing_between_gpus_is_refused(tmp_path, capsys):
    """It printed times of 0 and bandwidths of inf and plotted them."""
    import numpy as np

    path = tmp_path / "m.npy"
    np.save(path, np.diag(np.arange(1, 17, dtype=np.int64) * 1024))  # self-copies only
    plot = tmp_path / "c.png"
    argv = [
        "compare",
        "-t",
        "dgx-h100",
        "-n",
        "2",
        "--traffic",
        str(path),
        "-a",
        "direct",
        "--plot",
        str(plot),
    ]
    rc, err, _ = run(capsys, argv)
    assert rc == 2 and "no bytes between GPUs" in err and "m.npy" in err
    one_clear_line(err)
    assert not plot.exists()


@pytest.mark.parametrize(
    ("entries", "fragment"),
    [
        (["fastt"], "known planners"),
        (["fast[shap=staged]"], "fast[shap=staged]: shap"),
        (["fast[shape=foo]"], "allowed: auto, staged, grouped, direct"),
        (["fast[shape=staged"], "without its ']'"),
        (["fast,fast"], "each entry once"),
        (["fast", "fast"], "each entry once"),  # -a given twice lists the entries of both
        (["fast,,direct"], "empty entry"),
        (["direct[shape=staged]"], "not an option here"),
        (["mcf[time_limit=-1]"], "time_limit"),
    ],
)
def test_bad_planner_entries_are_one_line_exit_2_before_work(tmp_path, capsys, entries, fragment):
    """Planner entries with options in brackets (``-a 'fast,fast[shape=staged]'``): a misspelt planner, key,
    value or bracket is one line naming --algorithms and the entry, exit 2, before the header, nothing written."""
    argv = ["compare", "-t", "dgx-h100", "-n", "2", "--traffic", "zipf", "-J", str(tmp_path / "c.json")]
    for e in entries:
        argv += ["-a", e]
    rc, err, dt = run(capsys, argv)
    assert rc == 2 and "--algorithms" in err and fragment in err, err
    one_clear_line(err)
    assert dt < 2.0 and list(tmp_path.iterdir()) == []
    assert "# a2acc compare" not in capsys.readouterr().out
