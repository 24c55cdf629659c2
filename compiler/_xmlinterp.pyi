# Signatures of the compiled MSCCL XML lowering and check (compiler/native/xmlinterp.c); the Python modules of
# a2acc.backends.msccl_xml are the reference.
from typing import Any

# (ngpus, nchannels, nchunksperloop, proto, collective, max thread blocks per GPU, max steps per thread block),
# or None when the text is not accepted (the reference then says why)
def check(text: str, dialect: str, counts: Any, /) -> tuple[int, int, int, str, str, int, int] | None: ...

# (text, stats...) on success; (0, why..., last combined) when the executor's limits refuse; None: not decided
def lower(n: int, nchunks: int, *args: Any) -> tuple[Any, ...] | None: ...
