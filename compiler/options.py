"""Options of planners and targets: frozen dataclasses, set from the command line as ``--opt KEY=VALUE``.

Every planner and every target declares its options as a frozen dataclass (field type, default, and a help
text in ``field(metadata={"help": ...})``). The CLI and the JIT (``A2ACC_PLANNER_OPTS``,
``A2ACC_BACKEND_OPTS``) hand over ``KEY=VALUE`` strings; :func:`parse_options` converts each by the field's
type (``int``, ``float``, ``bool``, ``str`` or a ``Literal`` of allowed strings) and names the key, the value
and what is allowed when either is wrong. :func:`route` sends each key to the planner or the target that
declares it (``planner.KEY=`` / ``backend.KEY=`` force the side when both declare the same key).

An option that scales work or memory declares its allowed range with :func:`bounded`; every instance is checked
against it (and its own ``check()``) before a planner or target sees it, so ``epochs=1000000000`` is refused
with the limit and the reason instead of allocating for minutes.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterable, Mapping
from typing import Any, Literal, TypeVar, get_args, get_origin

from a2acc.errors import InputError

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class NoOptions:
    """For planners and targets that take no options."""


def bounded(default: Any, lo: float, hi: float, help: str, why: str = "") -> Any:
    """A numeric option field allowed in ``[lo, hi]``; ``why`` says what the limit protects (shown on refusal)."""
    return dataclasses.field(default=default, metadata={"help": help, "range": (lo, hi), "why": why})


def check_ranges(obj: Any, where: str = "--opt") -> None:
    """Refuse a field outside the range its :func:`bounded` declaration allows."""
    for f in dataclasses.fields(obj):
        rng = f.metadata.get("range")
        value = getattr(obj, f.name)
        if rng is None or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        lo, hi = rng
        if not lo <= value <= hi:
            why = f.metadata.get("why", "")
            raise InputError(where, f.name, value, f"allowed {_span(lo, hi)}{f' ({why})' if why else ''}")


def _span(lo: float, hi: float) -> str:
    def show(v: float) -> str:
        return f"{int(v):,}" if float(v).is_integer() else f"{v:g}"

    return f"{show(lo)} to {show(hi)}"


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _convert(tp: Any, key: str, raw: str, where: str) -> Any:
    origin = get_origin(tp)
    if origin is Literal:
        allowed = [str(a) for a in get_args(tp)]
        if raw not in allowed:
            raise InputError(where, key, raw, f"allowed: {', '.join(allowed)}")
        return raw
    if tp is bool:
        low = raw.lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
        raise InputError(where, key, raw, "a boolean: true/false (also 1/0, yes/no, on/off)")
    if tp is int:
        try:
            return int(raw, 0)
        except ValueError:
            raise InputError(where, key, raw, "an integer") from None
    if tp is float:
        try:
            v = float(raw)
        except ValueError:
            raise InputError(where, key, raw, "a number") from None
        if v != v or v in (float("inf"), float("-inf")):
            raise InputError(where, key, raw, "a finite number")
        return v
    if tp is str:
        return raw
    args = [a for a in get_args(tp) if a is not type(None)]
    if args and len(args) == 1:  # Optional[X]
        if raw.lower() in ("none", ""):
            return None
        return _convert(args[0], key, raw, where)
    raise InputError(where, key, raw, f"this option has an unsupported type {tp!r}")


def parse_options(cls: type[T], raw: Mapping[str, str] | T | None, *, where: str = "--opt") -> T:
    """An instance of the options dataclass ``cls`` from ``KEY=VALUE`` strings (or pass one through)."""
    if raw is None:
        return cls()
    if isinstance(raw, cls):  # built by the caller: judged as the same values given as strings would be
        _judge(raw, where)
        return raw
    if not isinstance(raw, Mapping):
        raise InputError(where, "", raw, f"options must be KEY=VALUE strings for {cls.__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    hints = _hints(cls)
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in fields:
            known = ", ".join(sorted(fields)) or "none"
            raise InputError(where, key, value, f"not an option here; known options: {known}")
        values[key] = value if not isinstance(value, str) else _convert(hints[key], key, value, where)
    obj = cls(**values)
    _judge(obj, where)
    return obj


def _judge(obj: Any, where: str) -> None:
    """Every option in its declared range, then the options class's own ``check()`` (values that depend on
    each other, values no range expresses: a NaN, a list's entries)."""
    check_ranges(obj, where)
    check = getattr(obj, "check", None)
    if callable(check):
        check()


def split_pairs(pairs: Iterable[str], where: str = "--opt") -> list[tuple[str, str]]:
    """``["a=1", "b=x"]`` (or one comma-separated string per item) -> ``[("a", "1"), ("b", "x")]``. A part
    without ``=`` continues the value before it, so list values read as written: ``dtypes=int8,float16,b=x``
    -> ``[("dtypes", "int8,float16"), ("b", "x")]`` (the option's own check then judges the list)."""
    out: list[tuple[str, str]] = []
    for item in pairs:
        first = True
        for part in item.split(","):
            part = part.strip()
            if not part:
                continue
            key, eq, value = part.partition("=")
            if not eq and out and not first:
                out[-1] = (out[-1][0], f"{out[-1][1]},{part}")
                continue
            first = False
            if not eq or not key.strip():
                raise InputError(where, "", part, "use KEY=VALUE (e.g. --opt dialect=rccl)")
            if any(k == key.strip() for k, _v in out):  # the last would silently win
                raise InputError(where, key.strip(), value.strip(), "given twice; give each option once")
            out.append((key.strip(), value.strip()))
    return out


def route(
    pairs: Iterable[tuple[str, str]], planner_cls: type, target_cls: type | None, where: str = "--opt"
) -> tuple[dict[str, str], dict[str, str]]:
    """Split option pairs between the planner and the target by which dataclass declares each key."""
    pf = {f.name for f in dataclasses.fields(planner_cls)}
    tf = {f.name for f in dataclasses.fields(target_cls)} if target_cls is not None else set()
    planner: dict[str, str] = {}
    target: dict[str, str] = {}
    spelled: dict[tuple[bool, str], str] = {}  # (planner side?, option) -> the key it was given as

    def put(side: dict[str, str], name: str, key: str, value: str) -> None:
        first = spelled.setdefault((side is planner, name), key)
        if name in side:  # time_limit=1,planner.time_limit=2: the last would silently win
            raise InputError(where, key, value, f"the same option as '{first}'; give each option once")
        side[name] = value

    for key, value in pairs:
        side, dot, bare = key.partition(".")
        if dot and side in ("planner", "backend"):
            put(planner if side == "planner" else target, bare, key, value)
            continue
        if key in pf and key in tf:
            raise InputError(
                where,
                key,
                value,
                f"both the planner and the backend take '{key}': write planner.{key}= or backend.{key}=",
            )
        if key in pf:
            put(planner, key, key, value)
        elif key in tf:
            put(target, key, key, value)
        else:
            known = sorted(pf | tf)
            raise InputError(
                where,
                key,
                value,
                f"no such option; known: {', '.join(known) or 'none'} (--opt help lists them)",
            )
    return planner, target


def describe(cls: type, title: str) -> list[str]:
    """Help lines for an options dataclass: name, type, default, help text."""
    hints = _hints(cls)
    lines = [f"{title}:"]
    fields = dataclasses.fields(cls)
    if not fields:
        lines.append("  (no options)")
    for f in fields:
        tp = hints[f.name]
        if get_origin(tp) is Literal:
            kind = "|".join(str(a) for a in get_args(tp))
        else:
            kind = getattr(tp, "__name__", str(tp))
        default = f.default if f.default is not dataclasses.MISSING else "(required)"
        rng = f.metadata.get("range")
        span = f", {_span(*rng)}" if rng is not None else ""
        lines.append(f"  {f.name}={kind}  (default {default}{span})  {f.metadata.get('help', '')}".rstrip())
    return lines


def as_dict(obj: Any) -> dict[str, Any]:
    """Options as a plain dict (recorded in plan metadata and cache keys)."""
    return dataclasses.asdict(obj) if dataclasses.is_dataclass(obj) and not isinstance(obj, type) else {}
