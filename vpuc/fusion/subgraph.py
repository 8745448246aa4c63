"""The tokenizer's output: subgraphs with their bodies, and the condensed graph.

A ``Subgraph`` is what the later stages (data-flow optimizer, Linear IR,
generator) receive: a ``body`` graph plus the wiring to the outer graph.

The body, in order:

- one ``Parameter`` per data input, named like the outer value it reads and
  typed like it (shape, element type, dims order); ``inputs[i]`` is the outer
  value behind the i-th Parameter.  A non-scalar Constant is an input too;
- the scalar Constants the fused ops read, copied in (each subgraph gets its
  own copy);
- the fused ops, unchanged (same names, attributes, types), in graph order;
- one ``Result`` per value used outside the subgraph; ``outputs[i]`` is the
  outer value the i-th Result produces.

So a kernel for the subgraph takes ``len(inputs) + len(outputs)`` memrefs, in
that order.  The *condensed graph* has one node per subgraph and per op left
outside any subgraph; ``condensed_order`` sorts it topologically (and proves it
acyclic), and ``run_tokenized`` executes it with the reference executor.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from vpuc.diagnostics import DiagnosticBag, VpucError
from vpuc.reference.graph import check_input, run_graph, run_op, runtime_dims
from vpuc.fusion.targets import TargetMachine
from vpuc.fusion.tokenizer import DataPointers, Decision, Tokenizer
from vpuc.ir.graph import PARAMETER, RESULT, Graph, GraphIndex, GraphOp
from vpuc.ir.module import Ref
from vpuc.verifier.graph import check_graph

Unit = tuple[str, int]   # ("sg", subgraph number) or ("op", op index): a condensed node


@dataclass
class Subgraph:
    name: str                      # sg0, sg1, ... in order of their first op
    ops: list[int]                 # indices of the fused ops in the outer graph
    body: Graph
    inputs: list[str]              # outer values feeding the body's Parameters, in order
    outputs: list[str]             # outer values the body's Results produce, in order
    start: Decision                # why its first op began a subgraph
    pointers: DataPointers


@dataclass(frozen=True)
class Boundary:
    """An edge of the condensed graph that a cut made, with its explanation."""

    source: Unit
    target: Unit
    values: tuple[str, ...]
    decision: Decision
    explained_at: int              # the op whose decision explains the cut


@dataclass
class Tokenization:
    graph: Graph
    target: TargetMachine
    subgraphs: list[Subgraph]
    left_out: dict[int, Decision]           # ops outside every subgraph (not Parameter/Constant/Result)
    starts: dict[int, Decision]             # every op that ever started a subgraph
    owner: dict[int, int] = field(default_factory=dict)   # op index -> subgraph number
    _index: GraphIndex | None = field(default=None, repr=False, compare=False)

    def graph_index(self) -> GraphIndex:
        """The graph's def-use index, built once: the tokenization's op numbers already
        hold its ops fixed (a lowering asked for it once per segment and value read:
        ResNet-50, 1,002 indices of 1,356 ops each)."""
        if self._index is None:
            self._index = self.graph.index()
        return self._index

    def unit(self, i: int) -> Unit:
        k = self.owner.get(i)
        return ("sg", k) if k is not None else ("op", i)

    def unit_name(self, unit: Unit) -> str:
        kind, n = unit
        if kind == "sg":
            return self.subgraphs[n].name
        op = self.graph.ops[n]
        return f"{op.label} ({op.kind})"

    def edges(self) -> dict[tuple[Unit, Unit], list[str]]:
        """Condensed edges with the outer values they carry (scalar constants copied in are not edges)."""
        index = self.graph.index()
        found: dict[tuple[Unit, Unit], list[str]] = {}
        for i, op in enumerate(self.graph.ops):
            for operand in dict.fromkeys(op.operands):
                p = index.position[operand]
                source, target = self.unit(p), self.unit(i)
                inlined = target[0] == "sg" and self.graph.ops[p].is_scalar_constant
                if source != target and not inlined:
                    found.setdefault((source, target), []).append(operand)
        return found

    def condensed_order(self) -> list[Unit]:
        """The condensed graph in topological order; VpucError if it has a cycle (a tokenizer bug)."""
        units = sorted({self.unit(i) for i in range(len(self.graph.ops))},
                       key=lambda u: self.subgraphs[u[1]].ops[0] if u[0] == "sg" else u[1])
        preds: dict[Unit, set[Unit]] = {u: set() for u in units}
        for source, target in self.edges():
            preds[target].add(source)
        order: list[Unit] = []
        done: set[Unit] = set()
        while len(order) < len(units):
            ready = [u for u in units if u not in done and preds[u] <= done]
            if not ready:
                stuck = ", ".join(self.unit_name(u) for u in units if u not in done)
                raise VpucError(f"internal: the condensed graph of @{self.graph.name} has a cycle "
                                f"among {stuck}")
            order.append(ready[0])
            done.add(ready[0])
        return order

    def boundaries(self) -> list[Boundary]:
        """Every condensed edge into or out of a subgraph that a decision explains.

        Between two subgraphs, the consumer started a subgraph of its own when it
        could not join the producer's: its start decision explains the cut.  An
        edge to or from an op left out is explained by why it was left out.
        Parameters, constants and Results are inputs and outputs, not cuts.
        """
        found = []
        for (source, target), values in self.edges().items():
            if source[0] == "op" and target[0] == "op":
                continue
            if source[0] == "sg" and target[0] == "sg":
                readers = [i for i in self.subgraphs[target[1]].ops
                           if i in self.starts and any(v in self.graph.ops[i].operands for v in values)]
                if not readers:
                    continue
                at, decision = readers[0], self.starts[readers[0]]
            else:
                at = source[1] if source[0] == "op" else target[1]
                decision = self.left_out.get(at)
                if decision is None:
                    continue
            found.append(Boundary(source, target, tuple(values), decision, at))
        return found


def _body(graph: Graph, index: GraphIndex, name: str, members: list[int]):
    """The body graph of one subgraph, and its outer inputs and outputs."""
    inside = set(members)
    params: list[GraphOp] = []
    consts: list[GraphOp] = []
    inputs: list[str] = []
    seen: set[str] = set()
    for m in members:
        for operand in graph.ops[m].operands:
            p = index.position[operand]
            if p in inside or operand in seen:
                continue
            seen.add(operand)
            producer = graph.ops[p]
            if producer.is_scalar_constant:
                consts.append(copy.deepcopy(producer))
            else:
                inputs.append(operand)
                params.append(GraphOp(PARAMETER, operand, (), {}, producer.type, loc=producer.loc))
    ops = [copy.deepcopy(graph.ops[m]) for m in members]
    outputs = [op.result for op in ops
               if any(u not in inside for u in index.users[op.result])]
    results = [GraphOp(RESULT, None, (Ref(v),), {}, None) for v in outputs]
    body = Graph(name, params + consts + ops + results, loc=graph.loc)
    bag = DiagnosticBag()
    check_graph(body, bag)
    if bag.has_errors:
        raise VpucError(f"internal: the body of {name} does not verify: "
                        + "; ".join(d.message for d in bag.items))
    return body, inputs, outputs


def tokenize(graph: Graph, target: TargetMachine) -> Tokenization:
    """Mark, tokenize and extract subgraph bodies.  ``graph`` must be verified (typed)."""
    tokenizer = Tokenizer(graph, target)
    grouping = tokenizer.run()
    index = tokenizer.index
    subgraphs, owner = [], {}
    for k, members in enumerate(grouping.groups):
        name = f"sg{k}"
        body, inputs, outputs = _body(graph, index, f"{graph.name}.{name}", members)
        subgraphs.append(Subgraph(name, members, body, inputs, outputs, grouping.starts[k],
                                  grouping.pointers[k]))
        owner.update({m: k for m in members})
    return Tokenization(graph, target, subgraphs, grouping.left_out, grouping.all_starts, owner)


def run_tokenized(tok: Tokenization, inputs: Mapping[str, np.ndarray],
                  base_dir: str | None = None) -> list[np.ndarray]:
    """Execute subgraphs and left-out ops in condensed order; the Results in graph order."""
    values: dict[str, np.ndarray] = {}
    results: dict[int, np.ndarray] = {}
    ops = tok.graph.ops
    for kind, n in tok.condensed_order():
        if kind == "sg":
            sub = tok.subgraphs[n]
            outs = run_graph(sub.body, {v: values[v] for v in sub.inputs}, base_dir)
            values.update(zip(sub.outputs, outs))
            continue
        op = ops[n]
        if op.kind == PARAMETER:
            values[op.result] = check_input(op, inputs[op.result])
        elif op.kind == RESULT:
            value = values[op.operands[0]]
            results[n] = np.broadcast_to(value, runtime_dims(op.type.dims, value.shape)).copy()
        else:
            values[op.result] = run_op(op, [values[o] for o in op.operands], base_dir)
    return [results[i] for i in sorted(results)]
