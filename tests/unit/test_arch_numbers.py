"""Numbers in an architecture file are checked at load, each error at its line in the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from vpuc.arch import ARCH_DIR, load_arch
from vpuc.cli import main
from vpuc.diagnostics import VpucError

REPO = Path(__file__).resolve().parents[2]
SHIPPED = (ARCH_DIR / "npu37xx.toml").read_text()


def _arch_file(tmp_path: Path, old: str, new: str) -> Path:
    assert old in SHIPPED
    path = tmp_path / "bad.toml"
    path.write_text(SHIPPED.replace(old, new))
    return path


@pytest.mark.parametrize("old, new, message", [
    ("channels = 2 ", "channels = 300", "channels = 300 is out of range; expected 1..256 "
     "(a DMA task holds its channel as a uint8)"),
    ("count = 64 ", "count = 40000", "count = 40000 is out of range; expected 1..32768 "
     "(a physical barrier id is an int16)"),
    ("address_bits = 32 ", "address_bits = 40", "address_bits = 40 is out of range; "
     "expected 1..32 (MemRefData.dataAddr is a uint32)"),
    ("\nWIN_F = 0x1F000000 ", "\nWIN_F = 0xFFF00000", "WIN_F = 4293918720 is out of range; "
     "expected 0..4278190080 (a window ends within the 32-bit address space)"),
])
def test_a_number_out_of_range_is_located_in_the_file(tmp_path, old, new, message):
    path = _arch_file(tmp_path, old, new)
    with pytest.raises(VpucError) as info:
        load_arch(str(path))
    (diag,) = info.value.diagnostics
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if new.strip() in text)
    assert diag.message == message
    assert (diag.loc.file, diag.loc.line) == (str(path), line)


def test_compile_with_a_bad_arch_file_is_a_located_error(tmp_path, capsys):
    path = _arch_file(tmp_path, "count = 2 ", "count = 1000")
    code = main(["compile", str(REPO / "examples" / "clamp.vir"), "--arch", str(path),
                 "-o", str(tmp_path / "x.blob")])
    err = capsys.readouterr().err
    assert code == 1
    assert err.startswith(f"{path}:12:1: error: count = 1000 is out of range; expected 1..256 "
                          "(tasks hold a tile as a uint8)")


def test_the_shipped_files_load():
    for path in ARCH_DIR.glob("*.toml"):
        load_arch(str(path))
