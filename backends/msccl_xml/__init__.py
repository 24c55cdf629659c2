"""MSCCL XML backend: lower a verified Program to XML for msccl-executor-nccl and RCCL, read it back strictly,
and interpret it with the executors' semantics (``shared/specs/msccl-xml.md`` is the contract)."""
