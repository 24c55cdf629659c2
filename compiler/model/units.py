"""Parsing of sizes, bandwidths and latencies with units.

Conventions (the ones our users know from nccl-tests): sizes given on the command line accept ``K/M/G/T``
suffixes meaning **1024-based** units (``1M`` = 1,048,576 B); bandwidths are reported in GB/s with
**1 GB = 1e9 B**. Bandwidth strings may name their unit (``"400Gbps"``, ``"50GB/s"``), latencies too
(``"900ns"``, ``"3us"``); bare numbers are GB/s and microseconds.
"""

from __future__ import annotations

import math
import re

from a2acc.errors import InputError

_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([KMGT]?)(I?B)?\s*$", re.IGNORECASE)
_SIZE_MULT = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


def parse_size(text: str | int, *, source: str = "", field: str = "size") -> int:
    """Parse ``"64M"``-style sizes (1024-based) into bytes."""
    if isinstance(text, int):
        value = text
    else:
        m = _SIZE_RE.match(str(text))
        if not m:
            raise InputError(
                source, field, text, "use a byte count with an optional K/M/G/T suffix, e.g. 64M"
            )
        mult = _SIZE_MULT[m.group(2).upper()]
        if len(m.group(1)) > 30:  # past any size (and past the digits Python converts to an int)
            raise InputError(source, field, text, "a size of at most 30 digits")
        if m.group(1).isdigit():  # whole numbers exactly (through a float, 2^63 - 1 became 2^63)
            value = int(m.group(1)) * mult
        else:
            exact = float(m.group(1)) * mult
            if exact != int(exact):
                raise InputError(
                    source, field, text, "sizes are whole bytes (e.g. 1.5K = 1536 is fine, 100.7 is not)"
                )
            value = int(exact)
    if value < 0:
        raise InputError(source, field, text, "sizes must be non-negative")
    return value


#: most sizes one range may expand to: a sweep is a row per size and planner, each a plan and a simulation
#: (nccl-tests' widest default sweep, -b 8 -e 8G -f 2, has 31 sizes)
MAX_SIZES = 64


def parse_size_range(text: str, *, source: str = "", field: str = "--sizes") -> list[int]:
    """Parse ``MIN:MAX:xF`` (geometric) or ``MIN:MAX:+STEP`` or a comma list into byte sizes (at most
    :data:`MAX_SIZES`, counted before any list is built)."""
    limit = f"at most {MAX_SIZES} sizes (each is a plan and a simulation per planner): use a coarser step"
    if "," in text or ":" not in text:
        parts = [p for p in text.split(",") if p.strip()]
        if len(parts) > MAX_SIZES:
            raise InputError(source, field, text, limit)
        return [parse_size(p, source=source, field=field) for p in parts]
    parts = text.split(":")
    if len(parts) != 3:
        raise InputError(
            source, field, text, "use MIN:MAX:xFACTOR (e.g. 1M:1G:x4) or MIN:MAX:+STEP or a list"
        )
    lo = parse_size(parts[0], source=source, field=field)
    hi = parse_size(parts[1], source=source, field=field)
    step = parts[2].strip()
    if lo <= 0 or hi < lo:
        raise InputError(source, field, text, "need 0 < MIN <= MAX")
    if step.startswith("x"):
        try:
            factor = float(step[1:])
        except ValueError:
            raise InputError(source, field, text, "the factor after 'x' must be a number > 1") from None
        if not factor > 1 or math.isinf(factor):
            raise InputError(source, field, text, "the factor after 'x' must be a finite number > 1")
        if math.log(hi / lo) / math.log(factor) + 1 > MAX_SIZES + 1e-9:
            raise InputError(source, field, text, limit)
        out: list[int] = []
        v = float(lo)
        while v <= hi * (1 + 1e-9):
            out.append(round(v))
            v *= factor
        return out
    if step.startswith("+"):
        inc = parse_size(step[1:], source=source, field=field)
        if inc <= 0:
            raise InputError(source, field, text, "the step after '+' must be > 0")
        if (hi - lo) // inc + 1 > MAX_SIZES:
            raise InputError(source, field, text, limit)
        return list(range(lo, hi + 1, inc))
    raise InputError(source, field, text, "the third part must be xFACTOR or +STEP")


_BW_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([A-Za-z/]*)\s*$")
# Case matters, as network people write it: B is bytes, b is bits ("400Gbps" = 50 GB/s). Spellings that mix
# cases ("gbps", "GBPS") are ambiguous and refused with the list below.
_BW_UNITS = {
    "": 1.0,
    "GB/s": 1.0,
    "GBps": 1.0,
    "GByte/s": 1.0,
    "Gb/s": 1.0 / 8.0,
    "Gbps": 1.0 / 8.0,
    "Gbit/s": 1.0 / 8.0,
    "TB/s": 1000.0,
    "TBps": 1000.0,
    "Tb/s": 1000.0 / 8.0,
    "Tbps": 1000.0 / 8.0,
    "Tbit/s": 1000.0 / 8.0,
    "MB/s": 1e-3,
    "MBps": 1e-3,
    "Mb/s": 1e-3 / 8.0,
    "Mbps": 1e-3 / 8.0,
    "Mbit/s": 1e-3 / 8.0,
}
_BW_ACCEPTED = ", ".join(k for k in _BW_UNITS if k)
_LAT_UNITS = {"": 1.0, "us": 1.0, "ns": 1e-3, "ms": 1e3, "s": 1e6}


#: the bandwidths a topology may declare (1 kB/s to 1 PB/s per link or NIC) and the longest latency: physical
#: ranges with room to spare, which keep the simulator's floats finite (1e308 GB/s overflowed to inf and hung it)
MIN_BANDWIDTH_GBS = 1e-6
MAX_BANDWIDTH_GBS = 1e6
MAX_LATENCY_US = 6e7


def parse_bandwidth(value: object, *, source: str, field: str, error: type[InputError] = InputError) -> float:
    """Return a bandwidth in GB/s (1e9 B/s); must be finite and > 0."""
    if isinstance(value, bool):
        raise error(source, field, value, "give a positive bandwidth in GB/s or a string like '400Gbps'")
    if isinstance(value, (int, float)):
        gbs = float(value)
    elif isinstance(value, str):
        m = _BW_RE.match(value)
        unit = m.group(2) if m else None
        if not m or unit not in _BW_UNITS:
            raise error(
                source,
                field,
                value,
                f"give GB/s as a number, or a number with one of the units {_BW_ACCEPTED} (B = bytes, b = bits)",
            )
        gbs = float(m.group(1)) * _BW_UNITS[unit]
    else:
        raise error(source, field, value, "give a positive bandwidth in GB/s or a string like '400Gbps'")
    if not (gbs > 0 and gbs < float("inf")):
        raise error(source, field, value, "bandwidth must be a finite number > 0 (GB/s)")
    if not (MIN_BANDWIDTH_GBS <= gbs <= MAX_BANDWIDTH_GBS):
        # the simulator's arithmetic (bytes/s, times in seconds) stays finite and exact enough in this range
        raise error(
            source, field, value, f"a bandwidth from {MIN_BANDWIDTH_GBS:g} to {MAX_BANDWIDTH_GBS:g} GB/s"
        )
    return gbs


def parse_latency(value: object, *, source: str, field: str, error: type[InputError] = InputError) -> float:
    """Return a latency in microseconds; must be finite and >= 0."""
    if isinstance(value, bool):
        raise error(source, field, value, "give a latency in microseconds or a string like '900ns'")
    if isinstance(value, (int, float)):
        us = float(value)
    elif isinstance(value, str):
        m = _BW_RE.match(value)
        unit = m.group(2).lower() if m else None
        if not m or unit not in _LAT_UNITS:
            raise error(source, field, value, "give microseconds as a number or a string with ns/us/ms/s")
        us = float(m.group(1)) * _LAT_UNITS[unit]
    else:
        raise error(source, field, value, "give a latency in microseconds or a string like '900ns'")
    if not (us >= 0 and us < float("inf")):
        raise error(source, field, value, "latency must be a finite number >= 0 (us)")
    if us > MAX_LATENCY_US:
        raise error(source, field, value, f"a latency of at most {MAX_LATENCY_US:g} us (one minute)")
    return us


def format_bytes(n: float) -> str:
    """Human-readable 1024-based size, e.g. ``256.0 MiB``."""
    v = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(v) < 1024 or unit == "TiB":
            return f"{v:.0f} {unit}" if unit == "B" else f"{v:.1f} {unit}"
        v /= 1024
    return f"{v:.1f} TiB"
