"""Sketch exploration for the one-to-all (scatter) demand of one source GPU, with SyCCL's three prunings.

SyCCL (SIGCOMM'25) slides, "Design 1: Sketch Exploration": one-to-all schedules are sets of **trees**: to
avoid wasting bandwidth every GPU except the root receives (its data and everything it relays) exactly once,
from one parent. The demand is split into stages, and each stage enumerates sub-demands by dimension, group,
source and destination GPUs. "Design 1-1: Pruning Strategies":

1. **Isomorphism** (Pruning 1): sketches that only swap the ids of equivalent GPUs are dropped. Here: two trees
   are the same sketch when a verified automorphism fixing the root maps one onto the other
   (:func:`images` lists a tree's images; the search keeps the first tree of each class).
2. **Consistency** (Pruning 2, from the Insight that isomorphic groups of a dimension should schedule
   uniformly): per stage and dimension, the receivers : senders ratio of every active group must be the same,
   otherwise the sketch is pruned (:func:`_ratios_consistent`).
3. **Relay depth** (Pruning 3): a relay that forwards n subtrees carries n extra shares, so deep scatter trees
   overload their upper relays; the tree height is at most the number of dimensions.

How the enumeration is organised is our design (the slides give the rule, not the algorithm): trees grow
level by level (level = tree depth = stage). The partial tree is invariant under the pointwise stabiliser of
its *fixed* ranks (the root and the relays it singled out), so the current frontier splits into holder
classes (orbits); one representative per class chooses its children as a union of orbits of the unreached
GPUs under the stabiliser of (fixed ranks + itself), and the choice is carried to the rest of the class by
verified automorphisms (class-uniform by construction; Pruning 2 then checks groups across classes). The root
may also single out **one** GPU of an orbit (``one``: that GPU becomes a fixed relay, the rest of the orbit
stays for later levels; ``one+rest``: all of the orbit, with that GPU singled out), which is how funnel trees
(gather at one relay, cross, scatter) arise; deeper levels use whole orbits. A hop never stays in the
dimension of the hop that reached the holder: a relay inside one dimension's group is the job of the
sub-demand LP (:mod:`.synth`), not of the sketch. And a **progress rule** keeps relays purposeful: every hop
on the way to a GPU must bring the data closer to it (more of server, NIC index, local index in common),
except the hop onto a singled-out relay (an aggregation point). The classes are those of a *coordinate group*
(:meth:`a2acc.planners.syccl.symmetry.Symmetry.coord_orbits`): a tree is a valid schedule whatever the fabric,
so the search may use coarser classes than the verified symmetry; everything the plan relies on (images,
replication, Pruning 1) uses verified automorphisms only. ``Pruning(progress=False, ...)`` with the three
prunings off is the exhaustive search of the tests.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from fractions import Fraction

from a2acc.planners.syccl.symmetry import Perm, Symmetry, compose

UNREACHED = -2


@dataclass(frozen=True)
class Sketch:
    """A scatter tree rooted at ``root``: ``parent[r]`` (-1 for the root), ``depth[r]`` (stage of the hop that
    reaches r); ``fixed`` = the root and the relays the root singled out (the tree is invariant under their
    pointwise stabiliser)."""

    root: int
    parent: tuple[int, ...]
    depth: tuple[int, ...]
    fixed: tuple[int, ...]

    @property
    def height(self) -> int:
        return max(self.depth)

    def path(self, d: int) -> tuple[int, ...]:
        out = [d]
        while out[-1] != self.root:
            out.append(self.parent[out[-1]])
        return tuple(reversed(out))

    def subtree_sizes(self) -> tuple[int, ...]:
        """Ranks in each rank's subtree (itself included): the shares its incoming hop carries."""
        size = [1] * len(self.parent)
        for r in sorted(range(len(self.parent)), key=lambda x: -self.depth[x]):
            p = self.parent[r]
            if p >= 0:
                size[p] += size[r]
        return tuple(size)

    def hops(self) -> list[tuple[int, int, int, int]]:
        """(level, sender, receiver, shares) for every tree edge, sorted."""
        size = self.subtree_sizes()
        return sorted(
            (self.depth[r], self.parent[r], r, size[r]) for r in range(len(self.parent)) if r != self.root
        )

    def mapped(self, g: Perm) -> Sketch:
        """The image of the tree under the rank permutation ``g``."""
        n = len(self.parent)
        parent = [0] * n
        depth = [0] * n
        for r in range(n):
            p = self.parent[r]
            parent[g[r]] = -1 if p < 0 else g[p]
            depth[g[r]] = self.depth[r]
        return Sketch(g[self.root], tuple(parent), tuple(depth), tuple(g[x] for x in self.fixed))

    def describe(self, sym: Symmetry) -> str:
        """Route shapes and how many destinations use each, e.g. ``intra:7 rail:1 intra>rail:7``."""
        shapes: dict[str, int] = {}
        for d in range(len(self.parent)):
            if d == self.root:
                continue
            p = self.path(d)
            key = ">".join(sym.dims[sym.dim_of(a, b)].name for a, b in itertools.pairwise(p))
            shapes[key] = shapes.get(key, 0) + 1
        return " ".join(
            f"{k}:{v}" for k, v in sorted(shapes.items(), key=lambda kv: (kv[0].count(">"), kv[0]))
        )


@dataclass(frozen=True)
class Pruning:
    """Which of the three prunings are on (all by default; the tests switch them off for exhaustive search)."""

    isomorphism: bool = True
    consistency: bool = True
    max_depth: int = 0  # 0: the number of dimensions (Pruning 3); otherwise this depth
    progress: bool = True  # the progress rule of the search space (module docstring); off: exhaustive


@dataclass
class SearchStats:
    explored: int = 0  # partial trees expanded
    complete: int = 0  # complete trees reached (duplicates included)
    duplicates: int = 0  # the same tree reached twice
    pruned_isomorphic: int = 0
    pruned_ratio: int = 0
    pruned_depth: int = 0
    truncated: bool = False


@dataclass(frozen=True)
class SearchResult:
    root: int
    sketches: tuple[Sketch, ...]
    stats: SearchStats = field(compare=False)


# ---------------------------------------------------------------------- images (replication, Pruning 1)
def images(sym: Symmetry, sk: Sketch, cap: int) -> list[tuple[Perm, Sketch]] | None:
    """The distinct images of ``sk`` under the verified automorphisms fixing its root, with a map producing
    each, in a deterministic order (the identity first); None when there are more than ``cap``. The tree is
    invariant under the stabiliser of its fixed ranks, so an image is fixed by where its singled-out relays
    go: walk their orbits one by one."""
    ident: Perm = tuple(range(sym.nranks))
    states: list[tuple[Perm, tuple[int, ...]]] = [(ident, (sk.root,))]
    for rep in sk.fixed[1:]:
        nxt: list[tuple[Perm, tuple[int, ...]]] = []
        for g, placed in states:
            q = g[rep]
            orbit = next(o for o in sym.stab_orbits(placed) if q in o)
            for q2 in sorted(orbit, key=lambda x: (x != q, x)):
                h = sym.carry(placed, q, q2)
                if h is None:
                    continue
                nxt.append((compose(h, g), (*placed, q2)))
                if len(nxt) > cap:
                    return None
        states = nxt
    out: list[tuple[Perm, Sketch]] = []
    seen: set[tuple[int, ...]] = set()
    for g, _placed in states:
        im = sk.mapped(g)
        if im.parent not in seen:
            seen.add(im.parent)
            out.append((g, im))
    return out


def _invariant(sym: Symmetry, sk: Sketch) -> tuple[object, ...]:
    """Isomorphism-invariant key: (level, dimension, shares, children) of every tree edge, sorted."""
    size = sk.subtree_sizes()
    kids = [0] * len(sk.parent)
    for p in sk.parent:
        if p >= 0:
            kids[p] += 1
    return tuple(
        sorted(
            (sk.depth[r], sym.dim_of(sk.parent[r], r), size[r], kids[r])
            for r in range(len(sk.parent))
            if r != sk.root
        )
    )


# ---------------------------------------------------------------------- Pruning 2
def _ratios_consistent(sym: Symmetry, parent: list[int], level_children: list[int]) -> bool:
    """Per dimension, every active group has the same receivers : senders ratio at this level."""
    per: dict[tuple[int, int], tuple[set[int], set[int]]] = {}
    for c in level_children:
        p = parent[c]
        dim = sym.dim_of(p, c)
        key = (dim, sym.group_of(dim, c))
        snd, rcv = per.setdefault(key, (set(), set()))
        snd.add(p)
        rcv.add(c)
    ratios: dict[int, set[Fraction]] = {}
    for (dim, _g), (snd, rcv) in per.items():
        ratios.setdefault(dim, set()).add(Fraction(len(rcv), len(snd)))
    return all(len(v) == 1 for v in ratios.values())


# ---------------------------------------------------------------------- the search
def search(
    sym: Symmetry,
    root: int,
    *,
    pruning: Pruning = Pruning(),
    limit: int = 20000,
    deadline: float | None = None,
    image_cap: int = 512,
    max_singled: int = 1,
) -> SearchResult:
    """Every scatter tree from ``root`` in the space described in the module docstring, after the prunings
    that are on. ``limit`` bounds the partial trees expanded (the result says when it was hit)."""
    n = sym.nranks
    s = _Search(sym, root, pruning, limit, deadline, image_cap, max_singled)
    parent0 = [UNREACHED] * n
    depth0 = [-1] * n
    parent0[root] = -1
    depth0[root] = 0
    if n == 1:
        s.kept.append(Sketch(root, (-1,), (0,), (root,)))
    else:
        s.expand(parent0, depth0, (root,), 1)
    return SearchResult(root, tuple(s.kept), s.stats)


class _Search:
    """One run of :func:`search`: its parameters, statistics, the complete trees found (by parent tuple), the
    kept ones (one per isomorphism class when Pruning 1 is on, grouped by :func:`_invariant`) and the images
    of kept trees computed so far."""

    def __init__(
        self,
        sym: Symmetry,
        root: int,
        pruning: Pruning,
        limit: int,
        deadline: float | None,
        image_cap: int,
        max_singled: int,
    ) -> None:
        self.sym = sym
        self.root = root
        self.pruning = pruning
        self.limit = limit
        self.deadline = deadline
        self.image_cap = image_cap
        self.max_singled = max_singled
        self.max_depth = pruning.max_depth or max(len(sym.dims), 1)
        self.stats = SearchStats()
        self.found: dict[tuple[int, ...], Sketch] = {}
        self.by_key: dict[tuple[object, ...], list[Sketch]] = {}
        self.kept: list[Sketch] = []
        self.image_memo: dict[tuple[int, ...], list[tuple[Perm, Sketch]] | None] = {}

    def record(self, parent: list[int], depth: list[int], fixed: tuple[int, ...]) -> None:
        """A complete tree: kept unless it was found before or (Pruning 1) is an image of a kept one."""
        stats = self.stats
        stats.complete += 1
        key = tuple(parent)
        if key in self.found:
            stats.duplicates += 1
            return
        sk = Sketch(self.root, key, tuple(depth), fixed)
        self.found[key] = sk
        if self.pruning.isomorphism:
            inv = _invariant(self.sym, sk)
            for other in self.by_key.get(inv, []):
                if other.parent not in self.image_memo:
                    self.image_memo[other.parent] = images(self.sym, other, self.image_cap)
                ims = self.image_memo[other.parent]
                if ims is not None and any(im.parent == key for _g, im in ims):
                    stats.pruned_isomorphic += 1
                    return
            self.by_key.setdefault(inv, []).append(sk)
        self.kept.append(sk)

    def agree(self, x: int, d: int) -> int:
        """Coordinates ranks ``x`` and ``d`` have in common: server, NIC index, local index."""
        sym, m = self.sym, self.sym.m
        return (x // m == d // m) + (sym.nic_local[x % m] == sym.nic_local[d % m]) + (x % m == d % m)

    def progress(self, parent: list[int], fixed: tuple[int, ...], h: int, c: int) -> bool:
        """Every hop on the way to c brings the data closer to c (more coordinates in common: server, NIC
        index, local index), except a hop onto a singled-out relay (an aggregation point)."""
        x = h
        while x != self.root:
            px = parent[x]
            if x not in fixed and self.agree(x, c) <= self.agree(px, c):
                return False
            x = px
        return True

    def options_for(
        self,
        orbit: tuple[int, ...],
        classes: list[tuple[int, ...]],
        carries: list[list[Perm]],
        parent: list[int],
        fixed: tuple[int, ...],
    ) -> list[tuple[tuple[tuple[int, int], ...], tuple[int, ...]]]:
        """Ways the holders can adopt one unreached orbit at this level: (parent, child) pairs and the relays
        singled out; an orbit is adopted by one holder class as a whole (each holder takes its sub-orbit)."""
        sym, root = self.sym, self.root
        out: list[tuple[tuple[tuple[int, int], ...], tuple[int, ...]]] = []
        for cls, row in zip(classes, carries):
            h0 = cls[0]
            incoming = sym.dim_of(parent[h0], h0) if parent[h0] >= 0 else -1
            if sym.dim_of(h0, orbit[0]) == incoming:
                continue
            if h0 == root:
                out.append((tuple((root, c) for c in orbit), ()))
                if len(orbit) > 1 and len(fixed) - 1 < self.max_singled:
                    out.append((tuple((root, c) for c in orbit), (orbit[0],)))
                    out.append((((root, orbit[0]),), (orbit[0],)))
                continue
            subs = [o for o in sym.coord_orbits((*fixed, h0)) if o[0] in orbit]
            for v in subs:
                if len(v) * len(cls) != len(orbit):
                    continue
                if self.pruning.progress and not self.progress(parent, fixed, h0, v[0]):
                    continue
                pairs = sorted((h, g[c]) for h, g in zip(cls, row) for c in v)
                if len({c for _h, c in pairs}) == len(orbit):
                    out.append((tuple(pairs), ()))
        out.append(((), ()))
        return out

    def expand(self, parent: list[int], depth: list[int], fixed: tuple[int, ...], level: int) -> None:
        """Grow the partial tree by one level: every combination of one option per unreached orbit."""
        stats = self.stats
        if stats.truncated:
            return
        if self.deadline is not None and time.monotonic() > self.deadline:
            stats.truncated = True
            return
        sym = self.sym
        frontier = {r for r in range(sym.nranks) if depth[r] == level - 1}
        orbits = sym.coord_orbits(fixed)
        classes = [o for o in orbits if o[0] in frontier]
        targets = [o for o in orbits if parent[o[0]] == UNREACHED]
        carries: list[list[Perm]] = []
        for cls in classes:
            row: list[Perm] = []
            for h in cls:
                row.append(sym.coord_carry(fixed, cls[0], h))
            carries.append(row)
        per_orbit = [self.options_for(o, classes, carries, parent, fixed) for o in targets]
        for combo in itertools.product(*per_orbit):
            stats.explored += 1
            if stats.explored > self.limit:
                stats.truncated = True
                return
            self.apply(combo, parent, depth, fixed, level)

    def apply(
        self,
        combo: tuple[tuple[tuple[tuple[int, int], ...], tuple[int, ...]], ...],
        parent: list[int],
        depth: list[int],
        fixed: tuple[int, ...],
        level: int,
    ) -> None:
        """One combination of options at ``level``: the grown tree is checked (singled-out relays, Pruning 2,
        Pruning 3), then recorded when complete or expanded further."""
        stats = self.stats
        reps = tuple(x for _p, rp in combo for x in rp)
        if len(fixed) - 1 + len(reps) > self.max_singled:
            return
        pairs = [pc for p, _rp in combo for pc in p]
        if not pairs:
            return
        newp = list(parent)
        newd = list(depth)
        for h, c in pairs:
            newp[c] = h
            newd[c] = level
        children = [c for _h, c in pairs]
        if self.pruning.consistency and not _ratios_consistent(self.sym, newp, children):
            stats.pruned_ratio += 1
            return
        left = sum(1 for x in newp if x == UNREACHED)
        if left and level >= self.max_depth:
            stats.pruned_depth += 1
            return
        nfixed = (*fixed, *reps)
        if not left:
            self.record(newp, newd, nfixed)
        else:
            self.expand(newp, newd, nfixed, level + 1)
