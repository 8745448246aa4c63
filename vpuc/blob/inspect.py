"""vpuc inspect: a blob or a kernel object, as text or as JSON with the same content.

The report is built once as plain data (dicts and lists) and then either
dumped as JSON or rendered as text, so the two always agree.  A blob is
decoded with the same checked reader as ``read_blob`` but not verified (the
report says whether it verifies), so a blob the simulator would refuse can
still be looked at.  Kernel ELF objects are listed with pyelftools and
disassembled with vpuc's disassembler.
"""

from __future__ import annotations

import io
import json as jsonlib
from dataclasses import asdict

from vpuc.abi.dtypes import data_type
from vpuc.abi.memref import MemRefData, unpack_dims, unpack_strides
from vpuc.abi.params import decode_params
from vpuc.blob.content import ELEM_OF, LOCATION_OF
from vpuc.blob.reader import decode_blob
from vpuc.blob.rebuild import rebuild, verify_program
from vpuc.diagnostics import BinLoc, UsageError, VpucError
from vpuc.passes.pack_kernel_args import contract_slots
from vpuc.program_printer import describe_memref
from vpuc.shave.disassembler import disassemble, disassemble_object
from vpuc.shave.kobject import KernelObject


def _tensor_summary(t) -> dict:
    return {"name": t.name, "location": str(LOCATION_OF.get(t.location, t.location)),
            "type": "x".join(str(d) for d in t.dims) + f"x{ELEM_OF[t.data_type]}",
            "dims_order": list(t.dims_order), "tile": None if t.tile == -1 else t.tile,
            "offset": None if t.offset == -1 else t.offset, "data_offset": t.data_offset,
            "strides_bits": list(t.strides)}


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


def _decode_args(program, inv, kernels_by_name, win_e: int) -> tuple[list[dict], str | None]:
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
                task: str | None = None, kernel: str | None = None) -> dict:
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
    report: dict = {
        "file": file, "format": decoded.format, "version": "%d.%d" % decoded.version,
        "size": decoded.total, "verifies": verified,
        "header": {"module": h.module_name, "module_arch": h.module_arch,
                   "architecture": h.arch._asdict(), "compiler": h.compiler_version,
                   "options": dict(h.options), "provenance": dict(h.provenance),
                   "attributes": dict(h.attributes), "task_counts": h.task_counts._asdict(),
                   "content_hash": decoded.digest.hex()},
        "network": {"inputs": [_tensor_summary(content.tensors[i]) for i in h.network_inputs],
                    "outputs": [_tensor_summary(content.tensors[i]) for i in h.network_outputs]},
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
        shown = {t["kernel"] for tl in report["task_lists"] for t in tl["tasks"] if "kernel" in t}
    report["kernels"] = [_kernel(program, k, file) for k in content.kernels
                         if k.image is not None and kernel in (None, k.name)
                         and (shown is None or k.name in shown)]
    report["invocations"] = _invocations(program, report["task_lists"], kernel)
    parts = sorted(decoded.sizes.items(), key=lambda kv: -kv[1])
    report["sections"] = [{"name": n, "size": s} for n, s in parts]
    if decoded.format == "fb":
        report["sections"].append({"name": "(vtables shared, padding, alignment)",
                                   "size": decoded.total - sum(decoded.sizes.values())})
    report["total"] = decoded.total
    return report


def _task_list(tl, task: str | None, kernel: str | None) -> dict:
    out = []
    for index, t in enumerate(tl.tasks):
        if task is not None and task not in (t.label, str(index)):
            continue
        if kernel is not None and getattr(t, "kernel", kernel) != kernel:
            continue
        entry = {"index": index, "label": t.label, "waits": list(t.waits),
                 "updates": list(t.updates)}
        kind = type(t).__name__
        if kind == "DmaTask":
            entry.update(src=t.src, dst=t.dst, channel=t.channel, mode=str(t.mode))
        elif kind == "DpuTask":
            entry.update(op=str(t.op), tile=t.tile, inputs=list(t.inputs), output=t.output,
                         weights=t.weights, bias=t.bias,
                         variants=[{"label": v.label, "start": list(v.start), "end": list(v.end),
                                    "waits": list(v.waits), "updates": list(v.updates),
                                    "mode": v.mode or t.mode}
                                   for v in t.variants])
        else:
            entry.update(kernel=t.kernel, tile=t.tile,
                         inputs=[f"%{b.buffer} as %{b.alias}" for b in t.inputs],
                         outputs=[f"%{b.buffer} as %{b.alias}" for b in t.outputs])
        out.append(entry)
    return {"executor": str(tl.executor), "tasks": out}


def _kernel(program, k, file: str) -> dict:
    img = k.image
    return {"name": k.name, "origin": img.origin, "entry": img.entry,
            "text_size": len(img.text), "rodata_size": len(img.rodata),
            "rodata_offset": img.rodata_offset, "data_size": len(img.data),
            "elf_size": len(img.elf), "elf_sections": elf_sections(img.elf, f"{file}:@{k.name}"),
            "graph": program.kernels[k.name].graph,
            "tags": _tags(program.kernels[k.name].tags),
            "disassembly": _disassembly(img.text, f"{file}:@{k.name}",
                                        program.kernels[k.name].tags)}


def _invocations(program, lists: list[dict], kernel: str | None) -> list[dict]:
    shown = {t["index"] for tl in lists if tl["executor"] == "ACT_SHAVE" for t in tl["tasks"]}
    kernels = {k.name: k for k in program.module.kernels}
    win_e = program.arch.window_base("WIN_E")
    act = next((tl for tl in program.module.task_lists if str(tl.executor) == "ACT_SHAVE"), None)
    out = []
    for inv in program.invocations:
        if inv.task_index not in shown or kernel not in (None, inv.kernel):
            continue
        args, error = _decode_args(program, inv, kernels, win_e)
        label = act.tasks[inv.task_index].label if act else None
        out.append({"task": inv.task_index, "label": label, "kernel": inv.kernel,
                    "tile": inv.tile, "window_size": len(inv.window_e),
                    "args_offset": inv.args_offset, "args_size": inv.args_size, "args": args,
                    "error": error,
                    "bytes": inv.window_e[inv.args_offset:inv.args_offset + inv.args_size].hex()})
    return out


# --- text rendering -------------------------------------------------------------------

def _kv(mapping: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in mapping.items()) or "(none)"


def render_blob(r: dict) -> str:
    h = r["header"]
    a = h["architecture"]
    lines = [f"{r['file']}: vpuc blob, {r['format'].upper()} format {r['version']}, "
             f"{r['size']} bytes",
             f"module @{h['module']} (arch {h['module_arch']}), compiled by {h['compiler']} "
             f"for {a['name']} v{a['version']}",
             f"  windows: WIN_D={a['win_d_base']:#x} WIN_E={a['win_e_base']:#x} "
             f"WIN_F={a['win_f_base']:#x} ({a['window_size']:#x} bytes each)",
             f"  options: {_kv(h['options'])}", f"  provenance: {_kv(h['provenance'])}",
             f"  attributes: {_kv(h['attributes'])}",
             f"  task counts: {_kv(h['task_counts'])}",
             f"  content hash: sha256:{h['content_hash']}",
             f"  verifies: {r['verifies']}", "", "network inputs:"]
    for role in ("inputs", "outputs"):
        if role == "outputs":
            lines.append("network outputs:")
        for t in r["network"][role]:
            lines.append(f"  %{t['name']} : {t['type']} order {t['dims_order']}")
    lines += ["", f"barriers ({len(r['barriers'])}):"]
    for b in r["barriers"]:
        phys = "virtual" if b["physical"] is None else f"physical {b['physical']}"
        lines.append(f"  #{b['id']} %{b['name']}: {phys}, {b['producers']} producers, "
                     f"{b['consumers']} consumers")
    for tl in r["task_lists"]:
        lines += ["", f"task list {tl['executor']} ({len(tl['tasks'])} tasks):"]
        for t in tl["tasks"]:
            lines.append(f"  [{t['index']}] {t['label'] or '-'}: {_task_text(t)}"
                         f"{_sync(t)}")
            for v in t.get("variants", ()):
                lines.append(f"      variant {v['label'] or '-'} start{tuple(v['start'])} "
                             f"end{tuple(v['end'])}"
                             + (f" mode({v['mode']})" if v.get("mode") else "") + _sync(v))
    for k in r["kernels"]:
        lines += ["", f"kernel @{k['name']} from {k['origin']}: .text {k['text_size']} B, "
                  f".rodata {k['rodata_size']} B at WIN_D+{k['rodata_offset']:#x}, .data "
                  f"{k['data_size']} B, entry .text+{k['entry']:#x}, ELF {k['elf_size']} B",
                  "  ELF sections:"]
        for s in k["elf_sections"]:
            lines.append(f"    {s['name'] or '(null)':<16} {s['type']:<14} {s['size']:>6} B  "
                         f"flags {s['flags']:#x} align {s['align']}")
        lines += _computes(k["graph"], "  ") + _tags_line(k["tags"], "  ")
        lines.append("  disassembly of .text (linked for WIN_D):")
        lines += ["    " + line for line in k["disassembly"].splitlines()]
    for inv in r["invocations"]:
        lines += ["", f"invocation of @{inv['kernel']} by task [{inv['task']}] "
                  f"{inv['label'] or '-'} on tile {inv['tile']}: WIN_E image "
                  f"{inv['window_size']} B, argsAddr=WIN_E+{inv['args_offset']:#x} "
                  f"argsSize={inv['args_size']}"]
        if inv["error"]:
            lines.append(f"  cannot decode: {inv['error']}")
        for arg in inv["args"]:
            if arg["kind"] == "memref":
                first, *rest = arg["text"]
                lines.append(f"  {arg['name']}: MemRefData {first}")
                lines += [f"    {line}" for line in rest]
            else:
                lines.append(f"  {arg['name']}: {arg['type']} {arg['value']!r}")
        hexes = inv["bytes"]
        lines.append("  bytes: " + " ".join(hexes[i:i + 2] for i in range(0, len(hexes), 2)))
    lines += ["", "sizes:"]
    for s in r["sections"]:
        lines.append(f"  {s['size']:>10}  {s['name']}")
    lines.append(f"  {r['total']:>10}  total")
    return "\n".join(lines) + "\n"


def _computes(graph: str | None, indent: str) -> list[str]:
    """A generated kernel's recorded body (its object's .note.vpuc.graph), if any."""
    if graph is None:
        return []
    return [f"{indent}computes (the graph recorded in .note.vpuc.graph):"] + \
        [f"{indent}  {line}" for line in graph.splitlines() if line.strip()]


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


def _tags_line(tags: list[dict] | None, indent: str) -> list[str]:
    if tags is None:
        return []
    labels = len({t["label"] for t in tags})
    insts = sum(t["count"] for t in tags)
    return [f"{indent}expression tags (.note.vpuc.graph): {insts} instructions in {len(tags)} "
            f"runs of {labels} labels; '# label' in the disassembly starts a run"]


def _sync(t: dict) -> str:
    text = ""
    if t["waits"]:
        text += " waits(" + ", ".join("%" + w for w in t["waits"]) + ")"
    if t["updates"]:
        text += " updates(" + ", ".join("%" + u for u in t["updates"]) + ")"
    return text


def _task_text(t: dict) -> str:
    if "src" in t:
        return f"dma {t['mode']} %{t['src']} -> %{t['dst']} channel {t['channel']}"
    if "op" in t:
        extra = "".join(f" {k}(%{t[k]})" for k in ("weights", "bias") if t[k])
        return (f"dpu {t['op']} on tile {t['tile']} in({', '.join('%' + i for i in t['inputs'])})"
                f"{extra} out(%{t['output']})")
    return (f"sw @{t['kernel']} on tile {t['tile']} inputs({', '.join(t['inputs'])}) "
            f"outputs({', '.join(t['outputs'])})")


# --- entry points -------------------------------------------------------------------

def inspect_blob(data: bytes, file: str, *, json: bool = False, task_list: str | None = None,
                 task: str | None = None, kernel: str | None = None) -> str:
    report = blob_report(data, file, task_list=task_list, task=task, kernel=kernel)
    return jsonlib.dumps(report, indent=2) + "\n" if json else render_blob(report)


def kernel_object_report(data: bytes, file: str) -> dict:
    obj = KernelObject.from_elf(bytes(data), file)
    return {"file": file, "kind": "kernel object", "size": len(data),
            "sections": elf_sections(bytes(data), file),
            "symbols": [{"name": s.name, "section": s.section, "value": s.value, "size": s.size,
                         "global": s.is_global, "type": int(s.type)} for s in obj.symbols],
            "relocations": [{"section": r.section, "offset": r.offset, "type": int(r.type),
                             "symbol": r.symbol, "addend": r.addend} for r in obj.relocations],
            "graph": obj.graph, "tags": _tags(obj.tags),
            "disassembly": disassemble_object(obj, obj.tags.starts() if obj.tags else None)}


def inspect_kernel_object(data: bytes, file: str, json: bool = False) -> str:
    r = kernel_object_report(data, file)
    if json:
        return jsonlib.dumps(r, indent=2) + "\n"
    lines = [f"{file}: SHAVE kernel object, {r['size']} bytes", "sections:"]
    for s in r["sections"]:
        lines.append(f"  {s['name'] or '(null)':<16} {s['type']:<14} {s['size']:>6} B  "
                     f"flags {s['flags']:#x} align {s['align']}")
    lines.append("symbols:")
    for s in r["symbols"]:
        lines.append(f"  {s['name']:<24} {s['section']}+{s['value']:#x} size {s['size']} "
                     f"{'global' if s['global'] else 'local'}")
    if r["relocations"]:
        lines.append("relocations:")
        for rel in r["relocations"]:
            lines.append(f"  {rel['section']}+{rel['offset']:#x}: type {rel['type']} "
                         f"{rel['symbol']}{rel['addend']:+d}")
    lines += _computes(r["graph"], "") + _tags_line(r["tags"], "")
    lines += ["disassembly:"] + ["  " + line for line in r["disassembly"].splitlines()]
    return "\n".join(lines) + "\n"


def inspect_file(data: bytes, file: str, *, json: bool = False, task_list: str | None = None,
                 task: str | None = None, kernel: str | None = None) -> str:
    """A blob (either format) or a single SHAVE kernel object, told apart by their headers."""
    from vpuc.blob.elf_records import EM_VPUC_NPU
    from vpuc.shave.elf_layout import EM_VPUC_SHAVE
    data = bytes(data)
    if data[:4] == b"\x7fELF" and len(data) >= 20:
        machine = int.from_bytes(data[18:20], "little")
        if machine == EM_VPUC_SHAVE:
            if task_list or task or kernel:
                raise UsageError("--task-list, --task and --kernel apply to blobs, not to a "
                                 "kernel object")
            return inspect_kernel_object(data, file, json=json)
        if machine != EM_VPUC_NPU:
            raise VpucError(f"ELF e_machine {machine:#x} is neither a vpuc blob "
                            f"({EM_VPUC_NPU:#x}) nor a SHAVE kernel object ({EM_VPUC_SHAVE:#x})",
                            BinLoc(file, "ELF header", 18))
    return inspect_blob(data, file, json=json, task_list=task_list, task=task, kernel=kernel)
