"""Fit the simulator's few parameters to measured all-to-all runs (``a2acc calibrate``).

The runs come from :mod:`a2acc.studies.logs` (FAST's logs, nccl-tests output).

Fit (:func:`fit`): repeated runs of one configuration are reduced to their median; the objective is the mean
squared log error ``log(predicted / measured)^2``. Parameters are fitted in two phases so each phase sees the
data that identifies it: staged schedules (SpreadOut by default; FAST's rows with ``--fit-on``) fix goodput, per-message cost, rendezvous cost and
eager window; fan-out rows then fix the incast parameters (RoCE only: a lossless fabric has none). The
optimiser is Nelder-Mead on log-transformed parameters (no SciPy dependency). What to fit on and what to hold
back is the caller's choice: ``--test`` logs are predicted with the fitted parameters and never used to fit.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import numpy.typing as npt

from a2acc.analysis.incast import DEFAULT_DT_ALPHA, DEFAULT_WINDOW_BYTES, ROCE_RTO_S, IncastModel
from a2acc.analysis.model import SimModel
from a2acc.analysis.simulate import Routes, routes
from a2acc.errors import InputError
from a2acc.model.topology import Topology
from a2acc.studies.logs import Measurement, matrix_for

#: the parameters :func:`fit` can fit, in the order they are reported
PARAMS = (
    "inter_efficiency",
    "alpha_us",
    "stage_us",
    "eager_bytes",
    "buffer_bytes",
    "retransmit",
    "storm_ms",
    "fanin_power",
)
STAGED_PARAMS = PARAMS[:4]
INCAST_PARAMS = PARAMS[4:]


# ---------------------------------------------------------------------------------------------- cases
@dataclass(frozen=True)
class Case:
    """A measurement with its planned Program(s), prepared once (model-independent). A run of random traffic
    is predicted as the median over ``draws`` matrices drawn like the run's (the log keeps no matrix)."""

    meas: Measurement
    draws: tuple[Routes, ...]
    payload: int

    def predict(self, model: SimModel, tolerance: float = 1e-3) -> float:
        from a2acc.analysis.fastsim import simulate_setup

        times = [simulate_setup(r.setup(model), tolerance=tolerance).time_s for r in self.draws]
        return float(np.median(times))


RANDOM_DRAWS = 3
#: how each logged algorithm is planned: FAST's FLASH column is FAST's own implementation - its stage sequence in
#: FAST's (ascending) order, with balancing, steps and the last redistribution one after another (its logs time
#: the three phases separately and they add up to the total)
PLANNED_AS: dict[str, dict[str, str]] = {
    "fast": {"shape": "staged", "order": "ascending", "phases": "sequential"}
}


def build_cases(
    meas: Sequence[Measurement], topo: Topology, seed: int = 0, draws: int = RANDOM_DRAWS
) -> list[Case]:
    """Plan every measurement's matrix (``draws`` of them for random traffic) with its planner."""
    from a2acc.pipeline import Request, compile

    out = []
    for i, m in enumerate(meas):
        # random traffic: several draws (SpreadOut's stage maxima vary from draw to draw); fan-out's time depends
        # on sums over many entries and varies little, and its fluid simulation costs most: one draw
        k = (draws if m.algorithm != "direct" else 1) if m.traffic.kind in ("uniform", "zipf") else 1
        rts = []
        payload = 0
        for j in range(k):
            mat = matrix_for(m.traffic, topo.nranks, m.size, seed + 1000 * i + j)
            opts = PLANNED_AS.get(m.algorithm)
            prog = compile(Request(topo, mat, m.algorithm, planner_options=opts)).program
            rts.append(routes(prog, topo))
            payload = int(mat.sum())
        out.append(Case(m, tuple(rts), payload))
    return out


# ---------------------------------------------------------------------------------------------- fitting
@dataclass(frozen=True)
class Fit:
    model: SimModel
    params: tuple[str, ...]
    loss: float
    evaluations: int


def start_model(transport: str) -> SimModel:
    """Where every fit starts (fixed neutral values, so a fit is reproducible): line-rate-ish goodput, tens of
    microseconds of software cost, NCCL's 4 MiB window as the eager limit; for RoCE a 64 MiB switch buffer."""
    lossy = transport == "roce"
    inc = (
        IncastModel(
            "roce",
            float(64 << 20),
            float(DEFAULT_WINDOW_BYTES),
            DEFAULT_DT_ALPHA,
            1.0,
            ROCE_RTO_S,
            30.0,
            2.0,
            1.0,
        )
        if lossy
        else IncastModel.lossless(transport)
        if transport != "ideal"
        else IncastModel.off()
    )
    return SimModel(
        name="start",
        transport=transport,
        inter_efficiency=0.9,
        intra_efficiency=1.0,
        alpha_s=20e-6,
        stage_s=50e-6,
        eager_bytes=float(DEFAULT_WINDOW_BYTES),
        incast=inc,
        source="start of the fit",
    )


def get_param(model: SimModel, name: str) -> float:
    inc = model.incast
    return {
        "inter_efficiency": model.inter_efficiency,
        "alpha_us": model.alpha_s * 1e6,
        "stage_us": model.stage_s * 1e6,
        "eager_bytes": model.eager_bytes,
        "fill_bytes": model.fill_bytes,
        "intra_efficiency": model.intra_efficiency,
        "buffer_bytes": inc.buffer_bytes,
        "retransmit": inc.retransmit,
        "storm_ms": inc.storm_s * 1e3,
        "fanin_power": inc.fanin_power,
    }[name]


def set_params(model: SimModel, values: dict[str, float]) -> SimModel:
    m = model
    inc = m.incast
    for k, v in values.items():
        if k == "inter_efficiency":
            m = replace(m, inter_efficiency=min(v, 1.0))
        elif k == "alpha_us":
            m = replace(m, alpha_s=v * 1e-6)
        elif k == "stage_us":
            m = replace(m, stage_s=v * 1e-6)
        elif k == "eager_bytes":
            m = replace(m, eager_bytes=v)
        elif k == "fill_bytes":
            m = replace(m, fill_bytes=v)
        elif k == "intra_efficiency":
            m = replace(m, intra_efficiency=min(v, 1.0))
        elif k == "buffer_bytes":
            inc = replace(inc, buffer_bytes=v)
        elif k == "retransmit":
            inc = replace(inc, retransmit=v)
        elif k == "storm_ms":
            inc = replace(inc, storm_s=v * 1e-3)
        elif k == "fanin_power":
            inc = replace(inc, fanin_power=v)
        else:
            raise KeyError(k)
    return replace(m, incast=inc)


def loss(cases: Sequence[Case], model: SimModel, tolerance: float = 1e-3) -> float:
    errs = [math.log(c.predict(model, tolerance) / c.meas.time_s) for c in cases]
    return float(np.mean(np.square(errs))) if errs else 0.0


#: search ranges (the optimiser works on a logistic transform of log(value) inside them)
BOUNDS = {
    "alpha_us": (0.1, 1e4),
    "stage_us": (0.1, 1e5),
    "eager_bytes": (4096.0, 2.0**30),
    "fill_bytes": (4096.0, 2.0**30),
    "buffer_bytes": (2.0**16, 2.0**34),
    "retransmit": (1e-3, 100.0),
    "storm_ms": (1e-2, 1e9),
    "fanin_power": (0.01, 6.0),
}


def _to_x(name: str, v: float) -> float:
    if name in ("inter_efficiency", "intra_efficiency"):
        p = min(max(v, 1e-3), 1 - 1e-6)
        return math.log(p / (1 - p))
    lo, hi = BOUNDS[name]
    u = (math.log(min(max(v, lo * 1.0001), hi / 1.0001)) - math.log(lo)) / (math.log(hi) - math.log(lo))
    return math.log(u / (1 - u))


def _from_x(name: str, x: float) -> float:
    if name in ("inter_efficiency", "intra_efficiency"):
        return 1.0 / (1.0 + math.exp(-x))
    lo, hi = BOUNDS[name]
    u = 1.0 / (1.0 + math.exp(-max(min(x, 50.0), -50.0)))
    return math.exp(math.log(lo) + u * (math.log(hi) - math.log(lo)))


def nelder_mead(
    f: Callable[[npt.NDArray[np.float64]], float],
    x0: npt.NDArray[np.float64],
    step: float = 0.3,
    iters: int = 120,
    xtol: float = 1e-3,
) -> tuple[npt.NDArray[np.float64], float, int]:
    """Minimise ``f`` from ``x0`` (Nelder and Mead, Computer Journal 1965; standard coefficients)."""
    n = len(x0)
    simplex = [x0.astype(np.float64)] + [x0 + step * np.eye(n)[i] for i in range(n)]
    vals = [f(x) for x in simplex]
    evals = n + 1
    for _ in range(iters):
        order = np.argsort(vals)
        simplex = [simplex[i] for i in order]
        vals = [vals[i] for i in order]
        if max(np.abs(s - simplex[0]).max() for s in simplex[1:]) < xtol:
            break
        centroid = np.mean(simplex[:-1], axis=0)
        worst = simplex[-1]
        xr = centroid + (centroid - worst)
        fr = f(xr)
        evals += 1
        if fr < vals[0]:
            xe = centroid + 2.0 * (centroid - worst)
            fe = f(xe)
            evals += 1
            simplex[-1], vals[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < vals[-2]:
            simplex[-1], vals[-1] = xr, fr
        else:
            xc = centroid + 0.5 * (worst - centroid)
            fc = f(xc)
            evals += 1
            if fc < vals[-1]:
                simplex[-1], vals[-1] = xc, fc
            else:  # shrink towards the best
                for i in range(1, n + 1):
                    simplex[i] = simplex[0] + 0.5 * (simplex[i] - simplex[0])
                    vals[i] = f(simplex[i])
                    evals += 1
    best = int(np.argmin(vals))
    return simplex[best], vals[best], evals


def fit(
    cases: Sequence[Case],
    base: SimModel,
    params: Sequence[str] | None = None,
    *,
    tolerance: float = 1e-3,
    progress: Callable[[str], None] | None = None,
) -> Fit:
    """Fit ``params`` (default: what the cases identify; module docstring) starting from ``base``."""
    staged = [c for c in cases if c.meas.algorithm != "direct"]
    fanout = [c for c in cases if c.meas.algorithm == "direct"]
    lossy = base.incast.rto_s > 0 or base.incast.retransmit > 0 or base.transport == "roce"
    if params is None:
        phase_a = list(STAGED_PARAMS) if staged else ["inter_efficiency", "alpha_us"]
        phase_b = list(INCAST_PARAMS) if (fanout and lossy) else []
    else:
        bad = [p for p in params if p not in PARAMS]
        if bad:
            raise InputError("", "--fit", ",".join(bad), f"parameters: {', '.join(PARAMS)}")
        phase_a = [p for p in params if p in STAGED_PARAMS]
        phase_b = [p for p in params if p in INCAST_PARAMS]
    model = base
    if phase_b and not model.incast.enabled:
        model = set_params(
            model, {"buffer_bytes": 64 * 2**20, "retransmit": 1.0, "storm_ms": 30000.0, "fanin_power": 1.0}
        )
    total_evals = 0
    total_loss = 0.0
    for phase, names in (("staged", phase_a), ("incast", phase_b)):
        data = staged if (phase == "staged" and staged) else fanout if phase == "incast" else list(cases)
        if not names or not data:
            continue
        model, val, evals = _fit_phase(data, model, names, tolerance)
        total_evals += evals
        total_loss += val * len(data)
        if progress:
            progress(
                f"{phase} phase: {evals} evaluations, rms log error {math.sqrt(val):.3f} over {len(data)} runs"
            )
    return Fit(model, tuple(phase_a + phase_b), total_loss / max(len(cases), 1), total_evals)


EAGER_GRID = tuple(float(64 << 10) * 2.0**i for i in range(9))


def _fit_phase(
    data: Sequence[Case], model: SimModel, names: Sequence[str], tolerance: float
) -> tuple[SimModel, float, int]:
    cont = [k for k in names if k != "eager_bytes"]

    def nm(m0: SimModel) -> tuple[SimModel, float, int]:
        if not cont:
            return m0, loss(data, m0, tolerance), 1

        def objective(x: npt.NDArray[np.float64]) -> float:
            return loss(data, set_params(m0, {k: _from_x(k, float(v)) for k, v in zip(cont, x)}), tolerance)

        evals = 0
        x = np.array([_to_x(k, get_param(m0, k)) for k in cont])
        val = math.inf
        for step in (0.5, 0.15):  # a restart from the best point, with a smaller simplex
            x, val, e = nelder_mead(objective, x, step=step, iters=80)
            evals += e
        return set_params(m0, {k: _from_x(k, float(v)) for k, v in zip(cont, x)}), val, evals

    def nm_all(m0: SimModel) -> tuple[SimModel, float, int]:
        names_all = list(names)

        def objective(x: npt.NDArray[np.float64]) -> float:
            return loss(
                data, set_params(m0, {k: _from_x(k, float(v)) for k, v in zip(names_all, x)}), tolerance
            )

        x = np.array([_to_x(k, get_param(m0, k)) for k in names_all])
        evals = 0
        val = math.inf
        for step in (0.5, 0.15):
            x, val, e = nelder_mead(objective, x, step=step, iters=120)
            evals += e
        return set_params(m0, {k: _from_x(k, float(v)) for k, v in zip(names_all, x)}), val, evals

    if "eager_bytes" not in names:
        return nm(model)
    # The window is a threshold on message sizes: the loss is flat between the sizes the logs hold and has
    # local minima. Candidates: every parameter by Nelder-Mead together, and the window on a x2 grid (64 KiB to
    # 16 MiB) with the others fitted at each point; then a x2^(1/4) grid around the best candidate.
    best = nm_all(model)
    total = best[2]
    for w in EAGER_GRID:
        got = nm(set_params(model, {"eager_bytes": w}))
        total += got[2]
        if got[1] < best[1]:
            best = got
    c = get_param(best[0], "eager_bytes")
    for i in (-3, -2, -1, 1, 2, 3):
        got = nm(set_params(best[0], {"eager_bytes": c * 2.0 ** (i / 4)}))
        total += got[2]
        if got[1] < best[1]:
            best = got
    return best[0], best[1], total


def collapse_size(sizes: Sequence[int], ratio: Sequence[float], threshold: float = 0.25) -> int | None:
    """The smallest size whose fan-out/FLASH throughput ratio falls below ``threshold`` (fan-out's collapse)."""
    for s, r in sorted(zip(sizes, ratio)):
        if r < threshold:
            return s
    return None


@dataclass(frozen=True)
class Prediction:
    case: Case
    predicted_s: float

    @property
    def error(self) -> float:
        """predicted / measured - 1."""
        return self.predicted_s / self.case.meas.time_s - 1.0


def evaluate(cases: Sequence[Case], model: SimModel, tolerance: float = 1e-3) -> list[Prediction]:
    return [Prediction(c, c.predict(model, tolerance)) for c in cases]


@dataclass(frozen=True)
class Summary:
    algorithm: str
    runs: int
    median_abs_error: float
    worst_abs_error: float


def summarise(preds: Sequence[Prediction], min_size: int = 0) -> list[Summary]:
    """Per algorithm: median and worst |predicted/measured - 1| over sizes >= ``min_size`` bytes per GPU."""
    out = []
    for alg in dict.fromkeys(p.case.meas.algorithm for p in preds):
        errs = [abs(p.error) for p in preds if p.case.meas.algorithm == alg and p.case.meas.size >= min_size]
        if errs:
            out.append(Summary(alg, len(errs), float(np.median(errs)), float(max(errs))))
    return out


# ---------------------------------------------------------------------------------------------- FAST's MI300X logs
#: The split of FAST's published 3-server MI300X logs (FAST repository, ``amd-result/``) used for the shipped
#: RoCE parameters: fit on the random- and skewed-traffic runs, hold back every fixed-size run.
FIT_PATTERNS = (
    "3n_random_sz_*.txt",
    "3n_random_cdf_*.txt",
    "3n_skewed_sz_*.txt",
    "3n_skewed_cdf_*.txt",
    "3n_skewness_*.txt",
)
TEST_PATTERNS = ("3n_fixed_sz_*.txt",)


def fast_log_split(root: str | Path) -> tuple[list[str], list[str]]:
    """(fit logs, held-back logs) under ``root`` (a copy of FAST's ``amd-result/``)."""
    base = Path(root)
    fit_logs = sorted({str(p) for pat in FIT_PATTERNS for p in base.glob(pat)})
    test_logs = sorted({str(p) for pat in TEST_PATTERNS for p in base.glob(pat)})
    return fit_logs, test_logs


@dataclass(frozen=True)
class Accuracy:
    """Held-back accuracy: per algorithm the median and worst error from ``min_size`` up, and fan-out's collapse."""

    rows: tuple[Prediction, ...]
    summaries: tuple[Summary, ...]
    collapse_measured: int | None
    collapse_predicted: int | None

    def summary(self, algorithm: str) -> Summary:
        return next(s for s in self.summaries if s.algorithm == algorithm)


def accuracy(cases: Sequence[Case], model: SimModel, min_size: int = 8_000_000) -> Accuracy:
    """Predict ``cases`` (fixed-size FAST runs: FLASH, fan-out, SpreadOut at each size) and summarise."""
    preds = evaluate(cases, model)
    by = {(p.case.meas.algorithm, p.case.meas.size): p for p in preds}
    sizes = sorted({p.case.meas.size for p in preds if p.case.meas.algorithm == "direct"})
    meas_ratio, pred_ratio = [], []
    for s in sizes:
        fan, ref = by.get(("direct", s)), by.get(("fast", s))
        if fan is None or ref is None:
            continue
        meas_ratio.append(ref.case.meas.time_s / fan.case.meas.time_s)
        pred_ratio.append(ref.predicted_s / fan.predicted_s)
    return Accuracy(
        tuple(preds),
        tuple(summarise([p for p in preds if p.case.meas.algorithm != "direct"], min_size)),
        collapse_size(sizes, meas_ratio),
        collapse_size(sizes, pred_ratio),
    )
