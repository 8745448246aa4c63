"""The docs and code cite the public design documents by name (e.g. "Software Layers
HLD, §Kernel Representation in the Compiler"), never files outside the repository."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TRACKED = ("README.md", "docs", "vpuc", "runtime_sim", "schema", "kernels", "examples", "bench", "tests")
SUFFIXES = {".md", ".py", ".fbs", ".toml", ".s", ".vir", ".inc"}
# Built from pieces so this file does not match itself.
OUTSIDE = re.compile("|".join([r"shared" + "/", r"\.\./" + "shared", r"\bseeds/",
                               r"(software_layers_hld|snippets_design_guide|gpu_conv_kernel_generator"
                               r"|gpu_graph_data_structures)\." + "md",
                               r"\bthe " + r"seed\b", r"\bseed" + "'s"]), re.IGNORECASE)


def _files():
    for top in TRACKED:
        path = REPO / top
        candidates = [path] if path.is_file() else path.rglob("*")
        for file in candidates:
            if file.suffix in SUFFIXES and ".venv" not in file.parts and file.is_file():
                yield file


def test_no_citation_points_outside_the_repository():
    hits = []
    for file in _files():
        for number, line in enumerate(file.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if OUTSIDE.search(line):
                hits.append(f"{file.relative_to(REPO)}:{number}: {line.strip()}")
    assert not hits, "cite the design document by name instead:\n" + "\n".join(hits)
