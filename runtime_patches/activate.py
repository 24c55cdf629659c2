"""Activation at interpreter start (``a2acc-jit.pth`` calls :func:`activate_from_env` iff ``A2ACC_JIT`` is set).

With ``A2ACC_JIT`` unset the hook costs one ``os.environ`` lookup and imports nothing. With it set, settings are
validated; a problem prints one clear warning and leaves every stock collective untouched.
"""

from __future__ import annotations

import logging
import os
import sys

_ACTIVE = False
_ATTEMPTED = False  # site may process a site-packages dir twice (e.g. a lib64 -> lib symlink in venvs)


def _setup_logging(level: int) -> None:
    log = logging.getLogger("a2acc")
    if not log.handlers:
        h = logging.StreamHandler(sys.stderr)
        h.setFormatter(logging.Formatter("a2acc[%(process)d] %(levelname)s: %(message)s"))
        log.addHandler(h)
    log.setLevel(level)


def activate_from_env() -> bool:
    """Patch ``torch.distributed.all_to_all_single`` when the settings are valid; True if patched."""
    global _ACTIVE, _ATTEMPTED
    if _ATTEMPTED or os.environ.get("A2ACC_JIT", "") in ("", "0"):
        return _ACTIVE
    _ATTEMPTED = True
    from a2acc.runtime.settings import JitSettings

    settings, problems = JitSettings.from_env()
    if settings is None:
        print(
            "a2acc: A2ACC_JIT is set but " + "; ".join(problems) + " -- using the stock collectives",
            file=sys.stderr,
        )
        return False
    _setup_logging(settings.log_level)
    try:
        import torch.distributed  # noqa: F401
    except ImportError:
        print("a2acc: A2ACC_JIT is set but torch is not importable -- nothing patched", file=sys.stderr)
        return False
    from a2acc.runtime.torch_patch import install

    install(settings)
    _ACTIVE = True
    return True
