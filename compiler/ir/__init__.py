"""The contract between planners and targets: the :class:`Program` IR and everything that defines it.

- :mod:`~a2acc.ir.program`: ``Program``, ``Op``, ``Buf``, ``MachineMap`` (the data and its invariants);
- :mod:`~a2acc.ir.builder`: ``ProgramBuilder`` (how planners emit ops; scratch allocator);
- :mod:`~a2acc.ir.serial`: plan JSON v2 (reads v1);
- :mod:`~a2acc.ir.layout`: the chunk layout, manifest, pack/unpack (one copy for every backend and the JIT);
- :mod:`~a2acc.ir.quantize`: every unit policy (bytes -> chunks);
- :mod:`~a2acc.ir.dag`: order check, levels, happens-before;
- :mod:`~a2acc.ir.verify`: the one verifier every plan and every lowered file goes through;
- :mod:`~a2acc.ir.passes`: Program -> Program passes.
"""

from __future__ import annotations

from a2acc.ir.builder import ProgramBuilder
from a2acc.ir.layout import ChunkLayout, Manifest
from a2acc.ir.program import LINK_CLASSES, OP_FIELDS, Buf, MachineMap, Op, Program, replace_ops
from a2acc.ir.serial import IR_FORMAT, IR_VERSION, load_program, program_from_json, program_to_json

__all__ = [
    "IR_FORMAT",
    "IR_VERSION",
    "LINK_CLASSES",
    "OP_FIELDS",
    "Buf",
    "ChunkLayout",
    "MachineMap",
    "Manifest",
    "Op",
    "Program",
    "ProgramBuilder",
    "load_program",
    "program_from_json",
    "program_to_json",
    "replace_ops",
]
