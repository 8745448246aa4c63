"""docs/shave-isa.md: generated sections match the tables, every instruction is documented."""

from pathlib import Path

from runtime_sim.isa.cycles import cycle_table_markdown
from vpuc.shave import INSTRUCTIONS
from vpuc.shave.isadoc import replace_generated, vpuc_sections

DOC = Path(__file__).parents[2] / "docs" / "shave-isa.md"


def regenerate(text: str) -> str:
    for name, body in {**vpuc_sections(), "cycles": cycle_table_markdown()}.items():
        text = replace_generated(text, name, body)
    return text


def test_generated_sections_are_current():
    text = DOC.read_text(encoding="utf-8")
    assert regenerate(text) == text, ("docs/shave-isa.md is stale: rewrite it with "
                                      "tests/shave/test_shave_docs.regenerate")


def test_every_instruction_is_in_the_reference():
    text = DOC.read_text(encoding="utf-8")
    for ins in INSTRUCTIONS:
        assert f"| `{ins.opcode:#05x}` | `{ins.syntax}` |" in text
