"""One shape for every registry: name -> module path + summary, loaded lazily.

Planners (:data:`a2acc.planners.PLANNERS`), lowering targets (:data:`a2acc.backends.TARGETS`), IR passes
(:data:`a2acc.ir.passes.PASSES`) and run-time executors (:data:`a2acc.runtime.executors.EXECUTORS`) are all a
:class:`Registry`: a list of :class:`Entry` lines, each naming the module that implements the entry and the
attribute of that module that is the registered object (a planner's ``plan`` function, a target's ``TARGET``,
a pass's ``run``, an executor's ``EXECUTOR``). Nothing is imported until an entry is used, so ``a2acc --help``
and the JIT's start-up stay cheap, and a new planner, target, pass or executor is a module plus one
:class:`Entry` line. The options of an entry are its object's or module's ``Options`` dataclass
(:func:`Registry.options`), and whether it applies to a topology its module's ``applies(topology)``
(:func:`Registry.applies`).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Generic, TypeVar

from a2acc.errors import InputError

T = TypeVar("T")


@dataclass(frozen=True)
class Entry:
    """One registry line: ``name`` is implemented by ``getattr(import_module(module), attr)``."""

    name: str
    module: str
    summary: str
    attr: str


class Registry(Generic[T]):
    """Entries of one kind (``kind`` names it in messages; ``flag`` is the option that takes a name)."""

    def __init__(self, kind: str, flag: str, entries: Sequence[Entry]) -> None:
        self.kind = kind
        self.flag = flag
        self._entries = {e.name: e for e in entries}
        self._objects: dict[str, T] = {}  # loaded entries, and objects registered at run time

    # ------------------------------------------------------------------ the list
    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._entries)

    def names(self) -> list[str]:
        return sorted(self._entries)

    def entries(self) -> tuple[Entry, ...]:
        return tuple(self._entries[k] for k in self.names())

    def entry(self, name: str) -> Entry:
        """The entry called ``name``; an InputError naming the known ones otherwise."""
        e = self._entries.get(name)
        if e is None:
            raise InputError(
                "",
                self.flag,
                name,
                f"known {self.kind}{'es' if self.kind.endswith('s') else 's'}: {', '.join(self.names())}",
            )
        return e

    # ------------------------------------------------------------------ loading
    def module(self, name: str) -> ModuleType | None:
        """The module implementing ``name`` (None for an object registered at run time)."""
        e = self.entry(name)
        return importlib.import_module(e.module) if e.module else None

    def get(self, name: str) -> T:
        """The registered object, imported on first use."""
        if name in self._objects and name in self._entries:
            return self._objects[name]
        mod = self.module(name)
        if mod is None:  # pragma: no cover - run-time objects are always in _objects
            raise InputError("", self.flag, name, f"a {self.kind} registered without an object")
        obj: T = getattr(mod, self.entry(name).attr)
        self._objects[name] = obj
        return obj

    def options(self, name: str) -> type:
        """The entry's options dataclass: its object's ``Options``, else its module's, else no options."""
        from a2acc.options import NoOptions

        opts = getattr(self.get(name), "Options", None)
        if not isinstance(opts, type):
            opts = getattr(self.module(name), "Options", NoOptions)
        if not isinstance(opts, type):  # pragma: no cover - a module whose Options is not a class
            raise InputError("", self.flag, name, f"a {self.kind} whose Options is a dataclass")
        return opts

    def applies(self, name: str, topology: Any) -> str | None:
        """None when the entry can serve ``topology``; otherwise why not (its module's ``applies``)."""
        check = getattr(self.module(name), "applies", None)
        return None if check is None else check(topology)

    # ------------------------------------------------------------------ run-time additions (plugins, tests)
    def register(self, name: str, impl: str | T, summary: str = "", attr: str = "") -> None:
        """Add an entry: a module path (its ``attr``, or the registry's usual attribute) or an object."""
        if isinstance(impl, str):
            usual = next(iter(self._entries.values())).attr if self._entries else ""
            self._entries[name] = Entry(name, impl, summary, attr or usual)
            self._objects.pop(name, None)
        else:
            self._entries[name] = Entry(name, "", summary or getattr(impl, "summary", ""), attr)
            self._objects[name] = impl

    def unregister(self, name: str) -> None:
        self._entries.pop(name, None)
        self._objects.pop(name, None)
