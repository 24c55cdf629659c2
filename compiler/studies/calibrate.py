"""Fit the simulator's few parameters to measured all-to-all runs (``a2acc calibrate``).

The runs come from :mod:`a2acc.studies.logs` (FAST's logs, nccl-tests output). Repeated runs of one
configuration are reduced to their median; a run of random traffic is predicted as the median over matrices
drawn like its own (the logs keep no matrix). The objective is the mean squared log error
``log(predicted / measured)^2``.

Two phases, each on the rows that identify its parameters (docs/simulator.md):

1. **staged** rows (SpreadOut, and FAST's FLASH column, planned and launched as FAST runs it): goodput of the
   NIC and of the scale-up links, per-message cost, the rendezvous cost beyond the eager window, the pipeline
   fill and, on lossy transports, the incast onset at step boundaries (:mod:`a2acc.analysis.model`). The eager window stays at what a point-to-point send may have in flight to
   a network peer (:data:`~a2acc.analysis.incast.DEFAULT_WINDOW_BYTES`, 2 MiB from NCCL/RCCL's defaults) unless
   asked for: it is a threshold, which the logs only bracket.
2. **fan-out** rows (lossy transports only): the incast parameters. The timeout hazard (``storm_ms``,
   ``fanin_power``) only re-weighs the overload episodes a simulation records, so it is solved for every
   simulation in closed form (no new simulation, :class:`FluidRun`); only the switch buffer and the
   go-back-N waste need simulating.

The optimiser is Levenberg-Marquardt (Marquardt, J. SIAM 1963) on the log errors, the parameters mapped to an
unbounded scale (logit of the log inside their bounds), the Jacobian by forward differences: a few dozen
evaluations of the rows where a simplex search needs hundreds. Every fit starts from the same neutral values
(:func:`start_model`), so a fit is reproducible. What to fit on and what to hold back is the caller's choice:
``--test`` logs are predicted with the fitted parameters and never used to fit.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from statistics import median
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from a2acc.analysis.incast import DEFAULT_DT_ALPHA, DEFAULT_WINDOW_BYTES, ROCE_RTO_S, IncastModel
from a2acc.analysis.iterations import back_to_back
from a2acc.analysis.model import SimModel
from a2acc.analysis.simulate import Routes, SimResult, routes
from a2acc.defaults import CALIBRATION_PARAMS
from a2acc.errors import InputError
from a2acc.model.topology import Topology
from a2acc.studies.logs import Measurement, matrix_for

#: the parameters :func:`fit` can fit, in the order they are reported (named in a2acc.defaults: the command
#: line lists them)
PARAMS = CALIBRATION_PARAMS
STAGED_PARAMS = PARAMS[:7]
INCAST_PARAMS = PARAMS[7:]
#: fitted by default: what the staged rows identify (``intra_efficiency`` only with FLASH rows, whose
#: balancing and redistribution run on the scale-up links; ``onset_bytes`` only on a lossy transport with rows
#: whose steps are queued, not host-launched: SpreadOut's) and what fan-out rows identify. Not by default, as
#: FAST's 3-server fan-out (16 remote senders per port) does not separate them: ``fanin_loss`` (fitted, 0), and
#: ``fanin_power``, which trades off against ``storm_ms`` and runs to its bound; it stays at 2 (timeouts come
#: from collisions between pairs of synchronised senders: ~(k - 1)^2 of them)
DEFAULT_STAGED = ("inter_efficiency", "alpha_us", "stage_us", "fill_bytes")
DEFAULT_INCAST = ("buffer_bytes", "retransmit", "storm_ms")
#: the hazard parameters solved in closed form for every simulation of the fan-out phase
HAZARD_PARAMS = ("storm_ms", "fanin_power")


class Progress(Protocol):
    """Where a fit reports: phases with a (possibly revised) number of steps, and steps done."""

    def phase(self, name: str, total: int) -> None: ...

    def advance(self, steps: int = 1) -> None: ...

    def note(self, text: str) -> None: ...


class _Quiet:
    def phase(self, name: str, total: int) -> None:
        pass

    def advance(self, steps: int = 1) -> None:
        pass

    def note(self, text: str) -> None:
        pass


# ---------------------------------------------------------------------------------------------- cases
@dataclass(frozen=True)
class Case:
    """A measurement with its planned Program(s), prepared once (model-independent). A run of random traffic
    is predicted as the median over ``draws`` matrices drawn like the run's (the log keeps no matrix). A run
    timed over back-to-back calls (:func:`timed_back_to_back`) also has, per draw, two calls queued back to
    back in ``periods``: its prediction is their makespan minus one call's, the steady-state period
    (:mod:`a2acc.analysis.iterations`)."""

    meas: Measurement
    draws: tuple[Routes, ...]
    payload: int
    periods: tuple[Routes, ...] = ()

    def results(self, model: SimModel, tolerance: float = 1e-3) -> list[SimResult]:
        """One call of each draw, simulated (what the fan-out fit's timeout hazard re-weighs; a period is
        :class:`Batch`'s)."""
        from a2acc.analysis.fastsim import simulate_setup

        return [simulate_setup(r.setup(model), tolerance=tolerance) for r in self.draws]


class Batch:
    """Cases prepared for repeated prediction: draws whose ops never share a link (SpreadOut's shifts) are timed
    together, exactly and vectorised (:class:`~a2acc.analysis.levels.SoloBatch`); the others by the fast engine."""

    def __init__(self, cases: Sequence[Case]) -> None:
        from a2acc.analysis.levels import SoloBatch, all_solo

        self.cases = tuple(cases)
        # (case, draw, 0 for one call / 1 for two back-to-back calls)
        self.solo: list[tuple[int, int, int]] = []
        self.fluid: list[tuple[int, int, int]] = []
        solo_routes: list[Routes] = []
        for i, c in enumerate(self.cases):
            if c.periods and len(c.periods) != len(c.draws):
                raise ValueError(f"case {i}: {len(c.periods)} periods for {len(c.draws)} draws")
            for j, r in enumerate(c.draws):
                # a period's two calls by one engine: both exact longest paths, or both fluid
                pair = [(0, r), *([(1, c.periods[j])] if c.periods else [])]
                solo = all(all_solo(x) for _k, x in pair)
                for kind, x in pair:
                    if solo:
                        self.solo.append((i, j, kind))
                        solo_routes.append(x)
                    else:
                        self.fluid.append((i, j, kind))
        self.batch = SoloBatch(solo_routes) if solo_routes else None

    def draw_times(self, model: SimModel, tolerance: float = 1e-3) -> list[list[float]]:
        """Per case, the predicted time of each of its draws: one call, or the period of back-to-back calls."""
        from a2acc.analysis.fastsim import simulate_setup

        one: list[list[float]] = [[0.0] * len(c.draws) for c in self.cases]
        two: list[list[float]] = [[0.0] * len(c.periods) for c in self.cases]
        if self.batch is not None:
            for (i, j, kind), t in zip(self.solo, self.batch.makespans(model).tolist()):
                (two if kind else one)[i][j] = t
        for i, j, kind in self.fluid:
            c = self.cases[i]
            res = simulate_setup((c.periods if kind else c.draws)[j].setup(model), tolerance=tolerance)
            if kind:
                two[i][j] = res.time_s
            elif c.periods:  # a period: both calls as the simulator reports them
                one[i][j] = res.time_s
            else:
                one[i][j] = FluidRun.of(res).expected(model.incast, c.meas.iterations)
        return [[b - a for a, b in zip(o, w)] if w else o for o, w in zip(one, two)]

    def predict(self, model: SimModel, tolerance: float = 1e-3) -> npt.NDArray[np.float64]:
        """Per case, the median over its draws."""
        return np.array([float(np.median(t)) for t in self.draw_times(model, tolerance)])

    def residuals(self, model: SimModel, tolerance: float = 1e-3) -> npt.NDArray[np.float64]:
        """Per case, ``log(predicted / measured)``."""
        return np.log(self.predict(model, tolerance) / np.array([c.meas.time_s for c in self.cases]))


#: matrices drawn per random-traffic run, by planner: SpreadOut's time is set by its stage maxima and varies
#: from draw to draw (a few %); so does FLASH's, through its step decomposition (on FAST's 4-server skewed runs
#: at 496 MiB per GPU one draw's prediction ranged 41.9-51.3 ms over five draws against a measured 44.0 ms, the
#: median of many matrices); fan-out's time is a sum over many entries: it varies little and costs more to
#: simulate
RANDOM_DRAWS = {"spreadout": 5, "fast": 5, "direct": 1}
#: how each logged algorithm is planned: FAST's FLASH column is FAST's own implementation - its stages in the
#: order its implementation runs them (heaviest first: ``run_scheduler`` in FAST's
#: ``amd/src/fast_alltoall/alltoall_global_scheduler.cc`` walks its ascending list from the end, and its logs
#: agree: on random traffic, where the lightest step comes last, the last redistribution takes 0.4-3 % of the
#: total), with balancing, steps and the last redistribution one after another (its logs time the three phases
#: separately and they add up to the total)
PLANNED_AS: dict[str, dict[str, str]] = {
    "fast": {"shape": "staged", "order": "descending", "phases": "sequential"}
}
#: the logged algorithms whose implementation launches each step from the host once the previous one has finished
#: (FAST's FLASH: ``fastAllToAll2`` in FAST's ``amd/test_alltoall.cpp`` synchronises its streams after every step
#: before it issues the next): their receives are never posted ahead, so every synchronised message pays the
#: rendezvous (:func:`a2acc.analysis.simulate.routes`). SpreadOut's shifts and fan-out's sends are grouped calls
#: queued on one stream, as nccl-tests' are
HOST_LAUNCHED = frozenset({"fast"})


def timed_back_to_back(m: Measurement) -> bool:
    """Is ``m`` predicted as the period of back-to-back calls? Its log averages several calls queued back to
    back (FAST's benchmark, nccl-tests; :mod:`a2acc.analysis.iterations`) and its schedule runs in synchronised
    steps. Fan-out rows stay one call from a common start: their incast timeouts are a per-call hazard
    (:class:`FluidRun`), and a call's exchanges all start at once."""
    return m.iterations > 1 and m.algorithm != "direct"


#: calls a back-to-back row is simulated over: the period is the makespan of two calls minus one's (four
#: calls, (T4 - T1) / 3, moved FAST's FLASH periods on random traffic by under 1.5 % of the time)
BACK_TO_BACK = 2


def build_cases(
    meas: Sequence[Measurement],
    topo: Topology,
    seed: int = 0,
    draws: int | None = None,
    progress: Progress | None = None,
) -> list[Case]:
    """Plan every measurement's matrix (``draws`` of them for random traffic, default :data:`RANDOM_DRAWS`) with
    its planner. The draws depend on the configuration (traffic, size) and ``seed`` only: the algorithms of one
    configuration see the same matrices, as FAST's benchmark runs them on one workload per line."""
    from a2acc.pipeline import Request, compile

    prog = progress or _Quiet()
    prog.phase("planning", len(meas))
    out = []
    for m in meas:
        random = m.traffic.kind in ("uniform", "zipf")
        k = (draws if draws is not None else RANDOM_DRAWS.get(m.algorithm, 1)) if random else 1
        rts, periods = [], []
        payload = 0
        base = _config_seed(m, seed)
        for j in range(k):
            mat = matrix_for(m.traffic, topo.nranks, m.size, base + j)
            opts = PLANNED_AS.get(m.algorithm)
            program = compile(Request(topo, mat, m.algorithm, planner_options=opts)).program
            host = m.algorithm in HOST_LAUNCHED
            rts.append(routes(program, topo, host_launched=host))
            if timed_back_to_back(m):
                periods.append(routes(back_to_back(program, BACK_TO_BACK), topo, host_launched=host))
            payload = int(mat.sum())
        out.append(Case(m, tuple(rts), payload, tuple(periods)))
        prog.advance()
    return out


def _config_seed(m: Measurement, seed: int) -> int:
    """A seed for a configuration's draws: its traffic and size (to 1/4 octave, as the logs group runs)."""
    key = f"{m.traffic.kind}:{m.traffic.skew:g}:{round(math.log2(max(m.size, 1)) * 4)}:{seed}"
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "little")


# ---------------------------------------------------------------------------------------------- parameters
@dataclass(frozen=True)
class Fit:
    model: SimModel
    params: tuple[str, ...]
    loss: float
    evaluations: int


def start_model(transport: str) -> SimModel:
    """Where every fit starts (fixed neutral values, so a fit is reproducible): line-rate-ish goodput, tens of
    microseconds of software cost, a 1 MiB pipeline fill, a point-to-point connection's bytes in flight
    (:data:`~a2acc.analysis.incast.DEFAULT_WINDOW_BYTES`, 2 MiB) as the eager window and the incast window; for
    RoCE a 64 MiB switch buffer."""
    lossy = transport == "roce"
    inc = (
        IncastModel(
            "roce",
            float(64 << 20),
            float(DEFAULT_WINDOW_BYTES),
            DEFAULT_DT_ALPHA,
            0.3,
            ROCE_RTO_S,
            3.0e3,
            2.0,
            2.0,
            0.0,
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
        intra_efficiency=0.8,
        alpha_s=20e-6,
        stage_s=50e-6,
        eager_bytes=float(DEFAULT_WINDOW_BYTES),
        incast=inc,
        source="start of the fit",
        fill_bytes=float(1 << 20),
        onset_bytes=float(1 << 20) if lossy else 0.0,
    )


_GET: dict[str, Callable[[SimModel], float]] = {
    "inter_efficiency": lambda m: m.inter_efficiency,
    "intra_efficiency": lambda m: m.intra_efficiency,
    "alpha_us": lambda m: m.alpha_s * 1e6,
    "stage_us": lambda m: m.stage_s * 1e6,
    "fill_bytes": lambda m: m.fill_bytes,
    "eager_bytes": lambda m: m.eager_bytes,
    "onset_bytes": lambda m: m.onset_bytes,
    "buffer_bytes": lambda m: m.incast.buffer_bytes,
    "retransmit": lambda m: m.incast.retransmit,
    "fanin_loss": lambda m: m.incast.fanin_loss,
    "storm_ms": lambda m: m.incast.storm_s * 1e3,
    "fanin_power": lambda m: m.incast.fanin_power,
}
_MODEL_FIELD = {
    "inter_efficiency": ("inter_efficiency", 1.0),
    "intra_efficiency": ("intra_efficiency", 1.0),
    "alpha_us": ("alpha_s", 1e-6),
    "stage_us": ("stage_s", 1e-6),
    "fill_bytes": ("fill_bytes", 1.0),
    "eager_bytes": ("eager_bytes", 1.0),
    "onset_bytes": ("onset_bytes", 1.0),
}
_INCAST_FIELD = {
    "buffer_bytes": ("buffer_bytes", 1.0),
    "retransmit": ("retransmit", 1.0),
    "fanin_loss": ("fanin_loss", 1.0),
    "storm_ms": ("storm_s", 1e-3),
    "fanin_power": ("fanin_power", 1.0),
}


def get_param(model: SimModel, name: str) -> float:
    return _GET[name](model)


def set_params(model: SimModel, values: dict[str, float]) -> SimModel:
    top: dict[str, Any] = {}
    inc: dict[str, Any] = {}
    for k, v in values.items():
        if k in _MODEL_FIELD:
            f, scale = _MODEL_FIELD[k]
            top[f] = min(v, 1.0) if k.endswith("efficiency") else v * scale
        elif k in _INCAST_FIELD:
            f, scale = _INCAST_FIELD[k]
            inc[f] = v * scale
        else:
            raise KeyError(k)
    out = replace(model, **top) if top else model
    return out.with_incast(replace(out.incast, **inc)) if inc else out


#: search ranges (the optimiser works on a logistic transform of log(value) inside them; efficiencies on a
#: logit); ``fanin_loss`` on a logit of the value itself (it may be 0)
BOUNDS = {
    "alpha_us": (0.1, 1e4),
    "stage_us": (0.1, 1e5),
    "fill_bytes": (4096.0, 2.0**30),
    "eager_bytes": (4096.0, 2.0**30),
    "onset_bytes": (4096.0, 2.0**30),
    "buffer_bytes": (2.0**16, 2.0**34),
    "retransmit": (1e-3, 100.0),
    "fanin_loss": (0.0, 3.0),
    "storm_ms": (1e-2, 1e13),
    "fanin_power": (0.01, 6.0),
}
_LINEAR = ("fanin_loss",)


def _squash(u: float) -> float:
    return 1.0 / (1.0 + math.exp(-max(min(u, 50.0), -50.0)))


def _to_x(name: str, v: float) -> float:
    if name.endswith("efficiency"):
        p = min(max(v, 1e-3), 1 - 1e-4)
        return math.log(p / (1 - p))
    lo, hi = BOUNDS[name]
    if name in _LINEAR:
        u = (min(max(v, lo), hi) - lo) / (hi - lo)
    else:
        u = (math.log(min(max(v, lo), hi)) - math.log(lo)) / (math.log(hi) - math.log(lo))
    u = min(max(u, 1e-4), 1 - 1e-4)
    return math.log(u / (1 - u))


def _from_x(name: str, x: float) -> float:
    if name.endswith("efficiency"):
        return _squash(x)
    lo, hi = BOUNDS[name]
    u = _squash(x)
    if name in _LINEAR:
        return lo + u * (hi - lo)
    return math.exp(math.log(lo) + u * (math.log(hi) - math.log(lo)))


def _with_x(model: SimModel, names: Sequence[str], x: npt.NDArray[np.float64]) -> SimModel:
    return set_params(model, {k: _from_x(k, float(v)) for k, v in zip(names, x)})


# ---------------------------------------------------------------------------------------------- optimiser
def levenberg_marquardt(
    resid: Callable[[npt.NDArray[np.float64]], npt.NDArray[np.float64]],
    x0: npt.NDArray[np.float64],
    *,
    step: float = 0.08,
    iters: int = 12,
    rtol: float = 1e-3,
) -> tuple[npt.NDArray[np.float64], float, int]:
    """Minimise ``|resid(x)|^2`` from ``x0`` (Levenberg-Marquardt with Marquardt's diagonal scaling; forward
    differences of width ``step``, wide enough to see past the simulator's event batching). Returns (x, mean
    squared residual, evaluations)."""
    x = np.asarray(x0, dtype=np.float64).copy()
    r = resid(x)
    evals = 1
    cost = float(r @ r)
    lam = 1e-2
    n = len(x)
    stalls = 0
    for _ in range(iters):
        jac = np.empty((len(r), n))
        for j in range(n):
            xj = x.copy()
            xj[j] += step
            jac[:, j] = (resid(xj) - r) / step
            evals += 1
        grad = jac.T @ r
        hess = jac.T @ jac
        scale = np.diag(hess).copy() + 1e-9
        improved = accepted = False
        while lam < 1e7:
            dx = np.linalg.solve(hess + lam * np.diag(scale), -grad)
            big = float(np.abs(dx).max())
            if big > 3.0:  # a trust region on the unbounded scale
                dx *= 3.0 / big
            r_new = resid(x + dx)
            evals += 1
            c_new = float(r_new @ r_new)
            if c_new < cost:
                improved = cost - c_new > rtol * cost
                accepted = True
                x, r, cost = x + dx, r_new, c_new
                lam = max(lam / 4.0, 1e-7)
                break
            lam *= 4.0
        stalls = 0 if improved else stalls + 1
        if not accepted or stalls >= 2:
            break
    return x, cost / max(len(r), 1), evals


# ---------------------------------------------------------------------------------------------- fan-out runs
@dataclass(frozen=True)
class FluidRun:
    """What the timeout hazard needs from one simulation: the fluid makespan and every overload episode's start
    and time at each fan-in degree. :meth:`expected` re-weighs it under any ``storm_ms``/``fanin_power`` - the
    hazard adds the expected timeout to the fluid time and changes nothing else
    (:func:`a2acc.analysis.incast.timeout_penalty`)."""

    makespan: float
    starts: npt.NDArray[np.float64]
    span_episode: npt.NDArray[np.int64]
    span_k: npt.NDArray[np.float64]
    span_dt: npt.NDArray[np.float64]

    @staticmethod
    def of(res: SimResult) -> FluidRun:
        eps = res.episodes
        idx = [i for i, e in enumerate(eps) for _ in e.spans]
        return FluidRun(
            res.makespan_s,
            np.array([e.start for e in eps], dtype=np.float64),
            np.array(idx, dtype=np.int64),
            np.array([k for e in eps for k, _t in e.spans], dtype=np.float64),
            np.array([t for e in eps for _k, t in e.spans], dtype=np.float64),
        )

    def expected(self, inc: IncastModel, iterations: int = 0) -> float:
        """The completion time under ``inc``: the expectation over iterations (what the simulator reports) or,
        with ``iterations``, the median over runs of their mean over that many iterations - what a benchmark
        log holds (a run times out in a binomial number of its iterations; :func:`binomial_median`)."""
        if not len(self.starts) or inc.rto_s <= 0 or not math.isfinite(inc.storm_s):
            return self.makespan
        w = np.maximum(self.span_k - 1.0, 0.0) ** inc.fanin_power * self.span_dt
        exposure = np.bincount(self.span_episode, weights=w, minlength=len(self.starts))
        hazard = float(np.sum((exposure / inc.storm_s) ** inc.shape))
        p = 1.0 - math.exp(-hazard)
        start = float(self.starts[int(np.argmax(exposure))])
        late = max(self.makespan, start + inc.rto_s) - self.makespan
        share = binomial_median(iterations, p) / iterations if iterations > 0 else p
        return self.makespan + share * late


def binomial_median(n: int, p: float) -> float:
    """The median of Binomial(``n``, ``p``), continuous in ``p``: where the CDF, drawn through (k + 1/2, F(k)),
    crosses 1/2 - 0 while p is small (most runs see no timeout), ``n`` as p reaches 1."""
    p = min(max(p, 0.0), 1.0)
    cdf = 0.0
    for k in range(n + 1):
        nxt = cdf + math.comb(n, k) * p**k * (1.0 - p) ** (n - k)
        if nxt >= 0.5:
            return max(k - 0.5 + (0.5 - cdf) / (nxt - cdf), 0.0)
        cdf = nxt
    return float(n)


# ---------------------------------------------------------------------------------------------- fitting
def loss(cases: Sequence[Case], model: SimModel, tolerance: float = 1e-3) -> float:
    """Mean squared ``log(predicted / measured)`` over ``cases``."""
    return float(np.mean(np.square(Batch(cases).residuals(model, tolerance)))) if cases else 0.0


def check_hold(params: Sequence[str] | None, hold: Mapping[str, float]) -> None:
    """Held parameters are known ones that ``params`` (the ones to fit; None: the default set) does not list."""
    bad = [p for p in hold if p not in PARAMS]
    if bad:
        raise InputError("", "--hold", ",".join(bad), f"parameters: {', '.join(PARAMS)}")
    both = [p for p in hold if params is not None and p in params]
    if both:
        raise InputError("", "--hold", ",".join(both), "a parameter that --fit does not also list")


def fit(
    cases: Sequence[Case],
    base: SimModel,
    params: Sequence[str] | None = None,
    *,
    hold: Mapping[str, float] | None = None,
    tolerance: float = 1e-2,
    progress: Progress | None = None,
) -> Fit:
    """Fit ``params`` (default: what the cases identify; module docstring) starting from ``base``. ``hold``: the
    parameters (report units, as :data:`PARAMS`) kept at a given value and not fitted - what the logs cannot
    identify (a fit that runs a parameter to its bound says so)."""
    prog = progress or _Quiet()
    held = dict(hold or {})
    check_hold(params, held)
    if held:
        base = set_params(base, held)
    staged = [c for c in cases if c.meas.algorithm != "direct"]
    fanout = [c for c in cases if c.meas.algorithm == "direct"]
    lossy = base.incast.rto_s > 0 or base.incast.retransmit > 0 or base.transport == "roce"
    if params is None:
        with_flash = any(c.meas.algorithm == "fast" for c in staged)
        queued = lossy and any(c.meas.algorithm not in HOST_LAUNCHED for c in staged)
        extra = [*(["intra_efficiency"] if with_flash else []), *(["onset_bytes"] if queued else [])]
        phase_a = [*DEFAULT_STAGED, *extra] if staged else []
        if not staged and fanout:
            phase_a = ["inter_efficiency", "alpha_us"]
        phase_b = list(DEFAULT_INCAST) if (fanout and lossy) else []
    else:
        bad = [p for p in params if p not in PARAMS]
        if bad:
            raise InputError("", "--fit", ",".join(bad), f"parameters: {', '.join(PARAMS)}")
        phase_a = [p for p in PARAMS if p in params and p in STAGED_PARAMS]
        phase_b = [p for p in PARAMS if p in params and p in INCAST_PARAMS]
    phase_a = [p for p in phase_a if p not in held]
    phase_b = [p for p in phase_b if p not in held]
    model = base
    if phase_b and not model.incast.enabled:
        model = model.with_incast(start_model("roce").incast)
        model = set_params(model, {k: v for k, v in held.items() if k in INCAST_PARAMS})
    total_evals, total_loss = 0, 0.0
    if phase_a:
        rows = staged or fanout
        model, val, evals = _fit_staged(rows, model, phase_a, tolerance, prog)
        total_evals += evals
        total_loss += val * len(rows)
        prog.note(
            f"staged phase: {evals} evaluations, rms log error {math.sqrt(val):.3f} over {len(rows)} runs"
        )
    if phase_b and fanout:
        model, val, evals = _fit_incast(fanout, model, phase_b, tolerance, prog)
        total_evals += evals
        total_loss += val * len(fanout)
        prog.note(
            f"fan-out phase: {evals} evaluations, rms log error {math.sqrt(val):.3f} over {len(fanout)} runs"
        )
    return Fit(model, tuple(phase_a + phase_b), total_loss / max(len(cases), 1), total_evals)


def _fit_staged(
    rows: Sequence[Case], model: SimModel, names: Sequence[str], tolerance: float, prog: Progress
) -> tuple[SimModel, float, int]:
    """The staged parameters in two steps: first on the rows whose transfers never share a link (SpreadOut:
    exact and cheap, :class:`Batch`) by a simplex search polished by Levenberg-Marquardt - robust to the kinks
    that thresholds put in the loss; then on every staged row (with FAST's FLASH rows, which identify the
    scale-up goodput) by Levenberg-Marquardt from there. The eager window, a threshold, on a x2 grid when it is
    fitted."""
    cont = [k for k in names if k != "eager_bytes"]
    fluid = {i for i, _j, _k in Batch(rows).fluid}
    cheap = [c for i, c in enumerate(rows) if i not in fluid]
    first = [k for k in cont if k != "intra_efficiency"]
    grid = [get_param(model, "eager_bytes")] if "eager_bytes" not in names else list(EAGER_GRID)
    steps = (len(first) + 2) * 40 if cheap else 0
    prog.phase("fit: staged rows", len(grid) * (steps + (len(cont) + 2) * 8))
    best: tuple[SimModel, float, int] | None = None
    evals = 0
    for w in grid:
        m = set_params(model, {"eager_bytes": w})
        if cheap and first and len(cheap) < len(rows):
            m, _v, e = _search(cheap, m, first, tolerance, prog, robust=True)
            evals += e
        got = _search(rows, m, cont, tolerance, prog, robust=len(cheap) == len(rows))
        evals += got[2]
        if best is None or got[1] < best[1]:
            best = got
    assert best is not None
    return best[0], best[1], evals


def _search(
    rows: Sequence[Case],
    model: SimModel,
    names: Sequence[str],
    tolerance: float,
    prog: Progress,
    *,
    robust: bool,
) -> tuple[SimModel, float, int]:
    """Minimise the rows' mean squared log error over ``names`` from ``model``: Levenberg-Marquardt, after a
    simplex search when ``robust``."""
    batch = Batch(rows)
    if not names:
        return model, float(np.mean(np.square(batch.residuals(model, tolerance)))), 1

    def resid(x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        prog.advance()
        return batch.residuals(_with_x(model, names, x), tolerance)

    x = np.array([_to_x(k, get_param(model, k)) for k in names])
    evals = 0
    if robust:
        for step in (0.5, 0.15):
            x, _v, e = nelder_mead(lambda y: float(np.mean(np.square(resid(y)))), x, step=step, iters=80)
            evals += e
    x, val, e = levenberg_marquardt(resid, x, iters=30 if robust else 8, rtol=1e-6 if robust else 1e-3)
    return _with_x(model, names, x), val, evals + e


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


#: the eager windows tried when ``eager_bytes`` is fitted (64 KiB to 16 MiB)
EAGER_GRID = tuple(float(64 << 10) * 2.0**i for i in range(9))


#: switch buffers scanned before the fan-out phase's search (its loss has a plateau wherever no port overflows)
BUFFER_SCAN = tuple(float(1 << b) for b in (22, 24, 26, 28))
#: the timeout-hazard starts tried for every simulation (closed form, no simulation): storm scales (ms) x fan-in
#: powers
HAZARD_GRID = tuple((10.0**e, p) for e in range(-1, 13) for p in (0.5, 1.0, 2.0, 4.0))


def _fit_incast(
    rows: Sequence[Case], model: SimModel, names: Sequence[str], tolerance: float, prog: Progress
) -> tuple[SimModel, float, int]:
    """The incast parameters that need simulations (outer Levenberg-Marquardt, after a scan of the switch
    buffer) and, for each of its simulations, the timeout hazard in closed form (:class:`FluidRun`: a grid,
    then Levenberg-Marquardt)."""
    outer = [k for k in names if k not in HAZARD_PARAMS]
    inner = [k for k in names if k in HAZARD_PARAMS]
    meas = np.log([c.meas.time_s for c in rows])
    iterations = [c.meas.iterations for c in rows]
    scan = list(BUFFER_SCAN) if "buffer_bytes" in outer else []
    prog.phase("fit: fan-out rows", len(scan) + (len(outer) + 2) * 6)
    cache: dict[bytes, SimModel] = {}

    def resid(x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        prog.advance()
        m = _with_x(model, outer, x)
        runs = [[FluidRun.of(r) for r in c.results(m, tolerance)] for c in rows]
        fitted, r = _hazard(runs, m, inner, meas, iterations)
        cache[x.tobytes()] = fitted
        return r

    x0 = np.array([_to_x(k, get_param(model, k)) for k in outer])
    evals = 0
    if scan:
        j = outer.index("buffer_bytes")
        best = math.inf
        for b in scan:
            x = x0.copy()
            x[j] = _to_x("buffer_bytes", b)
            r = resid(x)
            evals += 1
            if float(r @ r) < best:
                best, x_best = float(r @ r), x
        x0 = x_best
    x, val, e = levenberg_marquardt(resid, x0)
    evals += e
    if x.tobytes() not in cache:
        resid(x)
        evals += 1
    return cache[x.tobytes()], val, evals


def _hazard(
    runs: list[list[FluidRun]],
    m: SimModel,
    inner: Sequence[str],
    meas: npt.NDArray[np.float64],
    iterations: Sequence[int],
) -> tuple[SimModel, npt.NDArray[np.float64]]:
    """The timeout-hazard parameters ``inner`` that fit ``runs`` best (:data:`HAZARD_GRID`, then
    Levenberg-Marquardt from the best point of the grid), and the residuals."""

    def res(y: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        inc = _with_x(m, inner, y).incast
        # (statistics.median: the same floats as np.median, without its overhead on these few draws)
        return np.log([median([r.expected(inc, it) for r in rr]) for rr, it in zip(runs, iterations)]) - meas

    if not inner:
        return m, res(np.zeros(0))
    starts = [np.array([_to_x(k, get_param(m, k)) for k in inner])]
    for storm, power in HAZARD_GRID:
        vals = {"storm_ms": storm, "fanin_power": power}
        starts.append(np.array([_to_x(k, vals[k]) for k in inner]))

    def cost(y: npt.NDArray[np.float64]) -> float:
        r = res(y)
        return float(r @ r)

    y0 = min(starts, key=cost)
    y, _v, _e = levenberg_marquardt(res, y0, step=0.05, iters=40, rtol=1e-6)
    return _with_x(m, inner, y), res(y)


# ---------------------------------------------------------------------------------------------- accuracy
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
    """Every case predicted under ``model``."""
    if not cases:
        return []
    return [Prediction(c, float(t)) for c, t in zip(cases, Batch(cases).predict(model, tolerance))]


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


#: size bands of the accuracy report (bytes per GPU, from the accuracy target's 8 MB): the middle, where
#: per-message and per-step costs matter, then the bandwidth-bound sizes
SIZE_BANDS = (
    ("8 MB - 100 MiB", 8_000_000, 100 * 2**20),
    ("100 MiB - 1 GiB", 100 * 2**20, 2**30),
    (">= 1 GiB", 2**30, 2**62),
)


def band_summaries(preds: Sequence[Prediction]) -> list[tuple[str, Summary]]:
    """(size band, summary) for every algorithm and band of :data:`SIZE_BANDS` that has rows."""
    out = []
    for alg in dict.fromkeys(p.case.meas.algorithm for p in preds):
        for label, lo, hi in SIZE_BANDS:
            errs = [
                abs(p.error) for p in preds if p.case.meas.algorithm == alg and lo <= p.case.meas.size < hi
            ]
            if errs:
                out.append((label, Summary(alg, len(errs), float(np.median(errs)), float(max(errs)))))
    return out


# ---------------------------------------------------------------------------------------------- FAST's MI300X logs
#: The split of FAST's published 3-server MI300X logs (FAST repository, ``amd-result/``) used for the shipped
#: RoCE parameters: fit on the random- and skewed-traffic runs, hold back every fixed-size run. (The shipped fit
#: also takes the FLASH and SpreadOut rows of the same kinds of runs on 4 servers, from FAST's repository:
#: ``benchmarks/calibration.py --more``.)
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
