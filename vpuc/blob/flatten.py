"""Program -> BlobContent: names become indices, enums become schema codes.

Tensors are the module's buffers then its views, each with its resolved region
(strides in bits, byte offset in the root).  Barrier counts are per scheduled
entity: a DPU variant counts once, with its task's own barriers included.
Dicts (provenance, options, attributes) are written sorted by key, so equal
programs give identical bytes whatever order their dicts were filled in.
"""

from __future__ import annotations

from vpuc import __version__
from vpuc.blob.empty_outputs import empty_output_pairs
from vpuc.blob.layer_sources import records as layer_records
from vpuc.blob.content import (DMA_MODE_CODE, DPU_OP_CODE, ELEM_CODE, EXECUTOR_CODE,
                               INIT_FILE, INIT_SPLAT, INIT_VALUES, LOCATION_CODE, MPE_MODE_CODE,
                               POST_OP_CODE,
                               SOURCE_KIND_CODE, ActTaskRec, ArchRec, BarrierRec, BindingRec,
                               BlobContent, ConstantRec, ConstInitRec, DmaRec, DpuRec, HeaderRec,
                               InvocationRec, KernelImageRec, KernelRec, KeyValue, Number,
                               ParamRec, PostOpRec, RuntimeRec, ScalarRec, SliceRec, TaskCounts,
                               TaskListRec, TensorRec, VariantRec)
from vpuc.diagnostics import VpucError
from vpuc.ir.module import BufferKind, ConstInit
from vpuc.ir.symbols import SymbolTable, dense_strides_bits
from vpuc.ir.tasks import DmaTask, DpuTask, Executor, SwKernelTask
from vpuc.ir.types import Dynamic, TensorType
from vpuc.program import Program

COMPILER_VERSION = f"vpuc {__version__}"
_I64 = (-(1 << 63), 1 << 63)


def _fail(message: str) -> VpucError:
    return VpucError(f"cannot serialize the program: {message}")


def number(value) -> Number:
    if isinstance(value, bool) or isinstance(value, int):
        if not _I64[0] <= int(value) < _I64[1]:
            raise _fail(f"integer {value} does not fit in 64 bits")
        return Number(1, int(value))
    return Number(0, float(value))


def _pairs(mapping: dict[str, str]) -> tuple[KeyValue, ...]:
    return tuple(KeyValue(str(k), str(mapping[k])) for k in sorted(mapping))


def _type_fields(tensor: TensorType) -> tuple:
    dims = tensor.bound_shape
    dynamic = tuple(int(isinstance(d, Dynamic)) for d in tensor.dims)
    return dims, (dynamic if any(dynamic) else ()), ELEM_CODE[tensor.elem], tensor.order.perm


def _init(init: ConstInit | None) -> ConstInitRec | None:
    if init is None:
        return None
    if init.path is not None:
        return ConstInitRec(INIT_FILE, (), init.path)
    if init.splat is not None:
        return ConstInitRec(INIT_SPLAT, (number(init.splat),), None)
    return ConstInitRec(INIT_VALUES, tuple(number(v) for v in init.values or ()), None)


def flatten(program: Program, options: dict[str, str] | None = None) -> BlobContent:
    module, arch = program.module, program.arch
    symbols = SymbolTable(module)
    tensors: list[TensorRec] = []
    for buffer in module.buffers:
        dims, dynamic, dtype, order = _type_fields(buffer.type)
        tensors.append(TensorRec(
            buffer.name, LOCATION_CODE[buffer.kind], -1 if buffer.tile is None else buffer.tile,
            -1 if buffer.offset is None else buffer.offset, 0, dims, dynamic,
            dense_strides_bits(buffer.type), dtype, order, -1, (), _init(buffer.init)))
    tensor_index = {t.name: i for i, t in enumerate(tensors)}
    for i, view in enumerate(module.views):
        tensor_index[view.name] = len(tensors) + i
    for view in module.views:
        region = symbols.region(view.name)
        if region is None or view.base not in tensor_index:
            raise _fail(f"view %{view.name} does not resolve to a buffer")
        root = region.root
        dims, dynamic, dtype, order = _type_fields(region.type)
        tensors.append(TensorRec(
            view.name, LOCATION_CODE[root.kind], -1 if root.tile is None else root.tile,
            -1 if root.offset is None else root.offset, region.byte_offset, dims, dynamic,
            region.strides_bits, dtype, order, tensor_index[view.base],
            tuple(SliceRec(s.start, s.stop, s.step) for s in view.slices), None))

    barrier_index = {b.name: i for i, b in enumerate(module.barriers)}
    producers = [0] * len(module.barriers)
    consumers = [0] * len(module.barriers)

    def barriers(names) -> tuple[int, ...]:
        try:
            return tuple(barrier_index[n] for n in names)
        except KeyError as exc:
            raise _fail(f"undeclared barrier %{exc.args[0]}") from None

    def tensor(name) -> int:
        try:
            return tensor_index[name]
        except KeyError:
            raise _fail(f"undeclared buffer %{name}") from None

    def count(waits, updates) -> None:
        for b in set(waits):
            consumers[b] += 1
        for b in set(updates):
            producers[b] += 1

    kernel_index = {k.name: i for i, k in enumerate(module.kernels)}
    invocations = {inv.task_index: inv for inv in program.invocations}
    if len(invocations) != len(program.invocations):
        raise _fail("two invocation images for one ACT SHAVE task")
    lists, counts = [], dict(dma=0, dpu=0, dpu_variants=0, act_kernel=0)
    first_act = True
    for task_list in module.task_lists:
        recs: list = []
        for index, task in enumerate(task_list.tasks):
            waits, updates = barriers(task.waits), barriers(task.updates)
            if isinstance(task, DmaTask):
                count(waits, updates)
                recs.append(DmaRec(task.label, tensor(task.src), tensor(task.dst), task.channel,
                                   DMA_MODE_CODE[task.mode], waits, updates))
            elif isinstance(task, DpuTask):
                recs.append(_dpu(task, tensor, barriers, waits, updates, count))
                counts["dpu_variants"] += len(task.variants)
            elif isinstance(task, SwKernelTask):
                count(waits, updates)
                if task.kernel not in kernel_index:
                    raise _fail(f"task invokes undeclared kernel @{task.kernel}")
                inv = invocations.pop(index, None) if first_act else None
                if inv is not None and (inv.kernel != task.kernel or inv.tile != task.tile):
                    raise _fail(f"invocation image #{index} is for @{inv.kernel} on tile "
                                f"{inv.tile}, its task runs @{task.kernel} on tile {task.tile}")
                recs.append(ActTaskRec(
                    task.label, kernel_index[task.kernel], task.tile,
                    tuple(BindingRec(tensor(b.buffer), b.alias) for b in task.inputs),
                    tuple(BindingRec(tensor(b.buffer), b.alias) for b in task.outputs),
                    tuple(ScalarRec(c.name, ELEM_CODE[c.elem], number(c.value))
                          for c in task.consts),
                    tuple(task.run_args),
                    None if inv is None else InvocationRec(bytes(inv.window_e), inv.args_offset,
                                                           inv.args_size),
                    waits, updates))
        key = {Executor.DMA: "dma", Executor.DPU: "dpu", Executor.ACT_SHAVE: "act_kernel"}
        counts[key[task_list.executor]] += len(task_list.tasks)
        if task_list.executor is Executor.ACT_SHAVE:
            first_act = False
        lists.append(TaskListRec(EXECUTOR_CODE[task_list.executor], tuple(recs)))
    if invocations:
        raise _fail(f"invocation images for tasks {sorted(invocations)} that are not ACT SHAVE "
                    "kernel tasks")

    kernels = []
    aliases = program.kernel_aliases
    if not set(aliases.values()) <= set(program.kernels) or not set(aliases) <= set(kernel_index):
        raise _fail("kernel aliases refer to kernels or images that do not exist")
    for decl in module.kernels:
        image = program.kernels.get(decl.name)
        params = tuple(ParamRec(p.name, int(p.is_memref),
                                ELEM_CODE[p.memref.elem if p.is_memref else p.scalar],
                                None if not p.is_memref or p.memref.dims is None
                                else tuple(-1 if d is None else d for d in p.memref.dims))
                       for p in decl.params)
        kernels.append(KernelRec(decl.name, SOURCE_KIND_CODE[decl.source.kind], decl.source.ref,
                                 params, None if image is None else KernelImageRec(
                                     image.origin, bytes(image.text), bytes(image.rodata),
                                     bytes(image.data), bytes(image.elf), image.entry,
                                     image.rodata_offset),
                                 kernel_index[aliases[decl.name]] if decl.name in aliases else -1))
    unknown = set(program.kernels) - set(kernel_index)
    if unknown:
        raise _fail(f"kernel images for undeclared kernels {sorted(unknown)}")
    runtime = None
    if module.runtime is not None:
        if module.runtime.kernel not in kernel_index:
            raise _fail(f"runtime kernel @{module.runtime.kernel} is not declared")
        runtime = RuntimeRec(kernel_index[module.runtime.kernel], tuple(module.runtime.stacks))
    constants = tuple(ConstantRec(tensor(name), bytes(program.constants[name]))
                      for name in sorted(program.constants, key=tensor))

    barrier_recs = tuple(BarrierRec(i, -1 if b.physical is None else b.physical, b.name,
                                    producers[i], consumers[i])
                         for i, b in enumerate(module.barriers))
    bases = arch.window_bases
    header = HeaderRec(
        module.name,
        ArchRec(arch.name, arch.version, arch.tiles, arch.cmx_bytes, arch.act_shaves_per_tile,
                arch.dpus_per_tile, arch.dma_channels, arch.barriers, arch.max_producers,
                arch.max_consumers, arch.window_size, bases["WIN_D"], bases["WIN_E"],
                bases["WIN_F"]),
        tuple(i for i, b in enumerate(module.buffers) if b.kind is BufferKind.INPUT),
        tuple(i for i, b in enumerate(module.buffers) if b.kind is BufferKind.OUTPUT),
        TaskCounts(counts["dma"], counts["dpu"], counts["dpu_variants"], counts["act_kernel"],
                   len(barrier_recs), len(tensors), len(kernels)),
        COMPILER_VERSION, _pairs(options or {}),
        _pairs({**program.provenance, **empty_output_pairs(program.empty_outputs)}),
        _pairs(module.attributes), module.arch)
    return BlobContent(header, tuple(tensors), barrier_recs, tuple(lists), tuple(kernels),
                       runtime, constants, layer_records(module))


def _dpu(task: DpuTask, tensor, barriers, waits, updates, count) -> DpuRec:
    variants = []
    for v in task.variants:
        v_waits, v_updates = barriers(v.waits), barriers(v.updates)
        count(waits + v_waits, updates + v_updates)
        variants.append(VariantRec(v.label, tuple(v.start), tuple(v.end), v_waits, v_updates,
                                   MPE_MODE_CODE[v.mode]))
    post = None
    if task.post is not None:
        post = PostOpRec(POST_OP_CODE[task.post.kind], tuple(float(p) for p in task.post.params))
    opt = (lambda values: None if values is None else tuple(values))
    return DpuRec(task.label, DPU_OP_CODE[task.op], task.tile,
                  tuple(tensor(n) for n in task.inputs), tensor(task.output),
                  -1 if task.weights is None else tensor(task.weights),
                  -1 if task.bias is None else tensor(task.bias),
                  opt(task.kernel), opt(task.stride), opt(task.pad), opt(task.dilation), post,
                  waits, updates, tuple(variants), MPE_MODE_CODE[task.mode],
                  tuple(tensor(n) for n in task.broadcast_outputs),
                  *_quant(task.quant, tensor))


def _quant(quant, tensor) -> tuple[int, int, int]:
    """(scale table's tensor index, input zero point, output zero point); -1: no integer
    mode."""
    if quant is None:
        return -1, 0, 0
    return tensor(quant.scale), quant.in_zero_point, quant.out_zero_point
