"""Strict reader of MSCCL XML: the executors' hand-written parser quirks become checks
(msccl-executor-nccl's ``src/misc/msccl/msccl_parser.cc``, RCCL's copy of it).

The stock parser (msccl-executor-nccl / RCCL ``msccl_parser.cc``) is stricter than XML and fails silently or
late. This reader accepts exactly what it accepts and reports, with line numbers, everything it would reject:
an ``<?xml ...?>`` declaration, a TAB between elements, a start tag broken over lines, single-quoted values,
integers with leading zeros (octal), children inside ``<step>``, a missing required attribute (e.g.
``Attribute minBytes of node algo not found``), more than 16 attributes. Unknown elements (TACCL's ``<copy>``)
are skipped as the executor skips them, with a note. Parsing continues after errors (missing attributes take
neutral defaults) so that the interpreter can still report what the file would compute.
"""

from __future__ import annotations

import bisect
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


_TOKEN = re.compile(r"<!--.*?-->|</[^>]*>|<[^>]*>", re.S)
_ATTR = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="([^"\n]*)"')
_CLEAN_BODY = re.compile(r'(?: [A-Za-z_][A-Za-z0-9_]*="[^"\n\t]*")*')


class _Parser:
    """Regex tokenizer with the executor parser's rules applied as checks (tags, gaps between them, attrs)."""

    def __init__(self, text: str, src: str) -> None:
        self.t = text
        self.src = src
        self.errors: list[str] = []
        self.notes: list[str] = []
        self._nl = [m.start() for m in re.finditer("\n", text)]

    def line_of(self, pos: int) -> int:
        return bisect.bisect_right(self._nl, pos - 1) + 1

    def err(self, msg: str, line: int | None = None) -> None:
        self.errors.append(f"{self.src}:{line if line is not None else '?'}: {msg}")

    def _gap(self, a: int, b: int) -> None:
        gap = self.t[a:b]
        if not gap or not gap.strip(" \n\r"):
            return
        for k, c in enumerate(gap):
            if c == "\t":
                self.err(
                    "TAB between elements: the executor's parser accepts only space, \\n and \\r ('expecting <')",
                    self.line_of(a + k),
                )
                return
            if c not in " \n\r":
                self.err(
                    f"text content {c!r} outside a tag; the executor's parser expects '<'",
                    self.line_of(a + k),
                )
                return

    def _start_tag(self, tag: str, line: int) -> tuple[str, dict[str, str], bool] | None:
        if tag.startswith("<?"):
            self.err(
                "an '<?xml ...?>' declaration is not accepted by the executor's parser ('expected >')", line
            )
            return None
        m = _NAME.match(tag, 1)
        if not m:
            self.err("expected an element name after '<'", line)
            return None
        name = m.group(0)
        self_closing = tag.endswith("/>")
        body = tag[m.end() : len(tag) - (2 if self_closing else 1)]
        if _CLEAN_BODY.fullmatch(body):  # the common, well-formed case: single spaces, double quotes
            pairs = _ATTR.findall(body)
            attrs0 = self._first_of_each(name, pairs, line)
            if len(pairs) > MAX_ATTRS:
                self.err(f"<{name}> has {len(pairs)} attributes; the parser keeps only {MAX_ATTRS}", line)
            return name, attrs0, self_closing
        if "\n" in body or "\r" in body:
            self.err(
                f"<{name}>: a start tag must fit on one line (newline after an attribute gives 'expected >')",
                line,
            )
        if "\t" in body:
            self.err(f"<{name}>: TAB inside a start tag; use single spaces", line)
        found: list[tuple[str, str]] = []
        pos = 0
        n_attr = 0
        for am in _ATTR.finditer(body):
            between = body[pos : am.start()]
            self._stray(name, between, line)
            n_attr += 1 + max(0, between.count(" ") - 1)
            found.append((am.group(1), am.group(2)))
            pos = am.end()
        self._stray(name, body[pos:], line)
        attrs = self._first_of_each(name, found, line)
        if n_attr > MAX_ATTRS:
            self.err(f"<{name}> has {n_attr} attributes; the parser keeps only {MAX_ATTRS}", line)
        for k, v in attrs.items():
            if len(k) > 255 or len(v) > 255:
                self.err(f"<{name}> {k}: names and values are limited to 255 characters", line)
        return name, attrs, self_closing

    def _first_of_each(self, name: str, pairs: list[tuple[str, str]], line: int) -> dict[str, str]:
        """The attributes as the executor's parser reads them: its lookup (``mscclXmlGetAttrIndex``) returns
        the first of a repeated name, so a repeat is an error (a file that says two things) and the first
        value is what the interpreter then runs."""
        attrs: dict[str, str] = {}
        for k, v in pairs:
            if k in attrs:
                self.err(
                    f'<{name}> {k}="{v}": attribute repeated (the executor reads the first, "{attrs[k]}")',
                    line,
                )
            else:
                attrs[k] = v
        return attrs

    def _stray(self, name: str, text: str, line: int) -> None:
        """Text in a start tag that is not a ``name="value"`` attribute."""
        bad = text.strip(" \n\r\t")
        if not bad:
            return
        if "='" in bad:
            self.err(f"<{name}> {bad.split('=')[0]}: values must be in double quotes", line)
        else:
            self.err(f"<{name}>: unexpected text {bad[:20]!r} in start tag (expected >)", line)

    def parse(self) -> list[_Elem]:
        roots: list[_Elem] = []
        stack: list[_Elem] = []
        pos = 0
        for m in _TOKEN.finditer(self.t):
            self._gap(pos, m.start())
            pos = m.end()
            tok = m.group(0)
            if tok.startswith("<!--"):
                continue
            line = self.line_of(m.start())
            if tok.startswith("</"):
                name = tok[2:-1]
                if not stack or stack[-1].name != name:
                    self.err(f"unexpected closing tag {tok}", line)
                    continue
                stack.pop()
                continue
            parsed = self._start_tag(tok, line)
            if parsed is None:
                continue
            name, attrs, closing = parsed
            elem = _Elem(name, attrs, line)
            (stack[-1].children if stack else roots).append(elem)
            if not closing:
                stack.append(elem)
        self._gap(pos, len(self.t))
        if "<" in self.t[pos:]:
            self.err("unterminated tag at the end of the file", self.line_of(pos))
        for e in stack:
            self.err(f"<{e.name}> opened here is never closed", e.line)
        return roots


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


def _gpu(p: _Parser, g: _Elem, src: str) -> Gpu:
    gpu = Gpu(_int(p, g, "id", -1), _int(p, g, "i_chunks", 0), _int(p, g, "o_chunks", 0), _int(p, g, "s_chunks", 0),
              line=g.line)  # fmt: skip
    for tbe in g.children:
        if tbe.name != "tb":
            p.notes.append(
                f"{src}:{tbe.line}: <{tbe.name}> inside <gpu> is ignored by the executor (never executed)"
            )
            continue
        tb = Tb(_int(p, tbe, "id", -1), _int(p, tbe, "send", -1), _int(p, tbe, "recv", -1), _int(p, tbe, "chan", 0),
                line=tbe.line)  # fmt: skip
        for se in tbe.children:
            if se.name != "step":
                p.notes.append(f"{src}:{se.line}: <{se.name}> inside <tb> is ignored")
                continue
            if se.children:
                p.err(
                    f"<step> at line {se.line} has child elements; steps must be empty (self-closing)",
                    se.line,
                )
            tb.steps.append(_step(p, se))
        gpu.tbs.append(tb)
    return gpu


def _step(p: _Parser, se: _Elem) -> Step:
    return Step(
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


def read_xml(text: str, src: str = "<xml>") -> ReadResult:
    """Parse ``text`` the way the executor does; return the model plus every error and note."""
    p = _Parser(text, src)
    if not text.strip():
        p.err("empty file: no <algo> element", 1)
        return ReadResult(None, p.errors, p.notes)
    roots = p.parse()
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
        algo.gpus.append(_gpu(p, g, src))
    # nodes parsed per rank: algo + every gpu + the local rank's tbs and steps
    for gpu in algo.gpus:
        per_rank = nodes + len(gpu.tbs) + sum(len(t.steps) for t in gpu.tbs)
        if per_rank > MAX_NODES:
            p.err(
                f"gpu {gpu.id}: {per_rank} XML nodes parsed for this rank; the parser holds at most {MAX_NODES}"
            )
    return ReadResult(algo, p.errors, p.notes)


# ---------------------------------------------------------------------- what the executor selects a file by
_ALGO_TAG = re.compile(r"<algo\b[^>]*>")


def algo_attrs(text: str) -> dict[str, str]:
    """The attributes of the first ``<algo>`` start tag, as the executor's lookup (``mscclXmlGetAttrIndex``)
    reads them: the first of a repeated name. ``{}`` when there is none. A cheap read for choosing among files
    (what the executor compares before it runs anything); :func:`read_xml` checks the whole file."""
    tag = _ALGO_TAG.search(text)
    attrs: dict[str, str] = {}
    for k, v in _ATTR.findall(tag.group(0) if tag is not None else ""):
        attrs.setdefault(k, v)
    return attrs


def int_attr(attrs: dict[str, str], key: str) -> int:
    """An integer attribute of :func:`algo_attrs`; 0 when missing or not an integer (as ``strtol`` gives)."""
    try:
        return int(attrs.get(key, "0"))
    except ValueError:
        return 0


def covers(attrs: dict[str, str], nbytes: int) -> bool:
    """``minBytes <= nbytes <= maxBytes`` (``maxBytes`` 0: no upper limit), the executor's size test."""
    hi = int_attr(attrs, "maxBytes")
    return int_attr(attrs, "minBytes") <= nbytes and (hi == 0 or nbytes <= hi)
