"""A compiled program's kernels run from the objects the compiler built, not their ELF read back.

``assign-windows`` keeps beside each ``KernelImage.elf`` the ``KernelObject`` it
wrote the bytes from (``KernelImage.built``); the ACT SHAVE engine takes that object
instead of parsing the ELF.  That is only the same run if reading the bytes back
gives the same object: checked here for every library kernel and the zoo's
generated kernels, and an image whose bytes were replaced is parsed again.
"""

from __future__ import annotations

import dataclasses

import pytest

import runtime_sim.engines.shave as shave
from runtime_sim.engines.shave import kernel_object
from tests.sim.simlib import REPO, compile_vir
from vpuc.api import compile
from vpuc.onnx_import import zoo
from vpuc.shave import KernelObject

EXAMPLES = sorted((REPO / "examples").glob("*.vir"))


def _zoo_programs(folder):
    for name, sizes in (("encoder_layer", {"seq": 24, "width": 32, "heads": 2}),
                        ("mobilenet_v3_small", {"size": 32})):
        path = folder / f"{name}.onnx"
        zoo.ZOO[name](seed=0, **sizes).save(path, name)
        yield compile(str(path))


def _examples():
    for path in EXAMPLES:
        try:
            yield compile_vir(path)
        except Exception:  # noqa: BLE001 -- examples that do not compile have no images
            continue


def test_reading_a_built_object_back_gives_the_same_object(tmp_path, monkeypatch):
    monkeypatch.setattr(shave, "_OBJECTS", {})
    checked = set()
    for program in [*_zoo_programs(tmp_path), *_examples()]:
        for name, image in program.kernels.items():
            assert image.built is not None and image.built[0] is image.elf, name
            taken = kernel_object(image.elf, f"@{name}", image.built)
            assert taken is not image.built[1]            # renamed, the compiler's untouched
            assert taken == KernelObject.from_elf(image.elf, f"@{name}"), name
            checked.add(image.origin)
    assert sum(origin.startswith("library") for origin in checked) >= 5
    assert "generated" in checked


def test_an_image_with_other_bytes_is_read_from_them(tmp_path, monkeypatch):
    monkeypatch.setattr(shave, "_OBJECTS", {})
    program = next(_zoo_programs(tmp_path))
    name, image = next((n, i) for n, i in program.kernels.items() if i.origin == "generated")
    other = next(i for i in program.kernels.values() if i.elf != image.elf)
    moved = dataclasses.replace(image, elf=other.elf)      # ``built`` still the old object
    found = kernel_object(moved.elf, f"@{name}", moved.built)
    assert found == KernelObject.from_elf(other.elf, f"@{name}")
    assert found.text != image.built[1].text


@pytest.mark.parametrize("timing_only", [True, False])
def test_built_objects_and_parsed_ones_run_alike(tmp_path, monkeypatch, timing_only):
    from vpuc.api import simulate
    program = next(_zoo_programs(tmp_path))
    monkeypatch.setattr(shave, "_OBJECTS", {})
    built = simulate(program, timing_only=timing_only)
    for name, image in program.kernels.items():
        monkeypatch.setattr(image, "built", None)
    monkeypatch.setattr(shave, "_OBJECTS", {})
    parsed = simulate(program, timing_only=timing_only)
    assert built.cycles == parsed.cycles
    assert built.result.timeline.end == parsed.result.timeline.end
    for key, value in built.outputs.items():
        assert value.tobytes() == parsed.outputs[key].tobytes()
