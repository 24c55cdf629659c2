"""MSCCL++ targets: the seam. Files are recognised by content; lowering and checking are not built yet.

An MSCCL++ JSON execution plan (the schema the ``mscclpp`` Executor reads since v0.8) is a JSON object with
``name``, ``collective``, ``protocol``, ``inplace`` and ``gpus``. ``a2acc verify`` recognises such a file and
says plainly that this a2acc cannot check it yet; ``a2acc compile --backend mscclpp-json|mscclpp-dsl`` refuses
before planning anything. When the backend lands, this module's classes get their lowering (one lowering
feeding both the JSON plan and the DSL source) and an interpreter of the plan semantics; nothing else changes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from a2acc.backends.target import CheckReport, Lowered
from a2acc.errors import LoweringError
from a2acc.ir.layout import Manifest
from a2acc.ir.program import Program

NOT_BUILT = "the MSCCL++ backend is not built yet in this a2acc; use --backend msccl-xml"


@dataclass(frozen=True)
class Options:
    """No options until the backend is built."""


def is_plan_json(head: str) -> bool:
    s = head.lstrip()
    if not s.startswith("{"):
        return False
    try:
        doc = json.loads(head)
    except json.JSONDecodeError:  # only the head of a large file: look for the keys instead
        return all(f'"{k}"' in s for k in ("collective", "protocol", "gpus"))
    return isinstance(doc, dict) and {"name", "collective", "protocol", "gpus"} <= set(doc)


class _MscclppTarget:
    Options = Options
    output_kind = "file"

    def __init__(self, name: str, summary: str) -> None:
        self.name = name
        self.summary = summary

    def max_chunks(self, options: Any) -> int | None:
        return None

    def lower(self, program: Program, options: Any, *, name: str | None = None) -> Lowered:
        raise LoweringError(NOT_BUILT)

    def check(self, lowered: Lowered) -> CheckReport:
        raise LoweringError(NOT_BUILT)

    def emit(
        self, lowered: Lowered, output: Path, *, manifest_path: Path | None = None, force: bool = False
    ) -> list[Path]:
        raise LoweringError(NOT_BUILT)

    def detect(self, head: str) -> bool:
        return self.name == "mscclpp-json" and is_plan_json(head)

    def check_text(self, text: str, source: str, manifest: Manifest | None, options: Any) -> CheckReport:
        raise LoweringError(f"{source} is an MSCCL++ JSON execution plan: {NOT_BUILT} to check it")


TARGETS = {
    "mscclpp-json": _MscclppTarget("mscclpp-json", "MSCCL++ JSON execution plan (not built yet)"),
    "mscclpp-dsl": _MscclppTarget("mscclpp-dsl", "MSCCL++ DSL program source (not built yet)"),
}
