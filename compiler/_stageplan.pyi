# Signatures of the compiled FAST core (compiler/native/stageplan.c); a2acc.planners.stageplan and
# a2acc.planners.fast hold the pure-Python references.
from typing import Any

# (server matrix, balanced flags, big, padded, [(weight, permutation), ...]) as packed bytes and objects
StagePlan = tuple[bytes, bytes, int, Any, list[tuple[int, tuple[int, ...]]]]

def stage_plan(
    counts: Any,
    n_ranks: int,
    m: int,
    method: int,
    balance: int,
    unit: int,
    b_inter: float,
    b_intra: float,
    alpha: float,
    /,
) -> StagePlan: ...
def stage_plan_bytes(
    matrix: Any,
    n_ranks: int,
    m: int,
    method: int,
    balance: int,
    target_chunks: int,
    align: int,
    b_inter: float,
    b_intra: float,
    alpha: float,
    /,
) -> tuple[int, StagePlan]: ...
def fast_prepare(
    counts: Any, in_off: Any, out_off: Any, n_ranks: int, m: int, balanced: Any, base: int, /
) -> tuple[tuple[bytes, bytes, bytes], bytes, int, bytes, bytes, bytes, bytes, bytes]: ...
def fast_steps(
    pieces: Any,
    queue_ptr: Any,
    out_off: Any,
    n_ranks: int,
    m: int,
    perms: Any,
    caps: Any,
    gptr: Any,
    groups: Any,
    scratch: Any,
    ends: Any,
    split: bool,
    head_rows: bytes,
    head_ndeps: bytes,
    head_ids: bytes,
    /,
) -> tuple[tuple[bytes, bytes, bytes], bytes, int, int]: ...
