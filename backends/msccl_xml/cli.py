"""Command-line glue for the MSCCL XML backend (``a2acc verify FILE.xml``)."""

from __future__ import annotations

from a2acc.backends.msccl_xml.api import check_xml_text
from a2acc.backends.msccl_xml.manifest import load_manifest
from a2acc.errors import PlanFormatError, VerificationError


def verify_file(path: str, manifest: str | None, *, quiet: bool = False, dialect: str = "nccl") -> int:
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise PlanFormatError(path, "", path, f"cannot read the XML file ({exc.__class__.__name__})") from exc
    layout = load_manifest(manifest).layout() if manifest else None
    chk = check_xml_text(text, path, dialect=dialect, layout=layout)
    if not chk.ok:
        raise VerificationError(path, list(chk.errors))
    if not quiet:
        a = chk.algo
        assert a is not None
        tbs = max(len(g.tbs) for g in a.gpus)
        steps = max((len(t.steps) for g in a.gpus for t in g.tbs), default=0)
        print(
            f"{path}: OK  ({a.coll}, {a.ngpus} GPUs, proto {a.proto}, {a.nchannels} channels, C={a.nchunksperloop}, "
            f"max {tbs} tbs/GPU, max {steps} steps/tb{', all-to-all-v manifest' if layout else ''})"
        )
        for note in chk.notes:
            print(f"  note: {note}")
    return 0
