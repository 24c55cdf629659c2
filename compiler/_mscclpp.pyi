# Signatures of the compiled MSCCL++ core (compiler/native/mscclpp.c); the Python modules of
# a2acc.backends.mscclpp are the reference.
from typing import Any

# (ngpus, C, protocol, max thread blocks per GPU, max ops per thread block, channel pairs, launches) when the
# reference would report no error and no note for the text; (rank, its thread blocks) when a rank has more than
# max_tbs (checked right after parsing); otherwise why it is not decided here ("limit: ..." for a capacity limit
# of the core)
def check(
    text: str, counts: Any, chunk_bytes: int, launches: int, max_tbs: int, /
) -> tuple[int, int, str, int, int, int, int] | tuple[int, int] | str: ...
