"""``workers=dask://HOST:PORT`` names a Dask scheduler: anything else at that address is refused in seconds."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from a2acc.errors import InputError
from a2acc.flows import parallel


@contextmanager
def _server(greeting: bytes | None) -> Iterator[int]:
    """A TCP service on a free local port that sends ``greeting`` to each connection (None: says nothing)."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            held.append(conn)
            if greeting is not None:
                conn.sendall(greeting)

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield listener.getsockname()[1]
    finally:
        listener.close()
        for conn in held:
            conn.close()


@pytest.mark.parametrize(
    ("greeting", "said"),
    [(b"SSH-2.0-OpenSSH_9.6\r\n" * 4, "began with b'SSH-2.0-'"), (None, "sent nothing")],
    ids=["a banner", "silence"],
)
def test_a_service_that_is_no_dask_scheduler_is_refused_in_seconds(monkeypatch, greeting, said):
    """An SSH banner read as a Dask length prefix asked for 3 EiB (an out-of-memory error that named nothing);
    a port that accepts and never answers kept the client waiting past a minute."""
    monkeypatch.setattr(parallel, "PROBE_TIMEOUT", 0.5)
    with _server(greeting) as port:
        t0 = time.perf_counter()
        with pytest.raises(InputError) as exc:
            parallel.probe(f"dask://127.0.0.1:{port}")
        assert time.perf_counter() - t0 < 5
    msg = str(exc.value)
    assert "workers" in msg and f"127.0.0.1:{port}" in msg and "not a Dask scheduler" in msg and said in msg


def test_a_dask_scheduler_passes_the_probe():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(
        n_workers=0, processes=False, dashboard_address=None, scheduler_kwargs={"protocol": "tcp"}
    ) as cluster:
        parallel.probe("dask://" + cluster.scheduler_address.removeprefix("tcp://"))
