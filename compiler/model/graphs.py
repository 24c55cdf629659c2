"""Graph generators: the link sets of direct-connect topologies and of intra-server fabrics.

Pure functions of their parameters (validated by :mod:`a2acc.model.topology` before they run, so sizes are
bounded): each returns directed node pairs, both directions listed, sorted, self-loops dropped.

- :func:`torus`: a k-ary n-dimensional torus (wrap-around neighbours in every dimension);
- :func:`hypercube`: the d-dimensional binary hypercube (neighbours differ in one bit);
- :func:`genkautz`: the generalized Kautz digraph of Imase and Itoh ("A design for directed graphs with minimum
  diameter", IEEE Trans. Computers 1983): ``i -> (-i*d - q) mod n`` for ``q = 1..d``; the direct-connect
  topology family of Basu et al., "Efficient All-to-All Collective Communication Schedules for Direct-Connect
  Topologies" (HPDC'24);
- :func:`fabric_links`: a server's scale-up links (full mesh as MI300X xGMI, ring, the DGX-1/NDv2 hybrid
  cube-mesh), as (a, b, GB/s) over local GPU indices.
"""

from __future__ import annotations

from collections.abc import Sequence

Pair = tuple[int, int]

#: DGX-1 / NDv2 (V100) hybrid cube-mesh: NVLink counts between local GPUs (each GPU has 6 links).
#: Same link counts as msccl-tools ``msccl/topologies/nvidia.py`` (DGX-1) and TE-CCL ``topologies/ndv2.py``.
DGX1_LINK_COUNTS: tuple[tuple[int, ...], ...] = (
    (0, 2, 1, 1, 2, 0, 0, 0),
    (2, 0, 1, 2, 0, 1, 0, 0),
    (1, 1, 0, 2, 0, 0, 2, 0),
    (1, 2, 2, 0, 0, 0, 0, 1),
    (2, 0, 0, 0, 0, 2, 1, 1),
    (0, 1, 0, 0, 2, 0, 1, 2),
    (0, 0, 2, 0, 1, 1, 0, 2),
    (0, 0, 0, 1, 1, 2, 2, 0),
)


def torus(dims: Sequence[int]) -> list[Pair]:
    """Directed links of a torus with the given dimension sizes (node id = mixed-radix coordinates)."""
    n = 1
    for x in dims:
        n *= x
    pairs: set[Pair] = set()
    for node in range(n):
        coord, rest = [], node
        for x in dims:
            coord.append(rest % x)
            rest //= x
        for k, x in enumerate(dims):
            for step in (1, -1):
                other, mul = 0, 1
                for j, (val, xx) in enumerate(zip(coord, dims)):
                    other += ((val + step) % x if j == k else val) * mul
                    mul *= xx
                if other != node:
                    pairs.add((node, other))
    return sorted(pairs)


def hypercube(dimension: int) -> list[Pair]:
    """Directed links of the ``dimension``-dimensional hypercube (2**dimension nodes)."""
    return sorted((node, node ^ (1 << k)) for node in range(2**dimension) for k in range(dimension))


def genkautz(n: int, degree: int) -> list[Pair]:
    """Directed links of the generalized Kautz digraph GK(degree, n)."""
    return sorted({(i, (-i * degree - q) % n) for i in range(n) for q in range(1, degree + 1)} - _loops(n))


def _loops(n: int) -> set[Pair]:
    return {(i, i) for i in range(n)}


def fabric_links(kind: str, m: int, bw: float) -> tuple[tuple[int, int, float], ...]:
    """The links of a generated intra-server fabric of ``m`` GPUs (a switch has none: its ports are the model)."""
    if kind == "switch" or m == 1:
        return ()
    if kind == "full_mesh":
        return tuple((a, b, bw) for a in range(m) for b in range(m) if a != b)
    if kind == "ring":
        pairs = sorted({(a, b) for a in range(m) for b in ((a + 1) % m, (a - 1) % m) if a != b})
        ordered = sorted(pairs, key=lambda p: (p[0], (p[1] - p[0]) % m != 1))  # clockwise neighbour first
        return tuple((a, b, bw) for a, b in ordered)
    if kind == "hybrid_cube_mesh":
        c = DGX1_LINK_COUNTS
        return tuple((a, b, bw * c[a][b]) for a in range(8) for b in range(8) if c[a][b])
    raise ValueError(f"fabric {kind!r} has no generator")  # pragma: no cover - kinds are validated first
