"""Defaults and built-in names shared by the command line, the facade and the JIT (one place, cheap to import).

The command line builds its whole parser (``a2acc --help``, ``a2acc --version``) from this module and the
registries' lines, without importing numpy, a planner or a backend; the modules that use these names import
them from here.
"""

from __future__ import annotations

from typing import Literal

#: the planner of ``plan``, ``compile``, the facade and the JIT when none is named
DEFAULT_ALGORITHM = "fast"

#: the preset topology files shipped in ``a2acc.topologies`` (``a2acc topo list``)
PRESETS = (
    "dgx-h100",
    "dgx-h200-fast",
    "dgx-a100",
    "mi300x",
    "mi300x-100g",
    "ndv2",
    "dgx2",
    "alps",
    "nvl72",
)

#: the traffic generators of ``a2acc traffic gen`` and ``a2acc compare --traffic``
GENERATORS = ("balanced", "uniform", "zipf", "lognormal", "moe")

#: Megatron-LM's token-imbalance workloads (``a2acc traffic gen w0``...; :mod:`a2acc.model.workloads`), how EP
#: groups take the GPUs, and how experts sit on an EP group's ranks
WORKLOADS = ("w0", "w1", "w2", "w3", "w4", "w5", "w6", "w7")
EP_GROUPS: tuple[Literal["block", "strided"], ...] = ("block", "strided")
EP_PLACEMENTS: tuple[Literal["contiguous", "round-robin"], ...] = ("contiguous", "round-robin")

#: bytes a rank may send or receive (and the largest matrix entry)
MAX_RANK_BYTES = 2**50

#: ``a2acc plan``'s default layout: the busiest rank moves about this many chunks
DEFAULT_TARGET_CHUNKS = 4096

#: ``a2acc compile``'s padding ladder: the layouts tried, as the padding each may add (fraction of the payload)
AUTO_PADDING = (0.02, 0.05, 0.1, 0.2, 0.4)

#: ``a2acc compare``: the algbw definitions (``--bw``) and what ``--plot`` can show
BW_DEFINITIONS = ("fast", "alltoallv")
PLOT_METRICS = ("busbw", "algbw", "time")

#: the simulator parameters ``a2acc calibrate`` can fit (``--fit``, ``--hold``), in the order it reports them
CALIBRATION_PARAMS = (
    "inter_efficiency",
    "intra_efficiency",
    "alpha_us",
    "stage_us",
    "fill_bytes",
    "eager_bytes",
    "onset_bytes",
    "buffer_bytes",
    "retransmit",
    "fanin_loss",
    "storm_ms",
    "fanin_power",
)
