"""Incast model: goodput loss on a scale-out receive link shared by many concurrent senders.

An ideal max-min fair-share model says N flows into one 12.5 GB/s NIC still deliver 12.5 GB/s. Real RoCE
fabrics do not: when many senders burst into one receiver, switch buffers overflow, PFC/DCQCN throttle and
packets are retransmitted (FLASH §2.1, Figure 3a). We model this as an efficiency factor on the receive link's
capacity, a function of how many distinct remote senders are active on it (k) and how large their transfers
are (b = bytes per sender):

    eta(k, b) = 1 - (1 - eta_ref(b)) * min(1, (k - 1) / (k_ref - 1))

``eta_ref(b)`` is a measured curve, interpolated log-linearly in b and clamped at the ends. The default curve,
``mi300x-rocev2``, comes from FAST's published 3-server logs (FAST repository, ``amd-result/3n_fixed_sz_*.txt``)
(3 servers x 8 MI300X, one 100 Gb/s RoCEv2 NIC per GPU, so every NIC receives from k_ref = 16 remote GPUs in
fan-out): for each size, the median of RCCL fan-out algbw divided by the median of FLASH algbw at the same size
(FLASH is incast-free, so the ratio isolates incast loss from protocol overheads; capped at 1). Per-sender bytes
b = bytes per GPU / 24. It reproduces the measured collapse of fan-out above ~250 MB per GPU (eta 0.07-0.19
from 32 MB per pair). The non-monotone middle of the curve is measured, not fitted. It was calibrated on one
RoCE testbed; on InfiniBand fabrics incast is milder (FAST reports NCCL near NIC rate on balanced H200 runs),
so ``IncastModel.off()`` is the honest choice there if you know your fabric absorbs it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import pairwise

#: (bytes per sender, eta at k_ref senders) from the MI300X logs (see module docstring)
MI300X_ROCE_POINTS: tuple[tuple[float, float], ...] = (
    (251_221, 1.0),
    (502_442, 1.0),
    (1_004_883, 0.696),
    (2_009_771, 0.410),
    (4_019_542, 0.455),
    (8_039_083, 0.529),
    (16_078_167, 0.553),
    (32_156_333, 0.106),
    (64_312_500, 0.070),
    (128_625_417, 0.091),
    (257_250_417, 0.185),
)


@dataclass(frozen=True)
class IncastModel:
    """Receive-link efficiency under incast; ``points`` empty means no loss."""

    name: str
    points: tuple[tuple[float, float], ...]
    k_ref: int = 16

    @staticmethod
    def off() -> IncastModel:
        return IncastModel("off", ())

    @staticmethod
    def mi300x_rocev2() -> IncastModel:
        return IncastModel("mi300x-rocev2", MI300X_ROCE_POINTS, 16)

    def eta_ref(self, b: float) -> float:
        pts = self.points
        if not pts:
            return 1.0
        if b <= pts[0][0]:
            return pts[0][1]
        if b >= pts[-1][0]:
            return pts[-1][1]
        lb = math.log(b)
        for (x0, y0), (x1, y1) in pairwise(pts):
            if b <= x1:
                f = (lb - math.log(x0)) / (math.log(x1) - math.log(x0))
                return y0 + f * (y1 - y0)
        return pts[-1][1]  # pragma: no cover

    def efficiency(self, k: int, b: float) -> float:
        if k <= 1 or not self.points:
            return 1.0
        frac = min(1.0, (k - 1) / max(self.k_ref - 1, 1))
        return 1.0 - (1.0 - self.eta_ref(b)) * frac


INCAST_MODELS = {"mi300x-rocev2": IncastModel.mi300x_rocev2, "off": IncastModel.off}
