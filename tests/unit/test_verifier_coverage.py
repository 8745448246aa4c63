"""Every diagnostic the verifier and the parser can emit has a golden test.

Each ``bag.error(...)`` / ``bag.warning(...)`` call site in the verifier, the
symbol table, the parser and allocate-cmx is found with ``ast``; the longest
literal piece of its message must appear in some ``tests/golden/errors`` or
``tests/golden/syntax`` expected file.  A new rule without a golden fails here.
"""

from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted((ROOT / "vpuc" / "verifier").glob("*.py")) + [
    ROOT / "vpuc" / "ir" / "symbols.py",
    ROOT / "vpuc" / "vir" / "parser.py",
    ROOT / "vpuc" / "passes" / "allocate_cmx.py",
]
# Sites that cannot fire through the CLI, with the reason.
UNREACHABLE = {
    # Every element type is a whole number of bytes, so a view cannot start mid-byte.
    " starts inside a byte; expected a byte-aligned start",
    # vpuc/verifier/dpu_channels.py judges only programs lower-graph made, which meet it by
    # construction (lower_dpu_channels); tests/onnx_import/test_dpu_channels.py pins these.
    " (pad the input and weights with zero channels)",
    "); a DPU workload of this op takes ",
    " (a compressed convolution's input) or a multiple of ",
    "dpu permute variant covers channels ",
}


def _literal_parts(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr):
        return [v.value for v in node.values if isinstance(v, ast.Constant)]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _literal_parts(node.left) + _literal_parts(node.right)
    if isinstance(node, ast.IfExp):
        return _literal_parts(node.body)
    return []


def message_sites() -> list[tuple[str, str]]:
    sites = []
    for path in SOURCES:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("error", "warning") and len(node.args) >= 2):
                continue
            parts = [p for p in _literal_parts(node.args[1]) if len(p.strip()) >= 6]
            if not parts:
                continue
            key = max(parts, key=len)
            sites.append((f"{path.relative_to(ROOT)}:{node.lineno}", key))
    return sites


@lru_cache(maxsize=1)
def golden_text() -> str:
    texts = []
    for suite in ("errors", "syntax"):
        texts += [p.read_text(encoding="utf-8")
                  for p in (ROOT / "tests" / "golden" / suite).glob("*.expected")]
    return "\n".join(texts)


SITES = message_sites()


def test_sites_found() -> None:
    assert len(SITES) > 60


@pytest.mark.parametrize("where,fragment", SITES, ids=[s[0] for s in SITES])
def test_every_message_has_a_golden(where: str, fragment: str) -> None:
    if fragment in UNREACHABLE:
        pytest.skip("unreachable through the CLI")
    assert fragment in golden_text(), (
        f"{where}: no golden in tests/golden/errors or syntax shows {fragment!r}")


def _hints() -> list[str]:
    from vpuc.vir.syntax import CHARACTER_SLIPS, COMMON_SLIPS
    return list(COMMON_SLIPS) + list(CHARACTER_SLIPS.values())


@pytest.mark.parametrize("hint", _hints())
def test_every_slip_hint_has_a_golden(hint: str) -> None:
    syntax = "\n".join(p.read_text(encoding="utf-8")
                       for p in (ROOT / "tests" / "golden" / "syntax").glob("*.expected"))
    assert f"hint: {hint}\n" in syntax, f"no golden in tests/golden/syntax shows the hint {hint!r}"
