"""A number that does not fit its blob field: the writers' safety net (vpuc/blob/field_check.py).

The verifier's limits (vpuc/verifier/limits.py, golden tests in tests/golden/errors)
keep such numbers out of compiled programs; these tests change a compiled program
behind the verifier's back, as a buggy pass could, and check that both writers
report the field, the value, its range and the IR location instead of a bare
``struct.error``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import vpuc
from vpuc.blob import FORMATS, write_blob
from vpuc.blob.content import (ActTaskRec, BarrierRec, BindingRec, DmaRec, DpuRec, KernelRec,
                               ParamRec, RuntimeRec, SliceRec, TensorRec, VariantRec)
from vpuc.blob.fb_schema import load_schema
from vpuc.blob.field_check import FIELDS, RANGES
from vpuc.diagnostics import Loc, VpucError

REPO = Path(__file__).resolve().parents[2]
CLAMP = REPO / "examples" / "clamp.vir"


def _line_of(text: str) -> int:
    return next(i for i, line in enumerate(CLAMP.read_text().splitlines(), 1) if text in line)


def _error(program, fmt) -> VpucError:
    with pytest.raises(VpucError) as info:
        write_blob(program, fmt)
    return info.value


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_stack_beyond_uint32_names_field_value_range_and_runtime(fmt):
    program = vpuc.compile(CLAMP)
    runtime = program.module.runtime
    program.module.runtime = dataclasses.replace(runtime, stacks=(16384, 1 << 32))
    error = _error(program, fmt)
    (diag,) = error.diagnostics
    assert diag.message == ("cannot serialize the program: RuntimeRec.stack_sizes[1] = "
                            "4294967296 does not fit its blob field (uint32, 0..4294967295)")
    assert isinstance(diag.loc, Loc) and diag.loc.line == _line_of("runtime @runtime stacks")


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_dma_channel_beyond_uint8_names_the_task(fmt):
    program = vpuc.compile(CLAMP)
    dma_list = next(tl for tl in program.module.task_lists if tl.executor.value == "DMA")
    dma_list.tasks[1] = dataclasses.replace(dma_list.tasks[1], channel=256)
    (diag,) = _error(program, fmt).diagnostics
    assert diag.message == ("cannot serialize the program: DmaRec.channel = 256 does not fit "
                            "its blob field (uint8, 0..255)")
    assert diag.loc.line == _line_of("store: dma %out_cmx")


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_buffer_dim_beyond_uint32_names_the_buffer(fmt):
    program = vpuc.compile(CLAMP)
    buffers = program.module.buffers
    index = next(i for i, b in enumerate(buffers) if b.name == "in")
    big = dataclasses.replace(buffers[index].type, dims=(1, 16, 32, 1 << 32))
    buffers[index] = dataclasses.replace(buffers[index], type=big)
    (diag,) = _error(program, fmt).diagnostics
    assert diag.message.startswith("cannot serialize the program: TensorRec.dims[3] = "
                                   "4294967296 does not fit its blob field (uint32, ")
    assert diag.loc.line == _line_of("input %in :")


def test_an_error_without_a_record_to_blame_keeps_the_writers_message(monkeypatch):
    import struct

    import vpuc.blob.writer_fb as writer_fb

    def failing(content):
        raise struct.error("'I' format requires 0 <= number <= 4294967295")
    monkeypatch.setattr(writer_fb, "write_fb", failing)
    (diag,) = _error(vpuc.compile(CLAMP), "fb").diagnostics
    assert diag.message == ("cannot serialize the program: a value does not fit its blob field "
                            "('I' format requires 0 <= number <= 4294967295)")


# The checked records and the schema tables whose same-named fields they write.
SCHEMA_TABLES = {TensorRec: "TensorReference", SliceRec: "Slice", BarrierRec: "Barrier",
                 DmaRec: "DMATask", DpuRec: "DPUInvariant", VariantRec: "DPUVariant",
                 ActTaskRec: "ActKernelInvocation", BindingRec: "TensorBinding",
                 KernelRec: "ActKernel", ParamRec: "KernelParam", RuntimeRec: "ActKernelRuntime"}


def test_field_ranges_are_no_wider_than_the_schema_says():
    schema = load_schema()
    checked = 0
    for record, table_name in SCHEMA_TABLES.items():
        if table_name in schema.structs:
            codes = dict(schema.structs[table_name].fields)
        else:
            codes = {}
            for f in schema.tables[table_name].fields:
                ftype = f.type.element if f.type.kind == "vector" else f.type
                if ftype is not None and ftype.kind == "scalar":
                    codes[f.name] = ftype.code
        for name, code in FIELDS[record.__name__].items():
            assert name in record._fields, (record.__name__, name)
            if codes.get(name) not in RANGES:
                continue
            lo, hi = RANGES[code]
            slo, shi = RANGES[codes[name]]
            assert slo <= lo and hi <= shi, (record.__name__, name, code, codes[name])
            checked += 1
    assert checked >= 20


_FOUR_GIB_DDR = """module @huge arch NPU37XX
input %in : 1x16x32x32xf16 NHWC
output %out : 1x16x32x32xf16 NHWC
ddr %small : 1x16x32x32xf16 NHWC
ddr %big : 1x65536x32768x1xf16 NHWC
cmx %in_cmx : 1x16x32x32xf16 NHWC tile 0 at 0
barrier %b0 = physical 0
tasks DMA {
  load: dma %in -> %in_cmx channel 0 updates(%b0)
  store: dma %in_cmx -> %out channel 0 waits(%b0)
}
"""


def test_a_4_gib_ddr_buffer_is_refused_by_elf_at_its_line_and_written_by_fb(tmp_path):
    """The verifier allows a tensor of the whole 4 GiB address space; an ELF32 symbol's
    and section's sizes are 32-bit words, so the ELF writer refuses it (it ends past
    ``%small``'s 32 KiB) at the buffer's line (not a bare ``struct.error``), and the FlatBuffer (64-bit sizes) writes it."""
    source = tmp_path / "huge.vir"
    source.write_text(_FOUR_GIB_DDR)
    program = vpuc.compile(source)
    (diag,) = _error(program, "elf").diagnostics
    assert diag.message == (
        "cannot serialize the program: %big (4,294,967,296 bytes) would end at byte "
        "4,295,000,064 of ELF section .bss.DDRScratch; an ELF32 symbol's and section's sizes "
        "hold at most 4,294,967,295 bytes (the FlatBuffer format, --format fb, holds it)")
    assert isinstance(diag.loc, Loc) and diag.loc.line == 5 and diag.loc.col == 1
    assert write_blob(program, "fb")
