"""A compile's output depends on its input alone: not on where Python put its objects (an
order taken from a set of ids, or of objects hashed by identity, follows their addresses)
nor on what the process compiled before.  Each zoo model, at its test size, compiled in
fresh processes with the heap shifted by different numbers of live objects first, and
twice in one process: the printed programs are identical byte for byte."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MODELS = {"resnet18": "resnet18(size=32, width=8, classes=10)",
          "mobilenet_v3_small": "mobilenet_v3_small(size=64, classes=10)",
          "encoder_layer": "encoder_layer(seq=17, width=48, heads=3)"}

SCRIPT = """
import hashlib, sys
junk = [object() for _ in range({junk})] + [[0] * (k % 7) for k in range({junk})]
from vpuc import api
from vpuc.onnx_import import zoo
from vpuc.vir.printer import print_module
path = zoo.{build}.save(sys.argv[1], "m")
for _ in range({times}):
    text = print_module(api.compile(path, schedule="default").module)
    print(hashlib.sha256(text.encode()).hexdigest())
"""


def _digests(model: str, tmp_path: Path, junk: int, times: int = 1) -> list[str]:
    script = SCRIPT.format(junk=junk, build=MODELS[model], times=times)
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / f"{model}.onnx")],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.split()


@pytest.mark.parametrize("model", sorted(MODELS))
def test_a_compile_does_not_depend_on_the_heap_or_on_earlier_compiles(model, tmp_path):
    first, again = _digests(model, tmp_path, junk=0, times=2)
    assert first == again                       # a second compile in the same process
    shifted = _digests(model, tmp_path, junk=60_000)
    assert shifted == [first]                   # objects at other addresses
