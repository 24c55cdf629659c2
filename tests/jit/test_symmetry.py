"""Canonical form under the topology's symmetries: only automorphisms, and a moving hot expert keeps one bucket."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from a2acc.jit.bucket import BucketIndex
from a2acc.jit.symmetry import Symmetry
from a2acc.model.topology import load_topology, parse_topology

PRESETS = [("dgx-h100", 2), ("mi300x", 2), ("alps", 2), ("ndv2", 2), ("dgx-a100", 2)]


def _route_signature(topo, a: int, b: int):
    links, alpha = topo.route(a, b)
    return tuple((topo.link_bandwidths[i], topo.link_kinds[i]) for i in links), round(alpha, 12)


def _is_automorphism(topo, perm: np.ndarray) -> bool:
    """Every GPU pair's route (link bandwidths, kinds, latency) equals the route of its image: what a planner's
    cost model sees is unchanged by the relabelling."""
    n = topo.nranks
    return all(
        _route_signature(topo, a, b) == _route_signature(topo, int(perm[a]), int(perm[b]))
        for a in range(n)
        for b in range(n)
        if a != b
    )


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(PRESETS), st.integers(0, 2**31 - 1))
def test_canonical_relabellings_are_automorphisms(preset, seed):
    topo = load_topology(*preset)
    rng = np.random.default_rng(seed)
    m = rng.integers(0, 1000, size=(topo.nranks, topo.nranks))
    m[:, rng.integers(topo.nranks)] *= 5
    perm = Symmetry(topo).canonical(m)
    assert sorted(perm.tolist()) == list(range(topo.nranks))
    assert _is_automorphism(topo, perm)


def test_which_local_indices_move():
    assert Symmetry(load_topology("dgx-h100", 2)).local_runs == (tuple(range(8)),)  # NVSwitch, a NIC per GPU
    ring = parse_topology(
        {
            "version": 1,
            "servers": 2,
            "gpus_per_server": 4,
            "intra": {"fabric": "ring", "bandwidth": 50},
            "inter": {"nics_per_server": 4, "bandwidth": 25},
        }
    )
    assert Symmetry(ring).local_runs == ((0,), (1,), (2,), (3,))  # a ring has no adjacent swaps
    shared = parse_topology(
        {
            "version": 1,
            "servers": 2,
            "gpus_per_server": 4,
            "intra": {"fabric": "switch", "bandwidth": 150},
            "inter": {"nics_per_server": 2, "bandwidth": 25},
        }
    )
    assert Symmetry(shared).local_runs == ((0, 1), (2, 3))  # GPUs move only among those sharing their NIC
    assert Symmetry(load_topology("dgx-h100", 1)).servers_free is False


@pytest.mark.parametrize("preset", [("dgx-h100", 2), ("alps", 2), ("mi300x", 1)])
def test_a_moving_hot_expert_has_one_canonical_matrix(preset):
    topo = load_topology(*preset)
    n = topo.nranks
    canon = set()
    for hot in range(n):
        m = np.full((n, n), 100, dtype=np.int64)
        m[:, hot] = 700
        perm = Symmetry(topo).canonical(m)
        canon.add(m[np.ix_(perm, perm)].tobytes())
    assert len(canon) == 1


def test_buckets_follow_rotation_jumps_and_bursts():
    """Per-call sampled traffic (multinomial tokens): after the first two calls every rotating or jumping hot
    expert hits one canonical bucket; bursts add one layout of their own and hit it on recurrence."""
    topo = load_topology("alps", 2)
    n = topo.nranks
    for kind in ("rotating", "jumping", "bursts"):
        sym = BucketIndex(topo, "fast", "none", symmetric=True)
        keys, hits = set(), []
        for i in range(40):
            rng = np.random.default_rng([kind == "jumping", i])
            p = np.ones(n)
            if kind == "rotating":
                p[i % n] = 4
            elif kind == "jumping":
                p[rng.integers(n)] = 4
            elif i % 8 in (5, 6):
                p[np.random.default_rng([29, i // 8]).integers(n)] = 8
            m = np.stack([rng.multinomial(256 * n, p / p.sum()) for _ in range(n)]) * 4096
            b = sym.lookup(m)
            keys.add(b.key)
            hits.append(b.hit)
        assert sum(hits[2:]) >= 0.9 * 38, (kind, hits)
        assert len(keys) <= (2 if kind == "bursts" else 1)
        assert all(x.padding_fraction <= 0.10 for x in [sym.lookup(m)])


def test_pinned_layouts_are_offered_first():
    topo = load_topology("mi300x", 1)
    index = BucketIndex(topo, "fast", "msccl-xml")
    m = np.full((8, 8), 1 << 16, dtype=np.int64)
    key = index.pin(np.full((8, 8), 17, dtype=np.int64), 4096)  # 17 x 4 KiB holds every 64 KiB pair
    b = index.lookup(m)
    assert b.key == key and b.hit and b.unit == 4096 and b.ranks is None
    assert index.lookup(m * 4).key != key  # beyond the pinned layout: the usual buckets
