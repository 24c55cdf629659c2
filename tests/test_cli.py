"""The command line: exit codes, messages naming file/field/value, no partial output."""

from __future__ import annotations

import json

import numpy as np
import pytest

from a2acc.cli import main
from a2acc.model.traffic import generate


def test_pipe_runs_end_to_end(tmp_path, capsys):
    m = tmp_path / "m.npy"
    plan = tmp_path / "plan.json"
    assert (
        main(
            [
                "traffic",
                "gen",
                "zipf",
                "--topology",
                "dgx-h100",
                "--servers",
                "2",
                "--size",
                "1M",
                "-o",
                str(m),
            ]
        )
        == 0
    )
    assert main(["traffic", "show", str(m)]) == 0
    assert (
        main(["plan", "--topology", "dgx-h100", "--servers", "2", "--traffic", str(m), "-o", str(plan)]) == 0
    )
    assert main(["verify", str(plan)]) == 0
    assert main(["report", str(plan)]) == 0
    assert main(["topo", "show", "mi300x", "--servers", "3"]) == 0
    out = capsys.readouterr().out
    assert "OK" in out and "n=3 servers" in out


def test_plan_help_lists_planners(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["plan", "--help"])
    assert exc.value.code == 0
    assert "direct" in capsys.readouterr().out


def test_bad_matrix_size_no_output(tmp_path, capsys):
    m = tmp_path / "m.txt"
    m.write_text("1 2\n3 4\n")
    out = tmp_path / "plan.json"
    rc = main(["plan", "--topology", "dgx-h100", "--traffic", str(m), "-o", str(out)])
    assert rc == 2
    err = capsys.readouterr().err
    assert str(m) in err and "32 x 32" in err
    assert not out.exists()


def test_verify_exit_codes(tmp_path, capsys):
    m = tmp_path / "m.npy"
    np.save(m, np.full((8, 8), 4096, dtype=np.int64))
    plan = tmp_path / "p.json"
    assert main(["plan", "-t", "dgx-h100", "-n", "1", "-m", str(m), "-o", str(plan)]) == 0
    doc = json.loads(plan.read_text())
    doc["ops"] = doc["ops"][1:]
    for i, row in enumerate(doc["ops"]):
        row[0] = i
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    assert main(["verify", str(bad)]) == 1
    assert "never written" in capsys.readouterr().err
    doc["version"] = 9
    bad.write_text(json.dumps(doc))
    assert main(["verify", str(bad)]) == 2
    assert "version" in capsys.readouterr().err


def test_unknown_algorithm_and_topology(tmp_path, capsys):
    m = tmp_path / "m.npy"
    np.save(m, np.ones((8, 8), dtype=np.int64))
    assert (
        main(["plan", "-t", "dgx-h100", "-n", "1", "-m", str(m), "-a", "magic", "-o", str(tmp_path / "x")])
        == 2
    )
    assert "known planners" in capsys.readouterr().err
    assert main(["topo", "show", "nope"]) == 2
    assert "presets" in capsys.readouterr().err


def _a2acc_stdout(tmp_path, *argv: str) -> list[str]:
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "a2acc", *argv], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    return out.stdout.splitlines()


def test_solver_text_never_reaches_stdout(tmp_path):
    """HiGHS >= 1.12 prints a banner from its constructor; a2acc's stdout must hold only a2acc's lines."""
    import re

    m = generate("zipf", 16, 16 << 20, seed=1)
    np.save(tmp_path / "m.npy", m)
    topo = ["-t", "dgx-h100", "-n", "2"]
    lines = _a2acc_stdout(tmp_path, "bounds", *topo, "-m", "m.npy", "--mcf")
    terms = ("term", "flash-thm1", "gpu-cut", "self", "mcf", "peak-model", "lower", "nic-cut")
    assert lines and all(ln.split()[0] in terms for ln in lines), lines
    assert any(ln.startswith("mcf ") for ln in lines)
    lines = _a2acc_stdout(tmp_path, "compare", *topo, "--traffic", "m.npy", "-a", "syccl,mcf")
    row = re.compile(r"^\s+\d+\s+\d+\s+\w+\s+none\s+-1\s")
    assert lines and all(ln.startswith("#") or row.match(ln) for ln in lines), lines
    assert sum(bool(row.match(ln)) for ln in lines) == 2


def test_bounds_solves_the_mcf_lp_of_a_direct_graph_by_default_only_while_it_is_small(tmp_path, capsys):
    """a2acc bounds on a direct-connect graph: the MCF term by default while its LP is small (8 x 8 torus:
    16,384 variables); above that a line says it was not solved and how to ask for it, and --mcf solves it
    after a line on standard error saying how large it is."""
    from a2acc.cli.bounds import AUTO_MCF_VARIABLES

    def run(dims: str, *extra: str) -> tuple[list[str], str]:
        topo = tmp_path / f"t{dims}.yaml"
        topo.write_text(f"version: 1\ndirect: {{kind: torus, dims: [{dims}], bandwidth: 25}}\n")
        n = int(np.prod([int(x) for x in dims.split(",")]))
        np.save(tmp_path / "m.npy", generate("zipf", n, 16 << 20, seed=1))
        assert main(["bounds", "-t", str(topo), "-m", str(tmp_path / "m.npy"), *extra]) == 0
        got = capsys.readouterr()
        return got.out.splitlines(), got.err

    def solved(lines: list[str]) -> bool:
        return any(ln.startswith("mcf ") and "HiGHS" in ln for ln in lines)

    small, err = run("8,8")
    assert AUTO_MCF_VARIABLES >= 8 * 8 * 8 * 4 and solved(small) and err == ""
    large, err = run("9,9")  # 81 x 324 = 26,244 variables
    assert not solved(large) and err == ""
    (skipped,) = [ln for ln in large if ln.startswith("mcf")]
    assert "not solved" in skipped and "26,244 variables" in skipped and "--mcf" in skipped
    asked, err = run("9,9", "--mcf")
    assert solved(asked)
    assert (
        err.startswith("a2acc: bounds: solving the max-concurrent-flow LP (26,244 variables")
        and "minutes" in err
    )


LIGHT = r"""
import sys
from a2acc.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
heavy = ("numpy", "yaml", "networkx", "a2acc.pipeline", "a2acc.ir.program", "a2acc.model.topology")
print("heavy:" + ",".join(sorted(
    m for m in sys.modules
    if m.split(".")[0] in heavy or m in heavy
    or (m.startswith("a2acc.planners.") or m.startswith("a2acc.backends.") or m.startswith("a2acc.analysis"))
)))
"""


@pytest.mark.parametrize("argv", [["--version"], ["--help"], ["compile", "--help"], ["compare", "--help"]])
def test_the_parser_is_built_without_numpy_or_a_planner(argv):
    """``a2acc --version`` and every ``--help`` build the whole parser from the registries' lines and
    a2acc.defaults: no numpy, YAML, networkx, pipeline, planner, backend or simulator module is imported (they
    cost most of the start-up; a subcommand imports what it runs when it runs)."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", LIGHT, *argv], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "heavy:", out.stdout


def test_help_lists_what_the_registries_and_defaults_name(capsys):
    """What the parser shows without importing them: planners, passes, backends, presets, generators."""
    from a2acc.backends import TARGETS
    from a2acc.defaults import GENERATORS, PRESETS
    from a2acc.ir.passes import PASSES
    from a2acc.planners import PLANNERS

    for argv, names in (
        (["plan", "--help"], [*PLANNERS.names(), *PASSES.names(), *PRESETS]),
        (["compile", "--help"], TARGETS.names()),
        (["traffic", "gen", "--help"], list(GENERATORS)),
    ):
        with pytest.raises(SystemExit):
            main(argv)
        text = capsys.readouterr().out
        assert all(n in text for n in names), (argv, [n for n in names if n not in text])
