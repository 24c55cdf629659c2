"""Strict reader of MSCCL XML: the executors' hand-written parser quirks become checks (spec §1-2).

The stock parser (msccl-executor-nccl / RCCL ``msccl_parser.cc``) is stricter than XML and fails silently or
late. This reader accepts exactly what it accepts and reports, with line numbers, everything it would reject:
an ``<?xml ...?>`` declaration, a TAB between elements, a start tag broken over lines, single-quoted values,
integers with leading zeros (octal), children inside ``<step>``, a missing required attribute (e.g.
``Attribute minBytes of node algo not found``), more than 16 attributes. Unknown elements (TACCL's ``<copy>``)
are skipped as the executor skips them, with a note. Parsing continues after errors (missing attributes take
neutral defaults) so that the interpreter can still report what the file would compute.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from a2acc.backends.msccl_xml.model import (
    ALGO_ATTRS,
    MAX_ATTRS,
    MAX_NODES,
    Algo,
    Gpu,
    Step,
    Tb,
)

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_INT = re.compile(r"^-?(0|[1-9][0-9]*|0[xX][0-9a-fA-F]+)$")


@dataclass
class ReadResult:
    algo: Algo | None
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class _Elem:
    name: str
    attrs: dict[str, str]
    line: int
    children: list[_Elem] = field(default_factory=list)


class _Parser:
    def __init__(self, text: str, src: str) -> None:
        self.t = text
        self.i = 0
        self.line = 1
        self.src = src
        self.errors: list[str] = []
        self.notes: list[str] = []

    def err(self, msg: str, line: int | None = None) -> None:
        self.errors.append(f"{self.src}:{line or self.line}: {msg}")

    def _adv(self, k: int = 1) -> None:
        self.line += self.t.count("\n", self.i, self.i + k)
        self.i += k

    def skip_ws(self) -> None:
        while self.i < len(self.t):
            c = self.t[self.i]
            if c in " \n\r":
                self._adv()
            elif c == "\t":
                self.err(
                    "TAB between elements: the executor's parser accepts only space, \\n and \\r ('expecting <')"
                )
                self._adv()
            elif self.t.startswith("<!--", self.i):
                end = self.t.find("-->", self.i + 4)
                if end < 0:
                    self.err("unterminated comment")
                    self._adv(len(self.t) - self.i)
                else:
                    self._adv(end + 3 - self.i)
            elif c == "<":
                return
            else:
                self.err(f"text content {c!r} outside a tag; the executor's parser expects '<'")
                self._adv()

    def parse_elem(self) -> _Elem | None:
        start_line = self.line
        if self.t.startswith("<?", self.i):
            self.err("an '<?xml ...?>' declaration is not accepted by the executor's parser ('expected >')")
            end = self.t.find(">", self.i)
            self._adv((end + 1 if end >= 0 else len(self.t)) - self.i)
            return None
        self._adv()  # '<'
        m = _NAME.match(self.t, self.i)
        if not m:
            self.err("expected an element name after '<'")
            self._adv()
            return None
        name = m.group(0)
        self._adv(len(name))
        attrs: dict[str, str] = {}
        n_attr = 0
        while True:
            if self.i >= len(self.t):
                self.err(f"<{name}>: file ends inside the start tag", start_line)
                return _Elem(name, attrs, start_line)
            c = self.t[self.i]
            if c == ">":
                self._adv()
                break
            if self.t.startswith("/>", self.i):
                self._adv(2)
                return _Elem(name, self._check_attrs(name, attrs, n_attr, start_line), start_line)
            if c in "\n\r":
                self.err(
                    f"<{name}>: a start tag must fit on one line (newline after an attribute gives 'expected >')"
                )
                self._adv()
                continue
            if c == " ":
                self._adv()
                if self.i < len(self.t) and self.t[self.i] == " ":
                    n_attr += 1  # extra spaces make empty-name attributes (count toward the limit)
                continue
            if c == "\t":
                self.err(f"<{name}>: TAB inside a start tag; use single spaces")
                self._adv()
                continue
            am = _NAME.match(self.t, self.i)
            if not am:
                self.err(f"<{name}>: unexpected character {c!r} in start tag (expected >)")
                self._adv()
                continue
            aname = am.group(0)
            self._adv(len(aname))
            if not self.t.startswith('="', self.i):
                if self.t.startswith("='", self.i):
                    self.err(f"<{name}> {aname}: values must be in double quotes")
                else:
                    self.err(f'<{name}> {aname}: expected ="value"')
                end = self.t.find(" ", self.i)
                self._adv((end if end >= 0 else len(self.t)) - self.i)
                continue
            self._adv(2)
            end = self.t.find('"', self.i)
            nl = self.t.find("\n", self.i)
            if end < 0 or (0 <= nl < end):
                self.err(f"<{name}> {aname}: unterminated value")
                return None
            attrs[aname] = self.t[self.i : end]
            n_attr += 1
            self._adv(end + 1 - self.i)
        elem = _Elem(name, self._check_attrs(name, attrs, n_attr, start_line), start_line)
        while True:
            self.skip_ws()
            if self.i >= len(self.t):
                self.err(f"<{name}> opened here is never closed", start_line)
                return elem
            if self.t.startswith("</", self.i):
                close = f"</{name}>"
                if not self.t.startswith(close, self.i):
                    self.err(f"expected {close}")
                    end = self.t.find(">", self.i)
                    self._adv((end + 1 if end >= 0 else len(self.t)) - self.i)
                else:
                    self._adv(len(close))
                return elem
            child = self.parse_elem()
            if child is not None:
                elem.children.append(child)

    def _check_attrs(self, name: str, attrs: dict[str, str], n_attr: int, line: int) -> dict[str, str]:
        if n_attr > MAX_ATTRS:
            self.err(f"<{name}> has {n_attr} attributes; the parser keeps only {MAX_ATTRS}", line)
        for k, v in attrs.items():
            if len(k) > 255 or len(v) > 255:
                self.err(f"<{name}> {k}: names and values are limited to 255 characters", line)
        return attrs


def _int(p: _Parser, e: _Elem, key: str, default: int) -> int:
    if key not in e.attrs:
        p.err(f"Attribute {key} of node {e.name} not found", e.line)
        return default
    v = e.attrs[key]
    if not _INT.match(v):
        if re.match(r"^-?0[0-9]+$", v):
            p.err(
                f'<{e.name}> {key}="{v}": leading zero means octal to strtol; write a plain decimal', e.line
            )
        else:
            p.err(f'<{e.name}> {key}="{v}": not an integer', e.line)
        try:
            return int(v, 10)
        except ValueError:
            return default
    return int(v, 0)


def _str(p: _Parser, e: _Elem, key: str, default: str, required: bool = True) -> str:
    if key not in e.attrs:
        if required:
            p.err(f"Attribute {key} of node {e.name} not found", e.line)
        return default
    return e.attrs[key]


def read_xml(text: str, src: str = "<xml>") -> ReadResult:
    """Parse ``text`` the way the executor does; return the model plus every error and note."""
    p = _Parser(text, src)
    p.skip_ws()
    if p.i >= len(text):
        p.err("empty file: no <algo> element")
        return ReadResult(None, p.errors, p.notes)
    roots: list[_Elem] = []
    while p.i < len(text):
        e = p.parse_elem()
        if e is not None:
            roots.append(e)
        p.skip_ws()
    algos = [r for r in roots if r.name == "algo"]
    if not algos:
        p.err("no <algo> element (the meta loader reads only the first non-comment element)")
        return ReadResult(None, p.errors, p.notes)
    if roots[0].name != "algo":
        p.err(f"the first element is <{roots[0].name}>; the file must start with <algo> (after comments)")
    if len(algos) > 1:
        p.notes.append(f"{src}: only the first <algo> is used; {len(algos) - 1} more ignored")
    a = algos[0]
    algo = Algo(
        name=_str(p, a, "name", "", required=False),
        proto=_str(p, a, "proto", "Simple"),
        nchannels=_int(p, a, "nchannels", 1),
        nchunksperloop=_int(p, a, "nchunksperloop", 1),
        ngpus=_int(p, a, "ngpus", 0),
        coll=_str(p, a, "coll", ""),
        inplace=_int(p, a, "inplace", 0),
        outofplace=_int(p, a, "outofplace", 0),
        min_bytes=_int(p, a, "minBytes", 0),
        max_bytes=_int(p, a, "maxBytes", 0),
        extra_attrs={k: v for k, v in a.attrs.items() if k not in ALGO_ATTRS},
    )
    if "name" not in a.attrs:
        p.notes.append(f"{src}: <algo> has no name (ignored by the executors, required by old msccl)")
    nodes = 1
    for g in a.children:
        if g.name != "gpu":
            p.notes.append(f"{src}:{g.line}: <{g.name}> inside <algo> is ignored by the executor")
            continue
        nodes += 1
        gpu = Gpu(
            _int(p, g, "id", -1),
            _int(p, g, "i_chunks", 0),
            _int(p, g, "o_chunks", 0),
            _int(p, g, "s_chunks", 0),
            line=g.line,
        )
        for tbe in g.children:
            if tbe.name != "tb":
                p.notes.append(
                    f"{src}:{tbe.line}: <{tbe.name}> inside <gpu> is ignored by the executor (never executed)"
                )
                continue
            tb = Tb(
                _int(p, tbe, "id", -1),
                _int(p, tbe, "send", -1),
                _int(p, tbe, "recv", -1),
                _int(p, tbe, "chan", 0),
                line=tbe.line,
            )
            for se in tbe.children:
                if se.name != "step":
                    p.notes.append(f"{src}:{se.line}: <{se.name}> inside <tb> is ignored")
                    continue
                if se.children:
                    p.err(
                        f"<step> at line {se.line} has child elements; steps must be empty (self-closing)",
                        se.line,
                    )
                tb.steps.append(
                    Step(
                        _int(p, se, "s", -1),
                        _str(p, se, "type", "nop"),
                        _str(p, se, "srcbuf", "i"),
                        _int(p, se, "srcoff", -1),
                        _str(p, se, "dstbuf", "o"),
                        _int(p, se, "dstoff", -1),
                        _int(p, se, "cnt", 0),
                        _int(p, se, "depid", -1),
                        _int(p, se, "deps", -1),
                        _int(p, se, "hasdep", 0),
                        se.line,
                    )
                )
            gpu.tbs.append(tb)
        algo.gpus.append(gpu)
    # nodes parsed per rank: algo + every gpu + the local rank's tbs and steps
    for gpu in algo.gpus:
        per_rank = nodes + len(gpu.tbs) + sum(len(t.steps) for t in gpu.tbs)
        if per_rank > MAX_NODES:
            p.err(
                f"gpu {gpu.id}: {per_rank} XML nodes parsed for this rank; the parser holds at most {MAX_NODES}"
            )
    return ReadResult(algo, p.errors, p.notes)
