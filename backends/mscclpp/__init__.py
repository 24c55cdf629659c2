"""The MSCCL++ targets (``mscclpp-json`` execution plans, ``mscclpp-dsl`` program source): registered, detected
by content, lowering not built yet (see :mod:`a2acc.backends.mscclpp.target`)."""
