# Signature of the compiled max-min core (compiler/native/maxmin.c); a2acc.analysis.fastsim.max_min is the
# reference. rows: int64 [flows * k] binding links padded with len(cap); cap: float64 [links]; weight: float64
# [flows] or None. Returns the rates as float64 bytes.
from typing import Any

def max_min(rows: Any, k: int, cap: Any, weight: Any, /) -> bytes: ...
