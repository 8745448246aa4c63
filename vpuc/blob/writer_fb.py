"""BlobContent -> FlatBuffer bytes, with the builders flatc generated from
``schema/vpu_blob.fbs`` (no offset is computed here).

``ForceDefaults``: the tables a runtime reads to set itself up (the summary
header with the version, architecture and counts; the barrier table; the
kernels and their data references; the runtime; constants) are written with
every scalar present, even one equal to its schema default, so that they never
depend on a default.  The bulk per-task and per-tensor tables leave default
values out, as FlatBuffers intends: that is most of the write time saved.

Identical vectors and strings are written once and shared, and identical
byte payloads (kernel images, invocation WIN_E images) become one KernelData:
the runtime copies an invocation's image into its own WIN_E memory.  The
generated ``Start*Vector`` ignores ``force_align``, so KernelData and
ConstantData bytes are aligned to 64 with the builder's ``Prep``.  The builder
is ``FastBuilder``, the stock one with its hot paths inlined (same bytes).
"""

from __future__ import annotations

from schema.vpu_blob import (ActKernel, ActKernelInvocation, ActKernelRuntime, ActKernelTask,
                             Architecture, Barrier, Blob, ConstantData, ConstInit, Coord3,
                             DMATask, DPUInvariant, DPUTask, DPUVariant, KernelData,
                             KernelParam, Number, PostOp, ScalarArg, Slice, SummaryHeader,
                             TaskCounts, TaskList, TensorBinding, TensorReference, Version)
from vpuc.blob.content import (FORMAT_VERSION, ActTaskRec, BlobContent, DmaRec, DpuRec,
                               HeaderRec, KernelRec, TensorRec, content_hash, image_of)
from vpuc.blob.fb_builder import FastBuilder
from vpuc.blob.fb_writer_base import DATA_ALIGN, FbWriterBase
from vpuc.blob.sealing import DIGEST_BYTES, fb_hash_span, hashes_bytes, seal
from vpuc.blob.layer_sources import write_fb as write_layers

IDENTIFIER = b"VPUB"


class _Writer(FbWriterBase):
    """The blob's tables, one method per table kind, on the shared pieces."""

    def header(self, h: HeaderRec, digest: bytes) -> int:
        arch = h.arch._replace(name=self.string(h.arch.name))
        return self.table(
            SummaryHeader,
            version=lambda b: Version.CreateVersion(b, *FORMAT_VERSION),
            architecture=self.table(Architecture, **arch._asdict()),
            module_name=self.string(h.module_name),
            network_inputs=self.scalars("I", h.network_inputs),
            network_outputs=self.scalars("I", h.network_outputs),
            task_counts=self.table(TaskCounts, **h.task_counts._asdict()),
            compiler_version=self.string(h.compiler_version),
            options=self.key_values(h.options), provenance=self.key_values(h.provenance),
            attributes=self.key_values(h.attributes),
            content_hash=self.b.CreateByteVector(digest),
            module_arch=self.string(h.module_arch))

    def tensor(self, t: TensorRec) -> int:
        b = self.b
        name = self.string(t.name)
        dims, strides = self.scalars("I", t.dims), self.scalars("Q", t.strides)
        dynamic = self.scalars("?", t.dynamic_dims) if t.dynamic_dims else None
        order = self.scalars("B", t.dims_order)
        slices = init = None
        if t.base != -1:
            TensorReference.StartSlicesVector(b, len(t.slices))
            for s in reversed(t.slices):
                Slice.CreateSlice(b, s.start, s.stop, s.step)
            slices = b.EndVector()
        if t.const_init is not None:
            ci = t.const_init
            path = self.string(ci.path)
            ConstInit.StartValuesVector(b, len(ci.values))
            for v in reversed(ci.values):
                Number.CreateNumber(b, *self.number_fields(v))
            values = b.EndVector()
            ConstInit.Start(b)
            ConstInit.AddKind(b, ci.kind)
            ConstInit.AddValues(b, values)
            if path is not None:
                ConstInit.AddPath(b, path)
            init = ConstInit.End(b)
        TensorReference.Start(b)
        TensorReference.AddName(b, name)
        TensorReference.AddLocation(b, t.location)
        TensorReference.AddTile(b, t.tile)
        TensorReference.AddOffset(b, t.offset)
        TensorReference.AddDataOffset(b, t.data_offset)
        TensorReference.AddDims(b, dims)
        if dynamic is not None:
            TensorReference.AddDynamicDims(b, dynamic)
        TensorReference.AddStrides(b, strides)
        TensorReference.AddDataType(b, t.data_type)
        TensorReference.AddDimsOrder(b, order)
        TensorReference.AddBase(b, t.base)
        if slices is not None:
            TensorReference.AddSlices(b, slices)
        if init is not None:
            TensorReference.AddConstInit(b, init)
        return TensorReference.End(b)

    def barrier(self, rec) -> int:
        b = self.b
        name = self.string(rec.name)
        Barrier.Start(b)
        Barrier.AddId(b, rec.id)
        Barrier.AddPhysicalId(b, rec.physical_id)
        Barrier.AddName(b, name)
        Barrier.AddProducerCount(b, rec.producer_count)
        Barrier.AddConsumerCount(b, rec.consumer_count)
        return Barrier.End(b)

    def dma(self, t: DmaRec) -> int:
        b = self.b
        label, refs = self.string(t.label), self.barriers(t.waits, t.updates)
        DMATask.Start(b)
        if label is not None:
            DMATask.AddLabel(b, label)
        DMATask.AddSrc(b, t.src)
        DMATask.AddDst(b, t.dst)
        DMATask.AddChannel(b, t.channel)
        DMATask.AddMode(b, t.mode)
        DMATask.AddBarriers(b, refs)
        return DMATask.End(b)

    def dpu(self, t: DpuRec) -> int:
        b = self.b
        variants = []
        for v in t.variants:
            label, refs = self.string(v.label), self.barriers(v.waits, v.updates)
            DPUVariant.Start(b)
            if label is not None:
                DPUVariant.AddLabel(b, label)
            DPUVariant.AddStart(b, Coord3.CreateCoord3(b, *v.start))
            DPUVariant.AddEnd(b, Coord3.CreateCoord3(b, *v.end))
            DPUVariant.AddBarriers(b, refs)
            DPUVariant.AddMode(b, v.mode)
            variants.append(DPUVariant.End(b))
        variants_off = self.offsets(variants)
        label, refs = self.string(t.label), self.barriers(t.waits, t.updates)
        inputs = self.scalars("I", t.inputs)
        odu_cast = self.scalars("I", t.odu_cast) if t.odu_cast else None   # absent: none
        params = [self.scalars("I", p) for p in (t.kernel, t.stride, t.pad, t.dilation)]
        post = None
        if t.post_op is not None:
            post_params = self.scalars("d", t.post_op.params)
            PostOp.Start(b)
            PostOp.AddKind(b, t.post_op.kind)
            PostOp.AddParams(b, post_params)
            post = PostOp.End(b)
        DPUInvariant.Start(b)
        if label is not None:
            DPUInvariant.AddLabel(b, label)
        DPUInvariant.AddOp(b, t.op)
        DPUInvariant.AddTile(b, t.tile)
        DPUInvariant.AddInputs(b, inputs)
        DPUInvariant.AddOutput(b, t.output)
        DPUInvariant.AddWeights(b, t.weights)
        DPUInvariant.AddBias(b, t.bias)
        for add, off in zip((DPUInvariant.AddKernel, DPUInvariant.AddStride, DPUInvariant.AddPad,
                             DPUInvariant.AddDilation), params):
            if off is not None:
                add(b, off)
        if post is not None:
            DPUInvariant.AddPostOp(b, post)
        DPUInvariant.AddBarriers(b, refs)
        DPUInvariant.AddMode(b, t.mode)
        if odu_cast is not None:
            DPUInvariant.AddOduCast(b, odu_cast)
        if t.quant_scale != -1:                 # absent: the float datapath
            DPUInvariant.AddQuantScale(b, t.quant_scale)
            DPUInvariant.AddInZeroPoint(b, t.in_zero_point)
            DPUInvariant.AddOutZeroPoint(b, t.out_zero_point)
        invariant = DPUInvariant.End(b)
        DPUTask.Start(b)
        DPUTask.AddInvariant(b, invariant)
        DPUTask.AddVariants(b, variants_off)
        return DPUTask.End(b)

    def act(self, t: ActTaskRec, kernels: tuple[KernelRec, ...]) -> int:
        b = self.b
        groups = []
        for group in (t.inputs, t.outputs):
            offs = []
            for binding in group:
                offs.append(self.shared(("binding",) + binding, lambda: self.binding(binding)))
            groups.append(self.offsets(offs))
        scalars = [self.shared(("scalar", s.name, s.data_type, s.value.is_int, repr(s.value.value)),
                               lambda: self.scalar_arg(s)) for s in t.scalars]
        scalars_off = self.offsets(scalars)
        run_args = self.offsets([self.string(a) for a in t.run_args])
        refs = self.barriers(t.waits, t.updates)
        inv = t.invocation
        if inv is not None:
            image = image_of(kernels, t.kernel)
            data_size = 0 if image is None else len(image.data)
            window = self.data_ref(None, inv.window, 0, len(inv.window))
            args = self.data_ref(None, inv.window, inv.args_offset, inv.args_size)
            data_section = self.data_ref(None, inv.window, 0, data_size)
        ActKernelInvocation.Start(b)
        ActKernelInvocation.AddKernel(b, t.kernel)
        ActKernelInvocation.AddTile(b, t.tile)
        ActKernelInvocation.AddInputs(b, groups[0])
        ActKernelInvocation.AddOutputs(b, groups[1])
        ActKernelInvocation.AddScalars(b, scalars_off)
        ActKernelInvocation.AddRunArgs(b, run_args)
        if inv is not None:
            ActKernelInvocation.AddWindow(b, window)
            ActKernelInvocation.AddArgs(b, args)
            ActKernelInvocation.AddDataSection(b, data_section)
        ActKernelInvocation.AddBarriers(b, refs)
        invocation = ActKernelInvocation.End(b)
        label = self.string(t.label)
        ActKernelTask.Start(b)
        if label is not None:
            ActKernelTask.AddLabel(b, label)
        ActKernelTask.AddInvocation(b, invocation)
        return ActKernelTask.End(b)

    def binding(self, binding) -> int:
        b = self.b
        alias = self.string(binding.alias)
        TensorBinding.Start(b)
        TensorBinding.AddTensor(b, binding.tensor)
        TensorBinding.AddAlias(b, alias)
        return TensorBinding.End(b)

    def scalar_arg(self, s) -> int:
        b = self.b
        name = self.string(s.name)
        ScalarArg.Start(b)
        ScalarArg.AddName(b, name)
        ScalarArg.AddDataType(b, s.data_type)
        ScalarArg.AddValue(b, Number.CreateNumber(b, *self.number_fields(s.value)))
        return ScalarArg.End(b)

    def kernel(self, k: KernelRec) -> int:
        params = self.offsets([self.table(KernelParam, name=self.string(p.name),
                                          is_memref=bool(p.is_memref), data_type=p.data_type,
                                          dims=self.scalars("i", p.dims)) for p in k.params])
        img = k.image
        image = {}
        if img is not None:
            # One KernelData per kernel: [WIN_D image: .text, .rodata][.data][object].
            win_d = img.text + bytes(img.rodata_offset - len(img.text)) + img.rodata
            data_at = _align(len(win_d), DATA_ALIGN)
            elf_at = _align(data_at + len(img.data), DATA_ALIGN)
            blob = (win_d + bytes(data_at - len(win_d)) + img.data
                    + bytes(elf_at - data_at - len(img.data)) + img.elf)
            image = dict(origin=self.string(img.origin), **{
                part: self.data_ref(f"{k.name}.{part}", blob, offset, size)
                for part, offset, size in (("text", 0, len(img.text)),
                                           ("rodata", img.rodata_offset, len(img.rodata)),
                                           ("data", data_at, len(img.data)),
                                           ("elf", elf_at, len(img.elf)))},
                entry=img.entry, rodata_offset=img.rodata_offset)
        return self.table(ActKernel, name=self.string(k.name), source_kind=k.source_kind,
                          source_ref=self.string(k.source_ref), params=params, **image,
                          image_kernel=k.image_kernel)

    def blob(self, content: BlobContent, digest: bytes) -> bytes:
        with self.forced():
            header = self.header(content.header, digest)
            barriers = self.offsets([self.barrier(r) for r in content.barriers])
        tensors = self.offsets([self.tensor(t) for t in content.tensors])
        lists = []
        for tl in content.task_lists:
            dma = [self.dma(t) for t in tl.tasks if type(t) is DmaRec]
            dpu = [self.dpu(t) for t in tl.tasks if type(t) is DpuRec]
            act = [self.act(t, content.kernels) for t in tl.tasks if type(t) is ActTaskRec]
            dma, dpu, act = [self.offsets(v) if v else None for v in (dma, dpu, act)]
            lists.append(self.table(TaskList, executor=tl.executor, dma_tasks=dma,
                                    dpu_tasks=dpu, act_kernel_tasks=act))
        lists_off = self.offsets(lists)
        with self.forced():
            return self.finish(content, header, tensors, barriers, lists_off)

    def finish(self, content: BlobContent, header: int, tensors: int, barriers: int,
               lists: int) -> bytes:
        kernels = self.offsets([self.kernel(k) for k in content.kernels])
        runtime = None
        if content.runtime is not None:
            runtime = self.table(ActKernelRuntime, kernel=content.runtime.kernel,
                                 stack_sizes=self.scalars("I", content.runtime.stack_sizes))
        vectors: dict[bytes, int] = {}            # equal constants share one vector

        def vector(data: bytes) -> int:
            if data not in vectors:
                vectors[data] = self.aligned_bytes(data)
            return vectors[data]
        constants = self.offsets([self.table(ConstantData, tensor=c.tensor, data=vector(c.data))
                                  for c in content.constants])
        kernel_data = self.offsets([self.table(KernelData, data=self.aligned_bytes(data))
                                    for data in self.data])
        layer_sources = write_layers(self, content.layer_sources)
        root = self.table(Blob, header=header, tensors=tensors, barriers=barriers,
                          task_lists=lists, kernel_data=kernel_data, act_kernels=kernels,
                          act_kernel_runtime=runtime, constants=constants,
                          layer_sources=layer_sources)
        self.b.Finish(root, IDENTIFIER)
        return bytes(self.b.Output())


def _align(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment


def write_fb(content: BlobContent, builder=FastBuilder) -> bytes:
    """The blob, sealed with its content hash (``vpuc.blob.sealing``).  ``builder``: the
    builder class (tests compare FastBuilder with flatbuffers.Builder)."""
    if not hashes_bytes(FORMAT_VERSION):       # tests write older versions
        return _Writer(builder).blob(content, content_hash(content))
    data = bytearray(_Writer(builder).blob(content, bytes(DIGEST_BYTES)))
    at, _ = fb_hash_span(data)
    return seal(data, at)
