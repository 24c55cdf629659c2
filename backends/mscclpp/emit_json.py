"""Write a :class:`~a2acc.backends.mscclpp.model.Plan` as the JSON text the ``mscclpp`` Executor loads.

Keys and their order follow what the upstream DSL writes (microsoft/mscclpp
``python/mscclpp/language/program.py`` ``to_json``, ``internal/gpu.py``, ``internal/threadblock.py``,
``internal/operations.py``), so a plan from a2acc reads like one from the DSL. The layout is compact: one line
per operation, which keeps large plans small (the DSL's ``indent=2`` output is several times larger) and
diffs readable. The text is deterministic: the same plan gives the same bytes.
"""

from __future__ import annotations

import json
from typing import Any

from a2acc.backends.mscclpp.model import BufRef, Gpu, Op, Plan, ThreadBlock


def _ref(r: BufRef) -> dict[str, Any]:
    if r.kind == "remote":
        return {"buffer_id": r.buffer_id, "index": r.index, "size": r.size}
    if r.kind == "switch":
        return {"switch_channel_id": r.switch_id, "index": r.index, "size": r.size}
    return {"type": r.type, "index": r.index, "size": r.size}


def op_dict(op: Op) -> dict[str, Any]:
    """The JSON object of one operation (nested ``pipeline`` bodies included)."""
    d: dict[str, Any] = {"name": op.name}
    if op.iter_context is not None:
        d["iter_context"] = {"unit_size": op.iter_context[0], "num_chunks": op.iter_context[1]}
    if op.src is not None:
        d["src_buff"] = [_ref(r) for r in op.src]
    if op.dst is not None:
        d["dst_buff"] = [_ref(r) for r in op.dst]
    if op.channel_ids is not None:
        d["channel_ids"] = list(op.channel_ids)
    if op.channel_type is not None:
        d["channel_type"] = op.channel_type
    if op.semaphore_ids is not None:
        d["semaphore_ids"] = list(op.semaphore_ids)
    if op.barrier_id is not None:
        d["barrier_id"] = op.barrier_id
    if op.num_threadblocks is not None:
        d["num_threadblocks"] = op.num_threadblocks
    if op.tbg is not None:
        d["tbg_info"] = {"tb_id": op.tbg[0], "tbg_size": op.tbg[1]}
    if op.reduce_op is not None:
        d["reduce_op"] = op.reduce_op
    if op.iter_context is not None:
        d["ops"] = [op_dict(o) for o in op.ops]
    return d


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(", ", ": "))


def _ref_text(r: BufRef) -> str:
    if r.kind == "remote":
        return f'{{"buffer_id": {r.buffer_id}, "index": {r.index}, "size": {r.size}}}'
    if r.kind == "switch":
        return f'{{"switch_channel_id": {r.switch_id}, "index": {r.index}, "size": {r.size}}}'
    return f'{{"type": "{r.type}", "index": {r.index}, "size": {r.size}}}'


def _ints_text(xs: tuple[int, ...]) -> str:
    return "[" + ", ".join(map(str, xs)) + "]"


def op_text(op: Op) -> str:
    """One operation as compact JSON: the same text as ``json.dumps(op_dict(op))`` with ", "/": " separators,
    written directly for the operations a2acc emits (names and enums are plain ASCII words)."""
    if (
        op.iter_context is not None
        or op.tbg is not None
        or op.barrier_id is not None
        or op.num_threadblocks is not None
    ):
        return _dumps(op_dict(op))
    parts = [f'"name": "{op.name}"']
    if op.src is not None:
        parts.append('"src_buff": [' + ", ".join(map(_ref_text, op.src)) + "]")
    if op.dst is not None:
        parts.append('"dst_buff": [' + ", ".join(map(_ref_text, op.dst)) + "]")
    if op.channel_ids is not None:
        parts.append(f'"channel_ids": {_ints_text(op.channel_ids)}')
    if op.channel_type is not None:
        parts.append(f'"channel_type": "{op.channel_type}"')
    if op.semaphore_ids is not None:
        parts.append(f'"semaphore_ids": {_ints_text(op.semaphore_ids)}')
    if op.reduce_op is not None:
        parts.append(f'"reduce_op": "{op.reduce_op}"')
    return "{" + ", ".join(parts) + "}"


def _tb_lines(tb: ThreadBlock) -> list[str]:
    chans = [{"channel_type": t.channel_type, "channel_ids": list(t.ids)} for t in tb.channels]
    refs = [
        {"access_channel_type": t.channel_type, "remote_buffer_ids": list(t.ids)}
        for t in tb.remote_buffer_refs
    ]
    head = f'        {{"id": {tb.id}, "channels": {_dumps(chans)}, "remote_buffer_refs": {_dumps(refs)}, "ops": ['
    body = [f"          {op_text(o)}" for o in tb.ops]
    for i in range(len(body) - 1):
        body[i] += ","
    return [head, *body, "        ]}"]


def _gpu_lines(g: Gpu) -> list[str]:
    chans: list[dict[str, Any]] = []
    for c in g.channels:
        if c.channel_type == "switch":
            chans.append(
                {
                    "channel_type": "switch",
                    "buffer_type": c.buffer_type,
                    "rank_groups": [{"size": s, "ranks": list(rs)} for s, rs in c.rank_groups],
                }
            )
        else:
            chans.append({"channel_type": c.channel_type, "connected_to": list(c.connected_to)})
    rbs = [
        {"rank": b.rank, "type": b.type, "access_channel_types": list(b.access_channel_types)}
        for b in g.remote_buffers
    ]
    sems = [{"init_value": v} for v in g.semaphores]
    out = [
        f'    {{"id": {g.id}, "input_chunks": {g.input_chunks}, "output_chunks": {g.output_chunks}, '
        f'"scratch_chunks": {g.scratch_chunks},',
        '      "threadblocks": [',
    ]
    for i, tb in enumerate(g.threadblocks):
        lines = _tb_lines(tb)
        if i < len(g.threadblocks) - 1:
            lines[-1] += ","
        out += lines
    out += [
        "      ],",
        f'      "channels": {_dumps(chans)},',
        f'      "remote_buffers": {_dumps(rbs)},',
        f'      "semaphores": {_dumps(sems)}}}',
    ]
    return out


def to_json(plan: Plan) -> str:
    """The plan as JSON text (UTF-8, ends with a newline)."""
    lines = [
        "{",
        f'  "name": {json.dumps(plan.name)},',
        f'  "collective": {json.dumps(plan.collective)},',
        f'  "protocol": {json.dumps(plan.protocol)},',
        f'  "inplace": {json.dumps(plan.inplace)},',
        f'  "reuse_resources": {json.dumps(plan.reuse_resources)},',
        '  "gpus": [',
    ]
    for i, g in enumerate(plan.gpus):
        gl = _gpu_lines(g)
        if i < len(plan.gpus) - 1:
            gl[-1] += ","
        lines += gl
    lines += [
        "  ],",
        f'  "num_threads_per_block": {plan.num_threads_per_block},',
        f'  "use_double_scratch_buffer": {json.dumps(plan.use_double_scratch_buffer)},',
        f'  "buffer_alignment": {plan.buffer_alignment},',
        f'  "min_message_size": {plan.min_message_size},',
        f'  "max_message_size": {plan.max_message_size}',
        "}",
    ]
    return "\n".join(lines) + "\n"
