"""``a2acc calibrate LOGS... -t TOPO -o params.yaml``: fit the simulator's parameters to your measurements."""

from __future__ import annotations

import argparse
import math
import os
import resource
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from a2acc import __version__
from a2acc.cli.common import add_topology_args, topology_from_args
from a2acc.defaults import CALIBRATION_PARAMS as PARAMS
from a2acc.errors import InputError

TYPE_CHECKING = False  # the fit (numpy, the simulator) is imported when the subcommand runs
if TYPE_CHECKING:
    from a2acc.analysis.model import SimModel
    from a2acc.model.topology import Topology
    from a2acc.studies.calibrate import Case, Prediction
    from a2acc.studies.logs import Measurement

DEFAULT_FIT_ON = "fast,spreadout,direct"
ACCURACY_FROM = 8_000_000  # bytes per GPU: the accuracy summary covers sizes from 8 MB up


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "calibrate",
        help="fit the simulator's parameters to measured all-to-all logs (FAST logs, nccl-tests output)",
        description="Fit the simulator's model (per-message cost, goodput, rendezvous cost of stages, eager "
        "window, incast) to measured runs: FAST's benchmark logs (amd/test_alltoall.cpp) or nccl-tests "
        "alltoall_perf / alltoallv_perf output. Prints predicted vs measured per size, and writes a parameter "
        "file that 'a2acc simulate' and 'a2acc compare' accept with --model. Logs given with --test are "
        "predicted with the fitted parameters but never used to fit them.",
        epilog="examples:\n  a2acc calibrate amd-result/3n_random_sz_*.txt amd-result/3n_skew*.txt -t mi300x-100g -n 3 "
        "--test amd-result/3n_fixed_sz_*.txt -o params.yaml\n"
        "  a2acc calibrate 3n_random_*.txt 4n_random_*.txt -t mi300x-100g --fit-on fast,spreadout -o params.yaml"
        "\n    (no -n: each log on the server count its name gives, one fit over both)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "logs",
        nargs="+",
        metavar="LOG",
        help="measurement logs to fit on. FAST logs are told apart by their names, as FAST names its runs: "
        "'<n>n_' gives the servers (it must match -n; without -n, the topology is scaled to each log's n, so "
        "one fit may span several server counts), '*fixed_sz*' equal entries, '*random*' uniform, '*skew*' Zipf "
        "with each line's skew; nccl-tests output is recognised by its '# size count' header",
    )
    add_topology_args(p)
    p.add_argument("-o", "--output", required=True, metavar="PARAMS.yaml", help="parameter file to write")
    p.add_argument(
        "--test", nargs="+", default=[], metavar="LOG", help="held-back logs: predicted, not fitted"
    )
    p.add_argument(
        "--traffic",
        default=None,
        metavar="FILE",
        help="the matrix an alltoallv_perf run used (rescaled per size)",
    )
    p.add_argument(
        "--fit",
        default=None,
        metavar="P1,P2",
        help=f"parameters to fit (default: what the logs identify); any of {', '.join(PARAMS)}. eager_bytes is "
        "a threshold fitted on a grid (9 times the work of the others)",
    )
    p.add_argument(
        "--hold",
        default=None,
        metavar="P=V,...",
        help="parameters kept at a value and not fitted, in the units the report prints (alpha_us and stage_us "
        "in microseconds, storm_ms in milliseconds, sizes in bytes), e.g. alpha_us=5.209: for what your logs "
        "cannot identify (a fit that runs a parameter to its search bound). The shipped RoCE model holds "
        "alpha_us (docs/simulator.md)",
    )
    p.add_argument(
        "--fit-on",
        default=DEFAULT_FIT_ON,
        metavar="ALGS",
        help=f"algorithms whose rows are fitted (default {DEFAULT_FIT_ON}; FAST's FLASH column is planned as FAST's "
        "own implementation runs it: its steps in FAST's order, balancing, steps and last redistribution one "
        "after another)",
    )
    p.add_argument("--name", default=None, help="name of the fitted model (default: TOPOLOGY-calibrated)")
    p.add_argument(
        "--force", action="store_true", help="replace an output file a2acc did not write (default: refuse)"
    )
    p.set_defaults(func=_run)


def owned_params(head: bytes) -> bool:
    """A parameter file ``a2acc calibrate -o`` wrote (its first line)."""
    return head.startswith(b"# a2acc simulator parameters")


def _distinct_logs(logs: list[str], test: list[str]) -> None:
    """A log given twice would count its runs twice; a log both fitted and held back is not held back."""
    seen: dict[str, str] = {}
    for flag, paths in (("LOG", logs), ("--test", test)):
        for p in paths:
            k = os.path.realpath(p)
            if k in seen:
                allowed = (
                    "a log that is not also fitted: a held-back log must not be in the fit set"
                    if flag != seen[k]
                    else "each log once"
                )
                raise InputError("", flag, p, allowed)
            seen[k] = flag


def base_model(topo: Topology) -> SimModel:
    """Where the fit starts: fixed neutral values for the topology's transport (``calibrate.start_model``); a
    topology that names no transport fits a lossless model."""
    from a2acc.studies.calibrate import start_model

    transport = (topo.inter.transport if topo.inter is not None else "") or "ideal"
    return start_model(transport)


def _run(args: argparse.Namespace) -> int:
    from a2acc.fileio import Output, atomic_write_text, check_outputs
    from a2acc.studies.calibrate import check_hold, evaluate, fit

    start, cpu0 = time.perf_counter(), _cpu()
    topo = topology_from_args(args)
    check_outputs(
        [Output("-o/--output", args.output, owned_params)],
        [*args.logs, *args.test, args.traffic or "", args.topology],
        force=args.force,
    )
    _distinct_logs(args.logs, args.test)
    fit_on, params = _choices(args)
    hold = _holds(args.hold)
    check_hold(params, hold)  # before any log is read
    topos, count = _topologies(args, topo)
    fit_meas, test_meas = _read(args, topo, topos, count, fit_on)
    bar = BarProgress()
    try:
        fit_cases = _cases(fit_meas, topos, 0, bar)
        test_cases = _cases(test_meas, topos, 10_000, bar)
        res = fit(
            [c for c in fit_cases if c.meas.algorithm in fit_on],
            base_model(topo),
            params,
            hold=hold,
            tolerance=1e-2,
            progress=bar,
        )
        fitted_algs = ", ".join(sorted({m.algorithm for m in fit_meas if m.algorithm in fit_on}))
        model = replace(
            res.model,
            name=args.name or f"{topo.name}-calibrated",
            source=f"calibrated by a2acc calibrate {__version__} on {_machines(fit_meas, topos)} from "
            f"{_names(args.logs)} (fitted: {', '.join(res.params)}; "
            + (f"held: {', '.join(f'{k}={v:g}' for k, v in hold.items())}; " if hold else "")
            + f"rows of {fitted_algs})",
        )
        bar.phase("predicting", 2)
        fit_preds = evaluate(fit_cases, model)
        bar.advance()
        test_preds = evaluate(test_cases, model)
        bar.advance()
    finally:
        bar.close()
    _report(fit_preds, test_preds, fit_on, model, res.params, tuple(hold))
    header = (
        f"a2acc simulator parameters (a2acc calibrate {__version__})\n"
        + "".join(
            f"topology: {t.name} ({t.nranks} GPUs), fingerprint {t.fingerprint}\n"
            for n, t in sorted(topos.items())
            if any(m.servers == n for m in (*fit_meas, *test_meas))
        )
        + f"fitted on: {_names(args.logs)}\n"
        + (f"held back: {_names(args.test)}\n" if args.test else "")
        + "use: a2acc simulate PLAN -t TOPO --model THIS_FILE; a2acc compare ... --model THIS_FILE"
    )
    atomic_write_text(Path(args.output), model.to_yaml(header))
    print(f"# wrote {args.output}")
    wall, cpu = time.perf_counter() - start, _cpu() - cpu0
    print(f"# calibrated in {wall:.1f} s ({cpu:.1f} s of CPU)", file=sys.stderr, flush=True)
    return 0


def _names(paths: list[str]) -> str:
    return ", ".join(Path(p).name for p in paths)


def _holds(text: str | None) -> dict[str, float]:
    """``--hold P=V,...`` checked: known parameters, finite values inside the fit's search range."""
    from a2acc.studies.calibrate import BOUNDS

    out: dict[str, float] = {}
    if text is None:
        return out
    for item in (t.strip() for t in text.split(",")):
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or name not in PARAMS:
            raise InputError("", "--hold", text, f"NAME=VALUE,... with NAME one of {', '.join(PARAMS)}")
        try:
            if "_" in value:  # float() would read 5_0 as 50
                raise ValueError(value)
            v = float(value)
        except ValueError:
            raise InputError("", "--hold", text, f"a number after '{name}='") from None
        lo, hi = (1e-3, 1.0) if name.endswith("efficiency") else BOUNDS.get(name, (0.0, math.inf))
        if name == "retransmit":  # no loss at all is a value worth holding
            lo = 0.0
        if not (math.isfinite(v) and lo <= v <= hi):
            raise InputError("", "--hold", text, f"{name} between {lo:g} and {hi:g}")
        if name in out:
            raise InputError("", "--hold", text, "each parameter once")
        out[name] = v
    return out


def _choices(args: argparse.Namespace) -> tuple[list[str], list[str] | None]:
    """The algorithms to fit on and the parameters to fit (None: what the logs identify), checked."""
    fit_on = [a.strip() for a in args.fit_on.split(",") if a.strip()]
    for a in fit_on:
        if a not in ("fast", "spreadout", "direct"):
            raise InputError("", "--fit-on", a, "algorithms in the logs: fast, spreadout, direct")
    params = [p.strip() for p in args.fit.split(",") if p.strip()] if args.fit is not None else None
    if params is not None and not params:
        raise InputError("", "--fit", args.fit, f"a comma list of parameters: {', '.join(PARAMS)}")
    if params is not None:
        bad = [p for p in params if p not in PARAMS]
        if bad:
            raise InputError("", "--fit", ",".join(bad), f"parameters: {', '.join(PARAMS)}")
    return fit_on, params


def _topologies(args: argparse.Namespace, topo: Topology) -> tuple[dict[int, Topology], dict[str, int]]:
    """The topology of every server count the logs need, by server count, and the count each log is read
    against. With ``-n`` every log is read against the one topology (a FAST log naming another count is refused
    by the reader); without it, the topology (a preset or a file) is scaled to the count each FAST log's name
    gives (``<n>n_``), and a log naming none (nccl-tests output, whose count is its ``#  Rank`` lines) is read
    against the topology as it is."""
    from a2acc.model.topology import load_topology
    from a2acc.studies.logs import servers_named

    topos = {topo.servers: topo}
    count = {p: topo.servers for p in (*args.logs, *args.test)}
    if args.servers is None:
        for p in count:
            n = servers_named(p)
            if n is None:
                continue
            if n not in topos:
                try:
                    topos[n] = load_topology(args.topology, n)
                except InputError as exc:  # the count came from the file name, not from --servers
                    raise InputError(
                        p, "file name", f"{n}n_", f"a server count the topology allows ({exc.allowed})"
                    ) from None
            count[p] = n
    return topos, count


def _cases(meas: list[Measurement], topos: dict[int, Topology], seed: int, bar: BarProgress) -> list[Case]:
    """Each measurement planned on the topology it was read against."""
    from a2acc.studies.calibrate import build_cases

    return [
        c
        for n, t in sorted(topos.items())
        if (group := [m for m in meas if m.servers == n])
        for c in build_cases(group, t, seed=seed, progress=bar)
    ]


def _machines(meas: list[Measurement], topos: dict[int, Topology]) -> str:
    """``mi300x-100g x3`` (or ``x3, x4``) for the server counts ``meas`` spans."""
    counts = sorted({m.servers for m in meas})
    return f"{topos[counts[0]].name} " + ", ".join(f"x{n}" for n in counts)


def _read(
    args: argparse.Namespace,
    topo: Topology,
    topos: dict[int, Topology],
    count: dict[str, int],
    fit_on: list[str],
) -> tuple[list[Measurement], list[Measurement]]:
    """The fit and held-back measurements, each log read against its topology (:func:`_topologies`); the header
    lines saying what they are."""
    from a2acc.model.traffic import load_matrix
    from a2acc.studies.logs import read_logs

    traffic = load_matrix(args.traffic, expect_ranks=topo.nranks) if args.traffic else None

    def warn(msg: str) -> None:
        print(f"a2acc: warning: {msg}", file=sys.stderr, flush=True)

    def read(paths: list[str]) -> list[Measurement]:
        by: dict[int, list[str]] = {}
        for p in paths:
            by.setdefault(count[p], []).append(p)
        return [
            m
            for n, group in sorted(by.items())
            for m in read_logs(group, topos[n], traffic=traffic, warn=warn)
        ]

    fit_meas = read(args.logs)
    test_meas = read(args.test) if args.test else []
    fitted = [m for m in fit_meas if m.algorithm in fit_on]
    fan_counts = sorted({m.servers for m in fitted if m.algorithm == "direct"})
    if len(fan_counts) > 1:
        warn(
            f"fan-out rows of {', '.join(f'{n} servers' for n in fan_counts)} are fitted together: on FAST's 3- "
            "and 4-server logs one set of incast parameters fitted that way described neither count "
            "(docs/simulator.md); --fit-on fast,spreadout leaves them out"
        )
    if not fitted:
        raise InputError(
            "",
            "--fit-on",
            args.fit_on,
            f"no rows of these algorithms in the logs (they hold "
            f"{', '.join(sorted({m.algorithm for m in fit_meas}))})",
        )
    algs = ", ".join(sorted({m.algorithm for m in fitted}))
    transport = (topo.inter.transport if topo.inter is not None else "") or "not given"
    gpus = ", ".join(f"{t.nranks}" for n, t in sorted(topos.items()) if any(m.servers == n for m in fit_meas))
    print(f"# a2acc calibrate {__version__}: {topo.name} ({gpus} GPUs, transport {transport})")
    print(f"# fit on   : {len(fitted)} configurations from {_logs(len(args.logs))} (algorithms {algs})")
    if args.test:
        print(f"# held back: {len(test_meas)} configurations from {_logs(len(args.test))} (never fitted)")
    sys.stdout.flush()
    return fit_meas, test_meas


def _cpu() -> float:
    """CPU seconds of this process (user + system)."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


class BarProgress:
    """The fit's progress on standard error: a tqdm bar per phase on a terminal (none otherwise), and a line per
    finished phase either way."""

    def __init__(self) -> None:
        self.bar: Any = None

    def phase(self, name: str, total: int) -> None:
        from tqdm import tqdm

        self.close()
        self.bar = tqdm(
            total=total, desc=name, file=sys.stderr, leave=False, dynamic_ncols=True, disable=None
        )

    def advance(self, steps: int = 1) -> None:
        if self.bar is not None:
            if self.bar.total is not None and self.bar.n + steps > self.bar.total:
                self.bar.total = self.bar.n + steps  # the optimiser ran longer than estimated
            self.bar.update(steps)

    def note(self, text: str) -> None:
        from tqdm import tqdm

        tqdm.write(f"# {text}", file=sys.stderr)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def _report(
    fit_preds: list[Prediction],
    test_preds: list[Prediction],
    fit_on: list[str],
    model: SimModel,
    fitted: tuple[str, ...],
    held: tuple[str, ...] = (),
) -> None:
    """The tables and summaries on standard output."""
    from a2acc.studies.calibrate import band_summaries, get_param, summarise

    counts = sorted({p.case.meas.servers for p in (*fit_preds, *test_preds)})
    multi = len(counts) > 1  # several server counts: a column in the tables, summaries per count
    width = max(len(f"test x{n}") for n in counts) if multi else 4
    print(
        _table(fit_preds, "fit", fit_on, multi)
        + ("\n" + _table(test_preds, "test", fit_on, multi) if test_preds else "")
    )
    for label, preds in (("fit", fit_preds), ("test", test_preds)):
        for n in counts:
            sub = [p for p in preds if p.case.meas.servers == n]
            tag = f"{label} x{n}" if multi else label
            for s in summarise(sub, ACCURACY_FROM):
                print(
                    f"# {tag:{width}s} {s.algorithm:9s}: {s.runs:3d} sizes >= 8 MB/GPU, median |pred/meas - 1| "
                    f"{100 * s.median_abs_error:5.1f}%, worst {100 * s.worst_abs_error:5.1f}%"
                )
            for band, s in band_summaries(sub):
                print(
                    f"# {tag:{width}s} {s.algorithm:9s}: {s.runs:3d} sizes in {band:16s} median "
                    f"{100 * s.median_abs_error:5.1f}%, worst {100 * s.worst_abs_error:5.1f}%"
                )
    print("# parameters:")
    for p in PARAMS:
        tag = "  (fitted)" if p in fitted else "  (held)" if p in held else ""
        print(f"#   {p:18s} {get_param(model, p):.6g}{tag}")


def _logs(n: int) -> str:
    return f"{n} log" + ("" if n == 1 else "s")


def _table(preds: list[Prediction], label: str, fit_on: list[str], servers: bool = False) -> str:
    """Predicted vs measured per row; in the fit set, rows of algorithms not fitted are labelled ``shown``;
    ``servers``: a column with each row's server count."""
    col = f" {'servers':>7s}" if servers else ""
    lines = [
        f"# {label}: {'algorithm':10s}{col} {'traffic':10s} {'size/GPU':>10s} {'runs':>5s} {'measured':>11s} "
        f"{'predicted':>11s} {'error':>7s}",
        f"#       {'':10s}{' ' * len(col)} {'':10s} {'(MiB)':>10s} {'':>5s} {'(ms)':>11s} {'(ms)':>11s} {'':>7s}",
    ]
    for p in sorted(
        preds,
        key=lambda q: (
            q.case.meas.algorithm,
            q.case.meas.servers,
            q.case.meas.traffic.label(),
            q.case.meas.size,
        ),
    ):
        m = p.case.meas
        tag = label if label != "fit" or m.algorithm in fit_on else "shown"
        cell = f" {m.servers:7d}" if servers else ""
        lines.append(
            f"  {tag:5s} {m.algorithm:10s}{cell} {m.traffic.label():10s} {m.size / 2**20:10.2f} {m.runs:5d} "
            f"{m.time_s * 1e3:11.4f} {p.predicted_s * 1e3:11.4f} {100 * p.error:+6.1f}%"
        )
    return "\n".join(lines)
