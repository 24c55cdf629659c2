"""``fast``: the FAST/FLASH skew-aware planner (arXiv 2505.09764, FLASH §4) on the common IR.

1. **Intra-server load balancing** (§4.1, §4.3 "preparation"). For every (source server A, destination server
   B) tile, GPUs of A exchange data over the scale-up fabric so each holds an equal share of the tile
   (shares differ by at most one chunk). Data moved to GPU j' is preferably data destined to GPU j' of B
   ("pack by destination", FAST slides), so it later lands without redistribution. Balancing a tile is skipped
   when it does not pay: when the scale-out time it saves is smaller than the scale-up time it costs (FAST's
   implementation skips by a beta/alpha ratio test in ``check_balance_dispatch``; ours compares the two times).
2. **Birkhoff stages** (§4.2). The server matrix S[A][B] = the largest per-GPU share of tile (A, B) is padded
   and decomposed into incast-free one-to-one stages (:mod:`a2acc.planners.birkhoff`); in each stage GPU i of a
   sender talks only to GPU i of its receiver.
3. **Pipelined redistribution** (§4.3). Data that arrives at the wrong GPU of B goes to scratch and is
   redistributed over the scale-up fabric as soon as it lands, concurrently with the next stage's scale-out
   transfer; data already at its final GPU is written straight into the output. The stages become network
   *steps* (:func:`order_steps`): heaviest first and lightest last, not FAST's ascending order (Theorem 2's
   proof), because here only the last step's redistribution is exposed; stages shorter than two link latencies
   are folded into other steps; the last step is split when its redistribution would still show. Each GPU's
   bundle sends its own data first and data balanced in from peers last, so balancing overlaps the first steps
   instead of delaying them, and the tail carries data that needs no redistribution (beyond FAST, whose
   pipeline does not overlap balancing). The intra-server part of the matrix has no dependencies, so it runs
   concurrently with balancing and the first step.

4. **Steps priced by the fabric** (beyond FAST). Each step costs a message's software cost and, past the
   eager window, a rendezvous (the simulator's model, :mod:`a2acc.analysis.model`); on a lossless fabric with
   those costs a few concurrent groups of steps - or, for small or balanced matrices, one direct step - beat
   FAST's sequence, while on a lossy one the incast of concurrent groups costs more than the steps save. With
   ``shape=auto`` (default) :mod:`~a2acc.planners.fast.search` builds the candidates (FAST's sequence, the steps
   in 1, 2 or 4 concurrent groups with and without split messages, one direct step; each again with the other
   balancing choices), ranks them under the request's model - by :mod:`a2acc.analysis.estimate`, confirmed by
   the simulator on lossy fabrics (``rank``) - and keeps the fastest; the plan records every candidate's ranked
   time (``meta["candidates_us"]``) and how it won.

Step synchronisation is pairwise, not a global barrier: a step-k transfer from GPU A_i to B_i waits for
A_i's previous sends and B_i's previous receives, which is exactly what keeps every receiver incast-free. GPUs
that share a NIC (dgx2, ndv2) are synchronised as one: a transfer waits for all of their previous sends
(receives), so no GPU runs ahead and starves its sibling of the NIC's fair share.

Options (:class:`Options`, ``--opt KEY=VALUE``): ``birkhoff`` = ``bottleneck`` (default) | ``kuhn`` (FAST's
method); ``balance`` = ``auto`` (default) | ``always`` | ``never``; ``compare_kuhn=true`` also records how many
stages FAST's own Kuhn method would need (``meta["birkhoff_stages_kuhn"]``), next to ``meta["stage_bound"]``;
``order`` = ``tail`` (default, :func:`order_steps`; direct-connect graphs keep FAST's order) | ``ascending``
(the FLASH paper's order, §4.3 Theorem 2, every stage its own step) | ``descending`` (the order FAST's own
implementation runs: its ``run_scheduler`` walks the stages sorted by ascending weight from the last, heaviest
first; every stage its own step); ``shape`` = ``auto`` | ``staged`` (FAST's sequence) | ``grouped``
(``groups`` concurrent groups) | ``direct``; ``search_ops`` bounds the ops of the candidates ranked; ``rank``
how they are ranked. ``meta["stages"]`` counts the network steps run, ``meta["birkhoff_stages"]`` the
decomposition's stages.

The package: :mod:`~a2acc.planners.fast.steps` (stages to steps, grouping), :mod:`~a2acc.planners.fast.emit`
(the ops, by the compiled core ``a2acc._stageplan`` when it was built, the pure-Python reference otherwise:
byte-identical Programs; per op the Python path costs microseconds, the compiled one tens of nanoseconds),
:mod:`~a2acc.planners.fast.search` (the cost-aware choice).

Works for every intra fabric (the simulator routes scale-up ops over switch, mesh, ring or cube-mesh), any
non-negative matrix, one server (no stages), zero rows and servers with no cross traffic. On a direct-connect
topology each node is a one-GPU "server": balancing vanishes and the stages are GPU-level BvN stages.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from a2acc.ir import Program
from a2acc.options import bounded
from a2acc.planners import PlanRequest
from a2acc.planners.fast.steps import MAX_TAIL_SPLITS, Step, order_steps

__all__ = ["MAX_TAIL_SPLITS", "Options", "Step", "order_steps", "plan"]


@dataclass(frozen=True)
class Options:
    birkhoff: Literal["bottleneck", "kuhn"] = field(
        default="bottleneck",
        metadata={"help": "stage decomposition: bottleneck (fewer stages) or kuhn (FAST's)"},
    )
    balance: Literal["auto", "always", "never"] = field(
        default="auto", metadata={"help": "intra-server balancing: when it pays (auto), always, never"}
    )
    compare_kuhn: bool = field(
        default=False, metadata={"help": "also count the stages FAST's Kuhn method needs (report only)"}
    )
    order: Literal["tail", "ascending", "descending"] = field(
        default="tail",
        metadata={
            "help": "network step order: tail (heavy first, tiny stages folded, last step split), "
            "ascending (the FLASH paper's) or descending (FAST's implementation's: heaviest first, unfolded)"
        },
    )
    shape: Literal["auto", "staged", "grouped", "direct"] = field(
        default="auto",
        metadata={
            "help": "auto: the fastest of the shapes below under the simulator's model; staged: FAST's sequence "
            "of steps; grouped: the steps in `groups` concurrent groups; direct: one direct step"
        },
    )
    groups: int = bounded(
        1, 1, 64, "shape=grouped: concurrent groups of steps", "at most one per step anyway"
    )
    split: bool = field(
        default=False,
        metadata={
            "help": "shape=grouped: each GPU's share of a group to a peer as two messages, the data the receiver "
            "forwards first (shape=auto tries both)"
        },
    )
    phases: Literal["pipelined", "sequential"] = field(
        default="pipelined",
        metadata={
            "help": "pipelined: balancing, steps and redistribution overlap (a2acc); sequential: one after "
            "another, as FAST's own implementation runs them (for predicting its measurements)"
        },
    )
    search_ops: int = bounded(
        150_000,
        0,
        100_000_000,
        "shape=auto: rank candidates while their ops total at most this (0: FAST's sequence, no search)",
        "each ranked op costs time",
    )
    rank: Literal["auto", "estimate", "confirm", "simulate"] = field(
        default="auto",
        metadata={
            "help": "shape=auto: how candidates are ranked: estimate (milliseconds, within a few per cent of the "
            "simulator); simulate (the simulator itself: exact under the model, ~0.1-0.5 s a candidate at 8x8); "
            "confirm (the estimate shortlists those within 20 % of its best, the simulator decides); auto: "
            "estimate on lossless fabrics, confirm on lossy ones (incast), simulate under a model without "
            "per-message or per-stage costs"
        },
    )


def plan(req: PlanRequest, *, native: bool | None = None) -> Program:
    """Build FAST's Program in the shape the options ask for (``auto``: the fastest under the request's model).
    ``native=False`` emits with the pure-Python reference (identical Programs)."""
    from a2acc.planners.fast import emit, search

    opts: Options = req.options if isinstance(req.options, Options) else Options()
    if opts.shape == "staged":
        return emit.build(req, opts, native=native)
    if opts.shape == "grouped":
        return emit.build(req, opts, native=native, groups=opts.groups, split=opts.split)
    if opts.shape == "direct":
        return search.direct(req)
    return search.choose(req, opts, native=native)
