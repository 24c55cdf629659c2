"""Read an MSCCL++ DSL program of the form :mod:`.emit_dsl` writes back into a plan, without running it.

``a2acc verify`` and ``compile``'s check read DSL source as data: the module is parsed with :mod:`ast` and
evaluated by a small interpreter of the statement forms a2acc emits (no ``exec``, no imports, nothing else is
evaluated), then assembled the way the upstream DSL assembles a program (microsoft/mscclpp
``python/mscclpp/language/program.py`` ``post_process_operations``, ``internal/optimizer.py``,
``internal/buffer_access.py``, ``internal/gpu.py``, ``internal/threadblock.py``), as documented behaviour:

- channels, semaphores and scratch ``Buffer`` slices are numbered in creation order per rank;
- thread-block channel and remote-buffer tables list what the thread block's operations use, in first use;
- consecutive operations of a thread block fuse: puts (and put_packets) with the same first-source size and
  channel type, semaphore acquires, semaphore releases, signals or waits of one kind on disjoint channels, nops;
- ``data_sync`` becomes ``nop`` before/after the operation, and with ``auto_sync`` a ``nop`` is inserted before an
  operation whose local reads or writes overlap a write (or whose write overlaps a read) since the last ``nop``.

The result is a :class:`~.model.Plan`, checked like a JSON plan. Source that uses anything else (loops,
other calls, ``instances`` > 1) is reported as outside what this reader evaluates.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

from a2acc.backends.mscclpp.model import (
    BufRef,
    ChannelGroup,
    Gpu,
    Op,
    Plan,
    RemoteBuffer,
    TbTable,
    ThreadBlock,
)
from a2acc.model.topology import MAX_RANKS

#: the longest ``range(...)`` the reader unrolls (a2acc's DSL loops over ranks only)
MAX_RANGE = 4 * MAX_RANKS

# the documented submodules and the names each provides (mscclpp/language at v0.8 through HEAD)
DOCUMENTED = {
    "mscclpp.language": {"AlgoSpec", "ReplicationPolicy"},  # all the package itself re-exports
    "mscclpp.language.program": {"CollectiveProgram"},
    "mscclpp.language.collectives": {
        "AllToAll",
        "AllGather",
        "AllReduce",
        "ReduceScatter",
        "TestCollective",
        "SendRecv",
    },
    "mscclpp.language.rank": {"Rank", "Buffer", "Semaphore", "BaseBuffer"},
    "mscclpp.language.channel": {"MemoryChannel", "PortChannel", "SwitchChannel"},
    "mscclpp.language.general": {"JSON"},
    "mscclpp.language.loop": {"LoopIterationContext"},
    "mscclpp.language.thread_block_group": {"ThreadBlockGroup"},
    "mscclpp.language.internal.types": {"SyncType", "BufferType", "ReduceOperationType", "ChannelType"},
    "mscclpp.language.utils": {"AlgoSpec", "ReplicationPolicy"},
}
SYNC = {"none": 0, "before": 1, "after": 2, "both": 3}


class DslError(Exception):
    """The source is outside the forms this reader evaluates (or uses the DSL wrongly)."""


@dataclass
class DslResult:
    plan: Plan | None
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def import_errors(tree: ast.Module) -> list[str]:
    """Every import must be ``from <documented submodule> import <names it provides>``."""
    errs = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            errs.append(
                f"line {node.lineno}: 'import {node.names[0].name}': import names from the documented submodules"
            )
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if mod not in DOCUMENTED:
                errs.append(
                    f"line {node.lineno}: 'from {mod} import ...': not a documented mscclpp.language submodule "
                    f"({', '.join(sorted(DOCUMENTED))})"
                )
                continue
            for a in node.names:
                if a.name not in DOCUMENTED[mod]:
                    errs.append(f"line {node.lineno}: {mod} does not provide {a.name!r}")
    return errs


# ---------------------------------------------------------------------- values of the evaluated program
@dataclass(frozen=True)
class _Rank:
    r: int


@dataclass(frozen=True)
class _Buf:
    r: int
    type: str
    offset: int
    size: int


@dataclass(frozen=True)
class _Chunk:
    r: int
    type: str
    index: int
    size: int


@dataclass(frozen=True)
class _Chan:
    type: str
    src: int
    dst: int
    gid: int


@dataclass(frozen=True)
class _Sem:
    r: int
    id: int


@dataclass(frozen=True)
class _Coll:
    name: str
    n: int
    cf: int
    inplace: bool


@dataclass
class _DOp:
    """An operation before assembly: name, channel (type, rank-global id), local and remote chunks."""

    name: str
    ctype: str = "none"
    chans: list[int] = field(default_factory=list)
    src: list[tuple[str, int, int]] = field(default_factory=list)  # local (type, index, size)
    dst: list[tuple[str, int, int]] = field(default_factory=list)
    rdst: list[tuple[int, str, int, int]] = field(default_factory=list)  # remote (rank, type, index, size)
    sems: list[int] = field(default_factory=list)
    sync: int = 0


class _Eval:
    def __init__(self) -> None:
        self.consts: dict[str, Any] = {}
        self.prog: dict[str, Any] | None = None
        self.n = 0
        self.chunks = 0
        self.scratch: list[int] = []
        self.peers: dict[tuple[int, str], list[int]] = {}
        self.sems: list[list[int]] = []
        self.tbs: dict[tuple[int, int], list[_DOp]] = {}
        self.tb_chans: dict[tuple[int, int], dict[str, list[int]]] = {}
        self.tb_refs: dict[tuple[int, int], dict[str, list[int]]] = {}
        self.remote: list[dict[tuple[int, str], tuple[int, set[str]]]] = []
        self.printed = False

    # ------------------------------------------------------------------ expressions
    def ev(self, node: ast.expr, env: dict[str, Any]) -> Any:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id in env:
                return env[node.id]
            if node.id in self.consts:
                return self.consts[node.id]
            if node.id in ("True", "False", "None"):
                return {"True": True, "False": False, "None": None}[node.id]
            raise DslError(f"line {node.lineno}: unknown name {node.id!r}")
        if isinstance(node, ast.BinOp):
            a, b = self.ev(node.left, env), self.ev(node.right, env)
            if not (isinstance(a, int) and isinstance(b, int)):
                raise DslError(f"line {node.lineno}: arithmetic on non-integers")
            ops = {ast.Add: a + b, ast.Sub: a - b, ast.Mult: a * b}
            if isinstance(node.op, ast.FloorDiv):
                return a // b if b else 0
            if type(node.op) in ops:
                return ops[type(node.op)]
            raise DslError(f"line {node.lineno}: operator not evaluated")
        if isinstance(node, ast.List):
            return [self.ev(e, env) for e in node.elts]
        if isinstance(node, ast.ListComp):
            return self.listcomp(node, env)
        if isinstance(node, ast.Subscript):
            base = self.ev(node.value, env)
            if isinstance(node.slice, ast.Slice):
                if not isinstance(base, _Buf):
                    raise DslError(f"line {node.lineno}: only buffers are sliced")
                lo = 0 if node.slice.lower is None else self.ev(node.slice.lower, env)
                hi = base.size if node.slice.upper is None else self.ev(node.slice.upper, env)
                if node.slice.step is not None or not (isinstance(lo, int) and isinstance(hi, int)):
                    raise DslError(f"line {node.lineno}: slices are [a:b] with integers")
                if not 0 <= lo <= hi <= base.size:
                    raise DslError(
                        f"line {node.lineno}: slice [{lo}:{hi}] outside a buffer of {base.size} chunks"
                    )
                return _Chunk(base.r, base.type, base.offset + lo, hi - lo)
            idx = self.ev(node.slice, env)
            if not isinstance(base, list) or not isinstance(idx, int) or not 0 <= idx < len(base):
                raise DslError(f"line {node.lineno}: index {idx!r} outside a list")
            return base[idx]
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and node.value.id == "SyncType" and node.attr in SYNC:
                return ("sync", SYNC[node.attr])
            raise DslError(f"line {node.lineno}: attribute {node.attr!r} not evaluated")
        if isinstance(node, ast.Call):
            return self.call(node, env)
        raise DslError(f"line {getattr(node, 'lineno', '?')}: {type(node).__name__} not evaluated")

    def listcomp(self, node: ast.ListComp, env: dict[str, Any]) -> list[Any]:
        if (
            len(node.generators) != 1
            or node.generators[0].ifs
            or not isinstance(node.generators[0].target, ast.Name)
        ):
            raise DslError(f"line {node.lineno}: only [expr for name in iterable] comprehensions")
        gen = node.generators[0]
        it = self.ev(gen.iter, env)
        assert isinstance(gen.target, ast.Name)
        name = gen.target.id
        return [self.ev(node.elt, {**env, name: v}) for v in it]

    def args(self, node: ast.Call, env: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        return [self.ev(a, env) for a in node.args], {
            k.arg or "": self.ev(k.value, env) for k in node.keywords
        }

    def call(self, node: ast.Call, env: dict[str, Any]) -> Any:
        f = node.func
        if isinstance(f, ast.Name):
            a, kw = self.args(node, env)
            return self.construct(f.id, a, kw, node.lineno)
        if isinstance(f, ast.Attribute):
            obj = self.ev(f.value, env)
            a, kw = self.args(node, env)
            return self.method(obj, f.attr, a, kw, node.lineno)
        raise DslError(f"line {node.lineno}: call not evaluated")

    def construct(self, name: str, a: list[Any], kw: dict[str, Any], line: int) -> Any:
        if name == "range":
            r = range(*a)
            if len(r) > MAX_RANGE:  # checked before the list is built: range(10**9) would take 8 GB
                raise DslError(
                    f"line {line}: range of {len(r)} values; the DSL reader unrolls at most {MAX_RANGE}"
                )
            return list(r)
        if name == "AllToAll":
            return _Coll("alltoall", *a[:3])
        if name in ("JSON",):
            return ("json",)
        if name == "print":
            if a == [("json",)]:
                self.printed = True
                return None
            raise DslError(f"line {line}: print() of something other than JSON()")
        if self.prog is None:
            raise DslError(f"line {line}: {name}() outside the CollectiveProgram context")
        if name == "Rank":
            self.rank_ok(a[0], line)
            return _Rank(a[0])
        if name == "Buffer":
            r, size = a[0], a[1]
            self.rank_ok(r, line)
            off = self.scratch[r]
            self.scratch[r] += size
            return _Buf(r, "s", off, size)
        if name in ("MemoryChannel", "PortChannel"):
            dst = int(a[0] if a else kw["dst_rank"])
            src = int(a[1] if len(a) > 1 else kw["src_rank"])
            self.rank_ok(src, line)
            self.rank_ok(dst, line)
            t = "memory" if name == "MemoryChannel" else "port"
            lst = self.peers.setdefault((src, t), [])
            lst.append(dst)
            return _Chan(t, src, dst, len(lst) - 1)
        if name == "Semaphore":
            r, v = a[0], a[1] if len(a) > 1 else kw.get("initial_value", 0)
            self.rank_ok(r, line)
            self.sems[r].append(v)
            return _Sem(r, len(self.sems[r]) - 1)
        raise DslError(f"line {line}: {name}() is not a call this reader evaluates")

    def rank_ok(self, r: Any, line: int) -> None:
        if not isinstance(r, int) or not 0 <= r < self.n:
            raise DslError(f"line {line}: rank {r!r} outside 0..{self.n - 1}")

    def tb_of(self, kw: dict[str, Any], line: int) -> int:
        t = kw.get("tb")
        if not isinstance(t, int) or t < 0:
            raise DslError(f"line {line}: every operation needs tb=<thread block id>")
        return t

    def add(self, r: int, t: int, op: _DOp) -> None:
        self.tbs.setdefault((r, t), []).append(op)

    def use_chan(self, r: int, t: int, ch: _Chan) -> int:
        ids = self.tb_chans.setdefault((r, t), {}).setdefault(ch.type, [])
        if ch.gid not in ids:
            ids.append(ch.gid)
        return ids.index(ch.gid)

    def method(self, obj: Any, m: str, a: list[Any], kw: dict[str, Any], line: int) -> Any:
        if isinstance(obj, _Rank):
            done, value = self.rank_method(obj.r, m, a, kw, line)
            if done:
                return value
        elif isinstance(obj, _Chan) and m in ("signal", "wait", "put", "put_packets"):
            self.chan_method(obj, m, a, kw, line)
            return None
        elif isinstance(obj, _Sem) and m in ("acquire", "release"):
            t = self.tb_of(kw, line)
            sync = kw.get("data_sync", ("sync", 3))[1]
            self.add(obj.r, t, _DOp("sem_" + m, sems=[obj.id], sync=sync))
            return None
        raise DslError(f"line {line}: .{m}() on {type(obj).__name__.strip('_')} is not evaluated")

    def rank_method(self, r: int, m: str, a: list[Any], kw: dict[str, Any], line: int) -> tuple[bool, Any]:
        """Rank ``r``'s buffers, barrier (a nop) and local copies; (False, None) for any other method."""
        if m == "get_input_buffer":
            return True, _Buf(r, "i", 0, self.chunks)
        if m == "get_output_buffer":
            return True, _Buf(r, "o", 0, self.chunks)
        if m == "barrier":
            tbs = kw.get("tb_list", a[0] if a else None)
            if not isinstance(tbs, list) or len(tbs) != 1:
                raise DslError(f"line {line}: only one-thread-block barriers (nops) are read")
            self.tbs.setdefault((r, tbs[0]), []).append(_DOp("nop"))
            return True, None
        if m not in ("copy", "unpack_packets"):
            return False, None
        dst, src = a[0], a[1]
        t = self.tb_of(kw, line)
        if not (isinstance(dst, _Chunk) and isinstance(src, _Chunk)) or dst.r != r or src.r != r:
            raise DslError(f"line {line}: {m} takes chunks of rank {r}")
        if dst.size != src.size:
            raise DslError(f"line {line}: {m} sizes differ")
        name = "copy" if m == "copy" else "upkt"
        self.add(
            r, t, _DOp(name, src=[(src.type, src.index, src.size)], dst=[(dst.type, dst.index, dst.size)])
        )
        return True, None

    def chan_method(self, ch: _Chan, m: str, a: list[Any], kw: dict[str, Any], line: int) -> None:
        """signal, wait, put or put_packets on a channel, as an operation of its source rank."""
        r = ch.src
        t = self.tb_of(kw, line)
        cid = self.use_chan(r, t, ch)
        if m in ("signal", "wait"):
            relaxed = bool(kw.get("relaxed", False))
            sync = kw.get("data_sync", ("sync", 3))[1]
            self.add(r, t, _DOp(("rlx" if relaxed else "") + m, ch.type, [cid], sync=sync))
            return
        dst, src = a[0], a[1]
        if not (isinstance(dst, _Chunk) and isinstance(src, _Chunk)):
            raise DslError(f"line {line}: {m} takes chunks")
        if src.r != r or dst.r != ch.dst or dst.size != src.size:
            raise DslError(f"line {line}: {m} from rank {src.r} to {dst.r} on a channel {ch.src}->{ch.dst}")
        if m == "put_packets" and dst.type != "s":
            raise DslError(f"line {line}: put_packets writes the peer's scratch")
        refs = self.remote[r]
        gid, acc = refs.setdefault((dst.r, dst.type), (len(refs), set()))
        acc.add(ch.type)
        ids = self.tb_refs.setdefault((r, t), {}).setdefault(ch.type, [])
        if gid not in ids:
            ids.append(gid)
        rdst = [(ids.index(gid), dst.type, dst.index, dst.size)]
        name = "put" if m == "put" else "ppkt"
        self.add(r, t, _DOp(name, ch.type, [cid], src=[(src.type, src.index, src.size)], rdst=rdst))

    # ------------------------------------------------------------------ statements
    def stmts(self, body: list[ast.stmt], env: dict[str, Any]) -> None:
        for st in body:
            if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
                env[st.targets[0].id] = self.ev(st.value, env)
            elif isinstance(st, ast.Expr):
                if isinstance(st.value, ast.Constant):
                    continue
                self.ev(st.value, env)
            elif isinstance(st, ast.With):
                self.with_program(st, env)
            elif isinstance(st, ast.Pass):
                continue
            else:
                raise DslError(f"line {st.lineno}: {type(st).__name__} statements are not evaluated")

    def with_program(self, st: ast.With, env: dict[str, Any]) -> None:
        if len(st.items) != 1 or not isinstance(st.items[0].context_expr, ast.Call):
            raise DslError(f"line {st.lineno}: expected 'with CollectiveProgram(...):'")
        call = st.items[0].context_expr
        if not (isinstance(call.func, ast.Name) and call.func.id == "CollectiveProgram"):
            raise DslError(f"line {st.lineno}: expected 'with CollectiveProgram(...):'")
        a, kw = self.args(call, env)
        names = ["name", "collective", "num_ranks"]
        p = dict(zip(names, a, strict=False)) | kw
        coll = p.get("collective")
        if not isinstance(coll, _Coll):
            raise DslError(f"line {st.lineno}: the collective must be AllToAll(n, chunk_factor, inplace)")
        if int(p.get("instances", 1)) != 1:
            raise DslError(f"line {st.lineno}: instances > 1 is not read (replication is not evaluated)")
        self.n = int(p["num_ranks"])
        if not 1 <= self.n <= MAX_RANKS:  # before the per-rank tables are sized by it
            raise DslError(
                f"line {st.lineno}: num_ranks={self.n}; the DSL reader holds 1 to {MAX_RANKS} ranks"
            )
        self.chunks = coll.n * coll.cf
        self.scratch = [0] * self.n
        self.sems = [[] for _ in range(self.n)]
        self.remote = [{} for _ in range(self.n)]
        self.prog = p
        self.stmts(st.body, dict(env))


# ---------------------------------------------------------------------- the DSL's assembly
def _fuse(a: _DOp, b: _DOp) -> _DOp | None:
    if a.name == "nop" and b.name == "nop":
        return a
    if a.name in ("put", "ppkt") and b.name == a.name and a.ctype == b.ctype and a.src[0][2] == b.src[0][2]:
        return _DOp(a.name, a.ctype, a.chans + b.chans, a.src + b.src, [], a.rdst + b.rdst)
    if a.name in ("sem_acquire", "sem_release") and b.name == a.name:
        return _DOp(a.name, sems=a.sems + b.sems, sync=a.sync | b.sync)
    same = a.name in ("signal", "wait", "rlxsignal", "rlxwait") and b.name == a.name and a.ctype == b.ctype
    if same and not set(a.chans) & set(b.chans):
        return _DOp(a.name, a.ctype, a.chans + b.chans, sync=a.sync | b.sync)
    return None


def _assemble_tb(ops: list[_DOp]) -> list[_DOp]:
    fused: list[_DOp] = []
    for op in ops:
        if fused:
            f = _fuse(fused[-1], op)
            if f is not None:
                fused[-1] = f
                continue
        fused.append(op)
    synced: list[_DOp] = []
    for op in fused:  # data_sync: nop before / after
        if op.sync & 1 and (not synced or synced[-1].name != "nop"):
            synced.append(_DOp("nop"))
        synced.append(op)
        if op.sync & 2:
            synced.append(_DOp("nop"))
    out: list[_DOp] = []
    seen: list[tuple[str, int, int, bool]] = []  # local accesses since the last nop
    for op in synced:  # auto_sync: a nop before an op whose local accesses conflict
        if op.name == "nop":
            seen = []
            if out and out[-1].name == "nop":
                continue
            out.append(op)
            continue
        acc = [(t, i, i + s, False) for t, i, s in op.src if op.name != "upkt"]
        acc += [(t, i, i + s, True) for t, i, s in op.dst]
        if any(x[0] == y[0] and x[1] < y[2] and y[1] < x[2] and (x[3] or y[3]) for x in acc for y in seen):
            if not out or out[-1].name != "nop":
                out.append(_DOp("nop"))
            seen = []
        seen += acc
        out.append(op)
    return out


def _gpu(ev: _Eval, r: int) -> Gpu:
    """Rank ``r`` of the evaluated program: its thread blocks (ops assembled, channel and remote-buffer
    tables in first use), channel groups, remote buffers and semaphores."""
    tb_ids = sorted(t for rr, t in ev.tbs if rr == r)
    tbs = []
    for t in range(max(tb_ids, default=-1) + 1):
        ops = tuple(_to_op(d) for d in _assemble_tb(ev.tbs.get((r, t), [])))
        chans = ev.tb_chans.get((r, t), {})
        refs = ev.tb_refs.get((r, t), {})
        tbs.append(
            ThreadBlock(
                t,
                ops,
                tuple(TbTable(ct, tuple(ids)) for ct, ids in chans.items() if ids),
                tuple(TbTable(ct, tuple(ids)) for ct, ids in refs.items()),
            )
        )
    groups = tuple(
        ChannelGroup(t, tuple(ev.peers[(r, t)])) for t in ("memory", "port") if ev.peers.get((r, t))
    )
    rbs = tuple(
        RemoteBuffer(rank, typ, tuple(sorted(acc)))
        for (rank, typ), (_gid, acc) in sorted(ev.remote[r].items(), key=lambda kv: kv[1][0])
    )
    return Gpu(r, ev.chunks, ev.chunks, ev.scratch[r], tuple(tbs), groups, rbs, tuple(ev.sems[r]))


_MAIN_TEST = ast.dump(ast.parse('__name__ == "__main__"', mode="eval").body)
_MAIN_CALL = ast.dump(ast.parse("main()").body[0])


def _is_main_guard(node: ast.stmt) -> bool:
    """``if __name__ == "__main__": main()`` and nothing else."""
    return (
        isinstance(node, ast.If)
        and ast.dump(node.test) == _MAIN_TEST
        and not node.orelse
        and len(node.body) == 1
        and ast.dump(node.body[0]) == _MAIN_CALL
    )


def _inert_def(node: ast.FunctionDef) -> bool:
    """A definition that runs nothing as it is defined: no decorators, no default values, annotations that
    are names or constants (each of those is evaluated when the ``def`` runs)."""
    args = node.args
    every = [*args.posonlyargs, *args.args, *args.kwonlyargs, *filter(None, (args.vararg, args.kwarg))]
    notes = [node.returns, *(a.annotation for a in every)]
    return (
        not node.decorator_list
        and not args.defaults
        and not any(args.kw_defaults)
        and all(n is None or isinstance(n, (ast.Name, ast.Constant)) for n in notes)
    )


def _unread_statements(tree: ast.Module) -> list[str]:
    """Top-level statements the reader neither evaluates nor can prove harmless: running the file (as its
    header tells users to) would execute them, so a file holding one is not verified. Allowed: the docstring,
    imports (checked on their own), assignments to names (evaluated), function definitions that run nothing
    as they are defined (only ``main`` is run), a module-level ``with CollectiveProgram(...)`` block
    (evaluated) and the ``if __name__ == "__main__": main()`` guard."""
    out = []
    for i, node in enumerate(tree.body):
        if (
            (i == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))
            or isinstance(node, (ast.Import, ast.ImportFrom, ast.With))
            or (isinstance(node, ast.FunctionDef) and _inert_def(node))
            or (isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets))
            or _is_main_guard(node)
        ):
            continue
        out.append(
            f"line {node.lineno}: a top-level {type(node).__name__.lower()} statement the reader does not "
            "evaluate: running this file would execute it unchecked"
        )
    return out


def read_dsl(text: str, src: str = "<program>") -> DslResult:
    """Parse, check imports, evaluate and assemble; ``plan`` is None when the source cannot be evaluated."""
    try:
        tree = ast.parse(text, src)
    except SyntaxError as exc:
        return DslResult(None, [f"{src}: not valid Python ({exc.msg}, line {exc.lineno})"])
    errs = [f"{src}: {e}" for e in (*import_errors(tree), *_unread_statements(tree))]
    ev = _Eval()
    try:
        for node in tree.body:
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
            ):
                ev.consts[node.targets[0].id] = ev.ev(node.value, {})
        mains = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main"]
        withs = [n for n in tree.body if isinstance(n, ast.With)]
        if mains:
            ev.stmts(mains[0].body, {})
        elif withs:
            ev.stmts(list(withs), {})
        else:
            raise DslError("no 'with CollectiveProgram(...)' block (in main() or at module level)")
    except DslError as exc:
        return DslResult(None, [*errs, f"{src}: {exc}"])
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        return DslResult(None, [*errs, f"{src}: cannot evaluate the program ({type(exc).__name__}: {exc})"])
    notes = [] if ev.printed else ["the program does not print(JSON()): it only builds the plan"]
    p = ev.prog or {}
    plan = Plan(
        name=str(p.get("name", "")),
        collective="alltoall",
        protocol=str(p.get("protocol", "Simple")),
        inplace=bool(p["collective"].inplace) if "collective" in p else False,
        gpus=tuple(_gpu(ev, r) for r in range(ev.n)),
        reuse_resources=bool(p.get("reuse_resources", False)),
        num_threads_per_block=int(p.get("num_threads_per_block", 1024)),
        use_double_scratch_buffer=bool(p.get("use_double_scratch_buffer", False)),
        buffer_alignment=int(p.get("buffer_alignment", 16)),
        min_message_size=int(p.get("min_message_size", 0)),
        max_message_size=int(p.get("max_message_size", (1 << 64) - 1)),
    )
    if not 1 <= plan.num_threads_per_block <= 1 << 20:  # the JSON reader's range (what the executor launches)
        errs.append(f"{src}: num_threads_per_block={plan.num_threads_per_block}: must be in 1..{1 << 20}")
    return DslResult(plan, errs, notes)


def _to_op(d: _DOp) -> Op:
    if d.name == "nop":
        return Op("nop")
    if d.name in ("signal", "wait", "rlxsignal", "rlxwait"):
        return Op(d.name, channel_type=d.ctype, channel_ids=tuple(d.chans))
    if d.name in ("sem_acquire", "sem_release"):
        return Op(d.name, semaphore_ids=tuple(d.sems))
    if d.name in ("copy", "upkt"):
        (st, si, ss), (dt, di, ds) = d.src[0], d.dst[0]
        return Op(d.name, src=(BufRef(si, ss, st),), dst=(BufRef(di, ds, dt),))
    return Op(
        d.name,
        channel_type=d.ctype,
        channel_ids=tuple(d.chans) if d.ctype == "port" else None,
        src=tuple(BufRef(i, s, t) for t, i, s in d.src),
        dst=tuple(BufRef(i, s, buffer_id=b) for b, _t, i, s in d.rdst),
    )
