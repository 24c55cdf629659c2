"""A Ctrl-C during parallel solves: the terminal signals the whole process group; the workers ignore it and the
parent stops them at once (no traceback per worker, no wait for their solves to finish)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

SCRIPT = textwrap.dedent(
    """
    import signal, sys, time
    from a2acc.flows.parallel import run_all

    def slow(x):
        time.sleep(60)
        return x

    if __name__ == "__main__":
        # as a terminal's job starts (a background job of a non-interactive shell inherits SIGINT ignored)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            run_all(slow, [(i,) for i in range(4)], 2)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            sys.exit(130)
    """
)


def test_ctrl_c_stops_the_workers_without_their_tracebacks(tmp_path):
    script = tmp_path / "solve.py"
    script.write_text(SCRIPT)
    proc = subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's foreground job
    )
    time.sleep(4)  # the workers are spawned and sleeping in their solves
    assert proc.poll() is None
    t0 = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C does: every process of the group
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and out.strip() == "interrupted", (proc.returncode, out, err)
    assert time.monotonic() - t0 < 20  # not after the 60 s solves
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
