"""Bad inputs of `a2acc compile`: backend options, an empty all-to-all, files it did not write."""

from __future__ import annotations

import numpy as np
import pytest

from a2acc.cli import main
from a2acc.model.traffic import generate
from tests.cli.bad_inputs.common import one_clear_line, run, zipf16


@pytest.mark.parametrize(
    ("opt", "fragment"),
    [
        ("instances=0", "instances"),
        ("instances=2147483648", "allowed 1 to 128"),  # (it overflowed the compiled lowering's int)
        ("size_range=1M:1K", "MIN must be <= MAX"),
        ("size_range=1K:2K", "buffer size"),
    ],
)
def test_backend_options(tmp_path, capsys, opt, fragment):
    m = zipf16(tmp_path / "m.npy")
    rc, err, _ = run(
        capsys, ["compile", "-t", "dgx-h100", "-n", "2", "-m", m, "--opt", opt, "-o", str(tmp_path / "o")]
    )
    assert rc == 2 and fragment in err, err
    one_clear_line(err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.npy"]


def test_all_zero_matrix_plans_and_compile_refuses_cleanly(tmp_path, capsys):
    np.save(tmp_path / "z.npy", np.zeros((16, 16), dtype=np.int64))
    assert (
        main(
            [
                "plan",
                "-t",
                "dgx-h100",
                "-n",
                "2",
                "-m",
                str(tmp_path / "z.npy"),
                "-o",
                str(tmp_path / "p.json"),
            ]
        )
        == 0
    )
    assert main(["verify", str(tmp_path / "p.json")]) == 0
    capsys.readouterr()
    rc, err, _ = run(
        capsys,
        ["compile", "-t", "dgx-h100", "-n", "2", "-m", str(tmp_path / "z.npy"), "-o", str(tmp_path / "out")],
    )
    assert rc == 2 and "empty all-to-all" in err
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.manifest.json").exists()


def test_compile_refuses_foreign_files_and_replaces_its_own_as_a_set(tmp_path, capsys):
    np.save(tmp_path / "m.npy", generate("zipf", 16, 1 << 20, 1))
    args = [
        "compile",
        "-t",
        "dgx-h100",
        "-n",
        "2",
        "-m",
        str(tmp_path / "m.npy"),
        "-o",
        str(tmp_path / "out"),
    ]
    assert main([*args, "-a", "fast"]) == 0
    assert main([*args, "-a", "direct", "--opt", "dialect=rccl"]) == 0
    (xml,) = (tmp_path / "out").iterdir()  # the first XML was a2acc's: replaced, not left beside
    assert xml.name.endswith("-rccl.xml") and "direct" in xml.name
    capsys.readouterr()
    assert main(["verify", str(xml)]) == 0  # finds the manifest beside the directory, and its dialect
    assert "manifest" in capsys.readouterr().out
    (tmp_path / "out" / "theirs.xml").write_text("<algo/>")
    rc, err, _ = run(capsys, [*args, "-a", "fast"])
    assert rc == 2 and "theirs.xml" in err and "--force" in err
    assert main([*args, "-a", "fast", "--force"]) == 0
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert "theirs.xml" in names and len(names) == 2
    (tmp_path / "out" / "notes.txt").write_text("mine")
    rc, err, _ = run(capsys, [*args, "-a", "fast", "--force"])
    assert rc == 2 and "notes.txt" in err
    assert (tmp_path / "out" / "notes.txt").read_text() == "mine"


def test_compile_refuses_an_output_whose_parent_does_not_exist(tmp_path, capsys):
    """As every single-file output does: a typo in -o must not create a tree of directories."""
    m = tmp_path / "m.npy"
    np.save(m, generate("zipf", 8, 1 << 20, 1))
    out = tmp_path / "no" / "such" / "algos"
    rc, err, _dt = run(
        capsys,
        [
            "compile",
            "-t",
            "dgx-h100",
            "-n",
            "1",
            "--traffic",
            str(m),
            "-a",
            "direct",
            "--backend",
            "msccl-xml",
            "-o",
            str(out),
        ],
    )
    assert rc == 2 and "does not exist" in err and not (tmp_path / "no").exists(), err
    one_clear_line(err)


def test_instances_past_the_channel_limit_is_an_input_error(tmp_path, capsys):
    """``--opt instances=33`` multiplied the plan's channels past MSCCL's 32 and was reported as a
    verification failure of a2acc's own output ("a2acc bug", exit 1)."""
    from tests.cli.bad_inputs.common import zipf16

    m = zipf16(tmp_path / "m.npy")
    argv = ["compile", "-t", "dgx-h100", "-n", "2", "-m", m, "-a", "direct", "--opt", "instances=33"]
    rc, err, _dt = run(capsys, [*argv, "-o", str(tmp_path / "out")])
    assert rc == 2 and "instances" in err and "at most 32" in err
    one_clear_line(err)
    assert not (tmp_path / "out").exists()


def test_force_never_writes_over_a_file_it_did_not_write(tmp_path, capsys):
    """``--force`` writes beside files a2acc did not write, never over one that has the name it would use."""
    m = zipf16(tmp_path / "m.npy")
    out = tmp_path / "o"
    argv = ["compile", "-t", "dgx-h100", "-n", "2", "-m", m, "-o", str(out)]
    assert main(argv) == 0
    capsys.readouterr()
    (name,) = [p.name for p in out.iterdir()]
    for p in [*out.iterdir(), tmp_path / "o.manifest.json"]:
        p.unlink()
    (out / name).write_text("user xml", encoding="utf-8")
    rc, err, _ = run(capsys, [*argv, "--force"])
    assert rc == 2 and name in err
    one_clear_line(err)
    assert (out / name).read_text(encoding="utf-8") == "user xml"


def test_mscclpp_thread_blocks_are_bounded(tmp_path, capsys):
    m = zipf16(tmp_path / "m.npy")
    argv = [
        "compile",
        "-t",
        "dgx-h100",
        "-n",
        "2",
        "-m",
        m,
        "-b",
        "mscclpp-json",
        "-o",
        str(tmp_path / "p.json"),
    ]
    rc, err, _ = run(capsys, [*argv, "--opt", "max_threadblocks=2147483648"])
    assert rc == 2 and "max_threadblocks" in err
    one_clear_line(err)
