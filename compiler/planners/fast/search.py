"""fast's cost-aware shape: build the candidate shapes, simulate each under the request's model, keep the fastest.

Why a search and not a formula: what a step costs is the fabric's - a message's software cost (``alpha``), a
rendezvous past the eager window, and, on lossy fabrics, the incast that concurrent groups cause - and those
interact with the fair sharing of the scale-out links in ways a closed form misses (measured on dgx-h100 8x8,
Zipf 0.8, under the InfiniBand defaults: FAST's 20-step sequence 7.1 ms at 256 MiB per GPU, all steps in one
group 5.9 ms, direct 8.1 ms; on the RoCE-calibrated mi300x-100g 4x8 the sequence wins from 64 MiB). The simulator
is the model every other figure uses, so the plan the search keeps is the one ``simulate`` and ``compare`` rank
first among fast's shapes.

Candidates, in this order (ties keep the earlier one): FAST's sequence (``staged``), the steps in 1, 2 and 4
concurrent groups (``grouped:G``, only where G is below the step count), one direct step (``direct``: no
balancing, no relays); then the winner's twin with the other balancing choice, and the fastest grouped shape's
``+split`` form (each GPU's share to a peer in two messages, forwarded data first). The shape candidates are
simulated while their ops total at most ``search_ops``, and each twin when its base fits what is left of it
(so a search simulates at most about ``search_ops`` plus two candidates' ops); the first one is always built,
so a large request keeps FAST's sequence. They are ranked at a coarse simulator tolerance; the two best, FAST's
sequence and the direct step are timed again at the default one (the twins too) and the fastest of those wins - so fast is never behind the direct
planner nor FAST's sequence under the model (when the direct step was within the search budget). A request that
carries its target's peer limit (``max_peers``: RCCL's MSCCL runs at most 63 peers per GPU) never gets a shape
past it when FAST's sequence keeps within it; the shapes left out are named in ``meta``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Literal

import numpy as np

from a2acc.analysis.fastsim import DEFAULT_TOLERANCE, simulate_fast
from a2acc.analysis.model import SimModel, default_model
from a2acc.ir import Program, ProgramBuilder
from a2acc.ir.program import over_peer_limit
from a2acc.planners import PlanRequest
from a2acc.planners.direct import add_direct
from a2acc.planners.fast import emit

if TYPE_CHECKING:
    from a2acc.planners.fast import Options

#: concurrent group counts tried after FAST's sequence
GROUPS = (1, 2, 4)


def direct(req: PlanRequest) -> Program:
    """One direct step labelled as fast's: every pair at once, self-chunks copied (the direct planner's ops)."""
    topo = req.topology
    b = ProgramBuilder(
        f"fast-{topo.servers}x{topo.gpus_per_server}",
        "fast",
        req.counts,
        req.unit_bytes,
        req.traffic,
        topology=topo,
    )
    add_direct(b, req.counts)
    b.meta.update({"stages": 1, "shape": "direct"})
    return b.build()


def model_of(req: PlanRequest) -> SimModel:
    return req.model if req.model is not None else default_model(req.topology)


def choose(req: PlanRequest, opts: Options, *, native: bool | None = None) -> Program:
    """The fastest candidate under the request's model, with every evaluated candidate's time in its meta.

    Candidates are ranked with the simulator's coarser tolerance (:data:`RANK_TOLERANCE`, a few times faster);
    the best :data:`FINALISTS`, FAST's sequence and the direct step are simulated again at the default tolerance
    and the fastest of those wins: the ranking only has to tell apart shapes that differ by more than its error,
    and fast is never behind FAST's own sequence or the direct step."""
    staged = emit.build(req, opts, native=native)
    weights = staged.meta.get("stage_weights")
    nsteps = len(weights) if isinstance(weights, list) else 0
    if nsteps == 0 or opts.search_ops <= 0:  # no network step (one server, or nothing crosses): no choice
        return staged
    model = model_of(req)
    progs: dict[str, Program] = {"staged": staged}
    budget = opts.search_ops - len(staged.table)
    # sizes known before building (nothing past the budget is built: a large plan keeps FAST's sequence)
    sizes = {f"grouped:{g}": len(staged.table) for g in GROUPS if g < nsteps}
    sizes["direct"] = int(np.count_nonzero(req.counts))
    over: dict[str, str] = {}  # candidates past the target's peer limit, and why: never chosen
    for label, ops in sizes.items():
        if ops > budget:
            continue
        budget -= ops
        g = int(label.split(":")[1]) if ":" in label else 0
        prog = direct(req) if g == 0 else emit.build(req, opts, native=native, groups=g)
        why = over_peer_limit(prog, req.max_peers)
        if why is not None:
            over[label] = why
            continue
        progs[label] = prog
    if len(progs) == 1:  # nothing to choose between within the budget and the target's limits
        return _with_skipped(staged, over)
    rough = {k: _time(p, req, model, RANK_TOLERANCE) for k, p in progs.items()}
    order = sorted(progs, key=lambda k: rough[k])  # stable: ties keep the candidates' order
    # FAST's sequence and the direct step always: fast is never behind either under the model (the coarse
    # ranking's error, up to ~6 %, exceeds the gaps between shapes under an ideal model)
    finalists = [k for k in progs if k in order[:FINALISTS] or k in ("direct", "staged")]
    exact = {k: _time(progs[k], req, model, DEFAULT_TOLERANCE) for k in finalists}
    best = min(exact, key=lambda k: exact[k])
    # then the twins: the winner with the other balancing choice, and the split form of the fastest grouped
    # shape, even when another shape won (on mi300x-100g 4x8, balanced 4 MiB/GPU, the direct step (309 us) beats
    # one group (313 us), which split beats both (279 us)); each is built when its base fits what is left of the
    # budget
    for make in (_balance_twin, _split_twin):
        base = best
        if make is _split_twin and not best.startswith("grouped:"):
            timed = {**rough, **exact}
            base = min((k for k in progs if k.startswith("grouped:")), key=lambda k: timed[k], default=best)
        twin = make(req, opts, progs[base], base, budget, native)
        if twin is None or over_peer_limit(twin[1], req.max_peers) is not None:
            continue
        label, prog = twin
        progs[label] = prog
        exact[label] = _time(prog, req, model, DEFAULT_TOLERANCE)
        if exact[label] < exact[best]:
            best = label
    times = {**rough, **exact}
    meta = dict(progs[best].meta)
    meta.update(
        {
            "candidates_us": {k: round(times[k] * 1e6, 3) for k in progs},
            "chosen_by": f"fastest of {len(progs)} shapes simulated under model {model.name}",
            "sim_us": round(exact[best] * 1e6, 3),
        }
    )
    return _with_skipped(replace(progs[best], meta=meta), over)


def _balance_twin(
    req: PlanRequest, opts: Options, prog: Program, label: str, budget: int, native: bool | None
) -> tuple[str, Program] | None:
    """The winning shape with the other intra-server balancing choice, or None (the direct step, which does
    not balance; past the op budget; or ``balance`` fixed by the user). ``balance=auto`` decides per tile by a
    closed form (the scale-out time a tile's balancing saves against the scale-up time it costs), which knows
    nothing of message costs or incast; the twin lets the model decide for the whole plan (measured: on
    mi300x-100g 4x8, MoE 16 MiB/GPU, the four-group shape 1704 us balanced, 1552 us not)."""
    if label == "direct" or opts.balance != "auto" or len(prog.table) > budget:
        return None
    flip: Literal["always", "never"] = "never" if _balanced_tiles(prog) > 0 else "always"
    g = int(label.split(":")[1]) if ":" in label else None
    twin = emit.build(req, replace(opts, balance=flip), native=native, groups=g)
    if flip == "always" and _balanced_tiles(twin) == 0:
        return None  # nothing to balance: the same plan
    name = f"{label}+balance={flip}"
    return name, replace(twin, meta={**twin.meta, "shape": name})


def _split_twin(
    req: PlanRequest, opts: Options, prog: Program, label: str, budget: int, native: bool | None
) -> tuple[str, Program] | None:
    """A grouped shape (balancing twin included) with each GPU's share to a peer split in two
    messages, forwarded data first (:func:`a2acc.planners.fast.emit._send_queue`), or None (FAST's sequence,
    whose steps already pipeline their forwards, the direct step, or past the op budget). Whether the
    overlap it buys is worth a message and a latency per peer is the model's call: on dgx-h100 4x8 under the
    InfiniBand defaults it wins for MoE at 1-4 MiB/GPU and loses for Zipf at 1 MiB/GPU."""
    if not label.startswith("grouped:") or len(prog.table) > budget:
        return None
    shape, _, bal = label.partition("+balance=")
    g = int(shape.split(":")[1])
    twin_opts = opts  # the balancing twin's choice is kept
    if bal == "always":
        twin_opts = replace(opts, balance="always")
    elif bal == "never":
        twin_opts = replace(opts, balance="never")
    twin = emit.build(req, twin_opts, native=native, groups=g, split=True)
    name = f"{label}+split"
    return name, replace(twin, meta={**twin.meta, "shape": name})


def _balanced_tiles(prog: Program) -> int:
    v = prog.meta.get("balanced_tiles", 0)
    return int(v) if isinstance(v, (int, float)) else 0


def _with_skipped(prog: Program, over: dict[str, str]) -> Program:
    """``prog`` with the shapes left out for the target's peer limit named in its meta (nothing when none)."""
    return replace(prog, meta={**prog.meta, "shapes_over_peer_limit": over}) if over else prog


#: the simulator tolerance candidates are ranked with (fastsim's batching window; a few times faster than the
#: default, within a few per cent of it), and how many of the best are then timed at the default tolerance
RANK_TOLERANCE = 3e-2
FINALISTS = 2


def _time(prog: Program, req: PlanRequest, model: SimModel, tolerance: float) -> float:
    return simulate_fast(prog, req.topology, model=model, tolerance=tolerance).time_s
