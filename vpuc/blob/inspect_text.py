"""vpuc inspect's text rendering of the reports built by ``vpuc.blob.inspect``.

Text and JSON carry the same content: everything here is read from the report.
"""

from __future__ import annotations


def _kv(mapping: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in mapping.items()) or "(none)"


def _sync(t: dict) -> str:
    text = ""
    if t["waits"]:
        text += " waits(" + ", ".join("%" + w for w in t["waits"]) + ")"
    if t["updates"]:
        text += " updates(" + ", ".join("%" + u for u in t["updates"]) + ")"
    return text


def _number(value) -> str:
    return repr(value) if isinstance(value, float) else str(value)


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
             f"  verifies: {r['verifies']}"]
    for role in ("inputs", "outputs"):
        lines += ["", f"network {role}:"]
        lines += [f"  %{t['name']} : {t['type']} order {t['dims_order']}"
                  for t in r["network"][role]]
    lines += ["", f"tensors ({len(r['tensors'])}):"] + [_tensor(t) for t in r["tensors"]]
    lines += ["", f"barriers ({len(r['barriers'])}):"]
    for b in r["barriers"]:
        phys = "virtual" if b["physical"] is None else f"physical {b['physical']}"
        lines.append(f"  #{b['id']} %{b['name']}: {phys}, {b['producers']} producers, "
                     f"{b['consumers']} consumers")
    for tl in r["task_lists"]:
        lines += ["", f"task list {tl['executor']} ({len(tl['tasks'])} tasks):"]
        for t in tl["tasks"]:
            lines.append(f"  [{t['index']}] {t['label'] or '-'}: {_task_text(t)}{_sync(t)}")
            lines += _task_details(t)
    for k in r["kernels"]:
        lines += [""] + _kernel(k)
    rt = r["runtime"]
    lines += ["", "runtime: none declared" if rt is None else
              f"runtime: @{rt['kernel']}, ACT SHAVE stack per tile: "
              + ", ".join(f"tile {i} {s} B" for i, s in enumerate(rt["stack_sizes"]))]
    lines += ["", f"constants ({len(r['constants'])}):"]
    for c in r["constants"]:
        shared = f" (stored once with %{c['same_as']})" if c["same_as"] else ""
        lines.append(f"  %{c['tensor']}: {c['type']}, {c['bytes']} bytes, sha256:{c['sha256']}"
                     + shared)
    if r["layers"]:                     # a program compiled from ONNX
        lines += ["", f"layers ({len(r['layers'])}): the ONNX nodes behind the tasks"]
        for layer in r["layers"]:
            nodes = ", ".join(f'"{n["name"]}" {n["op_type"]}' for n in layer["nodes"])
            lines.append(f'  "{layer["key"]}": {layer["tasks"]} tasks from {nodes}')
    for inv in r["invocations"]:
        lines += [""] + _invocation(inv)
    lines += ["", "sizes:"]
    for s in r["sections"]:
        lines.append(f"  {s['size']:>10}  {s['name']}")
    lines.append(f"  {r['total']:>10}  total")
    return "\n".join(lines) + "\n"


def _tensor(t: dict) -> str:
    where = t["location"]
    if t["tile"] is not None:
        where += f" tile {t['tile']}"
    if t["offset"] is not None:
        where += f" offset {t['offset']:#x}"
    elif t["location"] == "cmx":
        where += " unplaced"
    if t["data_offset"]:
        where += f" +{t['data_offset']:#x}"
    text = f"  #{t['index']} %{t['name']}: {t['type']} {where} order {t['dims_order']} " \
           f"strides(bits) {t['strides_bits']}"
    if t["kind"] == "view":
        text += f", view of %{t['base']} [" + ", ".join(
            f"{a}:{'' if b == -1 else b}" + (f":{c}" if c != 1 else "")
            for a, b, c in t["slices"]) + "]"
    init = t["init"]
    if init is not None:
        text += ", init " + (f'file "{init["path"]}"' if init["kind"] == "file" else
                             f"splat {_number(init['values'][0])}" if init["kind"] == "splat"
                             else f"{len(init['values'])} values")
    return text


def _task_text(t: dict) -> str:
    if "src" in t:
        return f"dma {t['mode']} %{t['src']} -> %{t['dst']} channel {t['channel']}"
    if "op" in t:
        extra = "".join(f" {k}(%{t[k]})" for k in ("weights", "bias") if t[k])
        quant = t["quant"]
        integer = "" if quant is None else (f" quant scale(%{quant['scale']}) zero_point("
                                            f"{quant['in_zero_point']}, {quant['out_zero_point']})")
        return (f"dpu {t['op']} on tile {t['tile']} in({', '.join('%' + i for i in t['inputs'])})"
                f"{extra} out({', '.join('%' + o for o in [t['output'], *t['output_copies']])})"
                f"{integer}")
    return (f"sw @{t['kernel']} on tile {t['tile']} inputs({', '.join(t['inputs'])}) "
            f"outputs({', '.join(t['outputs'])})")


def _task_details(t: dict) -> list[str]:
    if "op" in t:
        params = [f"{p} {'x'.join(map(str, t[p]))}" for p in ("kernel", "stride", "dilation")
                  if t[p] is not None]
        if t["pad"] is not None:
            params.append("pad top {} bottom {} left {} right {}".format(*t["pad"]))
        post = t["post_op"]
        if post is not None:
            params.append(f"post {post['kind']}"
                          + (f"({', '.join(map(_number, post['params']))})"
                             if post["params"] else ""))
        lines = ["      " + (", ".join(params) or "kernel, stride, pad, dilation: not given")]
        for v in t["variants"]:
            box = ", ".join(f"{axis} {s}..{e}" for axis, s, e in zip("xyz", v["start"], v["end"]))
            size = "x".join(str(e - s + 1) for s, e in zip(v["start"], v["end"]))
            mode = f" mode {v['mode']}" if "mode" in v else ""
            lines.append(f"      variant {v['label'] or '-'}: {box} (W x H x C = {size})"
                         f"{mode}{_sync(v)}")
        return lines
    if "kernel" in t:
        lines = []
        if t["scalars"]:
            lines.append("      scalars: " + ", ".join(
                f"%{s['name']} = {_number(s['value'])} : {s['type']}" for s in t["scalars"]))
        lines.append("      run(" + ", ".join("%" + a for a in t["run_args"]) + ")")
        return lines
    return []


def _kernel(k: dict) -> list[str]:
    source = k["source"] + (f' "{k["source_ref"]}"' if k["source_ref"] else "")
    lines = [f"kernel @{k['name']}("
             + ", ".join(f"%{p['name']}: {p['type']}" for p in k["params"]) + f") from {source}"]
    img = k["image"]
    if img is None:
        lines.append(f"  runs the image of @{k['image_of']}" if k["image_of"] else
                     "  no image (no task runs it)")
        return lines
    lines += [f"  image from {img['origin']}: .text {img['text_size']} B, .rodata "
              f"{img['rodata_size']} B at WIN_D+{img['rodata_offset']:#x}, .data "
              f"{img['data_size']} B, entry .text+{img['entry']:#x}, ELF {img['elf_size']} B",
              "  ELF sections:"]
    lines += [_section(s, "    ") for s in img["elf_sections"]]
    lines += _computes(img["graph"], "  ") + _tags_line(img["tags"], "  ")
    if img["disassembly"] is not None:
        lines.append("  disassembly of .text (linked for WIN_D):")
        lines += ["    " + line for line in img["disassembly"].splitlines()]
    return lines


def _section(s: dict, indent: str) -> str:
    return (f"{indent}{s['name'] or '(null)':<16} {s['type']:<14} {s['size']:>6} B  "
            f"flags {s['flags']:#x} align {s['align']}")


def _invocation(inv: dict) -> list[str]:
    lines = [f"invocation of @{inv['kernel']} by task [{inv['task']}] "
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
    return lines


def _computes(graph: str | None, indent: str) -> list[str]:
    """A generated kernel's recorded body (its object's .note.vpuc.graph), if any."""
    if graph is None:
        return []
    return [f"{indent}computes (the graph recorded in .note.vpuc.graph):"] + \
        [f"{indent}  {line}" for line in graph.splitlines() if line.strip()]


def _tags_line(tags: list[dict] | None, indent: str) -> list[str]:
    if tags is None:
        return []
    labels = len({t["label"] for t in tags})
    insts = sum(t["count"] for t in tags)
    return [f"{indent}expression tags (.note.vpuc.graph): {insts} instructions in {len(tags)} "
            f"runs of {labels} labels; '# label' in the disassembly starts a run"]


def render_kernel_object(r: dict) -> str:
    lines = [f"{r['file']}: SHAVE kernel object, {r['size']} bytes", "sections:"]
    lines += [_section(s, "  ") for s in r["sections"]]
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
    if r["disassembly"] is not None:
        lines += ["disassembly:"] + ["  " + line for line in r["disassembly"].splitlines()]
    return "\n".join(lines) + "\n"
