"""The ELF sections read a column at a time (vpuc/blob/elf_columns.py): the same records
as the row-wise reads, and each bad field refused with its section, offset and message."""

import struct

import pytest
from blob_testlib import REPO, compiled

import vpuc.blob.reader as reader_module
from vpuc.blob import decode_blob, read_blob, write_blob
from vpuc.blob import elf_records as R
from vpuc.blob.elf_columns import record_dtype
from vpuc.diagnostics import VpucError
from vpuc.shave import elf_layout as elf

CLAMP = REPO / "examples" / "clamp.vir"
CONV = REPO / "examples" / "conv_2tiles.vir"
DWCONV = REPO / "examples" / "dwconv_pool.vir"


@pytest.fixture(autouse=True)
def no_hash_check(monkeypatch):
    monkeypatch.setattr(reader_module, "CHECK_CONTENT_HASH", False)


def patched(data: bytes, section: str, record, row: int, field: str, value: int) -> bytes:
    image = elf.read_elf32(data, "x")
    sec = next(s for s in image.sections if s.name == section)
    code = dict(record.fields)[field]
    out = bytearray(data)
    struct.pack_into("<" + code, out, sec.header.sh_offset + row * record.size
                     + record.offsets[field], value)
    return bytes(out)


def refusal(data: bytes):
    with pytest.raises(VpucError) as info:
        read_blob(data, "bad.elf")
    return info.value.diagnostics[0]


def test_the_dtypes_are_the_records_layouts():
    for record in (R.TensorRecord, R.DmaRecord, R.DpuInvariantRecord, R.DpuVariantRecord,
                   R.ActKernelInvocationRecord, R.ScalarArgRecord):
        dtype = record_dtype(record)
        assert dtype.itemsize == record.size
        assert [dtype.fields[name][1] for name, _ in record.fields] == \
            [record.offsets[name] for name, _ in record.fields]


@pytest.mark.parametrize("path", [CLAMP, CONV, DWCONV], ids=lambda p: p.stem)
def test_columns_read_the_records_the_flatbuffer_holds(path):
    program = compiled(path)
    fb = decode_blob(write_blob(program, "fb"), "x.blob")
    assert decode_blob(write_blob(program, "elf"), "x.elf").content == fb.content


def test_a_label_outside_the_string_table():
    data = write_blob(compiled(CLAMP), "elf")
    diag = refusal(patched(data, ".text.dmaTasks0", R.DmaRecord, 1, "label", 0x7FFFFF))
    assert diag.message == "string offset 0x7fffff is outside the string table"
    assert str(diag.loc) == f"bad.elf: section {R.STRTAB} at offset 0x7fffff"


def test_a_label_inside_another_string_reads_as_the_row_wise_read_does():
    """An offset that is no string's start is left to the row-wise read (a C string from
    there on): both reads give the same records."""
    from vpuc.blob.reader_elf import ElfReader
    data = write_blob(compiled(CLAMP), "elf")
    name = next(t for t in decode_blob(data, "x.elf").content.tensors if len(t.name) > 1).name
    strtab = next(s for s in elf.read_elf32(data, "x").sections if s.name == R.STRTAB).data
    inside = strtab.index(name.encode() + b"\0") + 1
    bad = patched(data, ".text.dmaTasks0", R.DmaRecord, 1, "label", inside)
    reader = ElfReader(bad, "x.elf")
    content, _ = reader.content()
    labels = [t.label for t in content.task_lists[0].tasks]
    assert labels[1] == name[1:]
    assert labels == [reader.string(o) for o in
                      reader.columns.table(reader.section(".text.dmaTasks0",
                                                          R.VpucShType.SHT_VPUC_DMA_TASKS),
                                           R.DmaRecord)["label"].tolist()]


def test_a_list_past_its_pool():
    data = write_blob(compiled(CLAMP), "elf")
    diag = refusal(patched(data, ".text.dmaTasks0", R.DmaRecord, 0, "waits_count", 1 << 20))
    assert diag.message.startswith(f"list of {1 << 20} at ")
    assert "runs past the pool (" in diag.message
    assert str(diag.loc).startswith(f"bad.elf: section {R.POOL32} at offset ")


def test_a_tensor_with_dynamic_bits_past_its_rank():
    data = write_blob(compiled(CLAMP), "elf")
    diag = refusal(patched(data, R.TENSORS, R.TensorRecord, 0, "dynamic_mask", 1 << 20))
    assert diag.message.startswith("tensor #0: dynamic mask 0x100000 has bits past its rank")
    assert str(diag.loc).startswith(f"bad.elf: section {R.TENSORS}")


def test_variants_of_another_task():
    data = write_blob(compiled(CONV), "elf")
    diag = refusal(patched(data, R.DPU_VARIANTS, R.DpuVariantRecord, 0, "invariant", 1))
    assert diag.message == "variants of DPU task #0 are out of range or belong to another task"
    name = next(s.name for s in elf.read_elf32(data, "x").sections
                if s.header.sh_type == R.VpucShType.SHT_VPUC_DPU_INVARIANTS)
    far = refusal(patched(data, name, R.DpuInvariantRecord, 1, "variants_start", 1 << 30))
    assert far.message == "variants of DPU task #1 are out of range or belong to another task"


def test_scalars_and_images_outside_their_sections():
    data = write_blob(compiled(CLAMP), "elf")
    name = next(s.name for s in elf.read_elf32(data, "x").sections
                if s.header.sh_type == R.VpucShType.SHT_VPUC_ACT_KERNEL_INVOCATIONS)
    rec = R.ActKernelInvocationRecord
    diag = refusal(patched(data, name, rec, 0, "scalars_start", 1000))
    assert diag.message.startswith("scalars 1000+") and "run past the table" in diag.message
    diag = refusal(patched(data, name, rec, 0, "image_size", 1 << 24))
    assert diag.message == f"{1 << 24} bytes at 0x0 run past the section (168 bytes)"
    assert diag.loc.section == R.KERNEL_PARAMS
