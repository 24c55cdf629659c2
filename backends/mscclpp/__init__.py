"""The MSCCL++ targets: ``mscclpp-json`` execution plans and ``mscclpp-dsl`` program source from one lowering,
read back strictly and interpreted (see :mod:`a2acc.backends.mscclpp.target`)."""
