"""assign-windows and pack-kernel-args: golden output, the Software Layers HLD's ClampParams bytes,
a dynamic-shape invocation, and window overflow errors."""

from pathlib import Path

import pytest

from vpuc.abi.memref import MemRefData
from vpuc.arch import load_arch
from vpuc.cli import main
from vpuc.ir.symbols import shape_meta_offset
from vpuc.passes.base import PassContext
from vpuc.passes.manager import PassManager
from vpuc.passes.registry import parse_pipeline
from vpuc.vir.parser import parse_file

DATA = Path(__file__).parent / "data"
REPO = Path(__file__).resolve().parents[2]

# The Software Layers HLD's ClampParams for a 1x16x32x32 f16 NHWC tensor in and out (tests/abi has the
# hand-built version of the same bytes).
CLAMP_PARAMS = bytes.fromhex(
    "0000001f 01000000 04000000 4800001e 5800001e 02000000 4213000000000000"
    "0080001f 01000000 04000000 7800001e 8800001e 02000000 4213000000000000"
    "0000 0046".replace(" ", ""))


def compile_kernels(path, arch=None):
    module = parse_file(path)
    ctx = PassContext(arch or load_arch(module.arch))
    PassManager(parse_pipeline("kernels")).run(module, ctx)
    return ctx.artifacts["program"]


def test_golden_opt_output(capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    assert main(["opt", "tests/unit/data/clamp_asm.vir", "-p", "kernels"]) == 0
    expected = (DATA / "clamp_asm.expected").read_text()
    assert capsys.readouterr().out == expected


def test_clamp_params_match_the_seed_contract_byte_for_byte():
    program = compile_kernels(DATA / "clamp_asm.vir")
    (inv,) = program.invocations
    assert inv.args_size == 68 and inv.args_offset == 0
    assert inv.window_e[:68] == CLAMP_PARAMS


def test_dynamic_memrefs_point_at_shape_metadata_in_win_f():
    program = compile_kernels(DATA / "dynamic_asm.vir")
    (inv,) = program.invocations
    module = program.module
    win_f = program.arch.window_base("WIN_F")
    a = next(b for b in module.buffers if b.name == "a")
    memref = MemRefData.unpack(inv.window_e, inv.args_offset)
    assert memref.isStatic == 0 and memref.numDims == 3
    assert memref.dataAddr == win_f + a.offset
    assert memref.dimsAddr == win_f + a.offset + shape_meta_offset(a)
    assert memref.stridesAddr == memref.dimsAddr + 16  # 3 int32 dims, padded to 8
    assert inv.args_size == 64 and len(inv.window_e) == 64  # no WIN_E tail for dynamic memrefs


def test_window_overflow_is_reported(capsys, monkeypatch, tmp_path):
    # Stacks small enough for the tiny WIN_E (the verifier checks them against it).
    monkeypatch.chdir(tmp_path)
    text = (DATA / "clamp_asm.vir").read_text()
    assert "stacks(16384, 16384)" in text
    Path("clamp_asm.vir").write_text(text.replace("stacks(16384, 16384)", "stacks(64, 64)"))
    Path("clamp_test.s").write_text((DATA / "clamp_test.s").read_text())
    code = main(["opt", "clamp_asm.vir", "-p", "kernels",
                 "--arch", str(REPO / "tests/unit/data/tiny_windows.toml")])
    err = capsys.readouterr().err
    assert code == 1
    assert "%out_cmx ends at WIN_F + 0x10000, past the 0x100-byte window by 65280 bytes" in err


def test_generated_kernels_need_the_fusion_pipeline(tmp_path):
    text = (DATA / "clamp_asm.vir").read_text().replace('from asm "clamp_test.s"', "from generated")
    path = tmp_path / "gen.vir"
    path.write_text(text)
    with pytest.raises(Exception) as info:
        compile_kernels(path)
    assert "no fusion result provides its code" in str(info.value)
