"""Every registered pass: name, class and file agree (xDSL's convention)."""

import inspect
from pathlib import Path

import pytest

from vpuc.passes.registry import PASSES, PIPELINES


def camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("-")) + "Pass"


@pytest.mark.parametrize("name,cls", sorted(PASSES.items()))
def test_pass_name_matches_class_and_file(name, cls):
    assert cls.name == name
    assert cls.__name__ == camel(name)
    assert Path(inspect.getfile(cls)).name == name.replace("-", "_") + ".py"
    doc = inspect.getdoc(inspect.getmodule(cls))
    assert doc and doc.startswith(f"{name}:"), "module docstring starts with the pass name"
    assert "Expects:" in doc and "Guarantees:" in doc


def test_pipelines_name_registered_passes():
    for pipeline in PIPELINES.values():
        assert all(name in PASSES for name in pipeline)
