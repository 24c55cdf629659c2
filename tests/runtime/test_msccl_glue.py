"""MSCCL glue: ctypes bindings against a C library with the executor's ABI, directory mode, MSCCL++ seam."""

from __future__ import annotations

import ctypes
import shutil
import subprocess

import pytest

from a2acc.errors import RuntimeHookError
from a2acc.runtime.executors.msccl import MscclLibrary, msccl_env, prepare_algo_dir
from a2acc.runtime.executors.mscclpp import executor_for, mscclpp_available
from a2acc.runtime.megatron import rows_from_tokens_per_expert

FAKE = r"""
#include <stdio.h>
#include <stddef.h>
typedef int mscclAlgoHandle_t;
static FILE *logf(void) { static FILE *f; if (!f) f = fopen(LOGPATH, "w"); return f; }
int mscclLoadAlgo(const char *path, mscclAlgoHandle_t *h, int rank) {
  fprintf(logf(), "load %s %d\n", path, rank); fflush(logf()); *h = 42; return 0; }
int mscclRunAlgo(const void *s, const size_t sc[], const size_t sd[], void *r, const size_t rc[], const size_t rd[],
                 size_t count, int dtype, int root, int peer, int op, mscclAlgoHandle_t h, void *comm, void *stream) {
  if (!sc || !sd || !rc || !rd) { fprintf(logf(), "NULL counts\n"); fflush(logf()); return 5; }
  fprintf(logf(), "run %p %p %zu %d %d %d %d %d %p %p %zu %zu %zu\n", s, r, count, dtype, root, peer, op, h, comm,
          stream, sc[1], sd[1], rd[2]);
  fflush(logf()); return h == 42 ? 0 : 3; }
int mscclUnloadAlgo(mscclAlgoHandle_t h) { fprintf(logf(), "unload %d\n", h); fflush(logf()); return 0; }
"""


@pytest.fixture
def fake_lib(tmp_path):
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    src = tmp_path / "fake_msccl.c"
    log = tmp_path / "calls.log"
    src.write_text(FAKE.replace("LOGPATH", f'"{log}"'))
    so = tmp_path / "libfake_msccl.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(so), str(src)], check=True)
    return so, log


def test_ctypes_bindings_pass_exact_arguments(fake_lib):
    so, log = fake_lib
    lib = MscclLibrary(str(so))
    h = lib.load_algo("/algos/00-a2acc.xml", 3)
    assert h == 42
    buf = (ctypes.c_char * 64)()
    lib.run_alltoall(
        h,
        ctypes.addressof(buf),
        ctypes.addressof(buf) + 32,
        count=1024,
        dtype="bfloat16",
        comm=0x1234,
        stream=0x5678,
        nranks=3,
        send_counts=[4, 5, 6],
        recv_counts=[7, 8, 9],
    )
    # without explicit counts: count per peer, displacements i * count (never NULL: RCCL reads them)
    lib.run_alltoall(h, ctypes.addressof(buf), ctypes.addressof(buf) + 32, 100, "float32", 1, 2, nranks=4)
    lib.unload_algo(h)
    lines = log.read_text().splitlines()
    assert lines[0] == "load /algos/00-a2acc.xml 3"
    run = lines[1].split()
    assert run[0] == "run" and run[3:9] == ["1024", "9", "0", "-1", "0", "42"]
    assert run[9] == "0x1234" and run[10] == "0x5678"
    assert run[11:] == ["5", "4", "15"]  # sendCounts[1], sDispls[1], rDispls[2]
    assert lines[2].split()[11:] == ["100", "100", "200"]
    assert lines[3] == "unload 42"
    with pytest.raises(RuntimeHookError, match="ncclResult 3"):
        lib.run_alltoall(7, 0, 0, 1, "float32", 0, 0, nranks=2)
    with pytest.raises(RuntimeHookError, match="must list 2 peers"):
        lib.run_alltoall(h, 0, 0, 1, "float32", 0, 0, nranks=2, send_counts=[1])


def test_library_without_msccl_symbols_is_refused(tmp_path):
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    src = tmp_path / "x.c"
    src.write_text("int ncclAllToAll(void) { return 0; }\n")
    so = tmp_path / "libx.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(so), str(src)], check=True)
    with pytest.raises(RuntimeHookError, match="has no mscclLoadAlgo"):
        MscclLibrary(str(so))


def test_directory_mode_writes_only_xml_and_sets_env(tmp_path):
    d = prepare_algo_dir({"00-a.xml": "<algo/>\n", "01-b.xml": "<algo/>\n"}, tmp_path / "algos")
    assert sorted(p.name for p in d.iterdir()) == ["00-a.xml", "01-b.xml"]
    env = msccl_env(d)
    assert env["MSCCL_ALGO_DIR"] == str(d.resolve())
    assert env["NCCL_MSCCL_ENABLE"] == env["RCCL_MSCCL_ENABLE"] == env["RCCL_MSCCL_FORCE_ENABLE"] == "1"
    with pytest.raises(RuntimeHookError, match="only plain"):
        prepare_algo_dir({"m.json": "{}"}, d)
    (d / "notes.txt").write_text("x")
    with pytest.raises(RuntimeHookError, match="parsed as XML"):
        prepare_algo_dir({"02-c.xml": "<algo/>"}, d)


def test_mscclpp_seam_explains_what_is_missing():
    with pytest.raises(RuntimeHookError) as exc:
        executor_for(None)
    if mscclpp_available():
        assert "not built yet" in str(exc.value)
    else:
        assert "mscclpp is not importable" in str(exc.value)


def test_megatron_counts_to_matrix():
    import numpy as np

    # tp=1, ep=2, 4 experts (2 per rank): rank 0 routes [1,2 | 3,4], rank 1 routes [5,6 | 7,8]
    t = np.array([[[1, 2, 3, 4], [5, 6, 7, 8]]])
    np.testing.assert_array_equal(rows_from_tokens_per_expert(t), [[3, 7], [11, 15]])
