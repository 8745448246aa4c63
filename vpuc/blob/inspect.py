"""vpuc inspect: a blob or a kernel object, as a report of plain data.

The report is built once as dicts and lists and then either dumped as JSON or
rendered as text (``vpuc.blob.inspect_text``), so the two always agree.  Its
shape is versioned (``INSPECT_VERSION``, the ``"inspect_version"`` key) and
every key is documented in docs/blob-format.md ("Inspecting").

A blob is decoded with the same checked reader as ``read_blob`` but not
verified (the report says whether it verifies), so a blob the simulator would
refuse can still be looked at.  Everything the reader decodes is in the report:
the header, the tensor table, barriers, every task with its parameters, kernels
with their contracts and images, the runtime, the constants and the invocations.
Disassembly is produced only when asked for (``disasm``): for a blob, when one
kernel is selected (``--kernel``); for a kernel object, unless ``--no-disasm``.
"""

from __future__ import annotations

import hashlib
import io
import json as jsonlib
from dataclasses import asdict

from vpuc.abi.dtypes import data_type
from vpuc.abi.memref import MemRefData, unpack_dims, unpack_strides
from vpuc.abi.params import decode_params
from vpuc.ir.provenance import LayerIndex
from vpuc.blob.content import (ELEM_OF, INIT_FILE, INIT_SPLAT, LOCATION_OF, SOURCE_KIND_OF,
                               TensorRec)
from vpuc.blob.reader import decode_blob
from vpuc.blob.rebuild import rebuild, verify_program
from vpuc.diagnostics import BinLoc, UsageError, VpucError
from vpuc.abi.contract import contract_slots
from vpuc.ir.tasks import SwKernelTask
from vpuc.program_printer import describe_memref
from vpuc.shave.disassembler import disassemble, disassemble_object
from vpuc.shave.kobject import KernelObject

# Bump on any change of the JSON shape (a key added, removed, renamed or retyped).
INSPECT_VERSION = 4     # 2: the blob report's "layers" (the layer table, format 1.2)
# 3: a DPU task's "output_copies" (its output's copies on other tiles, format 1.5)
# 4: a DPU task's "quant" (the integer mode's scale table and zero points, format 1.6)


def _type(t: TensorRec) -> str:
    dims = [f"?<={d}" if t.dynamic_dims and t.dynamic_dims[i] else str(d)
            for i, d in enumerate(t.dims)]
    return "x".join(dims + [str(ELEM_OF[t.data_type])])


def _tensor_summary(t: TensorRec) -> dict:
    return {"name": t.name, "location": str(LOCATION_OF.get(t.location, t.location)),
            "type": _type(t), "dims_order": list(t.dims_order),
            "tile": None if t.tile == -1 else t.tile,
            "offset": None if t.offset == -1 else t.offset, "data_offset": t.data_offset,
            "strides_bits": list(t.strides)}


def _tensor(index: int, t: TensorRec, tensors) -> dict:
    entry = {"index": index, **_tensor_summary(t), "kind": "view" if t.base >= 0 else "buffer",
             "dims": list(t.dims),
             "dynamic_dims": [bool(d) for d in t.dynamic_dims] if t.dynamic_dims else None,
             "element_type": str(ELEM_OF[t.data_type]),
             "base": tensors[t.base].name if t.base >= 0 else None,
             "slices": [list(s) for s in t.slices] if t.base >= 0 else None, "init": None}
    if t.const_init is not None:
        ci = t.const_init
        kind = "file" if ci.kind == INIT_FILE else "splat" if ci.kind == INIT_SPLAT else "values"
        entry["init"] = {"kind": kind, "values": [n.value for n in ci.values], "path": ci.path}
    return entry


def elf_sections(data: bytes, file: str) -> list[dict]:
    """Sections of an ELF file as pyelftools sees them."""
    from elftools.elf.elffile import ELFFile
    try:
        elf = ELFFile(io.BytesIO(data))
        return [{"name": s.name, "type": str(s["sh_type"]), "size": s["sh_size"],
                 "flags": s["sh_flags"], "align": s["sh_addralign"]} for s in elf.iter_sections()]
    except Exception as exc:  # pyelftools raises many types; the object was checked already
        raise VpucError(f"pyelftools cannot read the kernel object: {exc}",
                        BinLoc(file, "ELF", 0)) from None


def _disassembly(text: bytes, file: str, tags=None) -> str:
    try:
        return disassemble(text, file, tags.starts() if tags is not None else None)
    except VpucError as exc:
        return f"// cannot disassemble: {exc.diagnostics[0].message}\n"


def _decode_args(inv, kernels_by_name, win_e: int) -> tuple[list[dict], str | None]:
    struct_bytes = inv.window_e[inv.args_offset:inv.args_offset + inv.args_size]
    try:
        decoded = decode_params(contract_slots(kernels_by_name[inv.kernel]), struct_bytes)
    except VpucError as exc:
        return [], exc.diagnostics[0].message
    args = []
    for slot, value in decoded:
        if isinstance(value, MemRefData):
            entry = {"name": slot.name, "kind": "memref", **asdict(value)}
            try:
                entry["data_type_name"] = data_type(value.dataType).name
            except VpucError:
                entry["data_type_name"] = None
            entry["dims"] = entry["strides_bits"] = None
            dims_at, strides_at = value.dimsAddr - win_e, value.stridesAddr - win_e
            if value.isStatic and value.numDims <= 64 and 0 <= dims_at and 0 <= strides_at and \
                    strides_at + 8 * value.numDims <= len(inv.window_e):
                entry["dims"] = unpack_dims(inv.window_e, value.numDims, dims_at)
                entry["strides_bits"] = unpack_strides(inv.window_e, value.numDims, strides_at)
            entry["text"] = describe_memref(value, inv.window_e, win_e)
            args.append(entry)
        else:
            args.append({"name": slot.name, "kind": "scalar", "type": str(slot.elem),
                         "value": value})
    return args, None


def blob_report(data: bytes, file: str, *, task_list: str | None = None,
                task: str | None = None, kernel: str | None = None,
                disasm: bool = False) -> dict:
    decoded = decode_blob(data, file)
    content = decoded.content
    program = rebuild(content, file, verify=False)
    try:
        verify_program(program, content, file)
        verified = "ok"
    except VpucError as exc:
        verified = exc.diagnostics[0].message
    h = content.header
    module = program.module
    tensors = content.tensors
    report: dict = {
        "inspect_version": INSPECT_VERSION,
        "file": file, "format": decoded.format, "version": "%d.%d" % decoded.version,
        "size": decoded.total, "verifies": verified,
        "header": {"module": h.module_name, "module_arch": h.module_arch,
                   "architecture": h.arch._asdict(), "compiler": h.compiler_version,
                   "options": dict(h.options), "provenance": dict(h.provenance),
                   "attributes": dict(h.attributes), "task_counts": h.task_counts._asdict(),
                   "content_hash": decoded.digest.hex()},
        "network": {"inputs": [_tensor_summary(tensors[i]) for i in h.network_inputs],
                    "outputs": [_tensor_summary(tensors[i]) for i in h.network_outputs]},
        "tensors": [_tensor(i, t, tensors) for i, t in enumerate(tensors)],
        "barriers": [{"id": b.id, "name": b.name,
                      "physical": None if b.physical_id == -1 else b.physical_id,
                      "producers": b.producer_count, "consumers": b.consumer_count}
                     for b in content.barriers],
    }
    lists = module.task_lists
    if task_list is not None:
        lists = [tl for tl in lists if str(tl.executor).lower() == task_list.lower()]
        if not lists:
            raise UsageError(f"no task list '{task_list}' in {file}; it has "
                             + ", ".join(str(t.executor) for t in module.task_lists))
    report["task_lists"] = [_task_list(tl, task, kernel) for tl in lists]
    if task is not None and not any(tl["tasks"] for tl in report["task_lists"]):
        raise UsageError(f"no task '{task}' in {file} (give a label or an index)")
    names = [k.name for k in module.kernels]
    if kernel is not None and kernel not in names:
        raise UsageError(f"no kernel '{kernel}' in {file}; it has " + ", ".join(names))
    shown = None   # kernels: all, or those the filtered tasks run
    if task_list is not None or task is not None:
        shown = {t["kernel"] for tl in report["task_lists"] if tl["executor"] == "ACT_SHAVE"
                 for t in tl["tasks"]}
    report["kernels"] = [_kernel(program, content, i, file, disasm)
                         for i, k in enumerate(content.kernels)
                         if kernel in (None, k.name) and (shown is None or k.name in shown)]
    rt = content.runtime
    report["runtime"] = None if rt is None else {
        "kernel": content.kernels[rt.kernel].name, "stack_sizes": list(rt.stack_sizes)}
    report["constants"] = _constants(tensors, content.constants)
    report["layers"] = _layers(module)
    report["invocations"] = _invocations(program, report["task_lists"], kernel)
    parts = sorted(decoded.sizes.items(), key=lambda kv: -kv[1])
    report["sections"] = [{"name": n, "size": s} for n, s in parts]
    if decoded.format == "fb":
        report["sections"].append({"name": "(vtables shared, padding, alignment)",
                                   "size": decoded.total - sum(decoded.sizes.values())})
    report["total"] = decoded.total
    return report


def _layers(module) -> list[dict]:
    """The layer table, with how many tasks each layer covers."""
    index = LayerIndex(module.layers)
    tasks: dict[str, int] = {}
    for task_list in module.task_lists:
        for t in task_list.tasks:
            layer = index.layer(t.label or "")
            if layer is not None:
                tasks[layer.key] = tasks.get(layer.key, 0) + 1
    return [{"key": layer.key, "tasks": tasks.get(layer.key, 0),
             "nodes": [{"name": n.name, "op_type": n.op_type} for n in layer.nodes]}
            for layer in module.layers]


def _constants(tensors, constants) -> list[dict]:
    """One entry per constant; ``same_as`` names the first constant of equal bytes (the
    writers store those bytes once)."""
    out, first = [], {}
    for c in constants:
        t = tensors[c.tensor]
        digest = hashlib.sha256(c.data).hexdigest()
        out.append({"tensor": t.name, "type": _type(t), "shape": list(t.dims),
                    "dtype": str(ELEM_OF[t.data_type]), "bytes": len(c.data),
                    "sha256": digest, "same_as": first.get(digest)})
        first.setdefault(digest, t.name)
    return out


def _sync(obj) -> dict:
    return {"waits": list(obj.waits), "updates": list(obj.updates)}


def _variant(v, task_mode=None) -> dict:
    entry = {"label": v.label, "start": list(v.start), "end": list(v.end), **_sync(v)}
    # The execution mode (MPE grid): the variant's own, else its task's.
    mode = v.mode or task_mode
    if mode is not None:
        entry["mode"] = str(mode)
    return entry


def _task_list(tl, task: str | None, kernel: str | None) -> dict:
    out = []
    for index, t in enumerate(tl.tasks):
        if task is not None and task not in (t.label, str(index)):
            continue
        if kernel is not None and not (isinstance(t, SwKernelTask) and t.kernel == kernel):
            continue
        entry = {"index": index, "label": t.label, **_sync(t)}
        kind = type(t).__name__
        if kind == "DmaTask":
            entry.update(src=t.src, dst=t.dst, channel=t.channel, mode=str(t.mode))
        elif kind == "DpuTask":
            entry.update(op=str(t.op), tile=t.tile, inputs=list(t.inputs), output=t.output,
                         output_copies=list(t.broadcast_outputs), weights=t.weights, bias=t.bias,
                         quant=None if t.quant is None else {
                             "scale": t.quant.scale, "in_zero_point": t.quant.in_zero_point,
                             "out_zero_point": t.quant.out_zero_point},
                         **{p: None if getattr(t, p) is None else list(getattr(t, p))
                            for p in ("kernel", "stride", "pad", "dilation")},
                         post_op=None if t.post is None else
                         {"kind": str(t.post.kind), "params": list(t.post.params)},
                         variants=[_variant(v, t.mode) for v in t.variants])
        else:
            entry.update(kernel=t.kernel, tile=t.tile,
                         inputs=[f"%{b.buffer} as %{b.alias}" for b in t.inputs],
                         outputs=[f"%{b.buffer} as %{b.alias}" for b in t.outputs],
                         scalars=[{"name": c.name, "type": str(c.elem), "value": c.value}
                                  for c in t.consts],
                         run_args=list(t.run_args))
        out.append(entry)
    return {"executor": str(tl.executor), "tasks": out}


def _kernel(program, content, index: int, file: str, disasm: bool) -> dict:
    rec = content.kernels[index]
    decl = next(k for k in program.module.kernels if k.name == rec.name)
    entry = {"name": rec.name, "source": str(SOURCE_KIND_OF[rec.source_kind].value),
             "source_ref": rec.source_ref,
             "params": [{"name": p.name, "kind": "memref" if p.is_memref else "scalar",
                         "type": p.type_str()} for p in decl.params],
             "image_of": None if rec.image_kernel in (-1, index) else
             content.kernels[rec.image_kernel].name, "image": None}
    img = rec.image
    if img is not None:
        where = f"{file}:@{rec.name}"
        built = program.kernels[rec.name]
        entry["image"] = {
            "origin": img.origin, "entry": img.entry, "text_size": len(img.text),
            "rodata_size": len(img.rodata), "rodata_offset": img.rodata_offset,
            "data_size": len(img.data), "elf_size": len(img.elf),
            "elf_sections": elf_sections(img.elf, where), "graph": built.graph,
            "tags": _tags(built.tags),
            "disassembly": _disassembly(img.text, where, built.tags) if disasm else None}
    return entry


def _invocations(program, lists: list[dict], kernel: str | None) -> list[dict]:
    shown = {t["index"] for tl in lists if tl["executor"] == "ACT_SHAVE" for t in tl["tasks"]}
    kernels = {k.name: k for k in program.module.kernels}
    win_e = program.arch.window_base("WIN_E")
    act = next((tl for tl in program.module.task_lists if str(tl.executor) == "ACT_SHAVE"), None)
    out = []
    for inv in program.invocations:
        if inv.task_index not in shown or kernel not in (None, inv.kernel):
            continue
        args, error = _decode_args(inv, kernels, win_e)
        label = act.tasks[inv.task_index].label if act else None
        out.append({"task": inv.task_index, "label": label, "kernel": inv.kernel,
                    "tile": inv.tile, "window_size": len(inv.window_e),
                    "args_offset": inv.args_offset, "args_size": inv.args_size, "args": args,
                    "error": error,
                    "bytes": inv.window_e[inv.args_offset:inv.args_offset + inv.args_size].hex()})
    return out


def _tags(tags) -> list[dict] | None:
    """A generated kernel's expression tags (``.note.vpuc.graph``) as ranges of .text
    instruction indices; None for other kernels."""
    if tags is None:
        return None
    out, first = [], 0
    for count, label in tags.runs:
        out.append({"first": first, "count": count, "label": tags.label(label)})
        first += count
    return out


def kernel_object_report(data: bytes, file: str, disasm: bool = True) -> dict:
    obj = KernelObject.from_elf(bytes(data), file)
    return {"inspect_version": INSPECT_VERSION, "file": file, "kind": "kernel object",
            "size": len(data), "sections": elf_sections(bytes(data), file),
            "symbols": [{"name": s.name, "section": s.section, "value": s.value, "size": s.size,
                         "global": s.is_global, "type": int(s.type)} for s in obj.symbols],
            "relocations": [{"section": r.section, "offset": r.offset, "type": int(r.type),
                             "symbol": r.symbol, "addend": r.addend} for r in obj.relocations],
            "graph": obj.graph, "tags": _tags(obj.tags),
            "disassembly": disassemble_object(obj, obj.tags.starts() if obj.tags else None)
            if disasm else None}


# --- entry points -------------------------------------------------------------------

def _dump(report: dict) -> str:
    return jsonlib.dumps(report, indent=2) + "\n"


def inspect_blob(data: bytes, file: str, *, json: bool = False, task_list: str | None = None,
                 task: str | None = None, kernel: str | None = None,
                 disasm: bool | None = None) -> str:
    """``disasm`` None: disassemble only when ``kernel`` selects one kernel."""
    from vpuc.blob.inspect_text import render_blob
    report = blob_report(data, file, task_list=task_list, task=task, kernel=kernel,
                         disasm=kernel is not None if disasm is None else disasm)
    return _dump(report) if json else render_blob(report)


def inspect_kernel_object(data: bytes, file: str, json: bool = False,
                          disasm: bool = True) -> str:
    from vpuc.blob.inspect_text import render_kernel_object
    report = kernel_object_report(data, file, disasm)
    return _dump(report) if json else render_kernel_object(report)


def inspect_file(data: bytes, file: str, *, json: bool = False, task_list: str | None = None,
                 task: str | None = None, kernel: str | None = None, no_disasm: bool = False,
                 section: str | None = None, hexdump: bool = False) -> str:
    """A blob (either format) or a single SHAVE kernel object, told apart by their headers.

    Disassembly: of a blob's kernel when ``kernel`` selects it, of a kernel object
    always; ``no_disasm`` turns both off.  ``section`` reports one part of the file
    instead (``hexdump``: with its bytes); see ``vpuc.blob.inspect_section``."""
    from vpuc.blob.elf_records import EM_VPUC_NPU
    from vpuc.blob.reader import detect_format
    from vpuc.shave.elf_layout import EM_VPUC_SHAVE
    data = bytes(data)
    if hexdump and section is None:
        raise UsageError("--hex dumps a part of the file: give it with --section NAME")
    is_object = False
    if data[:4] == b"\x7fELF" and len(data) >= 20:
        machine = int.from_bytes(data[18:20], "little")
        is_object = machine == EM_VPUC_SHAVE
        if not is_object and machine != EM_VPUC_NPU:
            raise VpucError(f"ELF e_machine {machine:#x} is neither a vpuc blob "
                            f"({EM_VPUC_NPU:#x}) nor a SHAVE kernel object ({EM_VPUC_SHAVE:#x})",
                            BinLoc(file, "ELF header", 18))
    if section is not None:
        if task_list or task or kernel:
            raise UsageError("--section shows one part of the file; it does not combine with "
                             "--task-list, --task or --kernel")
        from vpuc.blob.inspect_section import render_section, section_report
        fmt = "object" if is_object else detect_format(data, file)
        report = section_report(data, file, section, fmt, INSPECT_VERSION)
        return _dump(report) if json else render_section(report, hexdump)
    if is_object:
        if task_list or task or kernel:
            raise UsageError("--task-list, --task and --kernel apply to blobs, not to a "
                             "kernel object")
        return inspect_kernel_object(data, file, json=json, disasm=not no_disasm)
    return inspect_blob(data, file, json=json, task_list=task_list, task=task, kernel=kernel,
                        disasm=kernel is not None and not no_disasm)
