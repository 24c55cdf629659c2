"""Bad inputs of `a2acc calibrate`: rows that are no measurement, values no run can produce."""

from __future__ import annotations

import pytest

from tests.cli.bad_inputs.common import run

HEAD = """# nThread 1 nGpus 1 minBytes 1048576 maxBytes 1073741824 step: 2(factor) warmup iters: 5 iters: 20
#
# Using devices
{ranks}#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
"""


def _log(rows: list[str]) -> str:
    ranks = "".join(
        f"#  Rank {r:2d} Group  0 Pid  1 on host device  {r % 8} [0x00] NVIDIA H100\n" for r in range(16)
    )
    return HEAD.format(ranks=ranks) + "".join(r + "\n" for r in rows)


def _row(size: int, time: str, wrong: str = "0") -> str:
    return f"{size:>12d} {size // 4:>13d}     float    none      -1 {time:>8s}   1.00   0.94 {wrong:>6s}    N/A    N/A    N/A    N/A"


def _calibrate(tmp_path, capsys, rows):
    log = tmp_path / "alltoall_perf.txt"
    log.write_text(_log(rows))
    out = tmp_path / "p.yaml"
    rc, err, _ = run(
        capsys, ["calibrate", str(log), "-t", "dgx-h100", "-n", "2", "--fit", "alpha_us", "-o", str(out)]
    )
    return rc, err, out


def test_rows_with_wrong_results_na_or_zero_times_are_left_out_with_a_warning(tmp_path, capsys):
    good = [_row(1 << s, f"{50 * 2 ** (s - 20):.1f}") for s in range(20, 27)]
    bad = [_row(1 << 27, "2100.0", wrong="3"), _row(1 << 28, "N/A"), _row(1 << 29, "0.00")]
    rc, err, out = _calibrate(tmp_path, capsys, good + bad)
    assert rc == 0, err
    warnings = [ln for ln in err.splitlines() if ln.startswith("a2acc: warning: ")]
    assert len(warnings) == 3
    for frag, line in (("3 wrong results", 31), ("N/A", 32), ("time is 0", 33)):
        assert any(frag in w and f"line {line}" in w and "alltoall_perf.txt" in w for w in warnings), warnings
    assert out.exists()


def test_a_log_with_no_usable_row_is_an_error(tmp_path, capsys):
    rc, err, out = _calibrate(tmp_path, capsys, [_row(1 << 20, "50.0", wrong="1"), _row(1 << 21, "N/A")])
    assert rc == 2 and "no usable data rows" in err and "2 rows left out" in err
    assert not out.exists()


@pytest.mark.parametrize(
    ("row", "fragment"),
    [
        (_row(10**30, "50.0"), "bytes per rank"),
        ("1" + "0" * 400 + " 4 float none -1 50.0 1 1 0", "bytes per rank"),
        (_row(1 << 20, "1e300"), "a time in us"),
        (_row(1 << 20, "1e999"), "a time in us"),
        (_row(1 << 20, "fast"), "a time in us"),
        (_row(1 << 20, "50.0", wrong="x"), "#wrong"),
        (_row(-(1 << 20), "50.0"), "a whole number >= 0"),  # was skipped as a line that is no row
    ],
)
def test_values_no_run_can_produce_are_one_clear_line(tmp_path, capsys, row, fragment):
    rc, err, out = _calibrate(tmp_path, capsys, [row])
    assert rc == 2 and fragment in err and "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert lines[-1].startswith("a2acc: error: ") and len(lines) == 1, err
    assert not out.exists()


@pytest.mark.parametrize("size", ["64M", "256MB", "1.5G", "6.7e7", "67108864.0", "64Mi", "+64"])
def test_a_row_whose_size_is_no_byte_count_is_named_not_dropped(tmp_path, capsys, size):
    """A data row (size, count, type, ...) whose size column is anything but a byte count (a unit suffix, a
    float) is one clear line naming the file, the line and the value: never dropped while the other sizes are
    fitted."""
    rows = [_row(1 << s, f"{50 * 2 ** (s - 20):.1f}") for s in range(20, 25)]
    rows[3] = rows[3].replace(str(1 << 23), size.rjust(len(str(1 << 23))), 1)
    rc, err, out = _calibrate(tmp_path, capsys, rows)
    assert rc == 2 and "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("a2acc: error: "), err
    line = _log([]).count("\n") + 4  # the fourth row
    assert "alltoall_perf.txt" in err and f"line {line}, size" in err and repr(size) in err and "bytes" in err
    assert not out.exists()


def test_every_row_is_used_or_named(tmp_path, capsys):
    """A size-0 row (nccl-tests -b 0) moves nothing: left out, and said so like every other row left out."""
    rows = [_row(0, "0.50"), *(_row(1 << s, f"{50 * 2 ** (s - 20):.1f}") for s in range(20, 25))]
    rc, err, out = _calibrate(tmp_path, capsys, rows)
    assert rc == 0, err
    warnings = [ln for ln in err.splitlines() if ln.startswith("a2acc: warning: ")]
    line = _log([]).count("\n") + 1
    assert len(warnings) == 1 and f"line {line}:" in warnings[0] and "size 0" in warnings[0], warnings
    assert out.exists()


def test_a_log_of_another_server_count_suggests_the_servers_to_give(tmp_path, capsys):
    """A 16-rank nccl-tests log read against a 4-server preset of 8 GPUs: the count that fits is named."""
    log = tmp_path / "alltoall_perf.txt"
    log.write_text(_log([_row(1 << s, f"{50 * 2 ** (s - 20):.1f}") for s in range(20, 25)]))
    out = tmp_path / "p.yaml"
    rc, err, _ = run(capsys, ["calibrate", str(log), "-t", "dgx-h100", "--fit", "alpha_us", "-o", str(out)])
    assert rc == 2 and "16 ranks" in err and "32 GPUs" in err and "--servers 2" in err, err
    assert len([ln for ln in err.splitlines() if ln.strip()]) == 1 and not out.exists()


def _fitted_alpha(tmp_path, capsys, text: str) -> tuple[int, str, str]:
    log = tmp_path / "alltoall_perf.txt"
    log.write_text(text)
    out = tmp_path / "p.yaml"
    rc, err, _ = run(
        capsys, ["calibrate", str(log), "-t", "dgx-h100", "-n", "2", "--fit", "alpha_us", "-o", str(out)]
    )
    return rc, err, out.read_text() if out.exists() else ""


GOOD = [_row(1 << s, f"{50 * 2 ** (s - 20):.1f}") for s in range(20, 27)]


def test_real_world_output_variants_read_as_the_plain_log(tmp_path, capsys):
    """What launchers and libraries add to nccl-tests output (Open MPI's and srun's line prefixes, the command
    echo, NCCL INFO and UCX warning lines) is read past; old versions' rows (no root column, a blank redop, a
    float error column) and the columns current versions may append (timestamps, #bitdiff, per-iteration
    times) are read by their layout from the left; a binary's NAME_SUFFIX is still alltoall_perf: each variant
    fits what the plain log fits."""
    plain = _log(GOOD)
    rc, err, want = _fitted_alpha(tmp_path, capsys, plain)
    assert rc == 0, err
    noisy = (
        "/opt/nccl-tests/build/alltoall_perf -b 1M -e 64M -f 2 -g 1\n"
        "[1748937999.151440] [host:1:0]     ucp_context.c:1951 UCX  WARN  UCP API version is incompatible\n"
        + plain.replace(
            "# Using devices\n", "# Using devices\nhost:1:1 [0] NCCL INFO Bootstrap : Using eth0\n"
        )
    )
    mpi = "".join(f"[1,0]<stdout>:{ln}\n" for ln in plain.splitlines())
    srun = "".join(f" 0: {ln}\n" for ln in plain.splitlines())
    old_rows = [r.replace("    none      -1 ", " ") for r in GOOD]  # old columns: blank redop, no root
    old = _log(old_rows).replace("redop    root ", "redop ").replace("#wrong", " error")
    old = old.replace(" 0    N/A", " 0e+00    N/A")

    def rows_edited(edit):
        return _log([" ".join(edit(r.split())) for r in GOOD])

    stamped = rows_edited(lambda t: [*t, "2025-11-27", "10:00:00"])  # -Z: a timestamp after the row
    bitdiff = rows_edited(lambda t: [*t[:9], "0", *t[9:], "0"])  # bitwise checks: #bitdiff after #wrong
    per_iter = rows_edited(lambda t: [*t[:9], "45.0", "60.0", "55.0", "3.00", *t[9:], "1", "2", "3", "4"])
    suffixed = "# Collective test starting: alltoall_perf_mpi\n" + plain  # built with NAME_SUFFIX=_mpi
    variants = {"noisy": noisy, "mpi": mpi, "srun": srun, "old": old, "stamped": stamped, "bitdiff": bitdiff}
    variants |= {"per-iteration": per_iter, "suffixed": suffixed}
    for name, text in variants.items():
        rc, err, got = _fitted_alpha(tmp_path, capsys, text)
        assert rc == 0 and "Traceback" not in err, (name, err)
        fitted = [ln for ln in got.splitlines() if ln.startswith("alpha_us")]
        assert fitted == [ln for ln in want.splitlines() if ln.startswith("alpha_us")], (name, got)


@pytest.mark.parametrize(
    ("edit", "fragment"),
    [
        (lambda t: "# Collective test starting: all_reduce_perf\n" + t, "all_reduce"),
        (lambda t: t.replace("    none      -1 ", "     sum      -1 "), "redop"),
    ],
)
def test_another_collectives_output_is_refused(tmp_path, capsys, edit, fragment):
    rc, err, got = _fitted_alpha(tmp_path, capsys, edit(_log(GOOD)))
    assert rc == 2 and fragment in err and "alltoall" in err and "Traceback" not in err, err
    assert got == ""


@pytest.mark.parametrize(("count", "allowed"), [(0, "integer >= 1"), (100_000_000, "at most")])
def test_a_server_count_in_a_log_name_the_preset_cannot_have_is_refused(tmp_path, capsys, count, allowed):
    """Without -n a FAST log's ``<n>n_`` scales the preset: a count it cannot take names the file, not --servers."""
    log = tmp_path / f"{count}n_fixed_sz_a.txt"
    log.write_text("1 0 1 1 1 1 1 0 1 0 1 1 0 1 0 1\n")
    out = tmp_path / "p.yaml"
    rc, err, _ = run(capsys, ["calibrate", str(log), "-t", "mi300x-100g", "-o", str(out)])
    assert rc == 2 and log.name in err and "file name" in err and allowed in err, err
    assert "--servers" not in err and not out.exists()
