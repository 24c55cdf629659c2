"""``a2acc report PLAN``: a short human-readable summary of a plan."""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Mapping

from a2acc.model.units import format_bytes


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("report", help="summarise a plan JSON")
    p.add_argument("file")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from a2acc.ir import load_program
    from a2acc.ir.verify import verify_program

    prog = load_program(args.file)
    rep = verify_program(prog)
    links = Counter(op.link or "?" for op in prog.ops)
    stages = Counter(op.stage for op in prog.ops)
    by_link: Counter[str] = Counter()
    for op in prog.ops:
        by_link[op.link or "?"] += op.cnt * prog.unit_bytes
    print(f"plan       : {prog.name} ({prog.algorithm}), {prog.nranks} ranks")
    print(
        f"layout     : unit {format_bytes(prog.unit_bytes)}, {int(prog.counts.sum())} chunks, "
        f"{format_bytes(prog.padded_bytes)} moved incl. padding {format_bytes(max(prog.padding_bytes, 0))}"
    )
    print(
        f"ops        : {len(prog.ops)} ({', '.join(f'{k}={v}' for k, v in sorted(links.items()))}), "
        f"DAG depth {rep.depth}"
    )
    planned = prog.meta.get("stages")
    labels = sorted(stages)
    label_txt = f"op stage labels {labels[0]}..{labels[-1]}" if labels else "no ops"
    if isinstance(planned, int):
        print(
            f"stages     : {planned} communication stages (the planner's rounds of synchronised transfers); "
            f"{label_txt}, label 0 = work outside the staged exchange (self copies, intra-server part, "
            "balancing)"
        )
    else:
        print(f"stages     : {label_txt}")
    print(
        f"chunks     : {int(prog.counts.sum())} chunks of {format_bytes(prog.unit_bytes)} (the layout unit every op "
        "moves a whole number of)"
    )
    print("bytes      : " + ", ".join(f"{k} {format_bytes(v)}" for k, v in sorted(by_link.items())))
    peak = max(prog.scratch, default=0)
    print(
        f"scratch    : up to {format_bytes(peak * prog.unit_bytes)} per rank ({peak} chunks), "
        f"{format_bytes(sum(prog.scratch) * prog.unit_bytes)} in all"
    )
    for line in _choice_lines(prog.meta):
        print(line)
    print(f"verified   : {'OK' if rep.ok else 'FAILED'}" + ("" if rep.ok else f" ({len(rep.errors)} errors)"))
    for e in rep.errors[:10]:
        print(f"  - {e}")
    return 0 if rep.ok else 1


def _choice_lines(meta: Mapping[str, object]) -> list[str]:
    """Why this plan: auto's pick among planners (simulated times), fast's shape among its candidates (the times
    it ranked them by: estimated or simulated, as ``chosen_by`` says)."""
    out = []
    auto = meta.get("auto")
    if isinstance(auto, Mapping):
        out.append(f"auto       : picked {auto.get('pick')} ({auto.get('why')})")
        out.append("  candidates (us): " + _times(auto.get("candidates_us")))
        skipped = auto.get("skipped")
        if isinstance(skipped, Mapping) and skipped:
            out.append("  skipped: " + "; ".join(f"{k}: {v}" for k, v in skipped.items()))
    cands = meta.get("candidates_us")
    if isinstance(cands, Mapping):
        out.append(f"fast shape : {meta.get('shape')} ({meta.get('chosen_by')})")
        out.append("  candidates (us): " + _times(cands))
    return out


def _times(doc: object) -> str:
    """``name time`` pairs, fastest first; then the candidates a search's bound stopped (null: slower than the
    pick); entries that are not numbers (a hand-edited plan) are shown as given, last (a report describes what
    the plan says, it does not refuse it)."""
    if not isinstance(doc, Mapping):
        return "-"
    nums = {k: v for k, v in doc.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    out = [f"{k} {float(v):.1f}" for k, v in sorted(nums.items(), key=lambda kv: float(kv[1]))]
    stopped = [k for k, v in doc.items() if v is None]
    if stopped:
        out.append(f"slower (stopped by the bound): {' '.join(stopped)}")
    return ", ".join(out + [f"{k} {v!r:.40}" for k, v in doc.items() if k not in nums and v is not None])
