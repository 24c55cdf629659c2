"""``auto``: plan with every planner that applies, verify and simulate each, return the fastest.

For a topology, a matrix, its layout and the simulator's model (the request's, or the topology's default),
``auto`` runs the registered planners in a fixed order - the quick ones first (fast, direct, spreadout,
hierarchical), then the searching ones (syccl, mcf) while the time budget lasts, each of those with the budget's
remainder as its own time limit - verifies every Program (a wrong one is an a2acc bug and raises), simulates it
under the model and keeps the fastest. Ties go to the earlier planner in that order, so the choice is
deterministic. A Program whose link floor (:func:`a2acc.analysis.estimate.link_bound`: its busiest link's bytes
over that link's capacity, which no run of it beats) is past the best simulated time so far cannot win and is
not simulated; a searching planner that takes a ``time_to_beat`` (syccl) gets that time and does not simulate
its own candidates that cannot beat it (when none does, its plan says so and is not simulated either); the pick
is the one simulating every Program gives (tested). The plan records every candidate's
simulated time (null where the floor spared it) and why it won (``meta["auto"]``; ``a2acc report`` prints
it); its ``algorithm`` is ``auto`` and its ops are the winner's, unchanged.

Simulations are memoised by content (:func:`a2acc.analysis.fastsim.simulate_fast`), so the candidates fast
already simulated for its own shape (its direct step is the direct planner's Program) cost nothing again.

``budget_s`` bounds the whole search: a planner is started only while time is left; syccl and mcf get the
rest as their ``time_limit`` and return their best plan so far when it runs out. The plan is byte-identical
in every process unless the budget binds (then what the searching planners found in time can depend on the
machine's speed; ``exclude`` or a larger budget removes that). In the JIT (``A2ACC_ALGORITHM=auto``) the
budget defaults to 0 (the quick planners only): every rank must pick the same plan, and a background miss
stays short.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field

from a2acc.analysis.estimate import link_bound
from a2acc.analysis.fastsim import simulate_fast
from a2acc.analysis.model import default_model
from a2acc.errors import InputError, VerificationError
from a2acc.ir.program import Program, over_peer_limit
from a2acc.ir.verify import verify_program
from a2acc.model.topology import Topology
from a2acc.options import bounded, parse_options
from a2acc.planners import PLANNERS, PlanRequest, remembered, run

#: the order candidates run in (and ties are broken by): quick planners, then the searching ones
ORDER = ("fast", "direct", "spreadout", "hierarchical", "syccl", "mcf")
#: planners that search (a time limit of their own): started only while the budget lasts
SEARCHING = ("syccl", "mcf")


@dataclass(frozen=True)
class Options:
    budget_s: float = bounded(
        30.0,
        0.0,
        3600.0,
        "seconds for the whole search; searching planners (syccl, mcf) run only while time is left, with "
        "the rest as their time limit (0: only the quick planners)",
        "a bound on planning time",
    )
    exclude: str = field(default="", metadata={"help": "comma list of planners not to try (e.g. syccl,mcf)"})

    def check(self) -> None:
        for name in self.excluded():
            if name not in ORDER:
                raise InputError("--opt", "exclude", name, f"planners auto tries: {', '.join(ORDER)}")
        if set(ORDER) <= set(self.excluded()):  # (what else leaves nothing depends on the topology: plan())
            raise InputError(
                "--opt",
                "exclude",
                self.exclude,
                f"leave auto at least one planner that applies here (none left: every one it tries, "
                f"{', '.join(ORDER)}, is excluded)",
            )

    def excluded(self) -> tuple[str, ...]:
        return tuple(x.strip() for x in self.exclude.split(",") if x.strip())


def applies(topology: Topology) -> str | None:
    return None  # direct, spreadout and fast plan for every topology


def plan(req: PlanRequest) -> Program:
    opts: Options = req.options if isinstance(req.options, Options) else Options()
    model = req.model if req.model is not None else default_model(req.topology)
    t0 = time.perf_counter()
    results: list[tuple[str, float, Program]] = []
    skipped: dict[str, str] = {}
    candidates = _candidates(req.topology, opts, skipped)
    if not candidates:
        _nothing_to_try(opts, skipped)
    best_fit = math.inf  # the fastest simulated plan within the target's peer limit
    for name in candidates:
        left = opts.budget_s - (time.perf_counter() - t0)
        if name in SEARCHING and left <= 0:
            skipped[name] = f"budget of {opts.budget_s:g} s spent"
            continue
        prog = _plan_one(name, req, left if name in SEARCHING else None, best_fit)
        rep = verify_program(prog)
        if not rep.ok:
            raise VerificationError(
                f"auto: planner '{name}' produced a wrong plan (a2acc bug)", list(rep.errors)
            )
        if "time_to_beat_us" in prog.meta or link_bound(prog, req.topology, model) > best_fit * (1.0 + 1e-9):
            # cannot win (nothing of the planner's beat the best so far, or the plan's floor is past it)
            results.append((name, math.inf, prog))
            continue
        t = simulate_fast(prog, req.topology, model=model).time_s
        results.append((name, t, prog))
        if over_peer_limit(prog, req.max_peers) is None:
            best_fit = min(best_fit, t)
    if not results:  # the searching ones only, and the budget spent before the first
        _nothing_to_try(opts, skipped)
    results = _within_peer_limit(results, req.max_peers, skipped)
    name, best_t, best = min(results, key=lambda r: r[1])  # min keeps the first of equal times: ORDER
    others = sorted((t, n) for n, t, _p in results if n != name and math.isfinite(t))
    bounded = sum(1 for _n, t, _p in results if not math.isfinite(t))
    why = f"fastest of {len(results)} planners under model {model.name}"
    if bounded:
        why += f" ({bounded} not simulated: could not beat the best)"
    if others and best_t > 0:
        why += f"; next {others[0][1]} at {others[0][0] / best_t:.3f}x"
    elif others:
        why += f"; {others[0][1]} ties at 0 s"
    meta = dict(best.meta)
    meta["auto"] = {
        "pick": name,
        "why": why,
        # null: a plan that could not beat the best simulated time so far (its link floor was past it, or none of
        # its planner's candidates beat it): not simulated
        "candidates_us": {n: round(t * 1e6, 3) if math.isfinite(t) else None for n, t, _p in results},
        "skipped": skipped,
        "model": model.name,
    }
    return dataclasses.replace(best, algorithm="auto", name=f"auto-{best.name}", meta=meta)


def _nothing_to_try(opts: Options, skipped: dict[str, str]) -> None:
    """Refuse options that leave auto no planner to try here, saying why each was left out."""
    why = "; ".join(f"{n}: {w}" for n, w in skipped.items())
    field, value = ("exclude", opts.exclude) if opts.excluded() else ("budget_s", opts.budget_s)
    raise InputError(
        "--opt",
        field,
        value,
        f"leave auto at least one planner that applies here (none left: {why})",
    )


def _within_peer_limit(
    results: list[tuple[str, float, Program]], limit: int | None, skipped: dict[str, str]
) -> list[tuple[str, float, Program]]:
    """The candidates the target can run (at most ``limit`` peers per rank); all of them when none can (the
    target then refuses the fastest, saying what would serve)."""
    why = {n: over_peer_limit(p, limit) for n, _t, p in results}
    fits = [r for r in results if why[r[0]] is None]
    if not fits:
        return results
    skipped.update({n: w for n, w in why.items() if w is not None})
    return fits


def _candidates(topo: Topology, opts: Options, skipped: dict[str, str]) -> list[str]:
    out = []
    for name in ORDER:
        if name not in PLANNERS:
            continue
        if name in opts.excluded():
            skipped[name] = "excluded"
            continue
        if name in SEARCHING and opts.budget_s <= 0:
            # said before the planner's module is imported (syccl's takes ~0.1 s: a fresh process's quick
            # auto would spend it on a planner it cannot run)
            skipped[name] = f"budget of {opts.budget_s:g} s spent"
            continue
        why = PLANNERS.applies(name, topo)
        if why is not None:
            skipped[name] = why
        else:
            out.append(name)
    return out


def _plan_one(name: str, req: PlanRequest, time_limit: float | None, best: float) -> Program:
    """Run planner ``name`` on the same request with its default options; a searching planner gets
    ``time_limit`` and, where its options take one (syccl), the best time so far as its ``time_to_beat``,
    unless this process already planned the request without either (a comparison's rows)."""
    kind = PLANNERS.options(name)
    unlimited = dataclasses.replace(req, options=parse_options(kind, None))
    if time_limit is None:
        return run(name, unlimited)
    done = remembered(name, unlimited)
    if done is not None:
        return done
    given = {"time_limit": str(max(time_limit, 1e-3))}
    if math.isfinite(best) and best > 0 and any(f.name == "time_to_beat" for f in dataclasses.fields(kind)):
        given["time_to_beat"] = repr(best)
    opts: object = parse_options(kind, given, where=f"auto: {name}")
    return run(name, dataclasses.replace(req, options=opts))
