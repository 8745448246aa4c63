"""``vpuc run``: inputs, outputs, checks, blobs and usage errors."""

from __future__ import annotations

import numpy as np
import pytest

from runtime_sim.inputs import parse_literal
from vpuc.cli_run import ProgressBar
from tests.sim.simlib import run_cli

RELU = "tests/sim/data/relu_pipeline.vir"
SHAPE = (1, 16, 32, 32)


def test_typed_literal_input_and_expected_output(capsys, monkeypatch, tmp_path):
    code, out, _ = run_cli(["run", RELU, "--input", "in=1x16x32x32xf16=-2.5",
                            "--expected", "out=1x16x32x32xf16=0", "--output-dir", tmp_path],
                           capsys, monkeypatch)
    assert code == 0
    assert (f"output %out -> {tmp_path / 'out.npy'}") in out
    assert "output %out: matches the expected tensor (16,384 elements, max |diff| 0" in out
    saved = np.load(tmp_path / "out.npy")
    assert saved.shape == SHAPE and saved.dtype == np.float16 and not saved.any()


def test_npy_input_and_the_worst_mismatch(capsys, monkeypatch, tmp_path):
    x = np.zeros(SHAPE, np.float16)
    x[0, 3, 5, 7] = 4.0
    x[0, 1, 2, 3] = 1.0
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "zeros.npy", np.zeros(SHAPE, np.float16))
    code, out, _ = run_cli(["run", RELU, "--input", f"@{tmp_path / 'x.npy'}",
                            "--expected", f"out=@{tmp_path / 'zeros.npy'}"], capsys, monkeypatch)
    assert code == 1
    assert out.splitlines()[-1] == (
        "output %out: 2 of 16,384 elements differ from the expected tensor (rtol 0.004, atol 0.0001); "
        "worst at [0, 3, 5, 7]: got 4, expected 0 (|diff| 4)")


def test_random_inputs_follow_the_seed(capsys, monkeypatch, tmp_path):
    outputs = []
    for seed in (1, 1, 2):
        run_cli(["run", RELU, "--seed", seed, "--output-dir", tmp_path / str(seed)], capsys,
                monkeypatch)
        outputs.append(np.load(tmp_path / str(seed) / "out.npy"))
    assert np.array_equal(outputs[0], outputs[1]) and not np.array_equal(outputs[0], outputs[2])


def test_reference_compares_every_output(capsys, monkeypatch):
    code, out, _ = run_cli(["run", "tests/sim/data/dma_modes.vir", "--reference"], capsys,
                           monkeypatch)
    assert code == 0
    assert [line.split(":")[0] for line in out.splitlines() if line.startswith("output")] == [
        "output %nhwc", "output %rows", "output %flat", "output %again"]


def test_reference_needs_a_numpy_function_for_asm_kernels(capsys, monkeypatch):
    code, _, err = run_cli(["run", RELU, "--reference"], capsys, monkeypatch)
    assert code == 1
    assert "--reference: relu calls @relu from asm \"relu_f16.s\", which has no numpy reference" in err


def test_a_blob_runs_like_its_source(capsys, monkeypatch, tmp_path):
    blob = tmp_path / "clamp.blob"
    assert run_cli(["compile", "examples/clamp.vir", "-o", blob], capsys, monkeypatch)[0] == 0
    code, out, _ = run_cli(["run", blob, "--reference"], capsys, monkeypatch)
    source = run_cli(["run", "examples/clamp.vir"], capsys, monkeypatch)[1]
    assert code == 0 and "matches the numpy reference" in out
    assert out.splitlines()[1:-1] == source.splitlines()[1:]   # same cycles, same table


@pytest.mark.parametrize("args, message", [
    (["--input", "nope=1x2xf16=1"], "--input nope=1x2xf16=1: the program has no input %nope; "
                                    "its inputs are %in"),
    (["--input", "in=1x2xf16=1,2,3"], "--input: 1x2xf16 needs 2 values (or one to fill it), got 3"),
    (["--input", "in=3xq9=1"], "--input: '3xq9' is not a tensor type"),
    (["--input", "in=16xf16=1"], "input %in has shape 16; expected 1x16x32x32"),
    (["--input", "@missing.npy"], "--input: cannot read the .npy file missing.npy: no such file"),
    (["--timing-only", "--reference"], "--timing-only computes no outputs"),
    (["--arch", "nowhere.toml"], "--arch: cannot read timing file nowhere.toml"),
])
def test_usage_errors(args, message, capsys, monkeypatch):
    code, out, err = run_cli(["run", RELU] + args, capsys, monkeypatch)
    assert code in (1, 2) and out == ""
    assert message in err


def test_literals():
    assert parse_literal("2x2xi8=1,2,3,4", "--input").tolist() == [[1, 2], [3, 4]]
    assert parse_literal("f32=2.5", "--input").shape == ()
    assert parse_literal("3xf16=inf", "--input").tolist() == [np.inf] * 3


def test_progress_bar_draws_only_after_a_delay(monkeypatch):
    import io
    stream = io.StringIO()
    bar = ProgressBar(100, stream)
    bar(50, 100)                      # too early: long runs only
    assert stream.getvalue() == ""
    bar.begin -= 10
    bar(50, 100)
    assert "50/100 units" in stream.getvalue()
    bar.close()
    assert stream.getvalue().endswith("\r")


def test_no_progress_bar_when_stdout_is_not_a_terminal(capsys, monkeypatch):
    _, _, err = run_cli(["run", "examples/double_buffer.vir", "--timing-only"], capsys, monkeypatch)
    assert err == ""
