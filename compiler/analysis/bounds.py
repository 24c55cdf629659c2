"""Lower bounds on all-to-all completion time, and the hierarchical peak model of "A Peak
Performance Model for All-to-all on Hierarchical Systems" (SC25 PMBS).

Terms (all in seconds, for bytes ``T`` on a topology); the reported bound is the largest **valid** one and names
the term that binds:

- ``flash-thm1`` (valid, tiered topologies with n > 1): FLASH Theorem 1, the server-level scale-out cut:
  max over servers of max(cross-server bytes sent, received) / (server NIC bandwidth = m * B_inter).
- ``gpu-cut`` (valid): every byte a GPU sends to another GPU leaves through its scale-up ports or its NIC
  (relays included), so max over GPUs of bytes out (or in) / (its scale-up egress + its NIC bandwidth).
- ``nic-cut`` (valid when no relays are possible, m = 1): per-GPU scale-out bytes / NIC share.
- ``self`` (valid): a GPU's self-chunk is a local copy at memory bandwidth.
- ``mcf`` (valid, optional LP): the max-concurrent multi-commodity flow optimum over the topology graph
  (source-aggregated commodities, store-and-forward allowed), solved with HiGHS: no schedule on these links
  can deliver the matrix faster than ``T / lambda*``. Used for small topologies (``mcf=True``).
- ``peak-model`` (a model, not a bound for skewed traffic): the SC25 PMBS peak model's self/near/far terms applied per GPU
  without relaying, ``max(far/B_far, near/B_near, self/B_self)``. For uniform traffic it is exactly the paper's
  ``t_a2a = max{(P-n)(m/P)/B_far, (n-1)(m/P)/B_near, (m/P)/B_self}``; with skew, relays beat it, so it is
  reported beside the bound and never taken as the bound.

:func:`peak_model` is the paper's closed form (P processes, near groups of n, buffer m bytes), including the Alps
detail ``B_near(n) = (n - 1) * 150 GB/s`` (:func:`alps_b_near`) and the 2D transpose composition
(:func:`transpose_2d_time`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from a2acc.model.topology import Topology


@dataclass(frozen=True)
class Bound:
    name: str
    seconds: float
    valid: bool
    detail: str


@dataclass(frozen=True)
class BoundsReport:
    """All terms; ``best`` is the largest valid term."""

    terms: tuple[Bound, ...]
    total_bytes: int
    nranks: int
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def best(self) -> Bound:
        valid = [t for t in self.terms if t.valid]
        return max(valid, key=lambda t: t.seconds)

    @property
    def seconds(self) -> float:
        return self.best.seconds

    @property
    def algbw_GBps(self) -> float:
        s = self.seconds
        return self.total_bytes / self.nranks / s / 1e9 if s > 0 else float("inf")


def server_matrix(t: npt.NDArray[np.int64], m: int) -> npt.NDArray[np.int64]:
    n = t.shape[0] // m
    return np.asarray(t.reshape(n, m, n, m).sum(axis=(1, 3)), dtype=np.int64)


def flash_theorem1(traffic: npt.NDArray[np.int64], topo: Topology) -> float:
    """FLASH Theorem 1: max(server cross-bytes sent, received) / (m * B_inter)."""
    s = topo.summary()
    if s.n <= 1 or s.b_inter <= 0:
        return 0.0
    srv = server_matrix(traffic, s.m).astype(np.float64)
    np.fill_diagonal(srv, 0.0)
    worst = max(srv.sum(axis=1).max(), srv.sum(axis=0).max())
    return float(worst / (s.m * s.b_inter * 1e9))


def _gpu_capacities(topo: Topology) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Per GPU: total egress and ingress bandwidth (B/s) over all its links, NIC at its full rate."""
    n = topo.nranks
    eg = np.zeros(n)
    ing = np.zeros(n)
    nic_bw = topo.inter.bandwidth * 1e9 if topo.inter is not None else 0.0
    for (u, v), bw, kind in zip(topo.link_names, topo.link_bandwidths, topo.link_kinds):
        if kind == "pcie":
            continue
        if u.startswith("g"):
            eg[int(u[1:])] += bw
        if v.startswith("g"):
            ing[int(v[1:])] += bw
    if topo.inter is not None and topo.servers > 1:
        eg += nic_bw
        ing += nic_bw
    return eg, ing


def peak_model_per_gpu(traffic: npt.NDArray[np.int64], topo: Topology) -> float:
    """The SC25 PMBS peak model per GPU (no relays): max over GPUs of max(far/B_far, near/B_near, self/B_self)."""
    s = topo.summary()
    n = topo.nranks
    srv = np.arange(n) // topo.gpus_per_server
    same = srv[:, None] == srv[None, :]
    eye = np.eye(n, dtype=bool)
    t = traffic.astype(np.float64)
    far_out = np.where(~same, t, 0).sum(axis=1)
    far_in = np.where(~same, t, 0).sum(axis=0)
    near_out = np.where(same & ~eye, t, 0).sum(axis=1)
    near_in = np.where(same & ~eye, t, 0).sum(axis=0)
    self_b = np.diag(t)
    terms = [self_b.max() / (topo.memory_bandwidth * 1e9)]
    if s.b_inter > 0:
        terms.append(max(far_out.max(), far_in.max()) / (s.b_inter * 1e9))
    if s.b_intra > 0:
        terms.append(max(near_out.max(), near_in.max()) / (s.b_intra * 1e9))
    return float(max(terms))


def mcf_variables(traffic: npt.NDArray[np.int64], topo: Topology) -> int:
    """The size of the MCF LP of :func:`mcf_bound`: ranks that send to another rank x directed links (what its
    cost grows with; past ``max_vars`` the bound is computed at scale instead)."""
    off = np.asarray(traffic).copy()
    np.fill_diagonal(off, 0)
    return int(np.count_nonzero(off.sum(axis=1))) * len(topo.link_names)


def mcf_bound(traffic: npt.NDArray[np.int64], topo: Topology, max_vars: int = 600_000) -> float | None:
    """Max-concurrent-flow lower bound (seconds): the link-based MCF optimum (:func:`a2acc.flows.mcf.link_mcf`)
    when it has at most ``max_vars`` variables, else the certified dual bound of :func:`a2acc.flows.scale.scale_bound`
    (edge lengths from a first-order flow, exact distances: still a valid lower bound). Local copies are
    excluded (no edge carries them). None if HiGHS finds no solution."""
    from a2acc.flows.mcf import link_mcf
    from a2acc.flows.network import FlowNetwork
    from a2acc.flows.scale import scale_bound

    net = FlowNetwork.of(topo)
    t = traffic.astype(np.float64).copy()
    np.fill_diagonal(t, 0.0)
    srcs = np.flatnonzero(t.sum(axis=1) > 0)
    if srcs.size == 0:
        return 0.0
    if srcs.size * net.nedges <= max_vars:
        flow = link_mcf(net, t, acyclic=False)
        return None if flow is None else flow.time_s
    return scale_bound(net, t)


def lower_bounds(traffic: npt.NDArray[np.int64], topo: Topology, *, mcf: bool = False) -> BoundsReport:
    """Compute every bound term for ``traffic`` on ``topo`` (see module docstring)."""
    t = np.asarray(traffic, dtype=np.int64)
    n = topo.nranks
    terms: list[Bound] = []
    if topo.is_tiered and topo.servers > 1:
        terms.append(
            Bound("flash-thm1", flash_theorem1(t, topo), True, "server scale-out cut / (m * B_inter)")
        )
    eg, ing = _gpu_capacities(topo)
    off = t.astype(np.float64).copy()
    np.fill_diagonal(off, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        out_t = np.where(eg > 0, off.sum(axis=1) / eg, 0.0)
        in_t = np.where(ing > 0, off.sum(axis=0) / ing, 0.0)
    g = int(np.argmax(np.maximum(out_t, in_t)))
    terms.append(Bound("gpu-cut", float(max(out_t.max(), in_t.max())), True, f"all ports of GPU {g}"))
    terms.append(
        Bound("self", float(np.diag(t).max() / (topo.memory_bandwidth * 1e9)), True, "local copy at HBM rate")
    )
    if topo.is_tiered and topo.gpus_per_server == 1 and topo.summary().b_inter > 0:
        far = off.sum(axis=1).max()
        terms.append(Bound("nic-cut", float(far / (topo.summary().b_inter * 1e9)), True, "one GPU per NIC"))
    if mcf:
        val = mcf_bound(t, topo)
        if val is not None:
            terms.append(Bound("mcf", val, True, "max-concurrent-flow LP (HiGHS)"))
    terms.append(
        Bound("peak-model", peak_model_per_gpu(t, topo), False, "SC25 PMBS self/near/far, no relays")
    )
    return BoundsReport(tuple(terms), int(t.sum()), n)


# ---------------------------------------------------------------------- SC25 PMBS peak model closed forms
def peak_model(
    p: int, n: int, m_bytes: float, b_self: float, b_near: float, b_far: float
) -> tuple[float, float]:
    """The SC25 PMBS peak model: time and peak bandwidth of an all-to-all of ``m_bytes`` per process (bandwidths in B/s).

    ``t = max{(P-n) (m/P) / B_far, (n-1) (m/P) / B_near, (m/P) / B_self}``, ``B_a2a = m / t``; a zero bandwidth
    means the pathway is unused (its message count must then be 0).
    """
    msg = m_bytes / p
    parts = [msg / b_self]
    if p - n > 0:
        parts.append((p - n) * msg / b_far)
    if n - 1 > 0:
        parts.append((n - 1) * msg / b_near)
    t = max(parts)
    return t, m_bytes / t


def alps_b_near(n: int, per_pair: float = 150e9) -> float:
    """Alps: GPUs split NVLink over their peers, so B_near(n) = (n - 1) x 150 GB/s (SC25 PMBS, Alps)."""
    return (n - 1) * per_pair


def transpose_2d_time(
    m_bytes: float, p_r: int, p_c: int, n_col: int, n_row: int, b_self: float, b_near: float, b_far: float
) -> float:
    """The SC25 PMBS paper's 2D transpose: t = t_a2a(P = P_c, n = n_col) + t_a2a(P = P_r, n = n_row)."""
    t_col, _ = peak_model(p_c, n_col, m_bytes, b_self, b_near, b_far)
    t_row, _ = peak_model(p_r, n_row, m_bytes, b_self, b_near, b_far)
    return t_col + t_row
