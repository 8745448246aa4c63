"""The Python API (docs/python-api.md) and the commands built on it: ``vpuc compile``,
``vpuc run FILE.vir`` and ``vpuc inspect FILE.vir`` all go through ``vpuc.compile``."""

from __future__ import annotations

import errno
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import vpuc
from vpuc.cli import main
from vpuc.diagnostics import VpucError

ROOT = Path(__file__).resolve().parents[2]
CLAMP = ROOT / "examples" / "clamp.vir"
FUSED = ROOT / "examples" / "fused_chain.vir"


def cli(args, capsys, monkeypatch) -> tuple[int, str, str]:
    monkeypatch.chdir(ROOT)
    capsys.readouterr()
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def test_compile_gives_a_program_with_provenance():
    program = vpuc.compile(CLAMP)
    assert program.module.name == "clamp_net"
    assert program.provenance["source"] == "clamp.vir"
    assert program.provenance["format"] == "fb" and program.provenance["arch"] == "NPU37XX"
    assert program.provenance["pipeline"].startswith("verify,allocate-cmx")


def test_compile_takes_text_and_names_it():
    text = CLAMP.read_text(encoding="utf-8")
    from_text = vpuc.compile(text, name="mine.vir", format="elf")
    assert from_text.provenance["source"] == "mine.vir"
    assert from_text.provenance["format"] == "elf"
    # the same program as from the file: the blobs differ only in the recorded source name
    from_file = vpuc.compile(CLAMP, format="elf")
    from_file.provenance["source"] = "mine.vir"
    assert vpuc.write_blob(from_text) == vpuc.write_blob(from_file)


def test_compile_graph_module_lowers_it_first():
    program = vpuc.compile(FUSED)
    assert program.provenance["pipeline"].startswith("lower-graph,")
    assert program.kernels            # the fused kernels were generated


def test_write_and_read_blob_round_trip(tmp_path):
    program = vpuc.compile(CLAMP, format="elf")
    data = vpuc.write_blob(program, path=tmp_path / "c.elf")
    assert data[:4] == b"\x7fELF" and (tmp_path / "c.elf").read_bytes() == data
    for source in (data, tmp_path / "c.elf", str(tmp_path / "c.elf")):
        back = vpuc.read_blob(source)
        assert back.provenance == program.provenance
        assert vpuc.write_blob(back) == data


def test_compile_cli_writes_the_api_blob(tmp_path, capsys, monkeypatch):
    code, _, err = cli(["compile", CLAMP, "-o", tmp_path / "c.blob"], capsys, monkeypatch)
    assert code == 0, err
    assert (tmp_path / "c.blob").read_bytes() == vpuc.write_blob(vpuc.compile(CLAMP))


@pytest.mark.parametrize("example", [CLAMP, FUSED])
def test_run_vir_equals_compile_then_run_blob(example, tmp_path, capsys, monkeypatch):
    """Same program, same provenance, same cycles and outputs, whichever way it is run."""
    blob = tmp_path / "net.blob"
    assert cli(["compile", example, "-o", blob], capsys, monkeypatch)[0] == 0
    runs = []
    for source in (example, blob):
        out_dir = tmp_path / source.suffix[1:]
        code, out, err = cli(["run", source, "--json", "--reference", "--output-dir", out_dir],
                             capsys, monkeypatch)
        assert code == 0, err
        runs.append((json.loads(out), {p.name: np.load(p) for p in out_dir.iterdir()}))
    (from_vir, outs_vir), (from_blob, outs_blob) = runs
    assert from_vir["provenance"] == from_blob["provenance"]
    assert from_vir["provenance"]["source"] == example.name
    assert from_vir["cycles"] == from_blob["cycles"]
    assert from_vir["engines"] == from_blob["engines"]
    assert outs_vir.keys() == outs_blob.keys()
    for name in outs_vir:
        assert np.array_equal(outs_vir[name], outs_blob[name])
    assert vpuc.read_blob(blob).provenance == vpuc.compile(example).provenance


def test_run_vir_honours_the_arch_override(tmp_path, capsys, monkeypatch):
    """--arch names a timing model; a .vir file compiles for the structure it models."""
    arch_text = (ROOT / "vpuc" / "archs" / "npu37xx.toml").read_text(encoding="utf-8")
    (tmp_path / "other.toml").write_text(arch_text.replace('name = "NPU37XX"',
                                                           'name = "NPU37XX_OTHER"'))
    sim_text = (ROOT / "vpuc" / "cost" / "archs" / "npu37xx.toml").read_text(encoding="utf-8")
    assert 'structure = "NPU37XX"' in sim_text
    (tmp_path / "sim.toml").write_text(sim_text.replace('structure = "NPU37XX"',
                                                        'structure = "other.toml"'))
    code, out, err = cli(["run", CLAMP, "--json", "--arch", tmp_path / "sim.toml"],
                         capsys, monkeypatch)
    assert code == 0, err
    assert json.loads(out)["provenance"]["arch"] == "NPU37XX_OTHER"


def test_simulate_checks_generated_kernels_and_computes_the_reference():
    program = vpuc.compile(FUSED)
    run = vpuc.simulate(program, reference=True)
    assert run.kernel_check is not None and run.kernel_check.checked > 0
    assert not run.kernel_check.mismatches and not run.races
    for name, value in run.reference.items():
        np.testing.assert_allclose(run.outputs[name].astype(np.float32),
                                   value.astype(np.float32), rtol=4e-3, atol=1e-4)
    assert run.cycles > 0


def test_simulate_uses_given_inputs():
    program = vpuc.compile(CLAMP)
    x = np.linspace(-8, 8, 16 * 32 * 32, dtype=np.float32).astype(np.float16)
    run = vpuc.simulate(program, {"in": x.reshape(1, 16, 32, 32)}, reference=True)
    assert np.array_equal(run.inputs["in"].ravel(), x)
    np.testing.assert_array_equal(run.outputs["out"], run.reference["out"])


def test_run_json_fields(capsys, monkeypatch):
    code, out, err = cli(["run", CLAMP, "--json", "--reference"], capsys, monkeypatch)
    assert code == 0 and err == ""
    data = json.loads(out)
    assert data["schema"] == "vpuc-run" and data["version"] == 1
    assert data["ok"] is True and data["races"] == []
    assert {e["name"] for e in data["engines"]} >= {"DMA0", "SHAVE0.0"}
    busy = sum(e["busy_cycles"] for e in data["engines"] if e["name"].startswith("DMA"))
    assert busy > 0 and data["dma"]["bytes"] == 2 * 16 * 32 * 32 * 2
    assert data["critical_path"]["tasks"][-1]["end"] == data["cycles"]
    assert [c["output"] for c in data["checks"]] == ["out"] and data["checks"][0]["ok"]
    # the text summary prints the same numbers
    code, text, _ = cli(["run", CLAMP], capsys, monkeypatch)
    assert f"total        {data['cycles']:,.0f} cycles" in text


def test_run_cast_inputs(tmp_path, capsys, monkeypatch):
    value = np.full((1, 16, 32, 32), 7.0, np.float32)
    np.save(tmp_path / "x.npy", value)
    args = ["run", CLAMP, "--input", f"in=@{tmp_path / 'x.npy'}", "--output",
            f"@{tmp_path / 'y.npy'}"]
    code, _, err = cli(args, capsys, monkeypatch)
    assert code == 1 and "--cast-inputs" in err
    code, out, err = cli(args + ["--cast-inputs"], capsys, monkeypatch)
    assert code == 0, err
    assert f"output %out -> {tmp_path / 'y.npy'}" in out
    got = np.load(tmp_path / "y.npy")
    assert got.dtype == np.float16 and got.shape == value.shape


def test_expected_output_is_irees_spelling(tmp_path, capsys, monkeypatch):
    """--expected_output (IREE) is --expected; a wrong expected tensor fails the run."""
    x = np.zeros((1, 16, 32, 32), np.float16)
    np.save(tmp_path / "x.npy", x)
    program = vpuc.compile(CLAMP)
    want = vpuc.simulate(program, {"in": x}).outputs["out"]
    np.save(tmp_path / "want.npy", want)
    np.save(tmp_path / "bad.npy", want + np.float16(1))
    base = ["run", CLAMP, "--input", f"@{tmp_path / 'x.npy'}"]
    code, out, _ = cli(base + ["--expected_output", f"@{tmp_path / 'want.npy'}"], capsys,
                       monkeypatch)
    assert code == 0 and "output %out: matches the expected tensor" in out
    code, out, _ = cli(base + ["--expected_output", f"@{tmp_path / 'bad.npy'}"], capsys,
                       monkeypatch)
    assert code == 1 and "differ from the expected tensor" in out


def test_opt_p_compile_lowers_graph_modules_like_compile(capsys, monkeypatch):
    code, out, err = cli(["opt", FUSED, "-p", "compile"], capsys, monkeypatch)
    assert code == 0, err
    assert "// graph: lowered" in out


def test_compile_p_pipeline(tmp_path, capsys, monkeypatch):
    code, _, err = cli(["compile", CLAMP, "-p", "compile", "-o", tmp_path / "a.blob"],
                       capsys, monkeypatch)
    assert code == 0, err
    assert vpuc.read_blob(tmp_path / "a.blob").provenance["pipeline"] == \
        vpuc.compile(CLAMP).provenance["pipeline"]


def test_unreadable_files_speak_plainly(tmp_path, monkeypatch):
    with pytest.raises(VpucError, match=r"^error: cannot read the \.vir file .*: no such file$"):
        vpuc.compile(tmp_path / "missing.vir")
    with pytest.raises(VpucError, match="it is a directory, not a file$"):
        vpuc.read_blob(tmp_path)

    def denied(self):
        raise PermissionError(errno.EACCES, "Permission denied", str(self))
    monkeypatch.setattr(Path, "read_bytes", denied)   # root reads any file: simulate EACCES
    with pytest.raises(VpucError) as info:
        vpuc.read_blob(tmp_path / "x.blob")
    assert str(info.value) == f"error: cannot read the blob {tmp_path / 'x.blob'}: " \
                              "permission denied"
    assert "Errno" not in str(info.value)


def test_non_utf8_text_names_line_and_column(tmp_path):
    path = tmp_path / "bad.vir"
    path.write_bytes("module @m arch NPU37XX\n// é ok, then \xff".encode("utf-8")[:-2] + b"\xff\n")
    with pytest.raises(VpucError) as info:
        vpuc.compile(path)
    message = str(info.value)
    assert message.startswith(f"{path}:2:15: error: byte 0xff is not UTF-8 text")
    assert "codec" not in message


def vpuc_cmd(*args, stdin: bytes = b"") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vpuc", *map(str, args)], input=stdin,
                          capture_output=True, cwd=ROOT, check=False)


def test_dash_reads_stdin_and_writes_stdout():
    """compile - -o -, then run - and inspect - of the blob on stdin, and of VIR text."""
    text = CLAMP.read_bytes()
    compiled = vpuc_cmd("compile", "-", stdin=text)
    assert compiled.returncode == 0, compiled.stderr
    assert compiled.stdout == vpuc.write_blob(vpuc.compile(text.decode(), name="<stdin>"))
    assert b"wrote <stdout>" in compiled.stderr
    for data in (compiled.stdout, text):
        run = vpuc_cmd("run", "-", "--json", stdin=data)
        assert run.returncode == 0, run.stderr
        assert json.loads(run.stdout)["program"] == "clamp_net"
        shown = vpuc_cmd("inspect", "-", stdin=data)
        assert shown.returncode == 0 and shown.stdout.startswith(b"<stdin>: vpuc blob")
    report = vpuc_cmd("run", CLAMP, "--report", "-")
    assert report.returncode == 0 and b"\nid,name,engine,track" in report.stdout


def test_python_api_doc_examples_run(monkeypatch, capsys):
    """The Python blocks of docs/python-api.md run as written, from the repository root."""
    import re
    text = (ROOT / "docs" / "python-api.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```python\n(.*?)^```$", text, re.MULTILINE | re.DOTALL)
    assert blocks
    monkeypatch.chdir(ROOT)
    for block in blocks:
        exec(compile(block, "docs/python-api.md", "exec"), {})
    assert "cycles" in capsys.readouterr().out
