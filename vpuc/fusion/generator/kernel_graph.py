"""What a generated kernel computes, recorded in its kernel object and read back.

The generator embeds the subgraph body it was given (``GeneratedKernel.source``:
the body as the tokenizer made it, retyped for one invocation, before the
data-flow optimizer) in the kernel's ELF object, as graph-level VIR text
(``KernelObject.graph``, section ``.note.vpuc.graph``; see ``vpuc.shave.kobject``).
The text is a module holding the one graph, as ``vpuc fuse --bodies`` prints
bodies; its Parameters are the kernel's inputs and its Results its outputs, in
the generated contract's order (``contract.py``).  So the blob alone says what
each fused kernel computes: ``vpuc run --reference`` runs the body with
``vpuc.reference.graph.run_graph`` on every invocation's inputs, and
``vpuc inspect`` prints it.

- ``body_text(name, body)``: the text to embed (constants read from files are
  inlined: the blob must not depend on them);
- ``parse_body(text, kernel, where)``: the body back, checked to be one graph
  whose contract is the declared one; any problem is a ``VpucError`` naming the
  kernel and the section, never a traceback; ``load_graphs(program)``: every
  kernel's body (``vpuc.api.simulate`` hands them to the simulator, which does
  not parse VIR itself);
- ``kernel_tolerance(body)``: how close the kernel is to ``run_graph(body)``,
  as the generator's tests require it (``tests/fusion/generator/gen_testlib.py``):
  bit for bit, except documented approximations and FMA contraction.

The same section also holds the kernel's expression tags (``profile.expression_tags``).
"""

from __future__ import annotations

import copy

import numpy as np

from vpuc.diagnostics import Diagnostic, Severity, VpucError
from vpuc.fusion.generator.contract import kernel_decl
from vpuc.ir.graph import CONSTANT, Graph
from vpuc.ir.module import ConstInit, KernelDecl, Module
from vpuc.shave.kobject import GRAPH_SECTION
from vpuc.vir.printer import print_module

# Ops whose generated code approximates the reference executor (documented accuracy),
# rather than matching it bit for bit (docs/generator.md, "Correctness").
APPROXIMATE = {"Erf", "Power", "SoftPlus", "Mish"}
EXACT_POWERS = (0.0, 1.0, 2.0, 0.5, -1.0)     # PowerStatic exponents computed exactly
# (rtol, atol) of |kernel - run_graph(body)| <= atol + rtol |run_graph(body)|
APPROXIMATE_TOLERANCE = (1e-4, 1e-5)
CONTRACTED_TOLERANCE = (2e-3, 1e-3)   # an FMA rounds once where Multiply + Add rounds twice


def body_key(body: Graph) -> tuple:
    """What the generated code of ``body`` depends on, whatever its values are called: each
    op's kind, operand positions, attributes, type and constant.  Equal keys: equal kernels
    (the generator is deterministic), so the lowering generates one and calls it twice."""
    position: dict[str, int] = {}
    key = []
    for i, op in enumerate(body.ops):
        if op.result is not None:
            position[op.result] = i
        key.append((op.kind, tuple(position[o] for o in op.operands),
                    repr(sorted(op.attrs.items())), str(op.type),
                    None if op.const is None else str(op.const)))
    return tuple(key)


def body_text(name: str, body: Graph) -> str:
    """The VIR text recording ``body`` in the object of kernel ``name``."""
    if any(op.kind == CONSTANT and op.const is not None and op.const.path is not None
           for op in body.ops):
        from vpuc.reference.graph import constant_value
        body = copy.deepcopy(body)
        for op in body.ops:
            if op.kind == CONSTANT and op.const is not None and op.const.path is not None:
                values = np.asarray(constant_value(op)).astype(np.float64).ravel().tolist()
                op.const = ConstInit(values=tuple(values))
    return print_module(Module(name, graphs=[body]))


def _located(exc: VpucError, prefix: str) -> VpucError:
    """``exc`` with ``prefix`` before its first message (locations and notes kept)."""
    first, *rest = exc.diagnostics
    return VpucError([Diagnostic(Severity.ERROR, first.loc, f"{prefix}: {first.message}",
                                 first.notes)] + rest)


def parse_body(text: str, decl: KernelDecl, where: str) -> Graph:
    """The body recorded for kernel ``decl``; ``where`` names the text in diagnostics (e.g.
    ``net.blob:@main_sg0:.note.vpuc.graph``)."""
    from vpuc.vir.parser import parse_text
    what = (f"kernel @{decl.name}: the graph recorded in its kernel object (section "
            f"{GRAPH_SECTION})")
    try:
        module = parse_text(text, where)
    except VpucError as exc:
        raise _located(exc, f"{what} is not valid VIR") from None
    if len(module.graphs) != 1 or module.kernels or module.buffers or module.task_lists:
        raise VpucError(f"{where}: {what} must be a module holding exactly one graph; it holds "
                        f"{len(module.graphs)} graphs, {len(module.kernels)} kernels, "
                        f"{len(module.buffers)} buffers and {len(module.task_lists)} task lists")
    graph = module.graphs[0]
    recorded = kernel_decl(decl.name, graph).params
    if recorded != decl.params:
        have = ", ".join(f"{p.name}: {p.type_str()}" for p in recorded)
        want = ", ".join(f"{p.name}: {p.type_str()}" for p in decl.params)
        raise VpucError(f"{where}: {what} does not match the kernel's contract: its Parameters "
                        f"and Results give ({have}), the kernel is declared ({want})")
    return graph


def load_graphs(program, source: str = "<program>") -> dict[str, Graph]:
    """The recorded body of every declared kernel of ``program`` (a ``vpuc.program.Program``)
    whose image carries one, by kernel name; a graph that does not parse or does not fit
    the kernel's contract is a VpucError."""
    graphs: dict[str, Graph] = {}
    for decl in program.module.kernels:
        name = program.kernel_aliases.get(decl.name, decl.name)
        image = program.kernels.get(name)
        if image is not None and image.graph is not None:
            graphs[decl.name] = parse_body(image.graph, decl, f"{source}:@{name}:{GRAPH_SECTION}")
    return graphs


def approximate(body: Graph) -> bool:
    """Whether the kernel of ``body`` approximates some op (within documented accuracy)."""
    return any(approximates(op) for op in body.ops)


def approximates(op) -> bool:
    """Whether the generated code of this one op approximates it."""
    if op.kind in APPROXIMATE:
        return True
    if op.kind == "Gelu" and op.attrs.get("approximation", "erf") == "erf":
        return True
    return op.kind == "PowerStatic" and float(op.attrs["power"]) not in EXACT_POWERS


def contracted(body: Graph) -> bool:
    """Whether a (data-flow optimized) body fused a Multiply and an Add into an FMA."""
    return any(op.kind == "FMA" for op in body.ops)


def kernel_tolerance(body: Graph) -> tuple[float, float] | None:
    """(rtol, atol) within which the generated kernel of ``body`` matches
    ``run_graph(body)``; None when it matches bit for bit (NaN equal to NaN)."""
    from vpuc.fusion.generator.generate import optimize_body
    try:
        fused = contracted(optimize_body(body))
    except VpucError:
        fused = True        # the optimizer refuses the body: assume the looser bound
    if fused:
        return CONTRACTED_TOLERANCE
    return APPROXIMATE_TOLERANCE if approximate(body) else None
