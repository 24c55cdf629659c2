"""Incast model: what a scale-out receive port loses when several senders burst into it at once.

An ideal max-min fair-share model says 16 flows into one 12.5 GB/s NIC still deliver 12.5 GB/s. Real fabrics
do not always: when many senders burst into one receiver the switch queue of that port fills (FLASH §2.1,
Figure 3a). What happens next depends on the transport, which the topology file names (``inter.transport``):

- **RoCE** (lossy or PFC-paused Ethernet, go-back-N retransmission): packets beyond the buffer are dropped and
  the whole window behind them is sent again, and a drop of the last packets of a message is only noticed after
  the transport's retransmission timeout. In FAST's published fixed-size 3-server MI300X logs (FAST repository,
  ``amd-result/3n_fixed_sz_*.txt``) RCCL fan-out's time saturates at ~2.15 s = 4.096 us x 2^19, the RoCE local
  ACK timeout.
- **InfiniBand, NVLink, Slingshot** (credit-based, lossless link-level flow control): nothing is dropped; a
  congested port stays busy at its line rate, so no goodput loss is modelled at the receiver.

The model, per scale-out receive port, re-evaluated whenever the set of active transfers changes:

``k``
    distinct remote senders currently transmitting into the port (fan-in degree);
``F``
    bytes they can have in flight: per sender ``min(bytes it still sends here, window_bytes)``, where
    ``window_bytes`` is what one connection may have outstanding (the collective library's per-peer FIFO,
    :data:`DEFAULT_WINDOW_BYTES`, 2 MiB with NCCL/RCCL's defaults);
``Q``
    the port's share of the switch's shared packet buffer under the dynamic-threshold policy (Choudhury and
    Hahne, "Dynamic queue length thresholds for shared-memory packet switches", IEEE/ACM ToN 1998): with
    ``n`` congested ports and threshold factor ``alpha`` each gets ``buffer * alpha / (1 + alpha * n)``.

With ``k >= 2`` and ``F > Q`` the port is *overloaded*: a share ``1 - Q/F`` of what is in flight overflows and
is retransmitted ``retransmit`` times on average (go-back-N resends the window behind a drop), so the port's
goodput is ``eta = 1 / (1 + retransmit * (1 - Q/F))``. An overload episode can end in a retransmission timeout
(a tail drop that no later packet reveals). Its exposure grows while it lasts, faster the more senders burst
together: ``E = integral of (k - 1)^fanin_power dt``; the probability that some episode ends in a timeout is
``1 - exp(-sum (E/storm_s)^shape)``, and the simulator adds the expected delay (:func:`timeout_penalty`).
Synchronised senders (equal messages, all active to the end) accrue exposure at the full fan-in for the whole
transfer; staggered ones (random sizes) see ``k`` fall as they finish - which is why FAST's fixed-size fan-out
collapses at a smaller size than its random-size fan-out. The parameters of the RoCE default are fitted
by :mod:`a2acc.studies.calibrate` (docs/simulator.md says on which logs); the others are defaults.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

MiB = 1 << 20

#: the bytes a send may have in flight to a peer over the network before the receiver frees FIFO slots, from
#: NCCL/RCCL's defaults: a point-to-point connection over the network moves ``NCCL_P2P_NET_CHUNKSIZE`` (128 KiB)
#: chunks through a FIFO of ``NCCL_STEPS`` (8) slots (src/init.cc ``computeBuffSizes``: p2p chunk x NCCL_STEPS
#: within ``NCCL_BUFFSIZE``), on ``NCCL_NCHANNELS_PER_NET_PEER`` (2) channels per peer: 2 MiB. (Collectives'
#: connections use the whole 4 MiB ``NCCL_BUFFSIZE``; the all-to-alls modelled here are point-to-point sends.)
DEFAULT_WINDOW_BYTES = 8 * (128 << 10) * 2
#: dynamic-threshold factor of shared-buffer switches (Choudhury and Hahne 1998; alpha = 1 is the common default)
DEFAULT_DT_ALPHA = 1.0
#: the RoCE local ACK timeout seen in FAST's fan-out logs: 4.096 us x 2^19 (IB spec "Local ACK Timeout")
ROCE_RTO_S = 4.096e-6 * 2**19


@dataclass(frozen=True)
class IncastModel:
    """Receive-port goodput under incast (module docstring). ``buffer_bytes == 0`` or ``retransmit == 0``
    and ``rto_s == 0`` mean no loss (a lossless fabric, or the model switched off)."""

    name: str = "off"
    buffer_bytes: float = 0.0
    window_bytes: float = float(DEFAULT_WINDOW_BYTES)
    dt_alpha: float = DEFAULT_DT_ALPHA
    retransmit: float = 0.0
    rto_s: float = 0.0
    storm_s: float = math.inf
    shape: float = 2.0
    fanin_power: float = 1.0
    #: how the go-back-N waste grows with the fan-in (0: not at all; module docstring)
    fanin_loss: float = 0.0

    @staticmethod
    def off() -> IncastModel:
        """No incast loss at all (``--incast off``)."""
        return IncastModel("off")

    @staticmethod
    def lossless(name: str) -> IncastModel:
        """A credit-based lossless fabric (InfiniBand, NVLink, Slingshot): a congested port stays busy."""
        return IncastModel(name)

    @property
    def enabled(self) -> bool:
        return self.buffer_bytes > 0 and (
            self.retransmit > 0 or (self.rto_s > 0 and math.isfinite(self.storm_s))
        )

    def port_share(self, congested_ports: int) -> float:
        """Buffer bytes one congested port may hold when ``congested_ports`` ports of its switch are congested."""
        return self.buffer_bytes * self.dt_alpha / (1.0 + self.dt_alpha * max(congested_ports, 1))

    def efficiency(self, senders: int, inflight: float, congested_ports: int = 1) -> float:
        """Goodput fraction of a port with ``senders`` concurrent remote senders and ``inflight`` bytes."""
        if not self.enabled or senders < 2:
            return 1.0
        q = self.port_share(congested_ports)
        if inflight <= q:
            return 1.0
        return 1.0 / (1.0 + self.waste(senders) * (1.0 - q / inflight))

    def waste(self, senders: int | float) -> float:
        """Bytes resent per overflowing byte with ``senders`` concurrent senders: ``retransmit x (k - 1)^fanin_loss``."""
        return self.retransmit * float(max(senders - 1, 1)) ** self.fanin_loss

    def exposure_rate(self, senders: int) -> float:
        """How fast an overloaded port with ``senders`` concurrent senders accrues timeout exposure (per s)."""
        return float(max(senders - 1, 0)) ** self.fanin_power

    def timeout_probability(self, exposures: Sequence[float]) -> float:
        """Probability that at least one overload episode ends in a timeout, from the episodes' exposures."""
        if not self.enabled or self.rto_s <= 0 or not math.isfinite(self.storm_s) or not exposures:
            return 0.0
        hazard = sum((e / self.storm_s) ** self.shape for e in exposures if e > 0)
        return 1.0 - math.exp(-hazard)

    def params(self) -> dict[str, float | str]:
        return {
            "name": self.name,
            "buffer_bytes": self.buffer_bytes,
            "window_bytes": self.window_bytes,
            "dt_alpha": self.dt_alpha,
            "retransmit": self.retransmit,
            "rto_s": self.rto_s,
            "storm_s": self.storm_s,
            "shape": self.shape,
            "fanin_power": self.fanin_power,
            "fanin_loss": self.fanin_loss,
        }


class Episode(NamedTuple):
    """One overload episode of a receive port: when it started, its exposure, and how long it spent at each
    fan-in degree ``k`` (what the exposure integrates: ``sum of exposure_rate(k) x seconds``)."""

    start: float
    exposure: float
    spans: tuple[tuple[int, float], ...] = ()


def timeout_penalty(
    model: IncastModel, makespan: float, episodes: Sequence[tuple[float, float] | Episode]
) -> tuple[float, float]:
    """(expected completion time, timeout probability) given the overload ``episodes`` (start, exposure, ...).

    A timeout stalls its connection for ``rto_s`` from the drop, taken at the start of the most exposed
    episode; the iteration then ends at ``max(makespan, start + rto_s)``. The expectation over iterations is
    reported, as a benchmark that averages many iterations measures it."""
    exposures = [float(e[1]) for e in episodes]
    p = model.timeout_probability(exposures)
    if p <= 0.0:
        return makespan, 0.0
    start = float(episodes[int(max(range(len(exposures)), key=exposures.__getitem__))][0])
    return (1.0 - p) * makespan + p * max(makespan, start + model.rto_s), p
