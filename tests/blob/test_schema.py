"""schema/vpu_blob.fbs: the committed Python is what flatc generates, and the
schema as vpuc parses it agrees with the generated code."""

import importlib
import re
import subprocess
from pathlib import Path

from blob_testlib import REPO, tool

from vpuc.blob.content import FORMAT_VERSION
from vpuc.blob.fb_schema import SCHEMA_PATH, load_schema

GENERATED = REPO / "schema" / "vpu_blob"


def test_generated_python_is_up_to_date(tmp_path):
    flatc = tool("flatc")
    subprocess.run([flatc, "--python", "--python-no-type-prefix-suffix", "-o", str(tmp_path),
                    str(SCHEMA_PATH)], check=True, capture_output=True)
    fresh = tmp_path / "schema" / "vpu_blob"
    names = sorted(p.name for p in fresh.glob("*.py"))
    assert names == sorted(p.name for p in GENERATED.glob("*.py")), \
        "schema/vpu_blob/ differs in files: regenerate it (see the head of vpu_blob.fbs)"
    for name in names:
        assert (fresh / name).read_bytes() == (GENERATED / name).read_bytes(), \
            f"schema/vpu_blob/{name} is stale: regenerate it (see the head of vpu_blob.fbs)"
    assert (tmp_path / "schema" / "__init__.py").read_bytes() == \
        (REPO / "schema" / "__init__.py").read_bytes()


def test_schema_rules_are_written_in_it():
    text = SCHEMA_PATH.read_text()
    assert "EVOLUTION RULE" in text and "append-only" in text
    assert 'file_identifier "VPUB";' in text


def test_namespace_does_not_start_with_a_table_name():
    schema = load_schema()
    first = schema.namespace.split(".")[0]
    assert first not in {name.lower() for name in schema.tables}


def test_version_lives_in_the_schema_and_comes_first():
    schema = load_schema()
    assert schema.tables[schema.root].fields[0].name == "header"
    assert schema.tables["SummaryHeader"].fields[0].name == "version"
    from schema.vpu_blob.VersionMajor import VersionMajor
    from schema.vpu_blob.VersionMinor import VersionMinor
    assert FORMAT_VERSION == (VersionMajor.Current, VersionMinor.Current)


def test_parsed_layout_matches_the_generated_builders():
    """Each table has as many slots as the generated Start() opens, and each
    field's Add function writes the slot vpuc's decoder reads."""
    schema = load_schema()
    for name, table in schema.tables.items():
        source = (GENERATED / f"{name}.py").read_text()
        assert f"builder.StartObject({len(table.fields)})" in source, name
        for field in table.fields:
            camel = "".join(p[:1].upper() + p[1:] for p in field.name.split("_"))
            match = re.search(rf"def Add{camel}\(builder, \w+\):\n\s+builder\.Prepend\w+Slot"
                              rf"\((\d+),", source)
            assert match and int(match.group(1)) == field.index, f"{name}.{field.name}"
    for name, struct in schema.structs.items():
        module = importlib.import_module(f"schema.vpu_blob.{name}")
        assert getattr(module, name).SizeOf() == struct.size, name


def test_enum_codes_come_from_the_schema():
    from vpuc.blob import content
    schema = load_schema()
    for table, enum in ((content.LOCATION_CODE, "MemoryLocation"),
                        (content.EXECUTOR_CODE, "Executor"), (content.DPU_OP_CODE, "DpuOp"),
                        (content.DMA_MODE_CODE, "DmaMode"), (content.POST_OP_CODE, "PostOpKind"),
                        (content.SOURCE_KIND_CODE, "KernelSourceKind")):
        values = schema.enums[enum][1]
        assert {m.name: code for m, code in table.items()} == values, enum
    from vpuc.abi.dtypes import data_type
    for elem, code in content.ELEM_CODE.items():
        assert code == int(data_type(elem.value).code)


def test_schema_file_is_package_data():
    text = (REPO / "pyproject.toml").read_text()
    assert "*.fbs" in text, "schema/vpu_blob.fbs must ship with the schema package"
    assert Path(SCHEMA_PATH).exists()


def test_docs_describe_every_table_record_and_section():
    from vpuc.blob import elf_records as R
    doc = (REPO / "docs" / "blob-format.md").read_text()
    schema = load_schema()
    for name, table in schema.tables.items():
        assert f"**`{name}`**" in doc, name
        for field in table.fields:
            assert f"`{field.name}`" in doc, f"{name}.{field.name}"
    for name in list(schema.enums) + list(schema.structs):
        assert f"`{name}`" in doc, name
    records = [getattr(R, n) for n in dir(R) if n.endswith("Record") or n == "VersionNote"]
    for record in records:
        assert f"**{record.name}** ({record.size}" in doc, record.name
        for field, _ in record.fields:
            assert f"`{field}`" in doc, f"{record.name}.{field}"
    for member in (*R.VpucShType, *R.VpucShFlags, *R.VpucRelocType):
        assert member.name in doc and f"{int(member):#x}".upper()[2:] in doc.upper(), member
    for section in (R.NOTE, R.HEADER, R.STRTAB, R.POOL32, R.POOL64, R.META, R.MAPPED_INFERENCE,
                    R.TENSORS, R.BARRIERS, R.DPU_INVARIANTS, R.DPU_VARIANTS, R.ACT_INVOCATIONS,
                    R.ACT_RANGES, R.CONTRACTS, R.SCALARS, R.KERNEL_CODE, R.KERNEL_DATA,
                    R.KERNEL_OBJECTS, R.KERNEL_PARAMS, R.CONSTANT_RECORDS, R.CONSTANT_DATA,
                    R.STACKS, R.DDR_SCRATCH, R.NETWORK_INPUTS, R.NETWORK_OUTPUTS):
        assert f"`{section}`" in doc, section


def test_fast_builder_writes_what_the_stock_builder_writes():
    import flatbuffers
    from blob_testlib import SOURCES, _compiled

    from vpuc.blob.flatten import flatten
    from vpuc.blob.writer_fb import write_fb
    programs = [p for p in map(_compiled, SOURCES) if not isinstance(p, str)]
    assert programs
    for program in programs:
        content = flatten(program, {"k": "v"})
        assert write_fb(content) == write_fb(content, flatbuffers.Builder)
