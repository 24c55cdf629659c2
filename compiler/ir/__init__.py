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

import importlib

# the names below are imported on first use (PEP 562): ``import a2acc.ir.passes`` (the command line's parser
# lists the passes) must not pay for numpy; not typing.TYPE_CHECKING, whose import costs time too
TYPE_CHECKING = False
if TYPE_CHECKING:
    from a2acc.ir.builder import ProgramBuilder
    from a2acc.ir.layout import ChunkLayout, Manifest
    from a2acc.ir.program import LINK_CLASSES, OP_FIELDS, Buf, MachineMap, Op, Program, replace_ops
    from a2acc.ir.serial import IR_FORMAT, IR_VERSION, load_program, program_from_json, program_to_json

_WHERE = {
    "ProgramBuilder": "builder",
    "ChunkLayout": "layout",
    "Manifest": "layout",
    "LINK_CLASSES": "program",
    "OP_FIELDS": "program",
    "Buf": "program",
    "MachineMap": "program",
    "Op": "program",
    "Program": "program",
    "replace_ops": "program",
    "IR_FORMAT": "serial",
    "IR_VERSION": "serial",
    "load_program": "serial",
    "program_from_json": "serial",
    "program_to_json": "serial",
}


def __getattr__(name: str) -> object:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'a2acc.ir' has no attribute '{name}'")
    value = getattr(importlib.import_module(f"a2acc.ir.{where}"), name)
    globals()[name] = value
    return value


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
