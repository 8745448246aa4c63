"""The DPU's integer mode in both blob formats (format 1.6).

``DPUInvariant.quant_scale``, ``in_zero_point``, ``out_zero_point`` (FlatBuffer) and
``DpuInvariantRecord.quant_scale_plus_one``, ``in_zero_point``, ``out_zero_point`` (ELF):
flatc decodes them, the readers give the task's ``quant`` back and the program runs the
same, a task of the float datapath writes no field (an ELF word of zero), and a bad scale
table index is a located error.
"""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

from tests.blob.blob_testlib import compiled, tool, with_task
from tests.sim.simlib import REPO
from vpuc.api import read_blob, simulate
from vpuc.blob.flatten import flatten
from vpuc.blob.writer_elf import write_elf
from vpuc.blob.writer_fb import write_fb
from vpuc.diagnostics import VpucError
from vpuc.ir.tasks import DpuTask

EXAMPLE = REPO / "examples" / "int8_conv.vir"
WRITERS = {"fb": write_fb, "elf": write_elf}


@pytest.fixture(scope="module")
def content():
    return flatten(compiled(EXAMPLE))


def _quant(module) -> dict:
    return {t.label: (t.quant.scale, t.quant.in_zero_point, t.quant.out_zero_point)
            for tl in module.task_lists for t in tl.tasks
            if isinstance(t, DpuTask) and t.quant is not None}


@pytest.mark.parametrize("fmt", ["fb", "elf"])
def test_the_integer_mode_reads_back_and_runs_the_same(content, fmt):
    program = compiled(EXAMPLE)
    read = read_blob(WRITERS[fmt](content))
    assert _quant(read.module) == {"conv": ("cs1", 128, -5), "dw": ("cs2", -5, 0)}
    x = np.random.default_rng(6).integers(0, 256, (1, 16, 16, 16), dtype=np.uint8)
    want, got = simulate(program, {"in": x}).outputs, simulate(read, {"in": x}).outputs
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])


def test_flatc_decodes_the_fields_and_a_float_task_has_none(content, tmp_path):
    from vpuc.blob.fb_schema import SCHEMA_PATH
    blobs = {"int8": write_fb(content),
             "float": write_fb(flatten(compiled(REPO / "examples" / "conv_2tiles.vir")))}
    for name, data in blobs.items():
        (tmp_path / f"{name}.blob").write_bytes(data)
        done = subprocess.run([tool("flatc"), "--json", "--strict-json", "--raw-binary", "-o",
                               str(tmp_path), str(SCHEMA_PATH), "--",
                               str(tmp_path / f"{name}.blob")], capture_output=True, text=True)
        assert done.returncode == 0 and not done.stderr, done.stderr
    decoded = json.loads((tmp_path / "int8.json").read_text())
    names = [t["name"] for t in decoded["tensors"]]
    dpu = next(tl for tl in decoded["task_lists"] if tl.get("dpu_tasks"))["dpu_tasks"]
    fields = {t["invariant"]["label"]: (names[t["invariant"]["quant_scale"]],
                                        t["invariant"].get("in_zero_point", 0),
                                        t["invariant"].get("out_zero_point", 0)) for t in dpu}
    assert fields == {"conv": ("cs1", 128, -5), "dw": ("cs2", -5, 0)}
    assert "quant_scale" not in (tmp_path / "float.json").read_text()


@pytest.mark.parametrize("fmt", ["fb", "elf"])
def test_a_scale_index_out_of_range_is_a_located_error(content, fmt):
    bad = with_task(content, 1, 0, quant_scale=len(content.tensors) + 4)
    with pytest.raises(VpucError) as info:
        read_blob(WRITERS[fmt](bad))
    message = str(info.value)
    assert "tensor" in message and str(len(content.tensors) + 4) in message, message


@pytest.mark.parametrize("fmt", ["fb", "elf"])
def test_a_zero_point_out_of_its_range_is_refused(content, fmt):
    with pytest.raises(VpucError, match=r"input zero point 999 is outside u8's range \[0, 255\]"):
        read_blob(WRITERS[fmt](with_task(content, 1, 0, in_zero_point=999)))
