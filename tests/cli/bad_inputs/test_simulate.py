"""Bad inputs of `a2acc simulate`."""

from __future__ import annotations

import numpy as np

from a2acc.cli import main
from a2acc.model.traffic import generate
from tests.cli.bad_inputs.common import run


def test_simulate_refuses_a_plan_for_another_topology(tmp_path, capsys):
    np.save(tmp_path / "m.npy", generate("zipf", 16, 1 << 20, 1))
    assert (
        main(
            [
                "plan",
                "-t",
                "dgx-h100",
                "-n",
                "2",
                "-m",
                str(tmp_path / "m.npy"),
                "-o",
                str(tmp_path / "p.json"),
            ]
        )
        == 0
    )
    rc, err, _ = run(capsys, ["simulate", str(tmp_path / "p.json"), "-t", "dgx-a100", "-n", "2"])
    assert rc == 2 and "another topology" in err


def test_a_plan_that_moves_nothing_simulates_to_zero(tmp_path, capsys):
    """An all-zero matrix plans to no ops; simulating it printed a ZeroDivisionError traceback."""
    np.save(tmp_path / "z.npy", np.zeros((8, 8), dtype=np.int64))
    plan = str(tmp_path / "p.json")
    assert (
        main(["plan", "-t", "dgx-h100", "-n", "1", "-m", str(tmp_path / "z.npy"), "-a", "direct", "-o", plan])
        == 0
    )
    for engine in ("fast", "reference"):
        capsys.readouterr()
        assert main(["simulate", plan, "-t", "dgx-h100", "-n", "1", "--engine", engine]) == 0
        assert "nothing to move" in capsys.readouterr().out
