# Signature of the compiled event loop of the fast simulator (compiler/native/fastsim.c);
# a2acc.analysis.fastsim's Python loop is the reference. Returns (start, end) per op as float64 bytes and the
# overload-episode log (ep_now float64, ep_ptr / ep_link / ep_k int64).
from typing import Any

def run(
    bind: Any,
    k: int,
    cap: Any,
    size: Any,
    lat: Any,
    solo: Any,
    grp: Any,
    route_rate: Any,
    succ_ptr: Any,
    succ_ids: Any,
    delay: Any,
    missing: Any,
    tolerance: float,
    retire_window: float,
    incast: tuple[Any, Any, Any, int, float, float, float, float, float] | None,
    onset: tuple[Any, Any, float] | None,
    /,
) -> tuple[bytes, bytes, bytes, bytes, bytes, bytes]: ...
def clear_unreached(
    dep_ptr: Any, dep_ids: Any, a: Any, b: Any, link: Any, ok: Any, budget: int, /
) -> None: ...
