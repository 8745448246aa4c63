"""FlatBuffer blob -> BlobContent, through the verifying decoder.

The format version is read first, on its own (SummaryHeader.version is the
first field of the first field of the root forever), so a blob of another
major version is refused before anything else of it is interpreted.
"""

from __future__ import annotations

from functools import partial
from itertools import repeat

import numpy as np

from vpuc.blob.layer_sources import read_fb as read_layers
from vpuc.blob.content import (ActTaskRec, ArchRec, BlobContent, ConstantRec, ConstInitRec,
                               DmaRec, DpuRec, HeaderRec, InvocationRec, KernelImageRec,
                               KernelRec, KeyValue, Number, ParamRec, PostOpRec, RuntimeRec,
                               ScalarRec, SliceRec, TaskCounts, TaskListRec, image_of)
from vpuc.blob.fb_columns import Columns
from vpuc.blob.fb_decode import Decoder
from vpuc.blob.fb_schema import load_schema
from vpuc.blob.fb_task_columns import act_columns, dma_fields, dpu_columns, ints
from vpuc.blob.fb_task_records import (barrier_sync, binding_columns, columns_of, corners,
                                       flat_rows, lazy_barriers, lazy_bindings, lazy_variants,
                                       record_table)
from vpuc.blob.sealing import DIGEST_BYTES, fb_hash_span
from vpuc.blob.sync_columns import ListSync, barrier_table
from vpuc.blob.tensor_table import fb_table
from vpuc.diagnostics import BinLoc, VpucError

IDENTIFIER = b"VPUB"
# Records made from a tuple without the namedtuple's Python __new__ frame.
_slice_rec = partial(tuple.__new__, SliceRec)
_invocation_rec = partial(tuple.__new__, InvocationRec)


class FbReader:
    def __init__(self, data: bytes, file: str, columns: bool = False) -> None:
        self.data = data
        self.file = file
        self.schema = load_schema()
        self.decoder = Decoder(self.schema, data, file, columns=columns)
        if columns:     # views' slices made as the records, variant corners as plain tuples
            self.decoder.columns.struct_types.update(Slice=SliceRec, Coord3=tuple)
            # numbers for the tensor table (``tensor_table.fb_table``)
            self.decoder.columns.struct_arrays.add("Slice")
            self.decoder.columns.number_vectors.update(("TensorReference.dims",
                                                        "TensorReference.strides"))
        self.root = None

    def fail(self, where: str, message: str) -> VpucError:
        return VpucError(message, BinLoc(self.file, where, 0))

    def tensor_fail(self, row: int, field: str, element: int | None, message: str):
        """A tensor record's number refused, located at its bytes: field ``field`` of tensor
        ``row`` (element ``element`` of a vector field)."""
        dec, tables = self.decoder, self.schema.tables
        tensor = tables["TensorReference"]
        at = dec.follow(dec.locate(tables["Blob"], dec.root_position(), "tensors") + 4 + 4 * row)
        at = dec.slot(tensor, at, field, 8) if element is None else \
            dec.locate(tensor, at, field) + 4 + 8 * element
        return VpucError(message, BinLoc(self.file, f"TensorReference.{field}", at))

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
        content = BlobContent(self.header(root.header), _tensors(root.tensors, self.tensor_fail),
                              _barriers(root.barriers),
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
        if not tasks:
            return TaskListRec(tl.executor, ())
        fields = None
        if tl.executor == 0:
            cols = columns_of(tasks)
            fields = dma_fields(cols)       # numpy; a record's ints made when asked
            recs = record_table(DmaRec, [cols["label"], fields["src"], fields["dst"],
                                   fields["channel"], fields["mode"],
                                   *lazy_barriers(cols["barriers"])])
            sync = barrier_sync(cols["barriers"], len(recs))
        elif tl.executor == 1:
            recs, sync = self.dpu_tasks(tasks)
        else:
            recs, fields = self.act_tasks(tasks, data, kernels)
            sync = barrier_sync(columns_of(columns_of(tasks)["invocation"])["barriers"], len(recs))
        if sync is not None and fields is not None:
            sync.fields = fields
        recs.sync = sync        # None: ``sync_columns`` flattens the records
        return TaskListRec(tl.executor, recs)

    def dpu_tasks(self, tasks) -> tuple[tuple, ListSync | None]:
        """DPU task records built a column at a time (fields by their schema names), and
        their barrier indices as ``sync_columns`` flattens them (None: not as columns)."""
        cols = columns_of(tasks)
        invariants = cols["invariant"]
        if not isinstance(invariants, Columns) and None in invariants:
            raise self.fail("DPUTask", "DPU task has no invariant")
        flat, counts = flat_rows(cols["variants"])
        variants: list = []
        variant_sync = vc = None
        starts = ends = []
        if flat:
            vc = columns_of(flat)
            variant_sync = barrier_sync(vc["barriers"], len(flat))
            starts, ends = corners(vc["start"]), corners(vc["end"])
            variants = lazy_variants(vc, starts, ends, counts)
        else:
            variants = [()] * len(tasks)
        ic = columns_of(invariants)
        posts = [None if p is None else PostOpRec(p.kind, tuple(p.params or ()))
                 for p in ic["post_op"]]
        extra, fields = dpu_columns(ic, vc, starts, ends, posts)
        n = extra.pop("numbers")        # numpy; a record's ints made when asked
        recs = record_table(DpuRec, [
            ic["label"], n["op"], n["tile"], [i or () for i in ic["inputs"]], n["output"],
            n["weights"], n["bias"], ic["kernel"], ic["stride"], ic["pad"], ic["dilation"], posts,
            *lazy_barriers(ic["barriers"]), variants, n["mode"],
            [o or () for o in ic["odu_cast"]], n["quant_scale"], n["in_zero_point"],
            n["out_zero_point"]], extra)
        sync = barrier_sync(ic["barriers"], len(recs))
        if sync is None or variant_sync is None:
            return recs, None
        sync.fields = fields
        sync.variant_waits, sync.variant_updates = variant_sync.waits, variant_sync.updates
        sync.variant_count = np.array(counts, np.int64)
        sync.variant_task = np.repeat(np.arange(len(recs), dtype=np.int64), sync.variant_count)
        return recs, sync

    def act_tasks(self, tasks, data, kernels) -> tuple:
        """ACT kernel task records built a column at a time (fields by their schema names),
        and the list's ``ListSync.fields`` (None: not as columns)."""
        cols = columns_of(tasks)
        labels, invocations = cols["label"], cols["invocation"]
        if not isinstance(invocations, Columns) and None in invocations:
            raise self.fail("ActKernelTask", "ACT kernel task has no invocation")
        ic = columns_of(invocations)
        images = None if flat_rows(ic["scalars"])[0] else self.images(ic, data, kernels)
        if images is None:      # row by row, in order, so the first bad task is reported
            images, scalars = zip(*[
                (None if inv.window is None else self.image(label, inv, data, kernels),
                 self.scalars(label, inv.scalars) if inv.scalars else ())
                for label, inv in zip(labels, invocations)])
        else:
            scalars = repeat((), len(tasks))
        run_args = [a or () for a in ic["run_args"]]
        sides = [binding_columns(ic["inputs"]), binding_columns(ic["outputs"])]
        extra, fields = act_columns(ic, *sides, run_args, bool(flat_rows(ic["scalars"])[0])) \
            if None not in sides else ({}, None)
        return record_table(ActTaskRec, [
            labels, ic["kernel"], ic["tile"], lazy_bindings(ic["inputs"]),
            lazy_bindings(ic["outputs"]), list(scalars), run_args, list(images),
            *lazy_barriers(ic["barriers"])],
            extra), fields

    def images(self, ic: dict, data: list[bytes], kernels) -> list | None:
        """Every invocation's WIN_E image when all are packed and every reference checks
        out (``image``'s checks, on the columns); None on any doubt (then row by row)."""
        refs = [ic["window"], ic["args"], ic["data_section"]]
        if not ic["window"] or any(not isinstance(column, Columns) and None in column
                                   for column in refs):
            return None
        (w_index, w_offset, w_size), (a_index, a_offset, a_size), (d_index, d_offset, d_size) = [
            [ints(c[field]) for field in ("data_index", "offset", "size")]
            for c in map(columns_of, refs)]
        kernel = ints(ic["kernel"])
        data_size = np.array([-1 if image_of(kernels, k) is None else len(image_of(kernels, k).data)
                              for k in range(len(kernels))] + [-1], np.int64)
        lengths = np.array([len(d) for d in data] + [-1], np.int64)
        inside = (w_index >= 0) & (w_index < len(data))
        ok = inside & (a_index == w_index) & (w_offset <= a_offset) & \
            (a_offset <= w_offset + w_size) & (d_index == w_index) & (d_offset == w_offset) & \
            (kernel >= 0) & (kernel < len(kernels)) & \
            (d_size == data_size[np.where((kernel >= 0) & (kernel < len(kernels)), kernel, -1)]) & \
            (w_offset + w_size <= lengths[np.where(inside, w_index, -1)])
        if not ok.all():
            return None
        ends = (w_offset + w_size).tolist()
        windows = [data[i][a:b] for i, a, b in zip(w_index.tolist(), w_offset.tolist(), ends)]
        return list(map(_invocation_rec, zip(windows, (a_offset - w_offset).tolist(),
                                              a_size.tolist())))

    def scalars(self, label, scalars) -> tuple:
        where = f"ActKernelInvocation {label or ''}"
        return tuple(ScalarRec(s.name or "", s.data_type, _number(s.value, where, self))
                     for s in scalars)

    def image(self, label, inv, data, kernels) -> InvocationRec:
        """An invocation's WIN_E image, its args and .data references checked against it."""
        where = f"ActKernelInvocation {label or ''}"
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
        return InvocationRec(self.slice(window, data, where), args.offset - window.offset,
                             args.size)


def _number(n, where: str, reader: FbReader) -> Number:
    if n is None:
        raise reader.fail(where, "missing number")
    return Number(1, n.int_value) if n.is_int else Number(0, n.float_value)


def _barriers(barriers) -> tuple:
    """Barrier records as columns (fields by their schema names), made when asked."""
    if not barriers:
        return ()
    c = columns_of(barriers)
    return barrier_table({"name": [n or "" for n in c["name"]],
                          **{name: ints(c[name]) for name in
                             ("id", "physical_id", "producer_count", "consumer_count")}})


def _tensors(tensors, fail) -> tuple:
    """The tensor records as a ``TensorTable`` (fields by their schema names); ``fail``:
    the reader's located error."""
    if not tensors:
        return ()
    c = columns_of(tensors)        # ([ubyte] vectors decode as bytes: dims_order made a tuple)
    inits = [None if ci is None else ConstInitRec(
        ci.kind, tuple(Number(1, v.int_value) if v.is_int else Number(0, v.float_value)
                       for v in ci.values or ()), ci.path) for ci in c["const_init"]]
    # kept as int64 columns, a record made when asked (``tensor_table``)
    return fb_table(c, [n or "" for n in c["name"]],
                    [tuple(map(int, d)) if d else () for d in c["dynamic_dims"]],
                    c["slices"] if hasattr(c["slices"], "values")
                    else _slice_column(c["slices"]), inits, fail)


def _slice_column(column) -> list:
    """Each tensor's Slice structs as a tuple of SliceRecs (() for a buffer): the column
    decoder's already are (``FbReader``'s struct types); the generic decoder's are converted."""
    first = next((slices for slices in column if slices), None)
    if first is None or type(first[0]) is SliceRec:
        return [slices or () for slices in column]
    return list(map(_slices({}), column))


def _slices(made: dict):
    """A view's Slice structs as SliceRecs; views of one shape share theirs (``made``)."""
    def slices(structs) -> tuple:
        if not structs:
            return ()
        found = made.get(structs)
        if found is None:
            found = made[structs] = tuple(map(_slice_rec, structs))
        return found
    return slices
