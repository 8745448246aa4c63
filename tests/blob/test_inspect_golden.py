"""`vpuc inspect` golden outputs, through the command line: a blob compiled from an
example with `vpuc compile`, then inspected; stdout (or, for usage errors, stderr)
compared byte for byte with tests/blob/golden/NAME.expected.

Regenerate with ``VPUC_UPDATE_GOLDEN=1 pytest tests/blob/test_inspect_golden.py``
and review the diff.
"""

from __future__ import annotations

import os
import subprocess

import pytest
from blob_testlib import REPO, tool

from vpuc.cli import main

GOLDEN = REPO / "tests" / "blob" / "golden"
UPDATE = os.environ.get("VPUC_UPDATE_GOLDEN") == "1"

# name -> (example, blob format, inspect arguments after the blob, exit code)
CASES = {
    "conv_2tiles": ("conv_2tiles", "fb", [], 0),
    "graph_conv": ("graph_conv", "fb", [], 0),
    "graph_conv_dpu_elf": ("graph_conv", "elf", ["--task-list", "DPU"], 0),
    "dynamic_shapes": ("dynamic_shapes", "elf", [], 0),
    "clamp_kernel_disasm": ("clamp", "fb", ["--kernel", "runtime"], 0),
    "clamp_kernel_no_disasm": ("clamp", "fb", ["--kernel", "builtin_clamp", "--no-disasm"], 0),
    "clamp_section_elf_hex": ("clamp", "elf", ["--section", ".vpuc.tensors", "--hex"], 0),
    "clamp_section_fb_hex": ("clamp", "fb", ["--section", "tensors[2]", "--hex"], 0),
    "clamp_section_fb_vector": ("clamp", "fb", ["--section", "header.network_inputs"], 0),
    "clamp_section_unknown_elf": ("clamp", "elf", ["--section", ".text"], 2),
    "clamp_section_unknown_fb": ("clamp", "fb", ["--section", "tensor[0]"], 2),
    "clamp_hex_without_section": ("clamp", "fb", ["--hex"], 2),
}


def run_cli(args: list[str], capsys) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        code = main(args)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def compile_blob(example: str, fmt: str, directory, capsys, monkeypatch) -> str:
    monkeypatch.chdir(REPO)
    blob = directory / f"{example}.{'blob' if fmt == 'fb' else 'elf'}"
    code, _, err = run_cli(["compile", f"examples/{example}.vir", "-o", str(blob), "--format",
                            fmt], capsys)
    assert code == 0, err
    monkeypatch.chdir(directory)
    return blob.name


@pytest.mark.parametrize("name", sorted(CASES))
def test_inspect_golden(name, tmp_path, capsys, monkeypatch):
    example, fmt, args, exit_code = CASES[name]
    blob = compile_blob(example, fmt, tmp_path, capsys, monkeypatch)
    monkeypatch.setenv("COLUMNS", "100")
    code, out, err = run_cli(["inspect", blob, *args], capsys)
    assert "Traceback" not in err and "internal error" not in err, err
    actual = out if exit_code == 0 else err
    expected = GOLDEN / f"{name}.expected"
    if UPDATE:
        GOLDEN.mkdir(parents=True, exist_ok=True)
        expected.write_text(actual, encoding="utf-8")
    assert code == exit_code, err
    if exit_code == 0:
        assert err == ""
    assert actual == expected.read_text(encoding="utf-8")


def test_hex_matches_hexdump(tmp_path, capsys, monkeypatch):
    """--section --hex prints what `hexdump -C -s OFFSET -n SIZE` prints, for an ELF section
    and for a FlatBuffer vector (the longest parts, with squeezed runs of equal lines)."""
    hexdump = tool("hexdump")
    for fmt, section in (("elf", ".text.ActKernelCode"), ("elf", ".vpuc.header"),
                         ("fb", "kernel_data[0].data"), ("fb", "header")):
        blob = compile_blob("clamp", fmt, tmp_path, capsys, monkeypatch)
        code, out, err = run_cli(["inspect", blob, "--section", section, "--hex"], capsys)
        assert code == 0, err
        head, dump = out.split("\n", 1)
        offset, size = head.rsplit(" bytes at file offset ", 1)[1], head.split(", ")[-1]
        size = int(head.rsplit(" bytes at", 1)[0].rsplit(" ", 1)[1])
        done = subprocess.run([hexdump, "-C", "-s", str(int(offset, 16)), "-n", str(size), blob],
                              capture_output=True, text=True, check=True)
        assert dump == done.stdout, section
