"""The all-to-all-v manifest written beside an MSCCL algorithm directory (never inside it: the executor parses
every file in ``MSCCL_ALGO_DIR`` as XML and a JSON file there would fail initialisation, spec §1).

No stock executor has a working all-to-all-v (spec §12), so a2acc compiles the Program's chunk layout into a
``coll="alltoall"`` XML. To use it, call ``ncclAllToAll`` with a per-rank buffer of ``C * u`` bytes
(``count = C * u / (ngpus * sizeof(dtype))`` elements per peer), after packing peer ``d``'s bytes at chunk offset
``input[d][0]`` (``input[d][1]`` chunks, zero-padded) and unpacking source ``s``'s bytes from ``output[s]``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from a2acc.backends.msccl_xml.interp import Layout
from a2acc.errors import PlanFormatError
from a2acc.ir import Program

MANIFEST_FORMAT = "a2acc.msccl-manifest"
MANIFEST_VERSION = 1


@dataclass(frozen=True)
class Manifest:
    xml: str
    algo_name: str
    ngpus: int
    nchunksperloop: int
    chunk_bytes: int
    counts: list[list[int]]
    input: list[list[list[int]]]  # input[r][d] = [offset, count] in chunks
    output: list[list[list[int]]]  # output[r][s] = [offset, count]
    traffic_bytes: list[list[int]] | None
    dtype_align: int = 16

    @property
    def buffer_bytes(self) -> int:
        return self.nchunksperloop * self.chunk_bytes

    def padding_bytes(self) -> int:
        moved = sum(map(sum, self.counts)) * self.chunk_bytes
        payload = sum(map(sum, self.traffic_bytes)) if self.traffic_bytes else moved
        return moved - payload

    def layout(self) -> Layout:
        n = self.ngpus
        return Layout(
            counts=[row[:] for row in self.counts],
            in_off=[[self.input[s][d][0] for d in range(n)] for s in range(n)],
            out_off=[[self.output[d][s][0] for s in range(n)] for d in range(n)],
        )

    def to_json(self) -> str:
        payload = sum(map(sum, self.traffic_bytes)) if self.traffic_bytes else None
        doc: dict[str, Any] = {
            "format": MANIFEST_FORMAT,
            "version": MANIFEST_VERSION,
            "xml": self.xml,
            "algo_name": self.algo_name,
            "coll": "alltoall",
            "ngpus": self.ngpus,
            "nchunksperloop": self.nchunksperloop,
            "unit_rules": {
                "chunk_bytes": self.chunk_bytes,
                "buffer_bytes_per_rank": self.buffer_bytes,
                "call": "ncclAllToAll(send, recv, count, dtype) with count = nchunksperloop * chunk_bytes / "
                "(ngpus * sizeof(dtype)) elements per peer; selection needs (count * ngpus) % nchunksperloop == 0",
                "pack": "peer d's bytes go to input chunk offset input[r][d][0], zero-padded to input[r][d][1] chunks",
                "unpack": "source s's bytes come from output chunk offset output[r][s][0]",
            },
            "counts": self.counts,
            "ranks": [
                {"rank": r, "input": self.input[r], "output": self.output[r]} for r in range(self.ngpus)
            ],
            "traffic_bytes": self.traffic_bytes,
            "padding": {
                "payload_bytes": payload,
                "moved_bytes": sum(map(sum, self.counts)) * self.chunk_bytes,
                "padding_bytes": self.padding_bytes(),
                "buffer_bytes_total": self.buffer_bytes * self.ngpus,
            },
        }
        return json.dumps(doc, indent=1) + "\n"


def manifest_for(prog: Program, xml_name: str, algo_name: str, nchunksperloop: int) -> Manifest:
    n = prog.nranks
    counts = prog.counts.tolist()
    inp = [[[prog.input_offset(r, d), counts[r][d]] for d in range(n)] for r in range(n)]
    out = [[[prog.output_offset(r, s), counts[s][r]] for s in range(n)] for r in range(n)]
    tb = prog.traffic.tolist() if prog.traffic is not None else None
    return Manifest(xml_name, algo_name, n, nchunksperloop, prog.unit_bytes, counts, inp, out, tb)


def load_manifest(path: str) -> Manifest:
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, json.JSONDecodeError) as exc:
        raise PlanFormatError(path, "", path, f"cannot read the manifest ({exc})") from exc
    if doc.get("format") != MANIFEST_FORMAT or doc.get("version") != MANIFEST_VERSION:
        raise PlanFormatError(
            path,
            "format/version",
            (doc.get("format"), doc.get("version")),
            f"expected {MANIFEST_FORMAT} version {MANIFEST_VERSION}",
        )
    try:
        n = int(doc["ngpus"])
        ranks = sorted(doc["ranks"], key=lambda x: x["rank"])
        return Manifest(
            xml=str(doc["xml"]),
            algo_name=str(doc["algo_name"]),
            ngpus=n,
            nchunksperloop=int(doc["nchunksperloop"]),
            chunk_bytes=int(doc["unit_rules"]["chunk_bytes"]),
            counts=[[int(x) for x in row] for row in doc["counts"]],
            input=[r["input"] for r in ranks],
            output=[r["output"] for r in ranks],
            traffic_bytes=doc.get("traffic_bytes"),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise PlanFormatError(path, "", "manifest", f"missing or malformed field ({exc})") from exc
