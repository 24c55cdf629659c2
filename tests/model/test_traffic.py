from __future__ import annotations

import numpy as np
import pytest

from a2acc.errors import TrafficMatrixError
from a2acc.model.traffic import GENERATORS, MoeSpec, generate, load_matrix, save_matrix, stats


@pytest.mark.parametrize("ext", [".npy", ".csv", ".json", ".txt"])
def test_round_trip_every_format(tmp_path, rng, ext):
    m = rng.integers(0, 10**9, size=(7, 7)).astype(np.int64)
    p = tmp_path / f"m{ext}"
    save_matrix(m, p)
    back = load_matrix(p)
    assert back.dtype == np.int64
    np.testing.assert_array_equal(back, m)


def test_reads_nccl_tests_alltoallv_text(tmp_path):
    p = tmp_path / "matrix.txt"
    p.write_text("# bytes\n0 16 32\n48   0 64\n\t80 96 0\n")
    np.testing.assert_array_equal(load_matrix(p), [[0, 16, 32], [48, 0, 64], [80, 96, 0]])


@pytest.mark.parametrize("kind", GENERATORS)
def test_generators_reproducible_by_seed(kind):
    a = generate(kind, 16, 64 << 20, seed=3)
    b = generate(kind, 16, 64 << 20, seed=3)
    np.testing.assert_array_equal(a, b)
    assert (a >= 0).all() and a.dtype == np.int64
    assert (a % 16 == 0).all()
    if kind != "balanced":
        assert not np.array_equal(a, generate(kind, 16, 64 << 20, seed=4))
    assert a.sum(axis=1).mean() == pytest.approx(64 << 20, rel=0.02)


def test_generator_shapes():
    u = generate("uniform", 8, 1 << 20, 1)
    assert np.all(np.diag(u) == 0)
    z = generate("zipf", 32, 1 << 30, 1, skew=0.99)
    assert stats(z).gini > stats(generate("uniform", 32, 1 << 30, 1)).gini
    moe = generate("moe", 8, None, 0, moe=MoeSpec(tokens=1000, experts=16, top_k=2, hidden=8, dtype_bytes=2))
    # every token goes to exactly top_k experts: row sums are tokens * k * hidden * bytes
    assert (moe.sum(axis=1) == 1000 * 2 * 8 * 2).all()


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("1 2\n3\n", "row 1"),
        ("1 2 3\n4 5 6\n", "square"),
        ("1 -2\n3 4\n", "entry [0][1]: value -2"),
        ("1 nan\n3 4\n", "entry [0][1]"),
        ("1 inf\n3 4\n", "finite"),
        ("1 2.5\n3 4\n", "whole bytes"),
        ("1 x\n3 4\n", "entry [0][1]: value 'x'"),
        ("", "no matrix rows"),
    ],
)
def test_bad_matrices_name_entry(tmp_path, content, fragment):
    p = tmp_path / "bad.txt"
    p.write_text(content)
    with pytest.raises(TrafficMatrixError) as exc:
        load_matrix(p)
    assert str(exc.value).startswith(str(p))
    assert fragment in str(exc.value)


def test_size_mismatch_and_truncated_files(tmp_path, rng):
    m = rng.integers(0, 100, size=(4, 4))
    p = tmp_path / "m.npy"
    save_matrix(m, p)
    with pytest.raises(TrafficMatrixError, match="8 x 8"):
        load_matrix(p, expect_ranks=8)
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(TrafficMatrixError, match="m.npy"):
        load_matrix(p)
    j = tmp_path / "m.json"
    j.write_text('{"units": "bytes", "matrix": [[1, 2], [3')
    with pytest.raises(TrafficMatrixError, match="not valid JSON"):
        load_matrix(j)
    with pytest.raises(TrafficMatrixError, match="cannot read"):
        load_matrix(tmp_path / "absent.csv")


def test_save_is_atomic_on_bad_input(tmp_path):
    p = tmp_path / "out.npy"
    with pytest.raises(TrafficMatrixError):
        save_matrix(np.array([[1, -1], [0, 0]]), p)
    assert not p.exists() and not list(tmp_path.iterdir())


def test_generator_argument_errors():
    with pytest.raises(TrafficMatrixError, match="KIND"):
        generate("pareto", 4, 100)
    with pytest.raises(TrafficMatrixError, match="--size"):
        generate("zipf", 4, None)
    with pytest.raises(TrafficMatrixError, match="--experts"):
        generate("moe", 4, None, moe=MoeSpec(experts=6))


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_a_valid_narrow_float_matrix_reads_without_a_numpy_warning(tmp_path, dtype):
    """float16 holds no value past the per-entry limit: comparing it with the limit must not overflow (numpy's
    RuntimeWarning with a source path was printed for a valid matrix)."""
    import warnings

    path = tmp_path / "m.npy"
    np.save(path, np.full((8, 8), 60000, dtype=dtype))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m = load_matrix(path)
    assert m.dtype == np.int64 and int(m.sum()) == 64 * 60000


@pytest.mark.parametrize("target", [0.10, 0.2, 0.38])
def test_lognormal_by_gini_hits_its_target_and_show_reports_it(target):
    """--gini picks the spread whose seeded draws give the off-diagonal entries that Gini coefficient; the
    per-rank figures traffic show prints come with it."""
    m = generate("lognormal", 24, 64 << 20, seed=5, gini_target=target)
    s = stats(m)
    assert s.gini == pytest.approx(target, abs=2e-4)
    assert s.send_max_over_mean == pytest.approx(m.sum(axis=1).max() / m.sum(axis=1).mean())
    assert s.recv_max_over_mean == pytest.approx(m.sum(axis=0).max() / m.sum(axis=0).mean())
    assert 0 < s.recv_gini < s.gini
    # the same draws as --sigma: the Gini target only chooses sigma
    assert not np.array_equal(m, generate("lognormal", 24, 64 << 20, seed=6, gini_target=target))


def test_gini_of_known_values():
    from a2acc.model.traffic import gini

    assert gini([1, 1, 1, 1]) == 0.0
    assert gini([0, 0, 0, 4]) == pytest.approx(0.75)
    assert gini([]) == 0.0
