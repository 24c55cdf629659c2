"""Activation at interpreter start (``a2acc-jit.pth`` calls :func:`activate_from_env` iff ``A2ACC_JIT`` is set).

With ``A2ACC_JIT`` unset the hook costs one ``os.environ`` lookup and imports nothing. With it set, settings are
validated; a problem prints one clear warning and leaves every stock collective untouched.
"""

from __future__ import annotations

import logging
import os
import sys

ON_VALUES = ("1", "true", "yes", "on")
OFF_VALUES = ("", "0", "false", "no", "off")
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
    if _ATTEMPTED:
        return _ACTIVE
    value = os.environ.get("A2ACC_JIT", "").strip().lower()
    if value in OFF_VALUES:
        return False
    _ATTEMPTED = True
    if value not in ON_VALUES:
        print(
            f"a2acc: A2ACC_JIT={os.environ['A2ACC_JIT']!r} is not one of {', '.join(ON_VALUES)} (on) or "
            f"{', '.join(v for v in OFF_VALUES if v)} (off) -- the JIT stays off",
            file=sys.stderr,
        )
        return False
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

    try:
        install(settings)
    except Exception as exc:  # the job must run on: stock collectives, one clear line
        print(f"a2acc: the JIT could not start ({exc}) -- using the stock collectives", file=sys.stderr)
        return False
    _ACTIVE = True
    return True


def _pth_text() -> str:
    from importlib import resources

    return (resources.files("a2acc.runtime") / "a2acc-jit.pth").read_text(encoding="utf-8")


def install_hook(site_dir: str | None = None) -> str:
    """Write ``a2acc-jit.pth`` into site-packages (editable installs; wheels ship it). Refuses to replace a
    file of that name whose content is not an a2acc hook (it cannot be proven ours)."""
    import sysconfig
    from pathlib import Path

    from a2acc.errors import InputError
    from a2acc.fileio import atomic_write_text

    target = Path(site_dir or sysconfig.get_paths()["purelib"]) / "a2acc-jit.pth"
    text = _pth_text()
    if target.exists():
        old = target.read_text(encoding="utf-8", errors="replace")
        if old == text:
            return str(target)
        if "a2acc.runtime.activate" not in old:
            raise InputError(
                str(target), "", "existing file", "not an a2acc hook: a2acc will not overwrite it"
            )
    atomic_write_text(target, text)
    return str(target)


if __name__ == "__main__":  # python -m a2acc.runtime.activate --install-hook [SITE_DIR]
    if len(sys.argv) >= 2 and sys.argv[1] == "--install-hook":
        print(f"a2acc: JIT start-up hook at {install_hook(sys.argv[2] if len(sys.argv) > 2 else None)}")
    else:
        print("usage: python -m a2acc.runtime.activate --install-hook [SITE_DIR]", file=sys.stderr)
        sys.exit(2)
