# Signature of the compiled list scheduler (compiler/native/listsched.c); a2acc.flows.schedule.list_schedule is
# the reference. Returns (order int64, after int64, ready float64, end float64) per hop as bytes.
from typing import Any

def run(
    edge: Any,
    key: Any,
    size: Any,
    last: Any,
    first: Any,
    lat: Any,
    rate: Any,
    budget: Any,
    window: int,
    /,
) -> tuple[bytes, bytes, bytes, bytes]: ...
