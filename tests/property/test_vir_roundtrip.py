"""Property: for random modules, print → parse gives back an equal module.

The generated modules exercise every construct of the grammar but need not
verify: the round trip is a property of the parser and printer alone.
"""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vpuc.ir.module import (Barrier, Buffer, BufferKind, ConstInit, Direction, KernelDecl,
                            KernelParam, KernelSource, KernelSourceKind, Module, Ref, RuntimeDecl,
                            Slice, View)
from vpuc.ir.tasks import (Binding, DmaMode, DmaTask, DpuOp, DpuTask, DpuVariant, Executor,
                           PostOp, PostOpKind, ScalarConst, SwKernelTask, TaskList)
from vpuc.ir.types import NAMED_ORDERS, DimsOrder, Dynamic, ElemType, MemRefPattern, TensorType
from vpuc.vir.parser import parse_text
from vpuc.vir.printer import print_module

names = st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True)
elems = st.sampled_from(list(ElemType))
small = st.integers(min_value=0, max_value=64)
finite = st.floats(allow_nan=False, width=32) | st.integers(-1000, 1000)


@st.composite
def tensor_types(draw):
    rank = draw(st.integers(0, 5))
    dims = tuple(draw(st.integers(1, 64) | st.builds(Dynamic, st.integers(1, 256)))
                 for _ in range(rank))
    orders = [p for n, p in NAMED_ORDERS.items() if len(p) == rank and n != "SCALAR"]
    perm = draw(st.sampled_from(orders) if orders and draw(st.booleans())
                else st.permutations(list(range(rank))))
    return TensorType(dims, draw(elems), DimsOrder(tuple(perm)))


@st.composite
def buffers(draw, name):
    kind = draw(st.sampled_from(list(BufferKind)))
    tensor = draw(tensor_types())
    init = None
    if kind is BufferKind.CONST:
        init = draw(st.sampled_from([
            ConstInit(values=tuple(draw(st.lists(finite, max_size=4)))),
            ConstInit(splat=draw(finite)),
            ConstInit(path="weights/w0.npy")]))
    return Buffer(name, kind, tensor,
                  tile=draw(st.none() | st.integers(0, 3)),
                  offset=draw(st.none() | st.integers(0, 1 << 20)), init=init)


def refs(values):
    return tuple(Ref(v) for v in values)


@st.composite
def modules(draw):
    pool = draw(st.lists(names, min_size=4, max_size=12, unique=True))
    bufs = [draw(buffers(n)) for n in pool[:3]]
    barriers = [Barrier(n, draw(st.none() | st.integers(0, 63))) for n in pool[3:]]
    value = st.sampled_from(pool).map(Ref)
    sync = st.lists(value, max_size=3).map(tuple)
    direction = st.none() | st.sampled_from(list(Direction))
    kernels = [KernelDecl("k0", [KernelParam("x", memref=MemRefPattern(ElemType.F16, None),
                                             direction=draw(direction)),
                                 KernelParam("y", memref=MemRefPattern(ElemType.F32, (None, 16)),
                                             direction=draw(direction)),
                                 KernelParam("s", scalar=draw(elems))],
                          draw(st.sampled_from([KernelSource(KernelSourceKind.LIBRARY, "clamp"),
                                                KernelSource(KernelSourceKind.ASM, "k/a.s"),
                                                KernelSource(KernelSourceKind.ELF, "k/a.o"),
                                                KernelSource(KernelSourceKind.GENERATED)]))),
               KernelDecl("rt", [], KernelSource(KernelSourceKind.LIBRARY, "runtime"))]
    views = [View("v" + pool[0], Ref(pool[0]),
                  tuple(draw(st.builds(Slice, small, st.integers(65, 99), st.integers(1, 3))
                             | st.builds(lambda a: Slice(a, a + 1), small))
                        for _ in range(draw(st.integers(1, 4)))))]
    dmas = [DmaTask(draw(st.none() | names), draw(sync), draw(sync), draw(value), draw(value),
                    draw(st.integers(0, 3)), draw(st.sampled_from(list(DmaMode))))
            for _ in range(draw(st.integers(0, 3)))]
    dpus = []
    for _ in range(draw(st.integers(0, 2))):
        op = draw(st.sampled_from(list(DpuOp)))
        ints = lambda n: st.none() | st.tuples(*[st.integers(0, 9)] * n)
        post = draw(st.none() | st.sampled_from([
            PostOp(PostOpKind.RELU), PostOp(PostOpKind.CLAMP, (0.0, 6.0)),
            PostOp(PostOpKind.LRELU, (0.125,)), PostOp(PostOpKind.TANH)]))
        variants = [DpuVariant(draw(st.none() | names), draw(st.tuples(small, small, small)),
                               draw(st.tuples(small, small, small)), draw(sync), draw(sync))
                    for _ in range(draw(st.integers(0, 3)))]
        dpus.append(DpuTask(draw(st.none() | names), draw(sync), draw(sync), op,
                            draw(st.integers(0, 3)), refs(draw(st.lists(value, min_size=1, max_size=2))),
                            draw(value), draw(st.none() | value), draw(st.none() | value),
                            draw(ints(2)), draw(ints(2)), draw(ints(4)), draw(ints(2)), post,
                            variants))
    sws = []
    for _ in range(draw(st.integers(0, 2))):
        consts = (ScalarConst("c0", draw(finite), draw(elems)),)
        sws.append(SwKernelTask(draw(st.none() | names), draw(sync), draw(sync), Ref("k0"),
                                draw(st.integers(0, 3)), (Binding(draw(value), Ref("a0")),),
                                (Binding(draw(value), Ref("a1")),), consts,
                                (Ref("a0"), Ref("a1"), Ref("c0"))))
    lists = [TaskList(Executor.DMA, dmas), TaskList(Executor.DPU, dpus),
             TaskList(Executor.ACT_SHAVE, sws)]
    return Module(draw(names), draw(st.sampled_from(["NPU37XX", "NPU40XX"])), kernels,
                  RuntimeDecl(Ref("rt"), tuple(draw(st.lists(st.integers(16, 1 << 16), min_size=1,
                                                             max_size=3)))),
                  bufs, views, barriers, draw(st.permutations(lists)))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(modules())
def test_print_parse_roundtrip(module):
    text = print_module(module)
    parsed = parse_text(text, "generated.vir")
    assert parsed == module
    assert print_module(parsed) == text
