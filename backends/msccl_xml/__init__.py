"""MSCCL XML backend: lower a verified Program to XML for msccl-executor-nccl and RCCL, read it back strictly,
and interpret it with the executors' semantics (msccl-executor-nccl's ``src/misc/msccl/`` and RCCL's MSCCL)."""
