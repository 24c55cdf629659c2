from __future__ import annotations

import json

from a2acc.cli import main

KEYS = {"time_s", "algbw_GBps", "busbw_GBps", "bound_s", "schedule_s", "stages", "algorithm", "size"}


def test_compare_json_and_table_and_plot(tmp_path, capsys):
    args = [
        "compare",
        "-t",
        "dgx-h100",
        "-n",
        "2",
        "--traffic",
        "zipf",
        "--sizes",
        "1M:4M:x4",
        "-a",
        "fast,spreadout",
    ]
    assert main([*args, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    rows = doc["rows"]
    assert len(rows) == 4
    for r in rows:
        assert set(r) >= KEYS
        assert r["nwrong"] == 0 and r["time_s"] >= r["bound_s"] * (1 - 1e-9)
        assert r["out_of_place"]["alg_bw"] == r["algbw_GBps"]
    png = tmp_path / "cmp.png"
    assert main([*args, "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "#       size         count      type   redop    root     time   algbw   busbw  #wrong" in out
    assert "# a2acc algorithm: fast" in out and "# Avg bus bandwidth" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bounds_and_simulate_commands(tmp_path, capsys):
    m = tmp_path / "m.npy"
    plan = tmp_path / "p.json"
    assert main(["traffic", "gen", "uniform", "-t", "mi300x", "-n", "2", "--size", "4M", "-o", str(m)]) == 0
    assert main(["bounds", "-t", "mi300x", "-n", "2", "-m", str(m), "--mcf"]) == 0
    assert "<- binds" in capsys.readouterr().out
    assert main(["plan", "-t", "mi300x", "-n", "2", "-m", str(m), "-a", "fast", "-o", str(plan)]) == 0
    assert main(["simulate", str(plan), "-t", "mi300x", "-n", "2"]) == 0
    out = capsys.readouterr().out
    assert "algbw" in out and "% of bound" in out
    assert main(["simulate", str(plan), "-t", "mi300x", "-n", "3"]) == 2
