"""Bad inputs of `a2acc verify`: XML sizes, manifests, plan counts, nesting."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from a2acc.cli import main
from a2acc.model.topology import load_topology
from a2acc.model.traffic import generate
from tests.cli.bad_inputs.common import one_clear_line, run

XML_HEAD = '<algo name="x" proto="Simple" nchannels="1" {c} ngpus="2" coll="alltoall" inplace="0" outofplace="1" minBytes="0" maxBytes="0">\n'


@pytest.mark.parametrize(
    ("chunks", "fragment"),
    [('nchunksperloop="4000000000"', "not interpreted"), ("", "nchunksperloop")],
)
def test_bad_xml_sizes_fail_fast(tmp_path, capsys, chunks, fragment):
    gpu = '<gpu id="{i}" i_chunks="{n}" o_chunks="{n}" s_chunks="0">\n</gpu>\n'
    n = "4000000000" if chunks else "2"
    text = XML_HEAD.format(c=chunks) + "".join(gpu.format(i=i, n=n) for i in range(2)) + "</algo>\n"
    (tmp_path / "x.xml").write_text(text)
    t0 = time.perf_counter()
    rc = main(["verify", str(tmp_path / "x.xml")])
    assert rc == 1 and time.perf_counter() - t0 < 1.0
    assert fragment in capsys.readouterr().err


def _manifest(tmp_path):
    from a2acc.ir.layout import manifest_for

    counts = np.array([[1, 2], [3, 4]])
    return json.loads(
        manifest_for(counts, 64, None, target="msccl-xml", file="x.xml", algo_name="x").to_json()
    )


@pytest.mark.parametrize(
    ("mutate", "fragment"),
    [
        (lambda d: d.update(ngpus=3), "counts"),
        (lambda d: d["ranks"].pop(), "ranks"),
        (lambda d: d["ranks"][0]["input"][1].__setitem__(0, 99), "contiguous layout"),
        (lambda d: d.update(buffer_chunks=1), "buffer_chunks"),
        (lambda d: d.update(ngpus=10**9), "ngpus"),
        (lambda d: d.update(target_options="x"), "target_options"),
        (lambda d: d.update(target_options=[1]), "target_options"),
        # a field missing or of another kind is named, with what it holds (not a Python message)
        (lambda d: d.update(unit_rules=None), "unit_rules: value None is invalid; an object"),
        (lambda d: d.update(ngpus=None), "ngpus: value None is invalid; malformed; an integer in 1.."),
        (lambda d: d.pop("ranks"), "ranks: value '(absent)' is invalid; missing; a list of one"),
        (lambda d: d.update(buffer_chunks=None), "buffer_chunks: value None is invalid; an integer"),
        (
            lambda d: d.update(buffer_chunks=0),
            "buffer_chunks: value 0 is invalid; must hold",
        ),  # not recomputed
        (lambda d: d["unit_rules"].update(chunk_bytes=0), "unit_rules.chunk_bytes: value 0 is invalid"),
        (lambda d: d["unit_rules"].update(chunk_bytes=-1), "unit_rules.chunk_bytes: value -1 is invalid"),
    ],
)
def test_bad_manifests(tmp_path, capsys, mutate, fragment):
    doc = _manifest(tmp_path)
    mutate(doc)
    (tmp_path / "m.json").write_text(json.dumps(doc))
    (tmp_path / "x.xml").write_text("<algo/>")
    rc, err, _ = run(capsys, ["verify", str(tmp_path / "x.xml"), "--manifest", str(tmp_path / "m.json")])
    assert rc == 2 and fragment in err
    one_clear_line(err)


@pytest.mark.parametrize("value", [2**70, 10**12])
def test_plan_counts_beyond_limits(tmp_path, capsys, value):
    from a2acc import plan

    topo = load_topology("dgx-h100", 2)
    doc = json.loads(plan(topo, generate("zipf", 16, 1 << 20, 1), "direct").to_json())
    doc["counts"][0][1] = value
    (tmp_path / "p.json").write_text(json.dumps(doc))
    rc, err, dt = run(capsys, ["verify", str(tmp_path / "p.json")])
    assert rc == 2 and dt < 1.0 and "counts" in err
    one_clear_line(err)


def _tamper_traffic(doc):
    doc["traffic_bytes"][0][1] = doc["counts"][0][1] * doc["unit_bytes"] + 1


def _tamper_machine(doc):
    doc["machine"]["node"][0] = 99


def _tamper_stage(doc):
    doc["ops"][0][9] = -1


@pytest.mark.parametrize(
    ("tamper", "fragment"),
    [
        (_tamper_traffic, "traffic_bytes[0][1]"),
        (_tamper_machine, "machine.node[0]"),
        (_tamper_stage, "ops[0].stage"),
        (lambda d: d.pop("topology"), "topology"),  # simulate's wrong-topology refusal reads it
        (lambda d: d.update(version=True), "version"),  # (True == 1 in Python)
        (lambda d: d.update(algorithm=10**30), "algorithm"),
    ],
)
def test_a_plan_that_contradicts_itself_is_refused_by_the_reader(tmp_path, capsys, tamper, fragment):
    """Traffic beyond what the layout carries (simulate then timed 51 us against a 2225 us bound), a rank on
    node 99 of 16 ranks, a negative stage: each is one line naming the field, not a passing verify."""
    from a2acc import plan

    topo = load_topology("dgx-h100", 2)
    doc = json.loads(plan(topo, generate("zipf", 16, 1 << 20, 1), "direct").to_json())
    tamper(doc)
    (tmp_path / "p.json").write_text(json.dumps(doc))
    rc, err, _dt = run(capsys, ["verify", str(tmp_path / "p.json")])
    assert rc == 2 and fragment in err, err
    one_clear_line(err)


@pytest.mark.parametrize(
    "text",
    [
        '{"format": "a2acc.program", "version": 2, "ops": ' + "[" * 100_000 + "]" * 100_000 + "}",
        '{"format": "a2acc.program", "version": 2, "meta": ' + '{"a": ' * 100_000 + "1" + "}" * 100_001,
    ],
    ids=["lists", "objects"],
)
def test_deeply_nested_plan_json_is_one_clear_line(tmp_path, capsys, text):
    (tmp_path / "p.json").write_text(text)
    rc, err, _ = run(capsys, ["verify", str(tmp_path / "p.json")])
    assert rc == 2 and "nested too deeply" in err and "RecursionError" not in err
    one_clear_line(err)


def test_deeply_nested_manifest_is_one_clear_line(tmp_path, capsys):
    (tmp_path / "m.json").write_text(
        '{"format": "a2acc.manifest", "x": ' + "[" * 100_000 + "]" * 100_000 + "}"
    )
    (tmp_path / "x.xml").write_text("<algo/>")
    rc, err, _ = run(capsys, ["verify", str(tmp_path / "x.xml"), "--manifest", str(tmp_path / "m.json")])
    assert rc == 2 and "nested too deeply" in err
    one_clear_line(err)


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """A compiled MSCCL XML, MSCCL++ JSON and DSL of one Zipf matrix, each with its manifest."""
    d = tmp_path_factory.mktemp("lowered")
    np.save(d / "m.npy", generate("zipf", 16, 1 << 20, 1))
    base = ["compile", "-t", "dgx-h100", "-n", "2", "-m", str(d / "m.npy"), "-a", "fast"]
    assert main([*base, "-o", str(d / "algos")]) == 0
    assert main([*base, "-b", "mscclpp-json", "-o", str(d / "p.json")]) == 0
    assert main([*base, "-b", "mscclpp-dsl", "-o", str(d / "p.py")]) == 0
    xml = next((d / "algos").glob("*.xml"))
    return {
        "xml": (xml, d / "algos.manifest.json"),
        "json": (d / "p.json", d / "p.json.manifest.json"),
        "dsl": (d / "p.py", d / "p.py.manifest.json"),
    }


@pytest.mark.parametrize(
    ("kind", "old", "new", "fragment"),
    [
        # the executor's parser returns the first of a repeated attribute: the file would run on 8 GPUs
        ("xml", 'ngpus="16"', 'ngpus="8" ngpus="16"', "attribute repeated"),
        ("xml", ' cnt="1"', ' cnt="1" cnt="56"', "attribute repeated"),
        # a size window that excludes the packed call: the executor would never select the file
        ("xml", 'maxBytes="', 'maxBytes="1" x="', "exclude the packed call"),
        ("json", '"num_threads_per_block": 1024', '"num_threads_per_block": 0', "num_threads_per_block"),
        ("dsl", "num_threads_per_block=1024", "num_threads_per_block=0", "num_threads_per_block"),
        ("json", '"collective": "alltoall"', '"collective": "allreduce"', "describes an alltoall"),
    ],
)
def test_files_the_executor_reads_differently_fail_verification(
    compiled, tmp_path, capsys, kind, old, new, fragment
):
    """Each of these verified OK before: the reader kept the last of a repeated attribute, nothing compared
    minBytes/maxBytes or the collective with the manifest, and the compiled MSCCL++ checker took any thread
    count."""
    path, man = compiled[kind]
    text = path.read_text()
    assert old in text
    bad = tmp_path / f"bad{path.suffix}"
    bad.write_text(text.replace(old, new, 1))
    assert main(["verify", str(path), "--manifest", str(man)]) == 0
    capsys.readouterr()
    assert main(["verify", str(bad), "--manifest", str(man)]) == 1
    assert fragment in capsys.readouterr().err


def test_options_that_would_do_nothing_are_refused(tmp_path, capsys):
    """``plan --opt backend.X`` and ``verify PLAN.json --opt X`` exited 0 and ignored the option."""
    np.save(tmp_path / "m.npy", generate("zipf", 16, 1 << 20, 1))
    base = ["plan", "-t", "dgx-h100", "-n", "2", "-m", str(tmp_path / "m.npy"), "-a", "direct"]
    rc, err, _dt = run(capsys, [*base, "--opt", "backend.nonsense=2", "-o", str(tmp_path / "p.json")])
    assert rc == 2 and "backend.nonsense" in err and not (tmp_path / "p.json").exists()
    one_clear_line(err)
    assert main([*base, "-o", str(tmp_path / "p.json")]) == 0
    rc, err, _dt = run(capsys, ["verify", str(tmp_path / "p.json"), "--opt", "nonsense=2"])
    assert rc == 2 and "plan JSON takes none" in err
    one_clear_line(err)


@pytest.mark.parametrize("cmd", ["verify", "report"])
def test_a_file_of_zeros_is_refused_from_its_first_bytes(tmp_path, capsys, cmd):
    """A sparse 1 GiB file of NUL bytes was read whole (6 GB of memory for 3 GB) before being refused."""
    import resource

    big = tmp_path / "big.json"
    with open(big, "wb") as fh:
        fh.truncate(1 << 30)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rc, err, dt = run(capsys, [cmd, str(big)])
    assert rc == 2 and "UnicodeDecodeError" in err and dt < 2.0
    one_clear_line(err)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 256 << 10  # KiB: under 256 MiB more


def test_a_manifest_of_another_file_is_said_so(compiled, tmp_path, capsys):
    """Another compile's manifest gave an internal 'list index out of range' blamed on the file; an MSCCL++
    manifest for an XML gave '--opt: deps' although no option was given; a copied plan beside its copied
    manifest gave 'no manifest found beside the file'."""
    import shutil

    xml, _man = compiled["xml"]
    other = tmp_path / "m2.npy"
    np.save(other, generate("zipf", 16, 1 << 22, 2))
    base = ["compile", "-t", "dgx-h100", "-n", "2", "-m", str(other), "-a", "fast"]
    assert main([*base, "-o", str(tmp_path / "algos2")]) == 0
    capsys.readouterr()
    assert main(["verify", str(xml), "--manifest", str(tmp_path / "algos2.manifest.json")]) == 1
    err = capsys.readouterr().err
    assert "nchunksperloop" in err and "index" not in err
    rc, err, _dt = run(capsys, ["verify", str(xml), "--manifest", str(compiled["json"][1])])
    assert rc == 2 and "a manifest of msccl-xml files" in err and "--opt" not in err
    one_clear_line(err)
    plan, man = compiled["json"]
    shutil.copy(plan, tmp_path / "x.json")
    shutil.copy(man, tmp_path / "x.json.manifest.json")
    assert main(["verify", str(tmp_path / "x.json")]) == 1
    assert f"describes {plan.name}, not x.json" in capsys.readouterr().err


@pytest.mark.parametrize(("field", "value"), [("name", {}), ("name", [1]), ("channel_type", {})])
def test_an_mscclpp_op_field_of_the_wrong_type_fails_verification(compiled, tmp_path, capsys, field, value):
    """An op name that is an object raised 'unhashable type' from the reader's fast path."""
    plan, man = compiled["json"]
    doc = json.loads(plan.read_text(encoding="utf-8"))
    doc["gpus"][0]["threadblocks"][0]["ops"][0][field] = value
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc), encoding="utf-8")
    rc = main(["verify", str(bad), "--manifest", str(man)])
    err = capsys.readouterr().err
    assert rc == 1 and f"ops[0].{field}" in err and "must be a string" in err and "Traceback" not in err


@pytest.mark.parametrize("cmd", ["verify", "report"])
def test_a_file_past_the_largest_plan_is_refused_while_it_is_read(tmp_path, capsys, monkeypatch, cmd):
    """An endless or huge file (``yes | a2acc verify /dev/stdin``) is refused at the plan file limit, not read
    whole first (a plan takes ~12x its size in memory to read). The limit is lowered here to 1 MiB."""
    import a2acc.ir.serial as serial

    monkeypatch.setattr(serial, "MAX_PLAN_FILE_BYTES", 1 << 20)
    big = tmp_path / "big.json"
    big.write_text('{"format":"a2acc.program",' + " " * (2 << 20) + "}")
    rc, err, _ = run(capsys, [cmd, str(big)])
    assert rc == 2 and "larger than 1 MiB" in err, err
    one_clear_line(err)


def test_a_plan_with_a_key_twice_is_refused(tmp_path, capsys):
    """A hand-edited plan that says ``nranks`` twice: JSON would keep the last silently; refused, as topology
    and matrix files are."""
    import a2acc

    prog = a2acc.plan(load_topology("dgx-h100", 1), generate("uniform", 8, 1 << 20, 1), "direct")
    bad = tmp_path / "p.json"
    bad.write_text(prog.to_json().replace('{"format"', '{"nranks":3,"format"', 1))
    rc, err, _ = run(capsys, ["verify", str(bad)])
    assert rc == 2 and "'nranks' appears twice" in err
    one_clear_line(err)
