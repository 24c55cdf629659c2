# Signatures of the compiled MSCCL++ lowering (compiler/native/mscclpp_lower.c); a2acc.backends.mscclpp.lower and
# its passes are the reference.
from typing import Any

# ("ok", text, threadblocks, ops_per_tb, lanes, semaphores, signals, iterations, ordering_deps, unroutable_deps),
# ("refused", message), or None (undecided: the reference runs)
def lower(n: int, c: int, unit: int, *columns_and_options: Any) -> tuple[Any, ...] | None: ...
