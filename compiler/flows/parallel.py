"""Where independent solves run: a ``concurrent.futures``-style executor, local or on a Dask cluster.

``workers`` is ``1`` (in this process), an integer N > 1 (N local worker processes) or ``dask://HOST:PORT`` (an
existing ``dask.distributed`` scheduler; install ``a2acc[distributed]``). Tasks are pure functions of their
arguments and HiGHS runs single-threaded with a fixed seed, so results are identical whichever executor ran
them; :func:`run_all` returns them in submission order. Progress is a ``tqdm`` bar on standard error when it
is a terminal.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from a2acc.errors import InputError

T = TypeVar("T")


def parse_workers(spec: str | int) -> str | int:
    if isinstance(spec, int):
        if spec < 1:
            raise InputError("", "workers", spec, "an integer >= 1 or dask://HOST:PORT")
        return spec
    s = str(spec).strip()
    if s.startswith("dask://"):
        if ":" not in s[len("dask://") :]:
            raise InputError("", "workers", spec, "dask://HOST:PORT (the scheduler's address)")
        return s
    try:
        return parse_workers(int(s))
    except ValueError:
        raise InputError("", "workers", spec, "an integer >= 1 or dask://HOST:PORT") from None


@contextmanager
def executor(workers: str | int) -> Iterator[cf.Executor | None]:
    """The executor for ``workers`` (None: run inline)."""
    w = parse_workers(workers)
    if w == 1:
        yield None
        return
    if isinstance(w, int):
        with cf.ProcessPoolExecutor(max_workers=w, mp_context=multiprocessing.get_context("spawn")) as ex:
            yield ex
        return
    try:
        from distributed import Client
    except ImportError:
        raise InputError(
            "", "workers", w, "dask://... needs the 'distributed' extra: pip install 'a2acc[distributed]'"
        ) from None
    client = Client("tcp://" + w[len("dask://") :], timeout=30)
    try:
        yield client.get_executor()
    finally:
        client.close()


def run_all(
    fn: Callable[..., T], args: Sequence[tuple[Any, ...]], workers: str | int, desc: str = "solving"
) -> list[T]:
    """``[fn(*a) for a in args]``, possibly in parallel; results in the order of ``args``."""
    from tqdm import tqdm

    bar = tqdm(total=len(args), desc=desc, file=sys.stderr, disable=None, leave=False)
    try:
        with executor(workers) as ex:
            if ex is None:
                out = []
                for a in args:
                    out.append(fn(*a))
                    bar.update()
                return out
            futures = [ex.submit(fn, *a) for a in args]
            for _f in cf.as_completed(futures):
                bar.update()
            return [f.result() for f in futures]
    finally:
        bar.close()
