"""Constants of equal bytes are stored once in both blob formats (issue 11, section 5).

Two tasks that load the same weights (two ``const`` buffers of equal values, as
the lowering declares for layers that share weights or per-tile copies) must
not double the blob: the FlatBuffer writer points both ``ConstantData`` tables
at one vector, the ELF writer gives both records one piece of
``.data.Constants``.  The readers give each buffer its bytes back, the outside
tools still accept the blob, and ``vpuc inspect`` says which constant shares.
"""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

from tests.tools import tool
from vpuc.api import compile_text, read_blob, simulate, write_blob
from vpuc.blob.inspect import blob_report

WEIGHTS = np.arange(256, dtype=np.float16) / 8 - 7     # 512 bytes, no run of equal bytes
OTHER = -WEIGHTS


def _literal(values: np.ndarray) -> str:
    return "[" + ", ".join(repr(float(v)) for v in values) + "]"


SOURCE = f"""module @shared arch NPU37XX
const %w_a : 256xf16 = {_literal(WEIGHTS)}
const %w_b : 256xf16 = {_literal(WEIGHTS)}
const %w_c : 256xf16 = {_literal(OTHER)}
output %out_a : 256xf16
output %out_b : 256xf16
output %out_c : 256xf16
tasks DMA {{
  dma %w_a -> %out_a channel 0
  dma %w_b -> %out_b channel 0
  dma %w_c -> %out_c channel 1
}}
"""


@pytest.fixture(scope="module")
def program():
    return compile_text(SOURCE, "shared.vir")


@pytest.mark.parametrize("fmt", ["fb", "elf"])
def test_equal_constants_are_stored_once(program, fmt):
    blob = write_blob(program, fmt)
    assert blob.count(WEIGHTS.tobytes()) == 1
    assert blob.count(OTHER.tobytes()) == 1
    read = read_blob(blob)
    assert read.constants["w_a"] == read.constants["w_b"] == WEIGHTS.tobytes()
    assert read.constants["w_c"] == OTHER.tobytes()
    outputs = simulate(read).outputs
    for name, expected in (("out_a", WEIGHTS), ("out_b", WEIGHTS), ("out_c", OTHER)):
        np.testing.assert_array_equal(outputs[name], expected)   # copies: bit-exact


def test_one_copy_is_smaller_than_two(program):
    once = len(write_blob(program, "fb"))
    distinct = compile_text(SOURCE.replace(f"%w_b : 256xf16 = {_literal(WEIGHTS)}",
                                           f"%w_b : 256xf16 = {_literal(WEIGHTS + 1)}"), "x.vir")
    assert len(write_blob(distinct, "fb")) >= once + WEIGHTS.nbytes


@pytest.mark.parametrize("fmt", ["fb", "elf"])
def test_inspect_names_the_shared_constant(program, fmt):
    report = blob_report(write_blob(program, fmt), f"shared.{fmt}")
    same = {c["tensor"]: c["same_as"] for c in report["constants"]}
    assert same == {"w_a": None, "w_b": "w_a", "w_c": None}


def test_flatc_decodes_the_shared_vector(program, tmp_path):
    flatc = tool("flatc")
    from vpuc.blob.fb_schema import SCHEMA_PATH
    blob = tmp_path / "x.blob"
    blob.write_bytes(write_blob(program, "fb"))
    done = subprocess.run([flatc, "--json", "--strict-json", "--raw-binary", "-o", str(tmp_path),
                           str(SCHEMA_PATH), "--", str(blob)], capture_output=True, text=True)
    assert done.returncode == 0 and not done.stderr, done.stderr
    constants = json.loads((tmp_path / "x.json").read_text())["constants"]
    datas = [bytes(c["data"]) for c in constants]
    assert sorted(datas) == sorted([WEIGHTS.tobytes()] * 2 + [OTHER.tobytes()])


def test_readelf_reads_the_shared_piece_silently(program, tmp_path):
    readelf = tool("readelf")
    blob = tmp_path / "x.elf"
    blob.write_bytes(write_blob(program, "elf"))
    done = subprocess.run([readelf, "-a", "-W", str(blob)], capture_output=True, text=True)
    assert done.returncode == 0 and done.stderr == ""
    symbols = {line.split()[-1]: line.split()[1] for line in done.stdout.splitlines()
               if line.split()[-1:] in (["w_a"], ["w_b"], ["w_c"])}
    assert symbols["w_a"] == symbols["w_b"] != symbols["w_c"]
