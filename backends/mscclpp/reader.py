"""Strict reader of MSCCL++ JSON execution plans: the schema of the executor's loader, with JSON paths in errors.

The ``mscclpp`` Executor reads plans with nlohmann::json (``src/core/executor/execution_plan.cc`` at v0.8 and
later): a missing required key, a value of the wrong type or an unknown enum string throws at load time, and a
key it does not read is silently ignored. This reader accepts what that loader accepts and reports everything
it would reject or ignore, each error naming the JSON path and the value (``gpus[0].threadblocks[2].ops[5].
channel_ids[0]: value -1 is invalid; ...``). It keeps reading after an error so that one pass lists them all.

Two families of files are recognised and rejected as a whole, with the reason:

- the **old schema** of v0.5 to v0.7 (``inputChunks``, ``chunkGroups``, ``connectedTo``, ``i_cids``/``o_cids``,
  ``srcs``/``dsts``, channel types ``sm``/``proxy``/``nvls``), which the v0.8+ loader cannot read;
- **dynamic templates** (``dynamic_index``/``dynamic_size`` placeholders, ``dynamic_parameters``), the unmerged
  all-to-all-v prototype on microsoft/mscclpp's ``qinghuazhou/all_to_all_v_dsl`` branch, which no released
  executor loads.

Cross-references (channel and buffer indices, limits, sizes) are checked by :mod:`.interp` on the model this
reader returns.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from a2acc.backends.mscclpp.model import (
    BUFFER_TYPES,
    CHANNEL_TYPES,
    MAX_U64,
    OP_NAMES,
    PROTOCOLS,
    BufRef,
    ChannelGroup,
    Gpu,
    Op,
    Plan,
    RemoteBuffer,
    TbTable,
    ThreadBlock,
)
from a2acc.fileio import loads_json

MAX_READ_GPUS = 4096
OLD_SCHEMA_KEYS = frozenset(
    {"inputChunks", "outputChunks", "scratchChunks", "chunkGroups", "connectedTo", "i_cids", "o_cids", "i_buff",
     "o_buff", "srcs", "dsts", "srcbuff", "srcoff", "dstbuff", "dstoff", "ctype", "cids", "cnt", "deps"}
)  # fmt: skip
OLD_CHANNEL_TYPES = {"sm": "memory", "proxy": "port", "nvls": "switch"}

_TOP_KEYS = {
    "name",
    "collective",
    "protocol",
    "inplace",
    "gpus",
    "num_threads_per_block",
    "min_message_size",
    "max_message_size",
    "buffer_alignment",
    "use_double_scratch_buffer",
    "reuse_resources",
}
_GPU_KEYS = {"id", "input_chunks", "output_chunks", "scratch_chunks", "threadblocks", "channels", "remote_buffers",
             "semaphores"}  # fmt: skip
_TB_KEYS = {"id", "ops", "channels", "remote_buffer_refs"}
_OP_KEYS = {"name", "channel_type", "channel_ids", "src_buff", "dst_buff", "barrier_id", "num_threadblocks",
            "semaphore_ids", "tbg_info", "iter_context", "ops", "reduce_op"}  # fmt: skip
_REF_KEYS = {"type", "buffer_id", "switch_channel_id", "index", "size"}


@dataclass
class ReadResult:
    plan: Plan | None
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


class _Dup(dict[str, Any]):
    """A JSON object that remembers keys given twice (json.loads keeps only the last)."""

    dups: list[str]


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    d = dict(pairs)
    if len(d) == len(pairs):
        return d
    dup = _Dup(pairs)
    seen: set[str] = set()
    dup.dups = []
    for k, _v in pairs:
        if k in seen:
            dup.dups.append(k)
        seen.add(k)
    return dup


def _walk_keys(obj: Any, fn: Callable[[str, str], None], path: str = "") -> None:
    if isinstance(obj, dict):
        for k, v in obj.items():
            fn(path, k)
            _walk_keys(v, fn, f"{path}.{k}" if path else k)
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            _walk_keys(v, fn, f"{path}[{i}]")


_OP_NAME_SET = frozenset(OP_NAMES)
_REF_LOCAL = frozenset({"type", "index", "size"})
_REF_REMOTE = frozenset({"buffer_id", "index", "size"})
_FAST_OP_KEYS = frozenset(
    {"name", "channel_type", "channel_ids", "src_buff", "dst_buff", "semaphore_ids", "reduce_op"}
)
_BIG = 1 << 32


def _ints(v: Any, hi: int) -> tuple[int, ...] | None:
    if type(v) is not list:
        return None
    for x in v:
        if type(x) is not int or not 0 <= x <= hi:
            return None
    return tuple(v)


def _fast_refs(v: Any) -> tuple[BufRef, ...] | None:
    if type(v) is not list:
        return None
    out = []
    for r in v:
        if type(r) is not dict:
            return None
        i, n = r.get("index"), r.get("size")
        if type(i) is not int or type(n) is not int or not (0 <= i <= _BIG and 0 <= n <= _BIG):
            return None
        keys = r.keys()
        if keys == _REF_LOCAL:
            t = r["type"]
            if t not in BUFFER_TYPES:
                return None
            out.append(BufRef(i, n, t))
        elif keys == _REF_REMOTE:
            b = r["buffer_id"]
            if type(b) is not int or not 0 <= b <= 255:
                return None
            out.append(BufRef(i, n, buffer_id=b))
        else:
            return None
    return tuple(out)


def _fast_op(d: Any) -> Op | None:
    """The common operation shapes, validated without building JSON paths (None: take the slow path,
    which reports what is wrong)."""
    if type(d) is not dict or not d.keys() <= _FAST_OP_KEYS:
        return None
    name = d.get("name")
    if type(name) is not str or name not in _OP_NAME_SET:
        return None
    ct = d.get("channel_type")
    if ct is not None and (type(ct) is not str or ct not in CHANNEL_TYPES):
        return None
    ids = sems = src = dst = None
    if "channel_ids" in d and (ids := _ints(d["channel_ids"], 255)) is None:
        return None
    if "semaphore_ids" in d and (sems := _ints(d["semaphore_ids"], _BIG)) is None:
        return None
    if "src_buff" in d and (src := _fast_refs(d["src_buff"])) is None:
        return None
    if "dst_buff" in d and (dst := _fast_refs(d["dst_buff"])) is None:
        return None
    red = d.get("reduce_op")
    if red is not None and red not in ("sum", "min", "max"):
        return None
    return Op(name, ct, ids, src, dst, sems, reduce_op=red)


class _Reader:
    def __init__(self, src: str) -> None:
        self.src = src
        self.errors: list[str] = []
        self.notes: list[str] = []

    def err(self, path: str, value: object, allowed: str) -> None:
        shown = repr(value)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        self.errors.append(f"{path or '<top>'}: value {shown} is invalid; {allowed}")

    # ------------------------------------------------------------------ typed getters
    def obj(self, v: Any, path: str, keys: set[str], required: tuple[str, ...]) -> dict[str, Any] | None:
        if not isinstance(v, dict):
            self.err(path, type(v).__name__, "must be a JSON object")
            return None
        for k in getattr(v, "dups", []):
            self.err(
                f"{path}.{k}" if path else k, "duplicate key", "each key once (the loader keeps the last)"
            )
        for k in v:
            if k not in keys:
                self.err(
                    f"{path}.{k}" if path else k,
                    k,
                    f"unknown key: the executor does not read it (known: {', '.join(sorted(keys))})",
                )
        for k in required:
            if k not in v:
                self.err(f"{path}.{k}" if path else k, "missing", "required: the executor's loader reads it")
        return v

    def int_(
        self, d: dict[str, Any], key: str, path: str, lo: int = 0, hi: int = MAX_U64, default: int = 0
    ) -> int:
        p = f"{path}.{key}" if path else key
        if key not in d:
            return default
        v = d[key]
        if isinstance(v, bool) or not isinstance(v, int):
            self.err(p, v, "must be an integer")
            return default
        if not lo <= v <= hi:
            self.err(p, v, f"must be in {lo}..{hi}")
            return default
        return v

    def bool_(self, d: dict[str, Any], key: str, path: str, default: bool = False) -> bool:
        p = f"{path}.{key}" if path else key
        if key not in d:
            return default
        v = d[key]
        if not isinstance(v, bool):
            self.err(p, v, "must be true or false")
            return default
        return v

    def str_(self, d: dict[str, Any], key: str, path: str, allowed: tuple[str, ...] | None = None) -> str:
        p = f"{path}.{key}" if path else key
        if key not in d:
            return ""
        v = d[key]
        if not isinstance(v, str):
            self.err(p, v, "must be a string")
            return ""
        if allowed is not None and v not in allowed:
            hint = ""
            if v in OLD_CHANNEL_TYPES:
                hint = f" ('{v}' is the pre-v0.8 name of '{OLD_CHANNEL_TYPES[v]}')"
            self.err(p, v, f"must be one of {', '.join(allowed)}{hint}")
            return ""
        return v

    def list_(self, d: dict[str, Any], key: str, path: str) -> list[Any]:
        p = f"{path}.{key}" if path else key
        if key not in d:
            return []
        v = d[key]
        if not isinstance(v, list):
            self.err(p, type(v).__name__, "must be a JSON array")
            return []
        return v

    def ints(self, d: dict[str, Any], key: str, path: str, hi: int = MAX_U64) -> tuple[int, ...] | None:
        if key not in d:
            return None
        fast = _ints(d[key], hi)
        if fast is not None:
            return fast
        out = []
        for i, v in enumerate(self.list_(d, key, path)):
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= hi:
                self.err(f"{path}.{key}[{i}]", v, f"must be an integer in 0..{hi}")
                continue
            out.append(v)
        return tuple(out)

    # ------------------------------------------------------------------ structure
    def plan(self, doc: Any) -> Plan | None:
        top = self.obj(doc, "", _TOP_KEYS, ("name", "collective", "protocol", "inplace", "gpus"))
        if top is None:
            return None
        name = self.str_(top, "name", "")
        coll = self.str_(top, "collective", "")
        proto = self.str_(top, "protocol", "", PROTOCOLS)
        inplace = self.bool_(top, "inplace", "")
        gpus_raw = self.list_(top, "gpus", "")
        if "gpus" in top and not gpus_raw:
            self.err("gpus", gpus_raw, "must list one GPU per rank")
        if len(gpus_raw) > MAX_READ_GPUS:
            self.err("gpus", len(gpus_raw), f"at most {MAX_READ_GPUS} GPUs are read")
            return None
        gpus = [self.gpu(g, f"gpus[{i}]") for i, g in enumerate(gpus_raw)]
        align = self.int_(top, "buffer_alignment", "", 1, 1 << 20, 16)
        plan = Plan(
            name=name,
            collective=coll,
            protocol=proto or "Simple",
            inplace=inplace,
            gpus=tuple(g for g in gpus if g is not None),
            reuse_resources=self.bool_(top, "reuse_resources", ""),
            num_threads_per_block=self.int_(top, "num_threads_per_block", "", 1, 1 << 20, 1024),
            use_double_scratch_buffer=self.bool_(top, "use_double_scratch_buffer", ""),
            buffer_alignment=align,
            min_message_size=self.int_(top, "min_message_size", "", 0, MAX_U64, 0),
            max_message_size=self.int_(top, "max_message_size", "", 0, MAX_U64, MAX_U64),
        )
        if any(g is None for g in gpus):
            return None
        return plan

    def gpu(self, v: Any, path: str) -> Gpu | None:
        d = self.obj(
            v,
            path,
            _GPU_KEYS,
            (
                "id",
                "input_chunks",
                "output_chunks",
                "scratch_chunks",
                "threadblocks",
                "channels",
                "remote_buffers",
            ),
        )
        if d is None:
            return None
        big = 1 << 32
        channels = [
            self.channel_group(c, f"{path}.channels[{i}]")
            for i, c in enumerate(self.list_(d, "channels", path))
        ]
        rbs = [
            self.remote_buffer(b, f"{path}.remote_buffers[{i}]")
            for i, b in enumerate(self.list_(d, "remote_buffers", path))
        ]
        sems = []
        for i, s in enumerate(self.list_(d, "semaphores", path)):
            sd = self.obj(s, f"{path}.semaphores[{i}]", {"init_value"}, ("init_value",))
            if sd is not None:
                sems.append(self.int_(sd, "init_value", f"{path}.semaphores[{i}]", 0, MAX_U64))
        tbs = [
            self.threadblock(t, f"{path}.threadblocks[{i}]")
            for i, t in enumerate(self.list_(d, "threadblocks", path))
        ]
        return Gpu(
            id=self.int_(d, "id", path, 0, MAX_READ_GPUS),
            input_chunks=self.int_(d, "input_chunks", path, 0, big),
            output_chunks=self.int_(d, "output_chunks", path, 0, big),
            scratch_chunks=self.int_(d, "scratch_chunks", path, 0, big),
            threadblocks=tuple(t for t in tbs if t is not None),
            channels=tuple(c for c in channels if c is not None),
            remote_buffers=tuple(b for b in rbs if b is not None),
            semaphores=tuple(sems),
        )

    def channel_group(self, v: Any, path: str) -> ChannelGroup | None:
        if isinstance(v, dict) and v.get("channel_type") == "switch":
            d = self.obj(
                v, path, {"channel_type", "buffer_type", "rank_groups"}, ("buffer_type", "rank_groups")
            )
            if d is None:
                return None
            if "buff" in d and "buffer_type" not in d:
                self.errors.append(
                    f"{path}: a switch channel needs 'buffer_type'; 'buff' is not what execution_plan.cc reads "
                    "(the loader throws reading a missing buffer_type)"
                )
            groups = []
            for i, g in enumerate(self.list_(d, "rank_groups", path)):
                gd = self.obj(g, f"{path}.rank_groups[{i}]", {"size", "ranks"}, ("size", "ranks"))
                if gd is not None:
                    ranks = self.ints(gd, "ranks", f"{path}.rank_groups[{i}]", MAX_READ_GPUS) or ()
                    groups.append((self.int_(gd, "size", f"{path}.rank_groups[{i}]", 0, 1 << 32), ranks))
            return ChannelGroup("switch", (), self.str_(d, "buffer_type", path, BUFFER_TYPES), tuple(groups))
        d = self.obj(v, path, {"channel_type", "connected_to"}, ("channel_type", "connected_to"))
        if d is None:
            return None
        ct = self.str_(d, "channel_type", path, ("memory", "port", "switch", "none"))
        peers = self.ints(d, "connected_to", path, MAX_READ_GPUS) or ()
        return ChannelGroup(ct, peers)

    def remote_buffer(self, v: Any, path: str) -> RemoteBuffer | None:
        d = self.obj(
            v, path, {"rank", "type", "access_channel_types"}, ("rank", "type", "access_channel_types")
        )
        if d is None:
            return None
        acc = []
        for i, a in enumerate(self.list_(d, "access_channel_types", path)):
            if a not in CHANNEL_TYPES:
                self.err(f"{path}.access_channel_types[{i}]", a, f"must be one of {', '.join(CHANNEL_TYPES)}")
            else:
                acc.append(a)
        return RemoteBuffer(
            self.int_(d, "rank", path, 0, MAX_READ_GPUS), self.str_(d, "type", path, BUFFER_TYPES), tuple(acc)
        )

    def tb_table(self, v: Any, path: str, ids_key: str, type_key: str) -> TbTable | None:
        keys = {type_key, ids_key} | ({"buff"} if ids_key == "channel_ids" else set())
        d = self.obj(v, path, keys, (type_key, ids_key))
        if d is None:
            return None
        ct = self.str_(d, type_key, path, CHANNEL_TYPES)
        return TbTable(ct, self.ints(d, ids_key, path, 255) or ())

    def threadblock(self, v: Any, path: str) -> ThreadBlock | None:
        d = self.obj(v, path, _TB_KEYS, ("id", "ops", "channels"))
        if d is None:
            return None
        chans = [
            self.tb_table(c, f"{path}.channels[{i}]", "channel_ids", "channel_type")
            for i, c in enumerate(self.list_(d, "channels", path))
        ]
        refs = [
            self.tb_table(c, f"{path}.remote_buffer_refs[{i}]", "remote_buffer_ids", "access_channel_type")
            for i, c in enumerate(self.list_(d, "remote_buffer_refs", path))
        ]
        ops = [
            _fast_op(o) or self.op(o, f"{path}.ops[{i}]", nested=False)
            for i, o in enumerate(self.list_(d, "ops", path))
        ]
        return ThreadBlock(
            id=self.int_(d, "id", path, 0, 1 << 16),
            ops=tuple(o for o in ops if o is not None),
            channels=tuple(c for c in chans if c is not None),
            remote_buffer_refs=tuple(r for r in refs if r is not None),
        )

    def ref(self, v: Any, path: str) -> BufRef | None:
        d = self.obj(v, path, _REF_KEYS, ("index", "size"))
        if d is None:
            return None
        kinds = [k for k in ("type", "buffer_id", "switch_channel_id") if k in d]
        if len(kinds) != 1:
            self.err(
                path, sorted(d), "a buffer reference has exactly one of type, buffer_id, switch_channel_id"
            )
            return None
        big = 1 << 32
        return BufRef(
            index=self.int_(d, "index", path, 0, big),
            size=self.int_(d, "size", path, 0, big),
            type=self.str_(d, "type", path, BUFFER_TYPES) if "type" in d else "",
            buffer_id=self.int_(d, "buffer_id", path, 0, 255, -1) if "buffer_id" in d else -1,
            switch_id=self.int_(d, "switch_channel_id", path, 0, 255, -1) if "switch_channel_id" in d else -1,
        )

    def refs(self, d: dict[str, Any], key: str, path: str) -> tuple[BufRef, ...] | None:
        if key not in d:
            return None
        out = [self.ref(r, f"{path}.{key}[{i}]") for i, r in enumerate(self.list_(d, key, path))]
        return tuple(r for r in out if r is not None)

    def op(self, v: Any, path: str, nested: bool) -> Op | None:
        d = self.obj(v, path, _OP_KEYS, ("name",))
        if d is None:
            return None
        name = self.str_(d, "name", path)
        if name and name not in OP_NAMES:
            why = {
                "glre": "a lone SwitchChannel reduce: the DSL writes it but the executor's op table has no 'glre'",
                "start": "the DSL's enum has it but the executor's op table does not",
            }.get(name, "the executor throws 'Invalid operation type'")
            self.err(f"{path}.name", name, f"not an executor operation ({why})")
        tbg = self.tbg_info(d, path)
        ic, body = self.pipeline(d, path, nested)
        if name == "pipeline" and ic is None:
            self.err(path, name, "a pipeline needs iter_context {unit_size, num_chunks}")
        ct = self.str_(d, "channel_type", path, CHANNEL_TYPES) if "channel_type" in d else None
        return Op(
            name=name,
            channel_type=ct,
            channel_ids=self.ints(d, "channel_ids", path, 255),
            src=self.refs(d, "src_buff", path),
            dst=self.refs(d, "dst_buff", path),
            semaphore_ids=self.ints(d, "semaphore_ids", path, 1 << 32),
            barrier_id=self.int_(d, "barrier_id", path, 0, 1 << 32) if "barrier_id" in d else None,
            num_threadblocks=self.int_(d, "num_threadblocks", path, 0, 1 << 16)
            if "num_threadblocks" in d
            else None,
            tbg=tbg,
            iter_context=ic,
            ops=tuple(o for o in body if o is not None),
            reduce_op=self.str_(d, "reduce_op", path, ("sum", "min", "max")) if "reduce_op" in d else None,
        )

    def tbg_info(self, d: dict[str, Any], path: str) -> tuple[int, int] | None:
        if "tbg_info" not in d:
            return None
        td = self.obj(d["tbg_info"], f"{path}.tbg_info", {"tb_id", "tbg_size"}, ("tb_id", "tbg_size"))
        if td is None:
            return None
        return (
            self.int_(td, "tb_id", f"{path}.tbg_info", 0, 1 << 16),
            self.int_(td, "tbg_size", f"{path}.tbg_info", 1, 1 << 16, 1),
        )

    def pipeline(
        self, d: dict[str, Any], path: str, nested: bool
    ) -> tuple[tuple[int, int] | None, list[Op | None]]:
        """A pipeline's iter_context and nested ops (None and [] for any other op)."""
        if "iter_context" not in d:
            if "ops" in d:
                self.err(f"{path}.ops", "ops", "only a pipeline (with iter_context) has nested ops")
            return None, []
        ic = None
        where = f"{path}.iter_context"
        cd = self.obj(d["iter_context"], where, {"unit_size", "num_chunks"}, ("unit_size", "num_chunks"))
        if cd is not None:
            ic = (
                self.int_(cd, "unit_size", where, 1, (1 << 32) - 1, 1),
                self.int_(cd, "num_chunks", where, 0, 1 << 32),
            )
        if nested:
            self.err(
                path,
                "pipeline",
                "pipelines cannot be nested (the DSL rejects it; the loader flattens one level)",
            )
        return ic, [
            self.op(o, f"{path}.ops[{i}]", nested=True) for i, o in enumerate(self.list_(d, "ops", path))
        ]


def _rejected_family(doc: Any, text: str) -> str:
    """Why the whole file is not a v0.8+ plan at all ("" when it looks like one)."""
    if '"dynamic' not in text and not any(f'"{k}"' in text for k in OLD_SCHEMA_KEYS):
        return ""
    old: set[str] = set()
    dyn: set[str] = set()

    def see(_path: str, key: str) -> None:
        if key in OLD_SCHEMA_KEYS:
            old.add(key)
        if key.startswith("dynamic"):
            dyn.add(key)

    _walk_keys(doc, see)
    if dyn:
        return (
            f"non-standard dynamic execution-plan template ({', '.join(sorted(dyn)[:5])}): placeholders from the "
            "unmerged all-to-all-v prototype (microsoft/mscclpp branch qinghuazhou/all_to_all_v_dsl) that no "
            "released executor loads; a static plan has concrete index/size fields"
        )
    if old:
        return (
            f"old execution-plan schema of MSCCL++ v0.5-v0.7 ({', '.join(sorted(old)[:6])}): the executor reads "
            "the new schema since v0.8 (input_chunks, remote_buffers, src_buff/dst_buff, channel types "
            "memory/port/switch) and cannot load this file; regenerate it with the v0.8+ DSL"
        )
    return ""


def read_plan(text: str, src: str = "<plan>") -> ReadResult:
    """Parse and validate ``text``; ``plan`` is None when the structure is too broken to interpret."""
    enabled = gc.isenabled()
    gc.disable()  # tens of thousands of small long-lived objects: collections would only rescan them
    try:
        return _read_plan(text, src)
    finally:
        if enabled:
            gc.enable()


def _read_plan(text: str, src: str) -> ReadResult:
    try:
        doc = loads_json(text, object_pairs_hook=_pairs)
    except json.JSONDecodeError as exc:
        return ReadResult(None, [f"{src}: not valid JSON ({exc})"])
    except RecursionError:
        return ReadResult(None, [f"{src}: JSON nested too deeply"])
    family = _rejected_family(doc, text)
    if family:
        return ReadResult(None, [f"{src}: {family}"])
    r = _Reader(src)
    plan = r.plan(doc)
    return ReadResult(plan, [f"{src}: {e}" for e in r.errors], r.notes)
