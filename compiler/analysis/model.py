"""The simulator's physical model: its few parameters, their defaults per transport, and the params file.

Both simulators (:mod:`a2acc.analysis.simulate`, the event-driven reference, and :mod:`a2acc.analysis.fastsim`)
run a Program's DAG as a fluid model on the topology graph with these costs (docs/simulator.md):

``inter_efficiency``, ``intra_efficiency``
    goodput fraction of a scale-out NIC link (``nic_tx``/``nic_rx``, and direct-connect links) and of a scale-up
    link: protocol headers, RDMA/NCCL chunking and copy engines keep a collective below the line rate.
``alpha_s``
    per-message software cost, added to every op's start: posting a send/receive or a copy, the rendezvous of
    the two sides (the alpha of the alpha-beta model, FLASH §6.3; the link latencies of the route come on top).
``stage_s``
    per-stage synchronisation and launch cost, added to an op that starts a later stage than every op it
    waits for: a staged schedule pays a kernel launch or a host/stream synchronisation per stage (FAST's
    implementation synchronises the host between steps, FAST repository ``amd/test_alltoall.cpp``; MPI-style
    shifts pay a rendezvous per step).
``fill_bytes``
    the pipeline fill of a synchronised step: a message that starts in step with its receiver (it waits for
    the receiver's previous step, as SpreadOut's shifts and FAST's stages do) first pays ``min(message,
    fill_bytes)`` at its route's slowest link - the collective library's per-connection FIFO (NCCL/RCCL
    ``NCCL_STEPS`` slots of ``NCCL_P2P_NET_CHUNKSIZE`` per channel) drains completely between two synchronised
    steps, so each step exposes one FIFO's worth of transfer before the next one streams. 0 switches it off.
    FAST's fixed-size SpreadOut runs show the shape: the time above the bandwidth term, per step, grows with the
    message up to ~2.5 MB and is flat beyond.
``onset_bytes``
    incast onset at step boundaries: a synchronised message whose sender is ready while its receiver's
    scale-out port is still receiving the previous message (receives posted ahead, so its eager bytes go at once)
    meets a busy port; the switch marks the queue (ECN), the sender's rate is cut and recovers with time (DCQCN:
    Zhu et al., SIGCOMM 2015): the message loses ``min(message, onset_bytes)`` at its route's slowest link, less
    the time it then waits for its receiver (:func:`a2acc.analysis.simulate.onset_delay`). In lockstep (equal
    messages everywhere) every step boundary does this; under skew most senders find the port free or wait out
    the recovery. A property of RoCE's congestion control: 0 (off) on lossless transports.
``incast``
    the receive-port model of :mod:`a2acc.analysis.incast`.

Where the defaults come from: a topology whose ``inter.transport`` is ``roce`` gets :data:`CALIBRATED_ROCE`,
fitted by ``benchmarks/calibration.py`` on FAST's published MI300X logs (FAST repository, ``amd-result/``: the
random- and skewed-size runs; the fixed-size runs are held back for testing). ``ib``, ``nvlink`` and
``slingshot`` are lossless credit-based fabrics without measured data here: they take the calibrated software
costs and goodput (properties of the collective library and the NIC, not of the switch) and no incast loss,
and say so. A topology that names no transport (and every direct-connect graph) is simulated with the
**ideal** model: line rate, no software costs, no incast. ``a2acc calibrate`` fits a model to your own logs;
``--model params.yaml`` uses it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from a2acc.analysis.incast import DEFAULT_DT_ALPHA, DEFAULT_WINDOW_BYTES, ROCE_RTO_S, IncastModel
from a2acc.errors import InputError
from a2acc.fileio import TooLarge, load_yaml, read_text, size_words
from a2acc.model.topology import Topology

MODEL_FILE_VERSION = 1
MODEL_TRANSPORTS = ("ideal", "roce", "ib", "nvlink", "slingshot")


class ModelFileError(InputError):
    """A simulator model (params) file is missing, malformed or out of range."""


@dataclass(frozen=True)
class SimModel:
    """The parameters of the simulator (module docstring). Times in seconds, sizes in bytes."""

    name: str = "ideal"
    transport: str = "ideal"
    inter_efficiency: float = 1.0
    intra_efficiency: float = 1.0
    alpha_s: float = 0.0
    stage_s: float = 0.0
    eager_bytes: float = 4.0 * 2**20
    incast: IncastModel = field(default_factory=IncastModel.off)
    source: str = "ideal fabric: line rate, no software costs, no incast"
    fill_bytes: float = 0.0
    onset_bytes: float = 0.0

    def with_incast(self, incast: IncastModel) -> SimModel:
        return replace(self, incast=incast)

    def describe(self) -> str:
        """One line: what plots and table headers print."""
        if self.transport == "ideal":
            return "ideal model (line rate, no overheads, no incast)"
        inc = self.incast
        incast = (
            f"incast: buffer {inc.buffer_bytes / 2**20:.3g} MiB, retransmit {inc.retransmit:.3g}"
            if inc.enabled
            else f"incast {'off' if inc.name == 'off' else 'none (lossless)'}"
        )
        fill = f", fill {self.fill_bytes / 2**20:.3g} MiB per step" if self.fill_bytes > 0 else ""
        if self.onset_bytes > 0:
            fill += f", incast onset {self.onset_bytes / 2**20:.3g} MiB"
        return (
            f"model {self.name} ({self.transport}): goodput {self.inter_efficiency:.3f} x NIC, "
            f"{self.intra_efficiency:.3f} x scale-up, alpha {self.alpha_s * 1e6:.3g} us/message, rendezvous "
            f"{self.stage_s * 1e6:.3g} us per stage above {self.eager_bytes / 2**20:.3g} MiB{fill}, {incast}"
        )

    def params(self) -> dict[str, Any]:
        """The parameters as JSON-able values (compare's JSON records them)."""
        return {
            "name": self.name,
            "transport": self.transport,
            "inter_efficiency": self.inter_efficiency,
            "intra_efficiency": self.intra_efficiency,
            "alpha_us": self.alpha_s * 1e6,
            "stage_us": self.stage_s * 1e6,
            "eager_bytes": int(self.eager_bytes),
            "fill_bytes": int(self.fill_bytes),
            "onset_bytes": int(self.onset_bytes),
            "incast": _incast_doc(self.incast),
            "source": self.source,
        }

    def to_yaml(self, header: str = "") -> str:
        doc = {"version": MODEL_FILE_VERSION, **self.params()}
        lead = "".join(f"# {line}\n" for line in header.splitlines())
        return lead + yaml.safe_dump(doc, sort_keys=False, width=110)


def _incast_doc(inc: IncastModel) -> dict[str, Any]:
    return {
        "name": inc.name,
        "buffer_bytes": int(inc.buffer_bytes),
        "window_bytes": int(inc.window_bytes),
        "dt_alpha": inc.dt_alpha,
        "retransmit": inc.retransmit,
        "rto_ms": inc.rto_s * 1e3,
        "storm_ms": inc.storm_s * 1e3 if math.isfinite(inc.storm_s) else None,
        "shape": inc.shape,
        "fanin_power": inc.fanin_power,
        "fanin_loss": inc.fanin_loss,
    }


# ---------------------------------------------------------------------------------------------- defaults
#: Fitted by ``.venv/bin/python benchmarks/calibration.py --fit --more DIR`` on the fit part of FAST's MI300X logs
#: (FAST repository: ``amd-result/`` 3n_random_sz_*, 3n_random_cdf_*, 3n_skewed_sz_*, 3n_skewed_cdf_*,
#: 3n_skewness_*, 96 configurations, all three columns; and DIR = ``amd/result/`` at commit 0712d29, the skewed
#: runs of 4 servers (4n_skewed_sz_*, 4n_skewed_cdf_*, 4n_skewness_*), their FLASH and SpreadOut columns, 42
#: configurations): NIC and scale-up goodput, rendezvous cost, pipeline fill and incast onset from the FLASH and
#: SpreadOut columns of both server counts (FLASH as FAST runs it: host-launched steps), the incast parameters
#: from the 3-server fan-out column; rounded to 4 digits. The staged rows are predicted as the logs time them, the
#: period of back-to-back calls (:mod:`a2acc.analysis.iterations`). Not fitted: the per-message cost, held at
#: 5.209 us (``benchmarks/calibration.py``, ``HELD``: the logs do not identify it beside the per-step fill and
#: rendezvous), the eager window (what a point-to-point send may have in flight to a network peer under
#: NCCL/RCCL's defaults, 2 MiB: ``incast.DEFAULT_WINDOW_BYTES``), the connection window (the same), the timeout
#: (4.096 us x 2^19), ``shape`` and ``fanin_power`` (2: the logs do not separate them from ``storm``),
#: ``fanin_loss`` (0: fitted, it stays 0). Held back and testing it: the fixed-size runs of every server count
#: (tests/studies/test_accuracy.py: the 3-server ones) and the 4-server uniform-random runs (4n_random_sz_*,
#: 4n_random_cdf_*).
CALIBRATED_ROCE = SimModel(
    name="mi300x-roce",
    transport="roce",
    inter_efficiency=0.9115,
    intra_efficiency=0.3701,
    alpha_s=5.209e-6,
    stage_s=65.95e-6,
    eager_bytes=float(DEFAULT_WINDOW_BYTES),
    incast=IncastModel(
        name="roce",
        buffer_bytes=96.48e6,
        window_bytes=float(DEFAULT_WINDOW_BYTES),
        dt_alpha=DEFAULT_DT_ALPHA,
        retransmit=0.3802,
        rto_s=ROCE_RTO_S,
        storm_s=286.8,
        shape=2.0,
        fanin_power=2.0,
        fanin_loss=0.0,
    ),
    source="calibrated on FAST's published MI300X logs (FAST repository: random- and skewed-size runs on 3 "
    "servers, skewed runs on 4); the fixed-size runs and the 4-server uniform-random runs are held back for "
    "testing",
    fill_bytes=0.2164e6,
    onset_bytes=2.814e6,
)


def transport_defaults(transport: str) -> SimModel:
    """The shipped parameters of a transport: what a model file's missing fields take. ``ideal``: line rate,
    no costs; ``roce``: :data:`CALIBRATED_ROCE`; lossless transports: its software costs and NIC goodput, no
    incast loss, and line-rate scale-up links (the calibrated scale-up goodput is MI300X Infinity Fabric's under
    RCCL, not a property of other scale-up fabrics)."""
    if transport in ("", "ideal"):
        return SimModel()
    if transport == "roce":
        return CALIBRATED_ROCE
    base = CALIBRATED_ROCE
    return replace(
        base,
        name=f"{transport}-default",
        transport=transport,
        intra_efficiency=1.0,
        onset_bytes=0.0,
        incast=IncastModel.lossless(transport),
        source=f"defaults (no measured {transport} data): software costs and NIC goodput from the RoCE "
        f"calibration ({base.source.split(';')[0]}); scale-up links at line rate; lossless credit-based "
        "fabric, no incast loss or onset",
    )


def default_model(topo: Topology) -> SimModel:
    """The model a topology gets without ``--model``: its transport's defaults (:func:`transport_defaults`),
    named for the topology where the RoCE calibration was not measured on it, with its switch buffer."""
    if topo.inter is None or not topo.inter.transport:
        return SimModel()
    model = transport_defaults(topo.inter.transport)
    if topo.inter.transport == "roce" and topo.name != "mi300x-100g":
        model = replace(
            model,
            name=f"{topo.name}-roce",
            source="RoCE defaults: " + CALIBRATED_ROCE.source + "; this fabric was not measured",
        )
    if topo.inter.switch_buffer > 0 and model.incast.enabled:
        model = model.with_incast(replace(model.incast, buffer_bytes=topo.inter.switch_buffer))
    return model


# ---------------------------------------------------------------------------------------------- params file
_TOP = (
    "version",
    "name",
    "transport",
    "inter_efficiency",
    "intra_efficiency",
    "alpha_us",
    "stage_us",
    "eager_bytes",
    "fill_bytes",
    "onset_bytes",
    "incast",
)
_TOP_INFO = ("source", "fit")  # informational, kept as written
_INCAST = (
    "name",
    "buffer_bytes",
    "window_bytes",
    "dt_alpha",
    "retransmit",
    "rto_ms",
    "storm_ms",
    "shape",
    "fanin_power",
    "fanin_loss",
)


def _num(src: str, fld: str, v: object, lo: float, hi: float, *, allow_none: bool = False) -> float | None:
    if v is None and allow_none:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(float(v)):
        raise ModelFileError(src, fld, v, f"a number in [{lo:g}, {hi:g}]")
    x = float(v)
    if not lo <= x <= hi:
        raise ModelFileError(src, fld, v, f"a number in [{lo:g}, {hi:g}]")
    return x


def _req_num(src: str, fld: str, v: object, lo: float, hi: float) -> float:
    x = _num(src, fld, v, lo, hi)
    assert x is not None
    return x


def parse_model(data: Any, source: str) -> SimModel:
    """Validate a params mapping (YAML already parsed) into a :class:`SimModel`.

    A field the file leaves out takes the transport's default (:func:`transport_defaults`), never an ideal
    value."""
    src = source
    transport, name, inc_raw = _check_layout(data, src)
    base = transport_defaults(str(transport))
    incast = (
        IncastModel.off() if inc_raw is None else _parse_incast(inc_raw, base.incast, str(transport), src)
    )
    source_txt = data.get("source", f"model file {source}")
    if not isinstance(source_txt, str):
        raise ModelFileError(src, "source", source_txt, "a string (where the parameters come from)")
    return SimModel(
        name=name,
        transport=str(transport),
        inter_efficiency=_req_num(
            src, "inter_efficiency", data.get("inter_efficiency", base.inter_efficiency), 1e-3, 1.0
        ),
        intra_efficiency=_req_num(
            src, "intra_efficiency", data.get("intra_efficiency", base.intra_efficiency), 1e-3, 1.0
        ),
        alpha_s=_req_num(src, "alpha_us", data.get("alpha_us", base.alpha_s * 1e6), 0, 1e7) * 1e-6,
        stage_s=_req_num(src, "stage_us", data.get("stage_us", base.stage_s * 1e6), 0, 1e7) * 1e-6,
        eager_bytes=_req_num(src, "eager_bytes", data.get("eager_bytes", base.eager_bytes), 0, 2**40),
        fill_bytes=_req_num(src, "fill_bytes", data.get("fill_bytes", base.fill_bytes), 0, 2**40),
        onset_bytes=_req_num(src, "onset_bytes", data.get("onset_bytes", base.onset_bytes), 0, 2**40),
        incast=incast,
        source=str(source_txt),
    )


def _check_layout(data: Any, src: str) -> tuple[object, str, dict[Any, Any] | None]:
    """The file's shape before any value: a mapping of known fields, the version, the transport, the name
    (default: the file's stem) and the incast mapping (known fields only; None for ``incast: off``). Returns
    (transport, name, incast)."""
    if not isinstance(data, dict):
        raise ModelFileError(
            src, "", type(data).__name__, "a model file is a YAML mapping (a2acc calibrate -o)"
        )
    for k in data:
        if k not in _TOP and k not in _TOP_INFO:
            raise ModelFileError(
                src, str(k), data[k], f"unknown field; allowed: {', '.join(_TOP + _TOP_INFO)}"
            )
    if isinstance(data.get("version"), bool) or data.get("version") != MODEL_FILE_VERSION:  # (True == 1)
        raise ModelFileError(
            src, "version", data.get("version"), f"this a2acc reads version {MODEL_FILE_VERSION}"
        )
    transport = data.get("transport")
    if transport not in MODEL_TRANSPORTS:
        raise ModelFileError(src, "transport", transport, f"one of {', '.join(MODEL_TRANSPORTS)}")
    name = data.get("name", Path(src).stem)
    if not isinstance(name, str) or not name:
        raise ModelFileError(src, "name", name, "a non-empty string")
    inc_raw = data.get("incast", {})
    # `incast: off` (YAML reads an unquoted off as false): no incast loss, as --incast off
    if inc_raw is False:
        return transport, name, None
    if not isinstance(inc_raw, dict):
        raise ModelFileError(
            src, "incast", inc_raw, "a mapping with " + ", ".join(_INCAST) + "; or off (no incast loss)"
        )
    for k in inc_raw:
        if k not in _INCAST:
            raise ModelFileError(
                src, f"incast.{k}", inc_raw[k], f"unknown field; allowed: {', '.join(_INCAST)}"
            )
    return transport, name, inc_raw


def _parse_incast(inc_raw: dict[Any, Any], bi: IncastModel, transport: str, src: str) -> IncastModel:
    """The ``incast`` mapping, each missing field taken from the transport's incast model ``bi``; ``storm_ms``
    may be null (no storm ceiling)."""
    storm_default = bi.storm_s * 1e3 if math.isfinite(bi.storm_s) else None
    storm = _num(src, "incast.storm_ms", inc_raw.get("storm_ms", storm_default), 1e-6, 1e9, allow_none=True)
    name = inc_raw.get("name", bi.name if bi.name != "off" else transport)
    if isinstance(name, (dict, list)) or name is None or name == "":
        raise ModelFileError(src, "incast.name", name, "a non-empty string")
    return IncastModel(
        name="off" if name is False else str(name),  # (YAML reads an unquoted off as false)
        buffer_bytes=_req_num(
            src, "incast.buffer_bytes", inc_raw.get("buffer_bytes", bi.buffer_bytes), 0, 2**40
        ),
        window_bytes=_req_num(
            src, "incast.window_bytes", inc_raw.get("window_bytes", bi.window_bytes), 1, 2**40
        ),
        dt_alpha=_req_num(src, "incast.dt_alpha", inc_raw.get("dt_alpha", bi.dt_alpha), 1e-3, 1e3),
        retransmit=_req_num(src, "incast.retransmit", inc_raw.get("retransmit", bi.retransmit), 0, 1e3),
        rto_s=_req_num(src, "incast.rto_ms", inc_raw.get("rto_ms", bi.rto_s * 1e3), 0, 1e7) * 1e-3,
        storm_s=math.inf if storm is None else storm * 1e-3,
        shape=_req_num(src, "incast.shape", inc_raw.get("shape", bi.shape), 0.1, 100),
        fanin_power=_req_num(
            src, "incast.fanin_power", inc_raw.get("fanin_power", bi.fanin_power), 0.0, 10.0
        ),
        fanin_loss=_req_num(src, "incast.fanin_loss", inc_raw.get("fanin_loss", bi.fanin_loss), 0.0, 4.0),
    )


#: the largest params file read (one is a few hundred bytes)
MAX_MODEL_FILE_BYTES = 1 << 20


def load_model(path: str | Path) -> SimModel:
    """Read a params file written by ``a2acc calibrate -o`` (or by hand)."""
    p = Path(path)
    try:
        text = read_text(p, MAX_MODEL_FILE_BYTES)
    except TooLarge:
        raise ModelFileError(
            str(p), "", p.name, f"larger than {size_words(MAX_MODEL_FILE_BYTES)}: not a params file"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelFileError(str(p), "", str(p), f"cannot read the file ({exc.__class__.__name__})") from exc
    try:
        data = load_yaml(text)
    except yaml.YAMLError as exc:
        raise ModelFileError(
            str(p), "", p.name, f"not valid YAML: {' '.join(str(exc).split())[:200]}"
        ) from exc
    return parse_model(data, str(p))
