"""VIR text → IR module, with lark's LALR parser and an inline transformer.

The transformer runs inside the parser (no intermediate tree), which with the
garbage collector paused during the parse is what makes big files fast.
The module, kernel, buffer and task rules are here; a graph block's and the
provenance lines' in ``graph_rules.py``; literals, types and the helpers every rule
shares in ``atoms.py``.
Values that the grammar accepts but that are out of range (a bad order, a
malformed memref) are collected as located diagnostics; a syntax error stops
the parse and is turned into a message people understand (see ``syntax.py``).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import lark
from lark import Token, v_args

from vpuc.diagnostics import SOURCES, DiagnosticBag, Loc, VpucError
from vpuc.perf import gc_paused
from vpuc.ir.graph import Graph, number_as_float
from vpuc.ir.provenance import LayerSource
from vpuc.ir.module import (Barrier, Buffer, BufferKind, ConstInit, Direction, KernelDecl,
                            KernelParam, KernelSource, KernelSourceKind, Module, Ref, RuntimeDecl,
                            Slice, View)
from vpuc.ir.tasks import (Binding, DmaMode, DmaTask, DpuOp, DpuQuant, DpuTask, DpuVariant,
                           Executor, PostOp, PostOpKind, ScalarConst, SwKernelTask,
                           TaskList)
from vpuc.ir.types import ELEM_BY_NAME, NAMED_ORDERS, DimsOrder
from vpuc.vir.atoms import MAX_DECIMAL_DIGITS, LiteralTooLong, parse_int, parse_number
from vpuc.vir.grammar_cache import cached_lark
from vpuc.vir.graph_rules import GraphRules
from vpuc.vir.plain_declarations import merge_declarations, take_declarations
from vpuc.vir.syntax import syntax_error

GRAMMAR_PATH = Path(__file__).with_name("grammar.lark")


@v_args(inline=True)
class VirTransformer(GraphRules):
    """Builds IR objects bottom-up while lark parses (the graph blocks' rules in
    ``graph_rules.py``, the atoms' helpers in ``atoms.py``)."""

    def __init__(self) -> None:
        super().__init__()
        self.file = "<input>"
        self.bag = DiagnosticBag()
        self.interned = {}

    def reset(self, file: str) -> None:
        self.file = file
        self.bag = DiagnosticBag()
        self.interned = {}

    # ------------------------------------------------------------ module
    def start(self, header: Module, *items) -> Module:
        module = header
        for item in items:
            if isinstance(item, KernelDecl):
                module.kernels.append(item)
            elif isinstance(item, RuntimeDecl):
                if module.runtime is not None:
                    self.bag.error(item.loc, "duplicate runtime declaration; a module has one "
                                   "runtime kernel", ((module.runtime.loc, "first declared here"),))
                module.runtime = item
            elif isinstance(item, Buffer):
                module.buffers.append(item)
            elif isinstance(item, View):
                module.views.append(item)
            elif isinstance(item, Barrier):
                module.barriers.append(item)
            elif isinstance(item, TaskList):
                module.task_lists.append(item)
            elif isinstance(item, Graph):
                module.graphs.append(item)
            elif isinstance(item, LayerSource):
                first = next((la for la in module.layers if la.key == item.key), None)
                if first is not None:
                    self.bag.error(item.loc, f'duplicate layer "{item.key}"; a layer key names '
                                   f'the tasks "{item.key}.*" once',
                                   ((first.loc, "first declared here"),))
                module.layers.append(item)
        return module

    def module_decl(self, kw, symbol, _arch_kw, arch) -> Module:
        return Module(name=symbol[1:], arch=str(arch) if arch else "NPU37XX", loc=self.loc(kw))

    # ------------------------------------------------------------ kernels
    def kernel_decl(self, kw, symbol, *rest) -> KernelDecl:
        *params, source = rest
        params = [p for p in params if p is not None]
        return KernelDecl(symbol[1:], params, source, loc=self.loc(kw))

    def kparam(self, name, direction, type_token) -> KernelParam:
        loc = self.loc(name)
        if type_token.type == "MEMREF":
            return KernelParam(str(name), memref=self.memref_pattern(type_token), loc=loc,
                               direction=Direction(str(direction)) if direction else None)
        if direction is not None:
            self.bag.error(self.loc(direction), f"scalar argument '{name}' has direction "
                           f"'{direction}'; a kernel only reads its scalars, so only memref "
                           "arguments take in, out or inout")
        if "x" in type_token:
            self.bag.error(self.loc(type_token), f"kernel argument '{name}' has tensor type "
                           f"{type_token}; expected a scalar type (f16, i32, ...) or memref<...>")
        return KernelParam(str(name), scalar=ELEM_BY_NAME[type_token.split("x")[-1]], loc=loc)

    def kernel_source(self, kind, path=None) -> KernelSource:
        if kind.type == "GENERATED":
            return KernelSource(KernelSourceKind.GENERATED)
        return KernelSource(KernelSourceKind(str(kind)), path[1:-1])

    def runtime_decl(self, kw, symbol, stacks) -> RuntimeDecl:
        return RuntimeDecl(self.ref(symbol), tuple(stacks), loc=self.loc(kw))

    # ------------------------------------------------------------ buffers
    def buffer_decl(self, kind, value, shaped, order, tile, offset, init) -> Buffer:
        return Buffer(value[1:], BufferKind(str(kind)), self.tensor_type(shaped, order),
                      tile=self.int_(tile), offset=self.int_(offset), init=init,
                      loc=self.loc(kind))

    def dims_order(self, first, perm=None) -> DimsOrder | None:
        if first.type == "ORDER":
            order = DimsOrder(tuple(perm))
            if not order.is_valid():
                self.bag.error(self.loc(first), f"{order} is not a permutation of "
                               f"0..{len(perm) - 1}; expected each dim exactly once")
                return None
            return order
        perm = NAMED_ORDERS.get(str(first))
        if perm is None:
            self.bag.error(self.loc(first), f"unknown dims order '{first}'; expected one of "
                           + ", ".join(n for n in NAMED_ORDERS if n != "SCALAR")
                           + " or order(i, j, ...)")
            return None
        return DimsOrder(perm)

    def init_values(self, *numbers) -> ConstInit:
        return ConstInit(values=tuple(n for n in numbers if n is not None))

    def init_splat(self, number) -> ConstInit:
        return ConstInit(splat=number)

    def init_file(self, path) -> ConstInit:
        return ConstInit(path=path[1:-1])

    def view_decl(self, kw, value, base, *slices) -> View:
        return View(value[1:], self.ref(base), tuple(slices), loc=self.loc(kw))

    def slice_index(self, index) -> Slice:
        start = parse_int(index)
        return self.shared_slice(start, start + 1)

    def _slice_bound(self, token: Token | None, what: str) -> int | None:
        if token is None:
            return None
        value = parse_int(token)
        if value < 0:
            self.bag.error(self.loc(token), f"slice {what} {value} is negative; expected an "
                           "index from 0 (write 'a:' for 'to the end')")
            return 0
        return value

    def slice_range(self, start, stop) -> Slice:
        # An open stop (``a:``) is resolved against the base's shape by the verifier; -1 marks it.
        stop_value = self._slice_bound(stop, "stop")
        return self.shared_slice(self._slice_bound(start, "start") or 0,
                                 -1 if stop_value is None else stop_value)

    def slice_step(self, start, stop, step) -> Slice:
        stop_value = self._slice_bound(stop, "stop")
        return self.shared_slice(self._slice_bound(start, "start") or 0,
                                 -1 if stop_value is None else stop_value, parse_int(step))

    def barrier_decl(self, kw, value, physical) -> Barrier:
        return Barrier(value[1:], self.int_(physical), loc=self.loc(kw))

    # ------------------------------------------------------------ tasks
    def task_list(self, kw, executor, *tasks) -> TaskList:
        return TaskList(Executor(str(executor)), list(tasks), loc=self.loc(kw))

    def dma_task(self, label, kw, mode, src, dst, channel, waits, updates) -> DmaTask:
        return DmaTask(label=label[:-1] if label else None, waits=waits or (),
                       updates=updates or (), src=self.ref(src), dst=self.ref(dst),
                       channel=self.int_(channel) or 0,
                       mode=DmaMode(str(mode)) if mode else DmaMode.COPY,
                       loc=self.loc(label or kw))

    def dpu_task(self, label, kw, op, tile, inputs, weights, bias, outputs, params, quant, mode,
                 post, waits, updates, *variants) -> DpuTask:
        # out(%y) or out(%y, %copy...): the first on the task's tile, the rest on others
        output, *broadcast = outputs
        task = DpuTask(label=label[:-1] if label else None, waits=waits or (),
                       updates=updates or (), op=DpuOp(str(op)), tile=parse_int(tile),
                       inputs=tuple(inputs), output=output, broadcast_outputs=tuple(broadcast),
                       weights=self.ref(weights) if weights else None,
                       bias=self.ref(bias) if bias else None, post=post, mode=mode,
                       variants=list(variants), loc=self.loc(label or kw), quant=quant)
        for name, values, loc in params:
            if getattr(task, name) is not None:
                self.bag.error(loc, f"duplicate '{name}(...)' on a dpu task; expected each "
                               "of kernel, stride, pad and dilation at most once",
                               ((task.param_locs[name], "first given here"),))
                continue
            setattr(task, name, values)
            task.param_locs[name] = loc
        return task

    def dpu_params(self, *params) -> list:
        return list(params)

    def dpu_param(self, name, values) -> tuple[str, tuple[int, ...], Loc]:
        return (str(name), self.shared(tuple(values)), self.loc(name))

    def dpu_quant(self, kw, scale, in_zero_point, out_zero_point) -> DpuQuant:
        return DpuQuant(self.ref(scale), parse_int(in_zero_point), parse_int(out_zero_point),
                        loc=self.loc(kw))

    def post_op(self, kw, kind, *params) -> PostOp:
        return PostOp(PostOpKind(str(kind)), tuple(number_as_float(p) for p in params if p is not None),
                      loc=self.loc(kw))

    def variant(self, label, kw, x0, y0, z0, x1, y1, z1, mode, waits, updates) -> DpuVariant:
        return DpuVariant(label[:-1] if label else None,
                          self.shared((parse_int(x0), parse_int(y0), parse_int(z0))),
                          self.shared((parse_int(x1), parse_int(y1), parse_int(z1))),
                          waits or (), updates or (), mode=mode, loc=self.loc(label or kw))

    def mpe_mode(self, kw, name) -> str:
        return str(name)

    def sw_task(self, label, kw, kernel, tile, inputs, outputs, waits, updates, *body) -> SwKernelTask:
        *consts, (run_args, run_loc) = body
        return SwKernelTask(label=label[:-1] if label else None, waits=waits or (),
                            updates=updates or (), kernel=self.ref(kernel), tile=parse_int(tile),
                            inputs=inputs, outputs=outputs, consts=tuple(consts),
                            run_args=run_args, run_loc=run_loc, loc=self.loc(label or kw))

    def sw_inputs(self, *bindings) -> tuple[Binding, ...]:
        return tuple(b for b in bindings if b is not None)

    sw_outputs = sw_inputs

    def binding(self, buffer, alias) -> Binding:
        return Binding(self.ref(buffer), self.ref(alias))

    def scalar_const(self, value, kw, number, shaped) -> ScalarConst:
        loc = self.loc(value)
        if "x" in shaped:
            self.bag.error(self.loc(shaped), f"scalar constant {value} has tensor type {shaped}; "
                           "expected a scalar type such as f16")
        return ScalarConst(value[1:], number, ELEM_BY_NAME[shaped.split("x")[-1]], loc=loc)

    def run_call(self, kw, args) -> tuple[tuple[Ref, ...], Loc]:
        return (tuple(args or ()), self.loc(kw))

    def waits(self, values) -> tuple[Ref, ...]:
        return tuple(values or ())

    updates = waits

    # ------------------------------------------------------------ atoms
    def value_list(self, *values) -> list[Ref]:
        return [self.ref(v) for v in values]

    def int_list(self, *ints) -> list[int]:
        return [parse_int(i) for i in ints]

    def number(self, token) -> float | int:
        return parse_number(token)


@lru_cache(maxsize=1)
def _parser() -> tuple[lark.Lark, VirTransformer]:
    transformer = VirTransformer()
    parser = cached_lark(GRAMMAR_PATH.read_text(encoding="utf-8"), parser="lalr",
                         lexer="contextual", transformer=transformer)
    return parser, transformer


@lru_cache(maxsize=1)
def bare_parser() -> lark.Lark:
    """The same grammar without our transformer: builds lark's tree only (for benchmarks)."""
    return lark.Lark(GRAMMAR_PATH.read_text(encoding="utf-8"), parser="lalr", lexer="contextual")


def parse_text(text: str, file: str = "<input>", machine_written: bool = False) -> Module:
    """Parse VIR text into a module; raises VpucError with every diagnostic found.
    ``machine_written``: text vpuc wrote (a lowered program), whose plainest declarations
    are read without lark (``plain_declarations.py``)."""
    parser, transformer = _parser()
    transformer.reset(file)
    SOURCES.add(file, text)
    try:
        with gc_paused():
            taken = None
            if machine_written:
                text, *taken = take_declarations(text, transformer)
            module = parser.parse(text)
            if taken is not None:
                module.buffers = merge_declarations(module.buffers, taken[0])
                module.views = merge_declarations(module.views, taken[1])
                module.barriers = merge_declarations(module.barriers, taken[2])
    except lark.exceptions.UnexpectedInput as exc:
        raise syntax_error(exc, text, file, parser) from None
    except LiteralTooLong as exc:
        raise _too_long(exc, file) from None
    except lark.exceptions.VisitError as exc:
        if isinstance(exc.orig_exc, LiteralTooLong):
            raise _too_long(exc.orig_exc, file) from None
        # A transformer callback failed: an internal invariant, reported at the rule's position.
        raise VpucError(f"{file}: internal error while reading {exc.rule}: {exc.orig_exc}") from None
    transformer.bag.raise_if_errors()
    return module


def _too_long(exc: LiteralTooLong, file: str) -> VpucError:
    token = exc.token
    loc = Loc(file, getattr(token, "line", 0) or 0, getattr(token, "column", 0) or 0)
    return VpucError(f"a number of more than {MAX_DECIMAL_DIGITS} digits; vpuc reads decimal "
                     f"numbers of at most {MAX_DECIMAL_DIGITS} digits", loc)


def parse_file(path: str | Path) -> Module:
    """Parse a .vir file (``-``: stdin); an unreadable file or a byte that is not UTF-8 is
    a plain error (``vpuc.input_files``)."""
    from vpuc.input_files import display_name, read_text
    return parse_text(read_text(path, "the .vir file"), display_name(path))
