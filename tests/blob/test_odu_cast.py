"""A DPU task's output copies on other tiles in both blob formats (format 1.5).

``DPUInvariant.odu_cast`` (FlatBuffer) and ``DpuInvariantRecord.odu_cast_start/_count``
(ELF) hold the tensor indices of the copies, named after NPU37XX's ODU_CAST registers
(npu_plugin's ``DPUInvariantRegisters.odu_cast``).  flatc and readelf read the blob as
they always did, the readers give the copies back (built a column at a time or row by
row), and a task without copies is written as before: no vector, a zero count.
"""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

from tests.blob.blob_testlib import compiled, tool, with_task
from tests.sim.simlib import REPO
from vpuc.api import read_blob, simulate
from vpuc.blob import elf_records as R
from vpuc.blob.flatten import flatten
from vpuc.blob.writer_elf import write_elf
from vpuc.blob.writer_fb import write_fb
from vpuc.diagnostics import VpucError
from vpuc.ir.tasks import DpuTask

EXAMPLE = REPO / "examples" / "dpu_broadcast.vir"
WRITERS = {"fb": write_fb, "elf": write_elf}


def _dpu_tasks(module) -> dict[str, DpuTask]:
    return {t.label: t for tl in module.task_lists for t in tl.tasks if isinstance(t, DpuTask)}


@pytest.fixture(scope="module")
def content():
    return flatten(compiled(EXAMPLE))


@pytest.mark.parametrize("fmt", ["fb", "elf"])
def test_the_copies_read_back_and_run(content, fmt):
    read = read_blob(WRITERS[fmt](content))
    tasks = _dpu_tasks(read.module)
    assert tasks["lo"].broadcast_outputs == ("y1_lo",)
    assert tasks["hi"].broadcast_outputs == ("y0_hi",)
    x = np.random.default_rng(5).standard_normal((1, 16, 8, 8)).astype(np.float16)
    outputs = simulate(read, {"in": x}).outputs
    np.testing.assert_array_equal(outputs["out0"], outputs["out1"])


def test_flatc_reads_the_copies(content, tmp_path):
    from vpuc.blob.fb_schema import SCHEMA_PATH
    blob = tmp_path / "x.blob"
    blob.write_bytes(write_fb(content))
    done = subprocess.run([tool("flatc"), "--json", "--strict-json", "--raw-binary", "-o",
                           str(tmp_path), str(SCHEMA_PATH), "--", str(blob)],
                          capture_output=True, text=True)
    assert done.returncode == 0 and not done.stderr, done.stderr
    decoded = json.loads((tmp_path / "x.json").read_text())
    names = [t["name"] for t in decoded["tensors"]]
    assert decoded["header"]["version"]["minor"] == 6
    dpu = next(tl for tl in decoded["task_lists"] if tl.get("dpu_tasks"))["dpu_tasks"]
    casts = {t["invariant"]["label"]: [names[i] for i in t["invariant"]["odu_cast"]]
             for t in dpu}
    assert casts == {"lo": ["y1_lo"], "hi": ["y0_hi"]}


def test_a_task_without_copies_writes_no_vector(tmp_path):
    """Older readers and tools see what they saw before: no odu_cast field at all."""
    from vpuc.blob.fb_schema import SCHEMA_PATH
    blob = tmp_path / "y.blob"
    blob.write_bytes(write_fb(flatten(compiled(REPO / "examples" / "conv_2tiles.vir"))))
    subprocess.run([tool("flatc"), "--json", "--strict-json", "--raw-binary", "-o",
                    str(tmp_path), str(SCHEMA_PATH), "--", str(blob)], check=True)
    assert "odu_cast" not in (tmp_path / "y.json").read_text()


def test_readelf_reads_the_longer_records_silently(content, tmp_path):
    blob = tmp_path / "x.elf"
    blob.write_bytes(write_elf(content))
    done = subprocess.run([tool("readelf"), "-a", "-W", str(blob)], capture_output=True,
                          text=True)
    assert done.returncode == 0 and done.stderr == ""
    line = next(s for s in done.stdout.splitlines() if R.DPU_INVARIANTS + " " in s)
    # [Nr] Name Type Address Off Size ES ...: the entry size is the record's, 92 + 8 bytes
    assert int(line.split("]", 1)[1].split()[5], 16) == R.DpuInvariantRecord.size == 112


@pytest.mark.parametrize("fmt", ["fb", "elf"])
def test_a_copy_index_out_of_range_is_a_located_error(content, fmt):
    bad = with_task(content, 1, 0, odu_cast=(len(content.tensors) + 3,))
    with pytest.raises(VpucError) as info:
        read_blob(WRITERS[fmt](bad))
    message = str(info.value)
    assert "tensor" in message and str(len(content.tensors) + 3) in message, message
