"""Verifier rules for graph blocks in a module with other blocks or task lists.

A graph block's Parameters and Results are its interface: module-level tensors
named like the values (docs/vir.md, "Several graph blocks, and graphs beside
tasks").  A Parameter reads a declared DDR buffer of its name, the Result of an
earlier block, or (neither) a network input; a Result writes a declared
``output``/``ddr`` buffer of its name or becomes one.  These rules check that
the names bind consistently and that a block's ``waits``/``updates`` name
barriers, before ``lower-graph`` replaces the blocks by tasks.
"""

from __future__ import annotations

from vpuc.diagnostics import DiagnosticBag
from vpuc.ir.graph import Graph, GraphOp
from vpuc.ir.module import BufferKind, Module
from vpuc.ir.symbols import SymbolTable

PARAMETER_KINDS = (BufferKind.INPUT, BufferKind.DDR, BufferKind.OUTPUT, BufferKind.CONST)
RESULT_KINDS = (BufferKind.OUTPUT, BufferKind.DDR)


def result_values(graph: Graph) -> list[GraphOp]:
    """The ops defining the values ``graph`` computes and returns (a Parameter or Constant
    returned unchanged writes nothing; lowering rejects it)."""
    defined = {op.result: op for op in graph.ops if op.result is not None and not op.is_source}
    return [defined[r.operands[0]] for r in graph.results
            if r.operands and r.operands[0] in defined]


def check_graph_blocks(module: Module, symbols: SymbolTable, bag: DiagnosticBag) -> None:
    _check_sync(module, symbols, bag)
    returned: dict[str, tuple[Graph, GraphOp]] = {}     # value -> the block returning it
    read: dict[str, GraphOp] = {}                       # network input -> first Parameter
    later = {v.result: (g, v) for g in module.graphs for v in result_values(g)}
    for graph in module.graphs:
        for op in graph.parameters:
            _check_parameter(graph, op, symbols, returned, later, read, bag)
        for op in result_values(graph):
            first = returned.get(op.result)
            if first is not None:
                bag.error(op.loc, f"graph @{graph.name} returns %{op.result}, which graph "
                          f"@{first[0].name} returns too; a module tensor has one writer block",
                          ((first[1].loc, f"graph @{first[0].name} defines it here"),))
                continue
            returned[op.result] = (graph, op)
            buffer = symbols.buffers.get(op.result)
            if buffer is None:
                continue
            if buffer.kind not in RESULT_KINDS:
                bag.error(op.loc, f"graph @{graph.name} returns %{op.result}, but %{op.result} "
                          f"is declared as {_a(buffer.kind)} buffer; a Result writes an 'output' "
                          "or 'ddr' buffer", ((buffer.loc, "declared here"),))
            elif buffer.type != op.type:
                bag.error(op.loc, f"graph @{graph.name} returns %{op.result} as {op.type}, but "
                          f"the buffer %{op.result} is {buffer.type}; expected the same type",
                          ((buffer.loc, "declared here"),))


def _check_parameter(graph, op, symbols, returned, later, read, bag) -> None:
    name = op.result
    buffer = symbols.buffers.get(name)
    source = returned.get(name)
    if buffer is not None:
        if buffer.kind not in PARAMETER_KINDS:
            bag.error(op.loc, f"graph @{graph.name} reads %{name}, but %{name} is declared as "
                      f"{_a(buffer.kind)} buffer; a Parameter reads a DDR buffer (input, ddr, "
                      "output, const)", ((buffer.loc, "declared here"),))
        elif buffer.type != op.type:
            bag.error(op.loc, f"graph @{graph.name} reads %{name} as {op.type}, but the "
                      f"buffer %{name} is {buffer.type}; expected the same type",
                      ((buffer.loc, "declared here"),))
    elif source is not None:
        if source[1].type != op.type:
            bag.error(op.loc, f"graph @{graph.name} reads %{name} as {op.type}, but graph "
                      f"@{source[0].name} returns it as {source[1].type}; expected the same "
                      "type", ((source[1].loc, "returned here"),))
    elif name in later:
        writer, value = later[name]
        bag.error(op.loc, f"graph @{graph.name} reads %{name}, which graph @{writer.name} "
                  "returns only further down; graph blocks run in the order they are written",
                  ((value.loc, f"graph @{writer.name} defines it here"),))
    else:
        first = read.setdefault(name, op)
        if first is not op and first.type != op.type:
            bag.error(op.loc, f"graph @{graph.name} reads the network input %{name} as "
                      f"{op.type}, but another block reads it as {first.type}; expected the "
                      "same type", ((first.loc, "read here"),))


def _check_sync(module: Module, symbols: SymbolTable, bag: DiagnosticBag) -> None:
    updated = {b for g in module.graphs for b in g.updates} | {
        b for tl in module.task_lists for t in tl.tasks
        for b in (*t.updates, *(u for v in getattr(t, "variants", ()) for u in v.updates))}
    for graph in module.graphs:
        for ref in (*graph.waits, *graph.updates):
            if ref not in symbols.barriers:
                what = "a buffer" if symbols.is_buffer_like(ref) else "undefined"
                bag.error(ref.loc, f"%{ref} is {what}; expected a barrier in graph "
                          f"@{graph.name}'s waits(...)/updates(...)"
                          + symbols.did_you_mean(ref, "barrier"))
        for ref in set(graph.waits) & set(graph.updates):
            bag.error(ref.loc, f"graph @{graph.name} both waits on and updates barrier %{ref}; "
                      "it could never start")
        for ref in graph.waits:
            if ref in symbols.barriers and ref not in updated:
                bag.error(ref.loc, f"graph @{graph.name} waits on barrier %{ref}, which no task "
                          "or graph block updates: the wait would order nothing; expected a "
                          "task that updates it")



def _a(kind) -> str:
    return f"an {kind}" if str(kind)[0] in "aeiou" else f"a {kind}"
