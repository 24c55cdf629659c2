"""The one driver and the registries: a target defined here is reachable from compile, verify and the JIT."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from a2acc import backends
from a2acc.backends.target import CheckReport, Lowered, Target
from a2acc.cli import main
from a2acc.errors import LoweringError
from a2acc.fileio import atomic_write_text
from a2acc.ir.layout import Manifest, manifest_for
from a2acc.ir.program import Program
from a2acc.ir.quantize import UnitPolicy
from a2acc.ir.serial import program_from_json
from a2acc.ir.verify import verify_program
from a2acc.model.topology import load_topology
from a2acc.model.traffic import generate
from a2acc.pipeline import Request, compile

MAGIC = "TOYPLAN v1\n"


@dataclass(frozen=True)
class ToyOptions:
    min_unit: int = field(
        default=0, metadata={"help": "refuse layouts with a smaller unit (tests the retry)"}
    )


class ToyTarget:
    """A complete target in a few lines: the file is the plan JSON behind a magic line."""

    name = "toy"
    summary = "test target"
    Options = ToyOptions
    output_kind = "dir"

    def max_chunks(self, options: Any) -> int | None:
        return 64

    def lower(self, program: Program, options: Any, *, name: str | None = None) -> Lowered:
        if program.unit_bytes < options.min_unit:
            raise LoweringError(f"unit {program.unit_bytes} below {options.min_unit}")
        fname = f"{name or program.name}.toy"
        man = manifest_for(
            program.counts, program.unit_bytes, program.traffic, target=self.name, file=fname, algo_name=fname
        )
        return Lowered(self.name, {fname: MAGIC + program.to_json()}, man, "toy plan", None, options)

    def check(self, lowered: Lowered) -> CheckReport:
        ((fname, text),) = lowered.files.items()
        return self.check_text(text, fname, lowered.manifest, lowered.options)

    def emit(
        self, lowered: Lowered, output: Path, *, manifest_path: Path | None = None, force: bool = False
    ) -> list[Path]:
        paths = []
        for fname, text in lowered.files.items():
            atomic_write_text(output / fname, text)
            paths.append(output / fname)
        mp = manifest_path or output / "manifest.json"
        atomic_write_text(mp, lowered.manifest.to_json())
        return [*paths, mp]

    def detect(self, head: str) -> bool:
        return head.startswith(MAGIC)

    def check_text(self, text: str, source: str, manifest: Manifest | None, options: Any) -> CheckReport:
        rep = verify_program(program_from_json(text[len(MAGIC) :], source))
        return CheckReport(rep.ok, rep.errors, (), f"{rep.ops} ops")


@pytest.fixture
def toy():
    backends.register("toy", ToyTarget())
    yield
    backends.unregister("toy")


TOPO = load_topology("dgx-h100", servers=2)
M = generate("zipf", TOPO.nranks, 8 << 20, 3)


def test_toy_target_satisfies_the_protocol():
    assert isinstance(ToyTarget(), Target)


def test_toy_target_through_compile_and_verify_cli(toy, tmp_path, capsys):
    mfile = tmp_path / "m.npy"
    np.save(mfile, M)
    out = tmp_path / "out"
    args = ["compile", "-t", "dgx-h100", "-n", "2", "-m", str(mfile), "-a", "fast", "--backend", "toy"]
    assert main([*args, "-o", str(out), "--timings"]) == 0
    text = capsys.readouterr().out
    assert "toy plan" in text and "timings" in text and "check" in text
    (toyfile,) = out.glob("*.toy")
    assert main(["verify", str(toyfile)]) == 0
    assert "toy:" in capsys.readouterr().out
    # the padding ladder respects the target's addressing limit (64 chunks per rank)
    prog = program_from_json(toyfile.read_text()[len(MAGIC) :])
    assert max(prog.layout.input_sizes.max(), prog.layout.output_sizes.max()) <= 64


def test_toy_target_from_the_jit(toy, tmp_path):
    from a2acc.runtime.decide.compiling import compile_entry
    from a2acc.runtime.settings import JitSettings

    settings, problems = JitSettings.from_env({"A2ACC_TOPOLOGY": "dgx-h100:2", "A2ACC_BACKEND": "toy"})
    assert problems == [] and settings is not None and settings.target == "toy"
    layout = np.maximum(-(-M // 4096), 1)
    entry = compile_entry(TOPO, layout, 4096, "fast", settings.target, "k" * 32)
    ((fname, text),) = entry.files.items()
    assert fname.endswith(".toy") and text.startswith(MAGIC)
    assert json.loads(entry.manifest or "")["target"] == "toy"


def test_padding_retry_records_refused_layouts(toy):
    res = compile(
        Request(
            TOPO,
            M,
            "direct",
            target="toy",
            target_options={"min_unit": "4096"},
            units=UnitPolicy(max_padding="auto"),
        )
    )
    assert res.program.unit_bytes >= 4096
    assert res.check is not None and res.check.ok
    assert all("below 4096" in a for a in res.attempts)
    assert set(res.timings) >= {"quantize", "plan", "verify", "lower", "check"}


def test_no_layout_fits_names_the_last_refusal(toy):
    with pytest.raises(LoweringError, match=r"below 1073741824 \(tried --max-padding 0.02"):
        compile(
            Request(
                TOPO,
                M,
                "direct",
                target="toy",
                target_options={"min_unit": str(1 << 30)},
                units=UnitPolicy(max_padding="auto"),
            )
        )


@pytest.mark.parametrize(
    ("opts", "message"),
    [
        (["--opt", "birkhoff=greedy"], "birkhoff: value 'greedy' is invalid; allowed: bottleneck, kuhn"),
        (["--opt", "nope=1"], "no such option"),
        (["--opt", "dialect"], "use KEY=VALUE"),
        (["--opt", "instances=two"], "an integer"),
        (["--opt", "size_range=2M:1M"], "MIN must be <= MAX"),
    ],
)
def test_bad_options_exit_2_with_the_allowed_values(tmp_path, capsys, opts, message):
    mfile = tmp_path / "m.npy"
    np.save(mfile, M)
    rc = main(
        [
            "compile",
            "-t",
            "dgx-h100",
            "-n",
            "2",
            "-m",
            str(mfile),
            "-a",
            "fast",
            *opts,
            "-o",
            str(tmp_path / "o"),
        ]
    )
    assert rc == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_opt_help_lists_planner_and_backend_options(capsys):
    assert main(["compile", "-t", "dgx-h100", "-m", "x.npy", "-a", "fast", "--opt", "help"]) == 0
    out = capsys.readouterr().out
    assert "options of planner 'fast'" in out and "birkhoff=bottleneck|kuhn" in out
    assert "options of backend 'msccl-xml'" in out and "dialect=nccl|rccl" in out


def test_planner_option_reaches_the_planner(tmp_path):
    opts = {"birkhoff": "kuhn", "compare_kuhn": "true", "shape": "staged"}
    res = compile(Request(TOPO, M, "fast", planner_options=opts))
    assert res.program.meta["birkhoff_method"] == "kuhn"
    assert "birkhoff_stages_kuhn" in res.program.meta


def test_verify_detects_format_by_content(tmp_path, capsys):
    plan = tmp_path / "plan.xml"  # a plan JSON with a misleading suffix
    plan.write_text(compile(Request(TOPO, M, "direct")).program.to_json())
    assert main(["verify", str(plan)]) == 0
    shared = Path(__file__).resolve().parents[2] / "shared" / "reference" / "mscclpp" / "generated"
    mscclpp = tmp_path / "plan.json"
    mscclpp.write_text((shared / "alltoall_2gpu.json").read_text())
    assert main(["verify", str(mscclpp)]) == 0  # an upstream DSL-generated plan, recognised and interpreted
    assert "mscclpp-json" in capsys.readouterr().out
    junk = tmp_path / "junk.json"
    junk.write_text('{"hello": 1}')
    assert main(["verify", str(junk)]) == 2
    assert "recognised by content" in capsys.readouterr().err


def test_facade_doctest():
    import doctest

    import a2acc

    res = doctest.testmod(a2acc, raise_on_error=False)
    assert res.attempted >= 5 and res.failed == 0
