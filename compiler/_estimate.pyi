# Signature of the compiled ranking estimate (compiler/native/estimate.c); a2acc.analysis.estimate's numpy
# preparation and the fast simulator's Python event loop are the reference. Buffers are C-contiguous int64 or
# float64 arrays; ``incast`` is None or (buffer_bytes, window_bytes, dt_alpha, retransmit, fanin_loss).
from typing import Any

def estimate(
    src: Any,
    dst: Any,
    cnt: Any,
    stage: Any,
    dep_ptr: Any,
    dep_ids: Any,
    unit: float,
    nranks: int,
    pair_bind: Any,
    k: int,
    pair_alpha: Any,
    pair_rx: Any,
    cap: Any,
    rx_switch: Any,
    alpha_s: float,
    stage_s: float,
    eager_bytes: float,
    fill_bytes: float,
    incast: tuple[float, float, float, float, float] | None,
    above: float,
    /,
) -> float: ...
def link_floor(
    src: Any, dst: Any, cnt: Any, unit: float, nranks: int, pair_bind: Any, k: int, cap: Any, /
) -> float: ...
