"""Blobs: the compiled Program as a FlatBuffer (schema/vpu_blob.fbs) or an ELF container.

    write_blob(program, fmt="fb" | "elf", options) -> bytes
    read_blob(data, file) -> Program
    inspect_blob(data, file, json=False, task_list=None, task=None, kernel=None) -> str
    inspect_kernel_object(data, file, json=False) -> str

Both formats hold the same content (``vpuc.blob.content``) and read back into
equal Programs.  docs/blob-format.md describes the layouts.
"""

from __future__ import annotations

from vpuc.blob.content import FORMAT_VERSION, content_hash
from vpuc.blob.field_check import reported
from vpuc.blob.flatten import flatten
from vpuc.blob.reader import decode_blob, detect_format, read_blob
from vpuc.diagnostics import UsageError
from vpuc.program import Program

FORMATS = ("fb", "elf")


def write_blob(program: Program, fmt: str = "fb", options: dict[str, str] | None = None) -> bytes:
    """Serialize a compiled program.  Deterministic: equal programs and options
    give identical bytes.  ``options`` are recorded in the header as given."""
    if fmt not in FORMATS:
        raise UsageError(f"unknown blob format '{fmt}'; expected one of: {', '.join(FORMATS)}")
    content = flatten(program, options)
    with reported(content, program):
        if fmt == "fb":
            from vpuc.blob.writer_fb import write_fb
            return write_fb(content)
        from vpuc.blob.writer_elf import write_elf
        return write_elf(content)


def inspect_blob(data: bytes, file: str = "<blob>", *, json: bool = False,
                 task_list: str | None = None, task: str | None = None,
                 kernel: str | None = None) -> str:
    from vpuc.blob.inspect import inspect_blob as _inspect
    return _inspect(data, file, json=json, task_list=task_list, task=task, kernel=kernel)


def inspect_kernel_object(data: bytes, file: str = "<kernel>", json: bool = False) -> str:
    from vpuc.blob.inspect import inspect_kernel_object as _inspect
    return _inspect(data, file, json=json)


__all__ = ["FORMATS", "FORMAT_VERSION", "write_blob", "read_blob", "decode_blob",
           "detect_format", "inspect_blob", "inspect_kernel_object"]
