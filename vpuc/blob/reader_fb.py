"""FlatBuffer blob -> BlobContent, through the verifying decoder.

The format version is read first, on its own (SummaryHeader.version is the
first field of the first field of the root forever), so a blob of another
major version is refused before anything else of it is interpreted.
"""

from __future__ import annotations

from functools import partial

from vpuc.blob.layer_sources import read_fb as read_layers
from vpuc.blob.content import (ActTaskRec, ArchRec, BarrierRec, BindingRec, BlobContent,
                               ConstantRec, ConstInitRec, DmaRec, DpuRec, HeaderRec,
                               InvocationRec, KernelImageRec, KernelRec, KeyValue, Number,
                               ParamRec, PostOpRec, RuntimeRec, ScalarRec, SliceRec, TaskCounts,
                               TaskListRec, TensorRec, VariantRec, image_of)
from vpuc.blob.fb_decode import Decoder
from vpuc.blob.fb_schema import load_schema
from vpuc.blob.sealing import DIGEST_BYTES, fb_hash_span
from vpuc.diagnostics import BinLoc, VpucError

IDENTIFIER = b"VPUB"
# Records made from a tuple without the namedtuple's Python __new__ frame.
_slice_rec = partial(tuple.__new__, SliceRec)
_binding_rec = partial(tuple.__new__, BindingRec)
_tensor_rec = partial(tuple.__new__, TensorRec)
_EMPTY_REFS = ((), ())


class FbReader:
    def __init__(self, data: bytes, file: str, columns: bool = False) -> None:
        self.data = data
        self.file = file
        self.schema = load_schema()
        self.decoder = Decoder(self.schema, data, file, columns=columns)
        self.root = None

    def fail(self, where: str, message: str) -> VpucError:
        return VpucError(message, BinLoc(self.file, where, 0))

    def version(self) -> tuple[int, int]:
        dec, tables = self.decoder, self.schema.tables
        if self.data[4:8] != IDENTIFIER:
            raise VpucError(f"not a vpuc FlatBuffer blob: file identifier "
                            f"{bytes(self.data[4:8])!r}, expected {IDENTIFIER!r}",
                            BinLoc(self.file, "file identifier", 4))
        at = dec.locate(tables["Blob"], dec.root_position(), "header")
        if at is None:
            raise self.fail("Blob.header", "blob has no summary header")
        version = dec.table(tables["SummaryHeader"], at, "SummaryHeader", only=("version",))
        if version.version is None:
            raise self.fail("SummaryHeader.version", "blob header has no format version")
        return version.version.major, version.version.minor

    def content(self) -> tuple[BlobContent, bytes]:
        root = self.root = self.decoder.root()
        if root.header is None:
            raise self.fail("Blob.header", "blob has no summary header")
        data = [d.data or b"" for d in root.kernel_data or ()]
        kernels = tuple(self.kernel(k, data) for k in root.act_kernels or ())
        lists = tuple(self.task_list(i, tl, data, kernels)
                      for i, tl in enumerate(root.task_lists or ()))
        runtime = None
        if root.act_kernel_runtime is not None:
            rt = root.act_kernel_runtime
            runtime = RuntimeRec(rt.kernel, tuple(rt.stack_sizes or ()))
        constants = tuple(ConstantRec(c.tensor, c.data or b"") for c in root.constants or ())
        content = BlobContent(self.header(root.header), tuple(map(_tensor, root.tensors or ())),
                              tuple(BarrierRec(b.id, b.physical_id, b.name or "",
                                               b.producer_count, b.consumer_count)
                                    for b in root.barriers or ()),
                              lists, kernels, runtime, constants, read_layers(root))
        return content, bytes(root.header.content_hash or b"")

    def hash_offset(self) -> int:
        """Where the content hash lies in the buffer (after ``content()`` checked the header);
        -1 without a 32-byte hash."""
        at, length = fb_hash_span(self.data)
        return at if length == DIGEST_BYTES else -1

    def header(self, h) -> HeaderRec:
        if h.architecture is None or h.task_counts is None:
            raise self.fail("SummaryHeader", "blob header has no architecture or task counts")
        a = h.architecture
        arch = ArchRec(a.name or "", *a[1:])
        pairs = (lambda kvs: tuple(KeyValue(kv.key or "", kv.value or "") for kv in kvs or ()))
        return HeaderRec(h.module_name or "", arch, tuple(h.network_inputs or ()),
                         tuple(h.network_outputs or ()), TaskCounts(*h.task_counts),
                         h.compiler_version or "", pairs(h.options), pairs(h.provenance),
                         pairs(h.attributes), h.module_arch or "")

    def slice(self, ref, data: list[bytes], where: str) -> bytes:
        if ref is None:
            raise self.fail(where, "missing kernel data reference")
        if not 0 <= ref.data_index < len(data):
            raise self.fail(where, f"kernel data index {ref.data_index} is out of range "
                            f"({len(data)} KernelData)")
        blob = data[ref.data_index]
        if ref.offset + ref.size > len(blob):
            raise self.fail(where, f"reference ({ref.size} bytes at {ref.offset:#x}) runs past "
                            f"its {len(blob)}-byte KernelData")
        return blob[ref.offset:ref.offset + ref.size]

    def kernel(self, k, data: list[bytes]) -> KernelRec:
        params = tuple(ParamRec(p.name or "", int(p.is_memref), p.data_type,
                                None if p.dims is None else tuple(p.dims))
                       for p in k.params or ())
        image = None
        if k.text is not None:
            where = f"ActKernel {k.name}"
            image = KernelImageRec(k.origin or "", self.slice(k.text, data, where),
                                   self.slice(k.rodata, data, where),
                                   self.slice(k.data, data, where),
                                   self.slice(k.elf, data, where), k.entry, k.rodata_offset)
        return KernelRec(k.name or "", k.source_kind, k.source_ref or "", params, image,
                         k.image_kernel)

    def task_list(self, index: int, tl, data, kernels) -> TaskListRec:
        vectors = (tl.dma_tasks, tl.dpu_tasks, tl.act_kernel_tasks)
        if not 0 <= tl.executor < len(vectors) or \
                any(v for i, v in enumerate(vectors) if i != tl.executor):
            raise self.fail(f"TaskList #{index}", f"executor {tl.executor} does not match the "
                            "tasks it holds")
        tasks = vectors[tl.executor] or ()
        if tl.executor == 0:
            recs = tuple(DmaRec(t.label, t.src, t.dst, t.channel, t.mode, *_refs(t.barriers))
                         for t in tasks)
        elif tl.executor == 1:
            recs = tuple(self.dpu(t) for t in tasks)
        else:
            recs = tuple(self.act(t, data, kernels) for t in tasks)
        return TaskListRec(tl.executor, recs)

    def dpu(self, t) -> DpuRec:
        inv = t.invariant
        if inv is None:
            raise self.fail("DPUTask", "DPU task has no invariant")
        variants = tuple(VariantRec(v.label, _coord(v.start), _coord(v.end), *_refs(v.barriers),
                                    v.mode) for v in t.variants or ())
        post = None if inv.post_op is None else PostOpRec(inv.post_op.kind,
                                                          tuple(inv.post_op.params or ()))
        return DpuRec(inv.label, inv.op, inv.tile, tuple(inv.inputs or ()), inv.output,
                      inv.weights, inv.bias, inv.kernel, inv.stride, inv.pad, inv.dilation,
                      post, *_refs(inv.barriers), variants, inv.mode)

    def act(self, t, data, kernels) -> ActTaskRec:
        inv = t.invocation
        if inv is None:
            raise self.fail("ActKernelTask", "ACT kernel task has no invocation")
        where = f"ActKernelInvocation {t.label or ''}"
        image = None
        if inv.window is not None:
            window, args = inv.window, inv.args
            if args is None or args.data_index != window.data_index or \
                    not window.offset <= args.offset <= window.offset + window.size:
                raise self.fail(where, "args reference lies outside the WIN_E image")
            kernel_image = image_of(kernels, inv.kernel) if 0 <= inv.kernel < len(kernels) \
                else None
            if inv.data_section is None or inv.data_section.data_index != window.data_index \
                    or inv.data_section.offset != window.offset or kernel_image is None \
                    or inv.data_section.size != len(kernel_image.data):
                raise self.fail(where, "data section reference is not the kernel's .data at "
                                "the start of the WIN_E image")
            image = InvocationRec(self.slice(window, data, where), args.offset - window.offset,
                                  args.size)
        bindings = [tuple([_binding_rec((b.tensor, b.alias or "")) for b in group])
                    if group else () for group in (inv.inputs, inv.outputs)]
        scalars = tuple(ScalarRec(s.name or "", s.data_type, _number(s.value, where, self))
                        for s in inv.scalars) if inv.scalars else ()
        return ActTaskRec(t.label, inv.kernel, inv.tile, bindings[0], bindings[1], scalars,
                          tuple(inv.run_args or ()), image, *_refs(inv.barriers))


def _refs(refs) -> tuple[tuple[int, ...], tuple[int, ...]]:
    if refs is None:
        return _EMPTY_REFS
    return refs.wait_barriers or (), refs.update_barriers or ()


def _coord(c) -> tuple[int, int, int]:
    return (0, 0, 0) if c is None else (c.x, c.y, c.z)


def _number(n, where: str, reader: FbReader) -> Number:
    if n is None:
        raise reader.fail(where, "missing number")
    return Number(1, n.int_value) if n.is_int else Number(0, n.float_value)


def _tensor(t) -> TensorRec:
    init = None
    if t.const_init is not None:
        ci = t.const_init
        init = ConstInitRec(ci.kind, tuple(Number(1, v.int_value) if v.is_int
                                           else Number(0, v.float_value)
                                           for v in ci.values or ()), ci.path)
    return _tensor_rec((t.name or "", t.location, t.tile, t.offset, t.data_offset,
                        tuple(t.dims or ()), tuple(map(int, t.dynamic_dims or ())),
                        tuple(t.strides or ()), t.data_type, tuple(t.dims_order or ()), t.base,
                        tuple(map(_slice_rec, t.slices or ())), init))
