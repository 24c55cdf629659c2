"""Activation at interpreter start: ``a2acc-jit.pth`` calls :func:`activate_from_env` when ``A2ACC_JIT`` is set.

Zero cost when unused: with ``A2ACC_JIT`` unset (or 0/false/no/off) the hook is one ``os.environ`` lookup. With it
on, start-up only arms a lazy import hook (a ``sys.meta_path`` finder, nothing else imported): the settings
are read and ``torch.distributed.all_to_all_single`` is patched when, and only if, the process imports
``torch.distributed``. Launchers and tools never activate (``torchrun``'s parent, pip, the ``a2acc`` CLI).
A problem prints one clear line on rank 0 and leaves every stock collective untouched. The rank is torch.distributed's
once it is initialised, else ``RANK`` (torchrun); under ``torch.multiprocessing.spawn`` neither is known at
activation, so rank-0 lines are held back until ``init_process_group`` returns and then printed by rank 0 only.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = (
    False  # not typing.TYPE_CHECKING: importing typing alone costs ~10 ms at every interpreter start
)
if TYPE_CHECKING:
    import importlib.machinery
    from collections.abc import Callable
    from types import ModuleType
    from typing import Any

ON_VALUES = ("1", "true", "yes", "on")
OFF_VALUES = ("", "0", "false", "no", "off")
# programs that import torch.distributed but never run a job's collectives
SKIP_PROGRAMS = ("torchrun", "pip", "pip3", "a2acc")
_ACTIVE = False
_ATTEMPTED = False  # site may process a site-packages dir twice (e.g. a lib64 -> lib symlink in venvs)
_ARMED = False
_DEFERRED: list[Callable[[], None]] = []  # rank-0 output waiting for the rank to be known


_SEEN_RANK: list[int] = []  # the rank torch.distributed gave, kept after destroy_process_group (exit logs)


def job_rank() -> int | None:
    """This process's global rank: torch.distributed's once initialised (remembered afterwards), else
    ``RANK``, else None (unknown)."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None:
        try:
            if dist.is_available() and dist.is_initialized():
                rank = int(dist.get_rank())
                _SEEN_RANK[:] = [rank]
                return rank
        except Exception:  # a half-initialised or exotic build: fall back to the environment
            pass
    if _SEEN_RANK:
        return _SEEN_RANK[0]
    raw = os.environ.get("RANK", "").strip()
    return int(raw) if raw.isdigit() else None


def job_rank0() -> bool:
    """True on the process that speaks for the job: global rank 0, or a process with no rank at all."""
    return job_rank() in (0, None)


def _setup_logging(level: int) -> None:
    import logging

    class RankFormatter(logging.Formatter):
        """``a2acc[rank R]``, with the rank looked up when a record is written (``-`` while unknown)."""

        def format(self, record: logging.LogRecord) -> str:
            r = job_rank()
            return f"a2acc[rank {'-' if r is None else r}] {super().format(record)}"

    log = logging.getLogger("a2acc")
    if not log.handlers:
        h = logging.StreamHandler(sys.stderr)
        h.setFormatter(RankFormatter("%(levelname)s: %(message)s"))
        log.addHandler(h)
    log.setLevel(level)


def rank0_later(action: Callable[[], None]) -> None:
    """Run ``action`` on rank 0 only: now when the rank is known, else once ``init_process_group`` returns
    (``torch.multiprocessing.spawn`` sets no ``RANK``; every process would print otherwise)."""
    rank = job_rank()
    if rank is not None or "torch.distributed" not in sys.modules:
        # known; or unknowable yet at interpreter start (a bad A2ACC_JIT value): said now, the process may
        # never start a process group
        if rank in (0, None):
            action()
        return
    _DEFERRED.append(action)
    if len(_DEFERRED) == 1:
        _wrap_init()


def _wrap_init() -> None:
    """Wrap ``init_process_group`` once: after it returns, flush the deferred rank-0 output and unwrap."""
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    real = dist.init_process_group

    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        out = real(*args, **kwargs)
        dist.init_process_group = c10d.init_process_group = real
        todo, _DEFERRED[:] = list(_DEFERRED), []
        if job_rank() == 0:
            for action in todo:
                action()
        return out

    dist.init_process_group = c10d.init_process_group = init_process_group


def say(message: str) -> None:
    """One line for the whole job: printed on rank 0 only (held back until the rank is known)."""
    rank0_later(lambda: print(f"a2acc: {message}", file=sys.stderr))


def _skipped_program() -> bool:
    argv0 = os.path.basename(getattr(sys, "argv", [""])[0] or "")
    return argv0.removesuffix(".py") in SKIP_PROGRAMS


class _AfterImport:
    """A ``sys.meta_path`` finder that runs :func:`_activate_now` right after ``torch.distributed`` has been
    imported (a post-import hook; importlib.abc is not imported for its base class: it costs ~35 ms)."""

    def find_spec(
        self, fullname: str, path: Any, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "torch.distributed":
            return None
        import importlib.machinery

        sys.meta_path.remove(self)  # find the real spec with the other finders, once
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        real_exec = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            real_exec(module)
            _activate_now()

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def activate_from_env() -> bool:
    """Arm the lazy hook when ``A2ACC_JIT`` is on (True), or do nothing (False). Cheap: imports nothing."""
    global _ARMED, _ATTEMPTED
    if _ARMED or _ATTEMPTED:
        return _ARMED or _ACTIVE
    value = os.environ.get("A2ACC_JIT", "").strip().lower()
    if value in OFF_VALUES:
        return False
    _ATTEMPTED = True
    if value not in ON_VALUES:
        say(
            f"A2ACC_JIT={os.environ['A2ACC_JIT']!r} is not one of {', '.join(ON_VALUES)} (on) or "
            f"{', '.join(v for v in OFF_VALUES if v)} (off) -- the JIT stays off"
        )
        return False
    if _skipped_program():
        return False
    if "torch.distributed" in sys.modules:
        return _activate_now()
    sys.meta_path.insert(0, _AfterImport())
    _ARMED = True
    return True


def _activate_now() -> bool:
    """Read the settings and patch ``torch.distributed`` (it is imported by now); True if patched."""
    global _ACTIVE
    if _ACTIVE:
        return True
    from a2acc.runtime.settings import JitSettings

    settings, problems = JitSettings.from_env()
    if settings is None:
        say("A2ACC_JIT is set but " + "; ".join(problems) + " -- using the stock collectives")
        return False
    _setup_logging(settings.log_level)
    from a2acc.runtime.torch_patch import install

    try:
        install(settings)
    except Exception as exc:  # the job must run on: stock collectives, one clear line
        say(f"the JIT could not start ({exc}) -- using the stock collectives")
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
