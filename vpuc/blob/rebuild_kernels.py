"""The architecture and the kernel declarations of a blob's records, checked and rebuilt
for ``vpuc.blob.rebuild`` (its checker ``check`` names the record of every failure)."""

from __future__ import annotations

from vpuc.arch import Arch, known_archs, load_arch
from vpuc.blob.content import ELEM_OF, SOURCE_KIND_OF, ArchRec, BlobContent
from vpuc.diagnostics import VpucError
from vpuc.ir.module import KernelDecl, KernelParam, KernelSource, Module, Ref, RuntimeDecl
from vpuc.ir.types import MemRefPattern
from vpuc.program import KernelImage, Program

MAX_RANK = 15                 # what a MemRefData dimsOrder code can express


def check_arch(rec: ArchRec, file: str, expected: str | Arch | None = None) -> Arch:
    """The architecture the blob was compiled for, checked field by field against the
    known one of its name, or against ``expected`` when that is an ``Arch`` (a variant
    the caller built, such as a sweep point's structure)."""
    name = expected.name if isinstance(expected, Arch) else expected
    if name is not None and rec.name.upper() != name.upper():
        raise VpucError(f"{file}: blob is compiled for {rec.name}; expected {name}")
    if rec.name.upper() not in known_archs():
        raise VpucError(f"{file}: blob is compiled for architecture '{rec.name}', which this "
                        f"vpuc does not know (known: {', '.join(known_archs())})")
    arch = expected if isinstance(expected, Arch) else load_arch(rec.name)
    ours = ArchRec(arch.name, arch.version, arch.tiles, arch.cmx_bytes, arch.act_shaves_per_tile,
                   arch.dpus_per_tile, arch.dma_channels, arch.barriers, arch.max_producers,
                   arch.max_consumers, arch.window_size, arch.window_bases["WIN_D"],
                   arch.window_bases["WIN_E"], arch.window_bases["WIN_F"])
    for field, theirs, mine in zip(ArchRec._fields, rec, ours):
        if theirs != mine:
            shown = (lambda v: f"{v:#x}") if isinstance(mine, int) and mine > 4096 else repr
            raise VpucError(f"{file}: blob is compiled for {rec.name} with {field} = "
                            f"{shown(theirs)}; this vpuc's {arch.name} has {shown(mine)}")
    return arch



def kernels(check, content: BlobContent, module: Module, program: Program) -> None:
    for i, k in enumerate(content.kernels):
        where = f"kernel #{i} '{k.name}'"
        params = []
        for p in k.params:
            elem = check.code(where, ELEM_OF, p.data_type, "element type")
            check.name(where, p.name)
            if p.is_memref:
                if p.dims is not None and (len(p.dims) > MAX_RANK or any(d < -1 for d in p.dims)):
                    raise check.fail(where, f"memref dims {list(p.dims)} are invalid")
                dims = None if p.dims is None else tuple(None if d == -1 else d for d in p.dims)
                params.append(KernelParam(p.name, memref=MemRefPattern(elem, dims)))
            elif p.dims is None and p.is_memref == 0:
                params.append(KernelParam(p.name, scalar=elem))
            else:
                raise check.fail(where, f"scalar parameter {p.name} has dims")
        source = KernelSource(check.code(where, SOURCE_KIND_OF, k.source_kind, "kernel source"),
                              k.source_ref)
        module.kernels.append(KernelDecl(k.name, params, source))
        img = k.image
        if img is not None:
            if img.entry > len(img.text) or img.rodata_offset < len(img.text):
                raise check.fail(where, f"entry {img.entry} / rodata offset {img.rodata_offset} "
                                 f"do not fit its {len(img.text)}-byte .text")
            notes = _recorded(check, k.name, img)
            program.kernels[k.name] = KernelImage(k.name, img.origin, img.elf, img.text,
                                                  img.rodata, img.data, img.entry,
                                                  img.rodata_offset, notes.graph, notes.tags)
    for i, k in enumerate(content.kernels):
        if k.image_kernel == -1:
            continue
        target = check.index(f"kernel #{i} '{k.name}'", k.image_kernel, len(content.kernels),
                             "kernel")
        owner = content.kernels[target]
        if owner.image is None or (target != i and k.image is not None):
            raise check.fail(f"kernel #{i} '{k.name}'", f"runs the image of kernel #{target}, "
                             "which has none, or has an image of its own")
        program.kernel_aliases[k.name] = owner.name
    if content.runtime is not None:
        rt = content.runtime
        check.index("runtime", rt.kernel, len(content.kernels), "kernel")
        module.runtime = RuntimeDecl(Ref(content.kernels[rt.kernel].name), tuple(rt.stack_sizes))


def _recorded(check, kernel: str, img):
    """A kernel object's notes (``.note.vpuc.graph``: what a generated kernel computes, the
    LIR expression of each instruction); a malformed note is an error naming the kernel."""
    from vpuc.shave.kernel_notes import object_notes
    return object_notes(img.elf, f"{check.file}: kernel @{kernel}'s object", len(img.text) // 8)
