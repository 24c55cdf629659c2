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
import signal
import socket
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any, TypeVar

from a2acc.errors import InputError

T = TypeVar("T")


#: seconds to wait for a Dask scheduler's TCP port, then for its handshake
PROBE_TIMEOUT = 3.0
CONNECT_TIMEOUT = 10.0
#: local worker processes (each holds a copy of the network and its share of the work)
MAX_LOCAL_WORKERS = 256


#: the largest first message a Dask scheduler's handshake could be (it is ~60 bytes): a larger length prefix is
#: another service's greeting read as a length (an SSH banner reads as 3 EiB)
MAX_HANDSHAKE_BYTES = 1 << 20


def probe(workers: str | int) -> None:
    """Fail fast, naming the option and the address, when ``dask://HOST:PORT`` is not a Dask scheduler: it does
    not accept a TCP connection, or does not begin the handshake a scheduler sends as it accepts one (its
    first 8 bytes: the message's length, little-endian; ``distributed.comm.tcp``), within
    :data:`PROBE_TIMEOUT` seconds each. A Dask client would wait its whole timeout on a silent port, and read
    another service's greeting as a length to allocate. Nothing to do for local workers."""
    w = parse_workers(workers)
    if not isinstance(w, str):
        return
    host, _, port = w[len("dask://") :].rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=PROBE_TIMEOUT) as sock:
            head = b""
            with suppress(OSError):  # a timeout or a reset: no handshake, said below
                while len(head) < 8:
                    got = sock.recv(8 - len(head))
                    if not got:
                        break
                    head += got
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or type(exc).__name__
        raise InputError(
            "--opt", "workers", w, f"no Dask scheduler answers at {host}:{port} ({why})"
        ) from None
    if len(head) < 8 or not 0 < int.from_bytes(head, "little") <= MAX_HANDSHAKE_BYTES:
        said = "sent nothing" if not head else f"began with {head!r}"
        raise InputError(
            "--opt",
            "workers",
            w,
            f"{host}:{port} accepts connections but is not a Dask scheduler (it {said} within "
            f"{PROBE_TIMEOUT:g} s, where a scheduler begins its handshake)",
        )


def parse_workers(spec: str | int) -> str | int:
    if isinstance(spec, int):
        if spec < 1:
            raise InputError("--opt", "workers", spec, "an integer >= 1 or dask://HOST:PORT")
        if spec > MAX_LOCAL_WORKERS:
            raise InputError("--opt", "workers", spec, f"at most {MAX_LOCAL_WORKERS} local processes")
        return spec
    s = str(spec).strip()
    if s.startswith("dask://"):
        host, colon, port = s[len("dask://") :].rpartition(":")
        if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise InputError(
                "--opt", "workers", spec, "dask://HOST:PORT (the scheduler's address, port 1-65535)"
            )
        return s
    try:
        return parse_workers(int(s))
    except ValueError:
        raise InputError("--opt", "workers", spec, "an integer >= 1 or dask://HOST:PORT") from None


@contextmanager
def executor(workers: str | int) -> Iterator[cf.Executor | None]:
    """The executor for ``workers`` (None: run inline)."""
    w = parse_workers(workers)
    if w == 1:
        yield None
        return
    if isinstance(w, int):
        ctx = multiprocessing.get_context("spawn")
        ex = cf.ProcessPoolExecutor(max_workers=w, mp_context=ctx, initializer=_ignore_interrupts)
        try:
            yield ex
        except (
            BaseException
        ):  # an error or an interrupt in the caller: stop the workers now, not after their solves
            _abandon(ex)
            raise
        ex.shutdown(wait=True)
        return
    try:
        from distributed import Client
    except ImportError:
        raise InputError(
            "", "workers", w, "dask://... needs the 'distributed' extra: pip install 'a2acc[distributed]'"
        ) from None
    probe(w)
    try:
        client = Client("tcp://" + w[len("dask://") :], timeout=CONNECT_TIMEOUT)
    except (OSError, TimeoutError, MemoryError) as exc:  # (MemoryError: a reply that is no Dask message)
        raise InputError(
            "--opt", "workers", w, f"cannot connect to the Dask scheduler at {w[len('dask://') :]} ({exc})"
        ) from None
    try:
        yield client.get_executor()
    finally:
        client.close()


def _ignore_interrupts() -> None:
    """Worker processes ignore SIGINT: a Ctrl-C reaches the whole foreground process group, and only the parent
    reports it (one line, ``a2acc: interrupted``) and stops the workers, instead of one traceback per worker."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _abandon(ex: cf.ProcessPoolExecutor) -> None:
    """Cancel what has not started and end the workers at once (their results are no longer wanted)."""
    # the pool's worker processes (a private attribute of concurrent.futures, read defensively and before
    # shutdown(), which drops it)
    procs = list((getattr(ex, "_processes", None) or {}).values())
    manager = getattr(ex, "_executor_manager_thread", None)
    ex.shutdown(wait=False, cancel_futures=True)
    for proc in procs:
        with suppress(OSError, AttributeError):
            proc.terminate()
    # let the pool's manager thread see its workers gone and close its wake-up pipe now: left running, it can
    # close the pipe while the interpreter's exit hook writes to it (concurrent.futures.process._python_exit in
    # Python 3.11, unlocked), which prints an "Exception ignored ... Bad file descriptor" traceback
    if manager is not None:
        with suppress(RuntimeError):
            manager.join(timeout=10.0)


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
