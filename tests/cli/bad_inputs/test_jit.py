"""Bad JIT settings: the switch's values, a topology that cannot load."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.mark.slow
@pytest.mark.parametrize(
    ("value", "active"), [("false", False), ("no", False), ("off", False), ("maybe", False)]
)
def test_jit_switch_values(value, active):
    code = "import sys; print('a2acc.runtime.torch_patch' in sys.modules)"
    env = {k: v for k, v in os.environ.items() if not k.startswith("A2ACC_")}
    env.update({"A2ACC_JIT": value, "A2ACC_TOPOLOGY": "dgx-h100:1"})
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == str(active)
    assert ("is not one of" in out.stderr) == (value == "maybe")
    assert "Traceback" not in out.stderr


def test_failed_install_leaves_nothing_installed():
    pytest.importorskip("torch")
    from a2acc.runtime import torch_patch
    from a2acc.runtime.settings import JitSettings

    with pytest.raises(Exception):  # noqa: B017 - any error: the topology cannot be loaded
        torch_patch.install(JitSettings(topology="no-such-topology"))
    assert not torch_patch.is_installed()
