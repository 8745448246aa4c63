"""kernel_cache: a body generated once in a process is not generated again.

An equal request (same body text, clean-ups, config, target) reuses the code
and makes only the named parts afresh; a request differing in anything the
generator reads -- a shape, an element type, an op, a constant, the config --
is generated anew; and a program compiled from reused kernels serializes to
the same bytes as one compiled with every kernel generated fresh.
"""

from __future__ import annotations

import pytest

from fusion_testlib import Builder
from vpuc import api
from vpuc.fusion.generator.cleanup import CleanupConfig
from vpuc.fusion.generator.generate import generate
from vpuc.fusion.generator.kernel_cache import GENERATED
from vpuc.fusion.subgraph import tokenize
from vpuc.fusion.targets import get_target
from vpuc.ir.types import ElemType
from vpuc.onnx_import.zoo import mobilenet_v3_small


def unary(kind: str, dims, elem=ElemType.F16):
    b = Builder()
    b.result(b.op(kind, b.param(dims, elem)))
    return tokenize(b.build(), get_target("shave")).subgraphs[0].body


def scaled(value: float):
    b = Builder()
    x = b.param((4, 64), ElemType.F16)
    b.result(b.op("Multiply", x, b.const(value, elem=ElemType.F16)))
    return tokenize(b.build(), get_target("shave")).subgraphs[0].body


@pytest.fixture
def fresh_cache():
    GENERATED.clear()
    yield GENERATED
    GENERATED.clear()


def test_an_equal_body_reuses_the_code_under_its_own_name(fresh_cache):
    first = generate(unary("HSwish", (8, 128)), "a")
    again = generate(unary("HSwish", (8, 128)), "b")      # an equal body, built anew
    assert (fresh_cache.misses, fresh_cache.hits) == (1, 1)
    assert again.flat is first.flat                          # not generated twice
    assert again.timings[0][0] == "reused"
    assert again.obj.text == first.obj.text
    assert again.obj.symbol("b").value == first.obj.symbol("a").value
    assert again.obj is not first.obj                        # each caller its own object
    assert again.decl.name == "b" and again.obj.graph.startswith("module @b ")


@pytest.mark.parametrize("variant", [
    lambda: unary("HSwish", (8, 192)),                   # a shape
    lambda: unary("HSwish", (8, 128), ElemType.F32),     # an element type
    lambda: unary("Relu", (8, 128)),                     # an op
])
def test_a_body_differing_in_what_the_generator_reads_is_not_shared(fresh_cache, variant):
    base = generate(unary("HSwish", (8, 128)), "k")
    other = generate(variant(), "k")
    assert (fresh_cache.misses, fresh_cache.hits) == (2, 0)
    assert other.flat is not base.flat
    assert other.source.ops[0].type != base.source.ops[0].type or other.asm != base.asm


def test_constants_and_configs_are_part_of_the_key(fresh_cache):
    half = generate(scaled(0.5), "k")
    quarter = generate(scaled(0.25), "k")
    assert half.asm != quarter.asm                           # the constant's bits differ
    small = generate(scaled(0.5), "k", config=CleanupConfig(unroll=2))
    assert (fresh_cache.misses, fresh_cache.hits) == (3, 0)
    assert small.config.unroll == 2
    generate(scaled(0.5), "k", config=CleanupConfig())       # the default, spelled out
    assert fresh_cache.hits == 1


def test_a_print_hook_sees_every_stage_run(fresh_cache):
    generate(unary("HSwish", (8, 128)), "k")
    stages: list[str] = []
    generate(unary("HSwish", (8, 128)), "k", print_after=lambda stage, text: stages.append(stage))
    assert fresh_cache.hits == 0
    assert "mir:modulo-schedule" in stages and stages[-1] == "asm"


def test_reused_kernels_give_the_blob_of_a_fresh_compile(fresh_cache, tmp_path):
    model = tmp_path / "m.onnx"
    mobilenet_v3_small(size=64, classes=10).save(str(model), "m")
    fresh = api.write_blob(api.compile(model))
    made = fresh_cache.misses
    assert made > 0
    reused = api.write_blob(api.compile(model))
    assert fresh_cache.misses == made and fresh_cache.hits > 0    # nothing generated again
    assert reused == fresh
    fresh_cache.clear()
    assert api.write_blob(api.compile(model)) == fresh
