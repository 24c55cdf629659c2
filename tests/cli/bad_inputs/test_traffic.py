"""Bad traffic matrices (read by `traffic show`, `plan`, `compile`) and `traffic gen`'s limits and outputs."""

from __future__ import annotations

import json

import numpy as np
import pytest

from a2acc.cli import main
from tests.cli.bad_inputs.common import one_clear_line, run

NPY = {
    "zero-bytes.npy": None,
    "empty.npy": np.zeros((0, 0)),
    "uint64-wraps.npy": np.full((16, 16), 2**63 + 5, dtype=np.uint64),
    "int64-max.npy": np.full((16, 16), 2**63 - 1, dtype=np.int64),
    "row-overflow.npy": np.full((16, 16), 2**47, dtype=np.int64),
    "bool.npy": np.ones((16, 16), dtype=bool),
    "float-frac.npy": np.full((16, 16), 1.5),
}


def _npy_header(shape: str, version: int = 1) -> bytes:
    """A .npy file whose header declares ``shape`` (text as written), with 64 bytes of data."""
    import struct

    head = ("{'descr': '<i8', 'fortran_order': False, 'shape': " + shape + ", }").encode()
    size = 10 if version == 1 else 12
    head += b" " * (64 - (size + len(head) + 1) % 64) + b"\n"
    length = struct.pack("<H", len(head)) if version == 1 else struct.pack("<I", len(head))
    return b"\x93NUMPY" + bytes([version, 0]) + length + head + b"\0" * 64


RAW = {  # headers numpy's own parser chokes on in other ways than ValueError
    "unbalanced-header.npy": _npy_header("(16,16"),
    "overflowing-shape.npy": _npy_header(f"({2**62}, {2**62})"),
    "five-thousand-digits.npy": _npy_header("(" + "9" * 5000 + ", 2)", version=2),
}
TEXT = {
    "strings.json": json.dumps([["1"] * 16] * 16),
    "mixed.json": json.dumps([[1, "x"], [3, 4]]),
    "ragged.csv": "1,2\n3\n",
    "neg.csv": "\n".join(",".join(["-1"] * 16) for _ in range(16)),
    # float() reads these as numbers; a matrix file means plain ASCII numbers
    "underscore.csv": "\n".join(",".join(["1_000"] * 16) for _ in range(16)),
    "arabic-digits.csv": "\n".join(",".join(["\u0661"] * 16) for _ in range(16)),
    "matrix-twice.json": '{"matrix": ' + json.dumps([[1] * 16] * 16) + ', "matrix": [[1]]}',
}


@pytest.fixture
def files(tmp_path):
    for name, arr in NPY.items():
        if arr is None:
            (tmp_path / name).write_bytes(b"")
        else:
            np.save(tmp_path / name, arr)
    for name, text in TEXT.items():
        (tmp_path / name).write_text(text)
    for name, data in RAW.items():
        (tmp_path / name).write_bytes(data)
    return tmp_path


@pytest.mark.parametrize("name", [*NPY, *RAW, *TEXT])
@pytest.mark.parametrize("cmd", ["show", "plan", "compile"])
def test_bad_matrices(files, capsys, name, cmd):
    before = sorted(p.name for p in files.iterdir())
    path = str(files / name)
    argv = {
        "show": ["traffic", "show", path],
        "plan": ["plan", "-t", "dgx-h100", "-n", "2", "-m", path, "-o", str(files / "p.json")],
        "compile": ["compile", "-t", "dgx-h100", "-n", "2", "-m", path, "-o", str(files / "out")],
    }[cmd]
    rc, err, dt = run(capsys, argv)
    assert rc == 2 and dt < 2.0
    one_clear_line(err)
    assert name in err and len(err) < 600
    assert sorted(p.name for p in files.iterdir()) == before


def test_generator_limits(tmp_path, capsys):
    rc, err, dt = run(
        capsys, ["traffic", "gen", "zipf", "--ranks", "200000", "--size", "1M", "-o", str(tmp_path / "x.npy")]
    )
    assert rc == 2 and dt < 1.0 and "--ranks" in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["moe", "--ranks", "8", "--tokens", "100", "--experts", "1000000000"], "--experts"),
        (["moe", "--ranks", "8", "--tokens", "100000000000000"], "--tokens"),
        (["moe", "--ranks", "8", "--size", "1P", "--hidden", "1"], "--size"),
        (["zipf", "--ranks", "8", "--size", "100000T"], "--size"),
        (["zipf", "--ranks", "8", "--size", "1M", "--seed", "-1"], "--seed"),
        (["lognormal", "--ranks", "8", "--size", "1M", "--sigma", "1000"], "--sigma"),
        (["lognormal", "--ranks", "8", "--size", "1M", "--gini", "1.5"], "--gini"),
        (["lognormal", "--ranks", "2", "--size", "1M", "--gini", "0.9"], "--gini"),
        (["zipf", "--ranks", "8", "--size", "1M", "--gini", "0.2"], "--gini"),
        (["w3", "--ranks", "8", "--experts", "12"], "--experts"),
        (["w3", "--ranks", "8", "--ep", "3"], "--ep"),
        (["w1", "--ranks", "8", "--top-k", "100"], "--top-k"),
        (["w6", "--ranks", "8", "--step", "-1"], "--step"),
        (["w4", "--ranks", "8", "--ragged", "2"], "--ragged"),
        (["w2", "--ranks", "64", "--tokens", "10000000"], "--tokens"),
        (["w2", "--ranks", "8", "--bytes-per-token", "1000000000000000"], "--bytes-per-token"),
        (["w2", "--ranks", "8", "--hidden", "0"], "--hidden"),
        (["zipf", "--ranks", "8", "--size", "1M", "--align", "99999999999999999999"], "--align"),
        (
            ["zipf", "--ranks", "8", "--size", "1024T"],
            "traffic gen zipf: row",
        ),  # the generator's, not the file's
    ],
)
def test_generator_sizes_and_seeds_are_bounded_before_work(tmp_path, capsys, args, flag):
    """What would take hours or overflow (a billion experts, 1e14 tokens, 1e17 bytes per rank) and what numpy
    refuses with a traceback (a negative seed) are one line naming the option, before any work."""
    try:
        rc, err, dt = run(capsys, ["traffic", "gen", *args, "-o", str(tmp_path / "x.npy")])
    except SystemExit as exc:  # argparse's own refusal (the usage line, then the error): exit 2 as well
        rc, err, dt = int(exc.code or 0), capsys.readouterr().err, 0.0
    assert rc == 2 and dt < 2.0 and flag in err and "Traceback" not in err, err
    assert list(tmp_path.iterdir()) == []


GEN = ["traffic", "gen", "zipf", "--ranks", "16", "--size", "1M"]


def test_gen_never_replaces_a_file_it_cannot_prove_it_wrote(tmp_path, capsys):
    """One rule for every command that writes: an a2acc plan is not a matrix a2acc wrote."""
    plan = tmp_path / "plan.json"
    np.save(tmp_path / "m.npy", np.full((16, 16), 1 << 16, dtype=np.int64))
    assert main(["plan", "-t", "dgx-h100", "-n", "2", "-m", str(tmp_path / "m.npy"), "-o", str(plan)]) == 0
    kept = plan.read_bytes()
    rc, err, _ = run(capsys, [*GEN, "--seed", "1", "-o", str(plan)])
    assert rc == 2 and "cannot prove it wrote" in err and "--force" in err
    one_clear_line(err)
    assert plan.read_bytes() == kept
    assert main(["plan", "-t", "dgx-h100", "-n", "2", "-m", str(tmp_path / "m.npy"), "-o", str(plan)]) == 0


@pytest.mark.parametrize("suffix", [".npy", ".csv", ".txt"])
def test_gen_rewrites_identical_bytes_and_refuses_other_unmarked_files(tmp_path, capsys, suffix):
    out = tmp_path / f"m{suffix}"
    assert main([*GEN, "--seed", "1", "-o", str(out)]) == 0
    first = out.read_bytes()
    assert main([*GEN, "--seed", "1", "-o", str(out)]) == 0 and out.read_bytes() == first  # same bytes
    capsys.readouterr()
    rc, err, _ = run(capsys, [*GEN, "--seed", "2", "-o", str(out)])  # .npy/.csv/text carry no mark
    assert rc == 2 and "--force" in err and out.read_bytes() == first
    assert main([*GEN, "--seed", "2", "-o", str(out), "--force"]) == 0 and out.read_bytes() != first


def test_gen_replaces_its_own_json_matrix(tmp_path):
    out = tmp_path / "m.json"
    assert main([*GEN, "--seed", "1", "-o", str(out)]) == 0
    assert json.loads(out.read_text())["format"] == "a2acc.matrix"
    assert main([*GEN, "--seed", "2", "-o", str(out)]) == 0  # marked as a2acc's: replaced without --force
    (tmp_path / "theirs.json").write_text('{"matrix": [[0]]}')
    assert main([*GEN, "--seed", "2", "-o", str(tmp_path / "theirs.json")]) == 2


def test_deeply_nested_json_matrix_is_one_clear_line(tmp_path, capsys):
    p = tmp_path / "deep.json"
    p.write_text("[" * 100_000 + "]" * 100_000)
    rc, err, _ = run(capsys, ["traffic", "show", str(p)])
    assert rc == 2 and "nested too deeply" in err
    one_clear_line(err)


def test_a_json_matrix_of_booleans_and_servers_without_a_topology_are_refused(tmp_path, capsys):
    path = tmp_path / "m.json"
    path.write_text("[[0, true], [1, 0]]")
    rc, err, _dt = run(capsys, ["traffic", "show", str(path)])
    assert rc == 2 and "entry [0][1]" in err and "boolean" in err, err
    one_clear_line(err)
    out = tmp_path / "g.npy"
    rc, err, _dt = run(
        capsys, ["traffic", "gen", "zipf", "--ranks", "8", "--servers", "4", "--size", "1M", "-o", str(out)]
    )
    assert rc == 2 and "--servers" in err and not out.exists(), err
    one_clear_line(err)


@pytest.mark.parametrize(
    ("name", "text", "field"),
    [
        ("one-long-row.txt", " ".join(["1"] * 3_000_000) + "\n", "row 0"),
        ("one-long-row.csv", ",".join(["1"] * 3_000_000) + "\n", "row 0"),
        ("long-second-row.txt", "1 2\n" + " ".join(["1"] * 3_000_000) + "\n", "row 1"),
        ("tall.txt", "1 2\n3 4\n5 6\n", "shape"),
    ],
)
def test_text_matrices_refused_before_they_are_held(tmp_path, capsys, name, text, field):
    """A text matrix's rows are checked against the rank limit and row 0 as they are read: a 6 MB line of
    three million entries is refused without splitting it into millions of numbers (which took ~650 MB for a
    20 MB line), and rows past N are refused before they are stored."""
    import tracemalloc

    path = tmp_path / name
    path.write_text(text)
    tracemalloc.start()
    try:
        rc, err, _dt = run(capsys, ["traffic", "show", str(path)])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert rc == 2 and field in err
    one_clear_line(err)
    assert peak < 8 * len(text) + (32 << 20), peak


def test_endless_text_matrices_are_refused_at_the_line_limit(tmp_path, capsys, monkeypatch):
    import a2acc.model.traffic as traffic

    monkeypatch.setattr(traffic, "MAX_LINE_CHARS", 100)
    monkeypatch.setattr(traffic, "MAX_JSON_BYTES", 100)
    (tmp_path / "long.csv").write_text("1," * 200 + "\n", encoding="utf-8")
    (tmp_path / "big.json").write_text(json.dumps([[0, 1], [1, 0]]) + " " * 200, encoding="utf-8")
    for name, fragment in (("long.csv", "row 0: value 'a line of more than 100"), ("big.json", "use .npy")):
        rc, err, _ = run(capsys, ["traffic", "show", str(tmp_path / name)])
        assert rc == 2 and fragment in err, err
        one_clear_line(err)


def test_a_matrix_entry_of_more_digits_than_python_reads_is_one_line(tmp_path, capsys):
    p = tmp_path / "m.json"
    p.write_text('{"matrix": [[0, ' + "9" * 5000 + "], [1, 0]]}", encoding="utf-8")
    rc, err, _ = run(capsys, ["traffic", "show", str(p)])
    assert rc == 2 and "more than 4300 digits" in err
    one_clear_line(err)


def test_a_matrix_of_the_wrong_rank_count_is_refused_from_its_header(tmp_path, capsys):
    """A 8192 x 8192 matrix (512 MiB, a sparse file here) for 16 GPUs: refused by its shape before a byte of
    its entries is read or converted."""
    import tracemalloc

    path = tmp_path / "big.npy"
    with open(path, "wb") as fh:
        np.lib.format.write_array_header_1_0(
            fh, {"descr": "<i8", "fortran_order": False, "shape": (8192, 8192)}
        )
        fh.truncate(fh.tell() + 8192 * 8192 * 8)
    tracemalloc.start()
    try:
        rc, err, _ = run(
            capsys, ["plan", "-t", "dgx-h100", "-n", "2", "-m", str(path), "-o", str(tmp_path / "p")]
        )
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert rc == 2 and "16 x 16" in err and peak < 64 << 20, peak
    one_clear_line(err)


def test_align_takes_a_size_like_every_other_size_option(tmp_path, capsys):
    out = tmp_path / "a.npy"
    assert (
        main(["traffic", "gen", "zipf", "--ranks", "16", "--size", "64M", "--align", "2M", "-o", str(out)])
        == 0
    )
    assert (np.load(out) % (2 << 20) == 0).all()
    rc, err, _ = run(
        capsys, ["traffic", "gen", "zipf", "--ranks", "16", "--align", "2Q", "-o", str(tmp_path / "b")]
    )
    assert rc == 2 and "--align" in err and not (tmp_path / "b").exists()
    one_clear_line(err)


@pytest.mark.parametrize(
    ("rows", "field", "value"),
    [
        ([[10**30, 1], [2, 3]], "entry [0][0]", "1000000000000000000000000000000"),  # past int64: objects
        ([[1, 2], [3, None]], "entry [1][1]", "None"),
        ([[1, "a"], [2, 3]], "entry [0][1]", "'a'"),
        ([[-(10**24), 1], [2, 3]], "entry [0][0]", "-1000000000000000000000000"),
    ],
)
def test_a_json_entry_that_is_no_number_of_bytes_is_named_by_its_place(tmp_path, capsys, rows, field, value):
    """numpy reads such a matrix as strings or objects: the error names the entry, not the kind of array."""
    path = tmp_path / "m.json"
    path.write_text(json.dumps(rows))
    rc, err, _ = run(capsys, ["traffic", "show", str(path)])
    assert rc == 2 and f"{field}: value {value} is invalid" in err, err
    one_clear_line(err)
