"""fast's cost-aware shape: build the candidate shapes, rank them under the request's model, keep the fastest.

Why a search and not a formula: what a step costs is the fabric's - a message's software cost (``alpha``), a
rendezvous past the eager window, and, on lossy fabrics, the incast that concurrent groups cause - and those
interact with the fair sharing of the scale-out links in ways a closed form misses (measured on dgx-h100 8x8,
Zipf 0.8, under the InfiniBand defaults: FAST's 20-step sequence 7.1 ms at 256 MiB per GPU, all steps in one
group 5.9 ms, direct 8.1 ms; on the RoCE-calibrated mi300x-100g 4x8 the sequence wins from 64 MiB).

**Candidates**, in this order: for the request's balancing choice, the steps in one concurrent group
(``grouped:1``) and with its split messages (``+split``: each GPU's share of a group to a peer in two messages,
forwarded data first), FAST's sequence (``staged``), one direct step (``direct``: no balancing, no relays),
then 2 and 4 groups (``grouped:G``, each also ``+split``; where G is below the step count); then the same shapes
for each other balancing choice that balances other tiles (``+balance=always``, ``+balance=never``: the closed
form of ``balance=auto`` knows no message costs or incast). A user's fixed ``balance`` is kept. Candidates are
built while their ops total at most ``search_ops`` (every shape of a plan has the ops of FAST's sequence); when
only one fits, FAST's sequence is kept unranked (a large request). A request that carries its target's peer limit
(``max_peers``: RCCL's MSCCL runs at most 63 peers per GPU) never gets a shape past it when FAST's sequence keeps
within it; the shapes left out are named in ``meta``.

**Ranking** (``rank``): ``estimate`` ranks every candidate by :func:`a2acc.analysis.estimate.estimate` - the
simulator's model with each op served by its bottleneck link in processor sharing, O(ops log ops) - and stops a
candidate as soon as a bound shows it cannot beat the best so far (``candidates_us`` then holds null for it);
before that, every shape of one plan has the same ops and so the same floor under the simulator (its busiest
link's time, :func:`a2acc.analysis.estimate.link_bound`): once a plan's floor is past the best so far, none of
its other shapes is built (null too; exact when ranked by the simulator);
``simulate`` ranks by the simulator itself (:func:`a2acc.analysis.fastsim.simulate_fast`: exact under the model,
a tenth to half a second a candidate at 8 x 8); ``auto`` (default) is the estimate, but the simulator under a
model without per-message or per-stage costs (:func:`ranking`). Equal times go to the shape with the fewest
concurrent transfers (:func:`_tie_rank`). Ranked by the simulator, fast is never behind FAST's sequence or the
direct step under the model; by the estimate, never under the estimate, and its pick simulates within a few
tenths of a per cent of the best candidate on average (docs/planners.md, "How fast plans online").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

import numpy as np

from a2acc.analysis.estimate import estimate, link_bound, prices_drafts
from a2acc.analysis.fastsim import simulate_fast
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
#: the other balancing choices tried when ``balance=auto``
OTHER_BALANCE: tuple[Literal["always", "never"], ...] = ("always", "never")


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
        layout=req.layout,
    )
    add_direct(b, req.counts)
    b.meta.update({"stages": 1, "shape": "direct"})
    return b.build()


@dataclass(frozen=True)
class DirectDraft:
    """The direct step as a draft (:class:`a2acc.ir.program.Priced`): its op columns read off the matrix - one op
    per nonzero pair in (source, destination) order, stage 0, no dependencies, as
    :func:`a2acc.planners.direct.add_direct` emits them - so its peer count, link floor and estimate are its
    Program's to the bit, and the Program (:func:`direct`) is built only if the search keeps it."""

    req: PlanRequest
    table: emit.DraftOps

    @classmethod
    def of(cls, req: PlanRequest) -> DirectDraft:
        src, dst = np.nonzero(req.counts)
        cnt = np.asarray(req.counts[src, dst], dtype=np.int64)
        n = len(cnt)
        none = np.zeros(n + 1, np.int64)
        return cls(
            req, emit.DraftOps(src.astype(np.int64), dst.astype(np.int64), cnt, none[:n], none, none[:0])
        )

    @property
    def nranks(self) -> int:
        return self.req.nranks

    @property
    def unit_bytes(self) -> int:
        return int(self.req.unit_bytes)

    def program(self) -> Program:
        return direct(self.req)


#: a candidate as the search holds it: a Program, or a draft of one made a Program only if kept (fast's shapes
#: with the compiled emission and estimate, :class:`a2acc.planners.fast.emit.Draft`; the direct step always)
Shape = Program | emit.Draft | DirectDraft


def model_of(req: PlanRequest) -> SimModel:
    return req.model if req.model is not None else default_model(req.topology)


def choose(req: PlanRequest, opts: Options, *, native: bool | None = None) -> Program:
    """The candidate ranked fastest under the request's model (module docstring), with every ranked candidate's
    time in its meta (``candidates_us``; ``chosen_by`` says by what)."""
    base = emit.prepare(req, opts, native=native)
    model = model_of(req)
    by = ranking(opts, model)
    # candidates the estimate prices stay drafts until one is kept; the simulator takes Programs
    drafts = by != "simulate" and prices_drafts() and opts.phases == "pipelined"
    # FAST's sequence: a candidate, the fallback, and the measure of the budget
    staged = _shape(base, None, False, drafts)
    todo = _within_budget(req, opts, base, staged, native, drafts)
    if len(todo) < 2:  # no network step, no search, or room for one shape only: FAST's sequence, unranked
        return _program(staged)
    # shortlist: with "confirm" every candidate within CONFIRM of the best estimate is simulated after
    slack = 1.0 + CONFIRM if by == "confirm" else 1.0
    times: dict[str, float] = {}
    progs: dict[str, Shape] = {}
    over: dict[str, str] = {}  # candidates past the target's peer limit, and why: never chosen
    floors: dict[str, float] = {}  # per plan (its shapes share the ops): the simulator's floor, link_bound
    for label, make in todo:
        plan = _plan_of(label)
        above = min(times.values(), default=math.inf) * slack  # what a candidate must not be past
        past = above * (1.0 + 1e-9)
        if floors.get(plan, 0.0) > past:  # no shape of this plan can beat the best so far: none is built
            times[label] = math.inf
            continue
        prog = make()
        why = over_peer_limit(prog, req.max_peers)
        if why is not None:
            over[label] = why
            continue
        progs[label] = prog
        if plan not in floors:
            floors[plan] = link_bound(prog, req.topology, model)
            if floors[plan] > past:
                times[label] = math.inf
                continue
        if by == "simulate":
            times[label] = simulate_fast(_program(prog), req.topology, model=model).time_s
        else:
            # (the reference estimate prices Programs: the direct step's draft is made one where drafts are not)
            times[label] = estimate(prog if drafts else _program(prog), req.topology, model, above=above)
    if not times:  # every shape past the target's limits: FAST's sequence, which the target then judges
        return _with_skipped(_program(staged), over)
    decided = times
    if by == "confirm":
        top = min(times.values()) * slack
        decided = {
            k: simulate_fast(_program(progs[k]), req.topology, model=model).time_s
            for k in times
            if times[k] <= top
        }
    best = min(decided, key=lambda k: (decided[k], _tie_rank(k)))
    kept = _program(progs[best])
    meta = dict(kept.meta)
    meta.update(
        {
            "shape": best,
            # a candidate the bound stopped (slower than the best so far, or past the shortlist) is null, as is
            # one of a plan whose link floor is past the best so far (not built)
            "candidates_us": {k: round(t * 1e6, 3) if math.isfinite(t) else None for k, t in times.items()},
            "chosen_by": f"fastest of {len(times)} shapes, "
            + {
                "simulate": "ranked by the simulator",
                "estimate": "ranked by the estimate",
                "confirm": f"the {len(decided)} within {CONFIRM:.0%} of the best estimate simulated",
            }[by]
            + f" under model {model.name}",
            "ranked_us": round(decided[best] * 1e6, 3),
        }
    )
    if by == "confirm":
        meta["simulated_us"] = {k: round(t * 1e6, 3) for k, t in decided.items()}
    return _with_skipped(replace(kept, meta=meta), over)


#: ``rank=auto`` on a lossy fabric: candidates estimated within this of the best estimate are simulated. Chosen
#: on ``benchmarks/fast_estimate.py --cases mi300x-100g:4`` (seeds 2-3, four traffic kinds, 1 MiB-1 GiB/GPU;
#: never the quality configurations' seed 1) under the model that charges the rendezvous and incast onset,
#: which the estimate leaves out: the simulator's best was within 15.5 % of the best estimate in all 48, and
#: a 10 % shortlist missed it in 4 (its pick up to 5.4 % behind); with 20 % none was missed
CONFIRM = 0.20


def ranking(opts: Options, model: SimModel) -> str:
    """How the candidates are ranked: ``rank`` when given; ``auto``: by the estimate on a lossless fabric with
    per-message and per-stage costs (every preset but the RoCE ones); on a lossy fabric (incast) the estimate
    shortlists the candidates within :data:`CONFIRM` of its best and the simulator decides (``confirm``): the
    estimate charges incast as if every sender of a group were active together and leaves retransmission
    timeouts, the rendezvous of host-launched steps and incast onset out, and measured on mi300x-100g 4x8 its
    own pick was 3.3 % behind the best shape on average, 23 % at worst (the shortlist's pick: none behind;
    dgx-h100 4x8: 0.2 % and 4.5 %; mi300x 4x8: 0.05 % and 0.7 %; ``benchmarks/fast_estimate.py``);
    under a model without per-message or per-stage costs (the ideal model, a topology that names no transport)
    by the simulator: concurrent shapes save no step costs there, and what separates them from FAST's sequence
    is what the estimate leaves out, a transfer slowed by its other link (on dgx-h100 4x8 its pick was up to
    3.9 % behind the best). docs/planners.md."""
    if opts.rank != "auto":
        return opts.rank
    if model.incast.enabled:
        return "confirm"
    costs = model.alpha_s > 0 or model.stage_s > 0 or model.fill_bytes > 0
    return "estimate" if costs else "simulate"


#: a candidate's maker
Make = Callable[[], Shape]


def candidates(
    req: PlanRequest, opts: Options, *, native: bool | None = None
) -> Iterator[tuple[str, Callable[[], Program]]]:
    """Every candidate the search would rank for ``req``, in order, its budget aside, as Programs (for
    ``benchmarks/fast_estimate.py``, which sets the estimate against the simulator on each)."""
    base = emit.prepare(req, opts, native=native)
    for label, make in _candidates(req, opts, base, emit.shape(base), native, False):
        yield label, _as_program(make)


def _as_program(make: Make) -> Callable[[], Program]:
    return lambda: _program(make())


def _shape(prep: emit.Prepared, groups: int | None, split: bool, drafts: bool) -> Program | emit.Draft:
    """One shape of ``prep``: a draft where the compiled core emitted the plan and ``drafts`` (the compiled
    estimate prices it), else the Program."""
    if drafts and prep.bal.prep is not None:
        return emit.draft(prep, groups, split)
    return emit.shape(prep, groups, split)


def _program(shape: Shape) -> Program:
    return shape if isinstance(shape, Program) else shape.program()


def _within_budget(
    req: PlanRequest,
    opts: Options,
    base: emit.Prepared,
    staged: Program | emit.Draft,
    native: bool | None,
    drafts: bool,
) -> list[tuple[str, Make]]:
    """The candidates to rank, in order, while their ops total at most ``search_ops`` (the first always). Every
    shape of a plan has the same ops (the grouping and the split change only dependencies), counted as FAST's
    sequence of the request's plan has them."""
    if not base.steps or opts.search_ops <= 0:
        return []
    per_shape = len(staged.table)
    left = opts.search_ops
    out: list[tuple[str, Make]] = []
    for label, make in _candidates(req, opts, base, staged, native, drafts):
        ops = int(np.count_nonzero(req.counts)) if label == "direct" else per_shape
        if out and ops > left:
            break
        left -= ops
        out.append((label, make))
    return out


def _candidates(
    req: PlanRequest,
    opts: Options,
    base: emit.Prepared,
    staged: Program | emit.Draft,
    native: bool | None,
    drafts: bool,
) -> Iterator[tuple[str, Make]]:
    """(label, builder) of every candidate in ranking order (module docstring): the request's plan's shapes, the
    direct step, then the other balancing choices' shapes (prepared only when reached; one that balances the
    tiles of a plan already listed is that plan and is left out)."""
    plans = [base]
    yield from _shapes(base, "", drafts, staged, direct=lambda: DirectDraft.of(req))
    if opts.balance != "auto":
        return
    for flip in OTHER_BALANCE:
        flipped = replace(opts, balance=flip)
        stages = emit.plan_stages(req, flipped)
        if any(np.array_equal(stages.balanced, p.balanced) for p in plans):
            continue  # (decided by the stage plan alone: nothing more of it is prepared)
        other = emit.prepare(req, flipped, native=native, stages=stages)
        plans.append(other)
        yield from _shapes(other, f"+balance={flip}", drafts)


def _shapes(
    prep: emit.Prepared,
    suffix: str,
    drafts: bool,
    staged: Program | emit.Draft | None = None,
    direct: Make | None = None,
) -> Iterator[tuple[str, Make]]:
    """One plan's shapes: one concurrent group (with and without split messages), FAST's sequence (``staged``
    when already built), the ``direct`` step when given, then 2 and 4 groups where there are more steps."""
    sequence: Make = (lambda: staged) if staged is not None else (lambda: _shape(prep, None, False, drafts))
    for g in GROUPS:
        if g == 2:
            yield f"staged{suffix}", sequence
            if direct is not None:
                yield "direct", direct
        if g < len(prep.steps):
            for split in (False, True):
                yield f"grouped:{g}{suffix}{'+split' if split else ''}", _grouped(prep, g, split, drafts)


def _grouped(prep: emit.Prepared, groups: int, split: bool, drafts: bool) -> Make:
    return lambda: _shape(prep, groups, split, drafts)


def _plan_of(label: str) -> str:
    """The plan a candidate is a shape of (its shapes have the same ops, so the same link floor): the direct
    step, or the balancing choice in its label (the request's own: "")."""
    if label == "direct":
        return label
    return next((part for part in label.split("+") if part.startswith("balance=")), "")


def _tie_rank(label: str) -> int:
    """Equal times go to the shape with the fewest concurrent transfers: FAST's sequence, then more groups,
    unsplit before split, the direct step last. The estimate is exact for FAST's sequence (one transfer per
    link at a time) and can only be optimistic for concurrent ones (module docstring of
    :mod:`a2acc.analysis.estimate`), so a tie is no reason to leave the sequence."""
    shape = label.split("+", 1)[0]
    order = {"staged": 0, **{f"grouped:{g}": 10 - g for g in GROUPS}, "direct": 20}
    return 2 * order.get(shape, 30) + label.endswith("+split")


def _with_skipped(prog: Program, over: dict[str, str]) -> Program:
    """``prog`` with the shapes left out for the target's peer limit named in its meta (nothing when none)."""
    return replace(prog, meta={**prog.meta, "shapes_over_peer_limit": over}) if over else prog
