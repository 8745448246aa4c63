"""The tokenizer: greedy grouping of a graph's elementwise ops into subgraphs.

The Snippets Design Guide's algorithm (§Tokenizer; OpenVINO's ``TokenizeSnippets``), walking the ops in
topological order.  An op the target cannot fuse (not elementwise, marked
``skipped-by-plugin``, an element type the target lacks, declined by the
target's tokenization callback) is left out, and so is
a dead op (nothing it computes reaches a Result).  Any other op either

- starts a subgraph, when none of its operands comes from a subgraph;
- attaches to the one subgraph its operands come from; or
- merges all the subgraphs its operands come from and attaches to the result.

Attaching is refused, and the op starts a new subgraph, when the merged
subgraph would

1. form a cycle with the rest of the graph;
2. feed more than one Result;
3. need more data pointers (inputs + outputs + buffers) than the target has;
4. have outputs whose shapes do not broadcast one into the other (a kernel
   iterates over one domain).

An op that breaks rule 2, 3 or 4 even on its own is left out.  Every start and
every left-out op records a ``Decision``: the reason and a sentence naming the
ops involved, which ``vpuc fuse`` prints at each boundary.

**Cycles, by topological-order bounds.**  Every node of the *condensed* graph
(a subgraph, or an op outside any subgraph) carries a rank, such that every
edge goes from a lower to a higher rank; an op starts with its position in the
graph.  A cycle through a merged subgraph M would leave M to some consumer c
and come back through some producer p, so rank(c) <= rank(p).  Hence, if every
producer of M (outside M) ranks below every consumer of M (outside M), no cycle
forms, and M gets a rank strictly between the two, which keeps every edge
increasing.  Parameters, Constants and Results have no producers or no
consumers, so no cycle passes through them and they are not counted.  The test
is conservative (it may refuse a merge that would be fine) but never searches
the graph.

Scalar constants are copied into every subgraph that reads them; other
constants are subgraph inputs like Parameters.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from fractions import Fraction

from vpuc.fusion.targets import TargetMachine
from vpuc.fusion.targets.mark_skipped import SKIPPED
from vpuc.ir.graph import RESULT, SOURCE_KINDS, Graph, GraphIndex, GraphOp
from vpuc.ir.graph_ops import OPS, broadcasts_to


class Reason(Enum):
    NO_SUBGRAPH_PARENT = "no-subgraph-parent"   # a start, not a cut
    NOT_TOKENIZABLE = "not-tokenizable"
    SKIPPED_BY_PLUGIN = "skipped-by-plugin"
    UNSUPPORTED_TYPE = "unsupported-type"
    CALLBACK = "plugin-callback"             # the target's tokenization callback declined it
    CYCLE = "cycle"
    DATA_POINTERS = "data-pointer-limit"
    RESULTS = "second-result"
    OUTPUT_SHAPES = "output-shapes"
    DEAD = "dead"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Decision:
    """Why an op starts a subgraph, or why it was left out.

    ``cut_from`` names (by op index) one producer in each subgraph the op could
    not join, so reports can say which subgraphs a cut separates.
    """

    reason: Reason
    detail: str
    cut_from: tuple[int, ...] = ()


@dataclass(frozen=True)
class DataPointers:
    inputs: int
    outputs: int
    buffers: int

    @property
    def total(self) -> int:
        return self.inputs + self.outputs + self.buffers

    def __str__(self) -> str:
        return (f"{self.total} data pointers ({self.inputs} in, {self.outputs} out, "
                f"{self.buffers} buffers)")


@dataclass
class Grouping:
    """The raw result: member op indices per subgraph, and the decisions."""

    groups: list[list[int]]            # each sorted; groups ordered by their first op
    starts: list[Decision]             # per group: why its first-attached op started it
    left_out: dict[int, Decision]      # ops (not Parameter/Constant/Result) outside every group
    pointers: list[DataPointers]
    all_starts: dict[int, Decision]    # every op that started a group, even one merged later


def _describe(op: GraphOp) -> str:
    return f"{op.label} ({op.kind})"


class Tokenizer:
    def __init__(self, graph: Graph, target: TargetMachine) -> None:
        self.graph, self.target = graph, target
        self.ops = graph.ops
        self.index: GraphIndex = graph.index()
        self.owner: dict[int, int] = {}            # op -> group id
        self.members: dict[int, list[int]] = {}    # group id -> ops
        self.rank: dict[int, Fraction] = {}        # group id -> rank in the condensed graph
        self.start: dict[int, tuple[int, Decision]] = {}
        self.left_out: dict[int, Decision] = {}
        self.all_starts: dict[int, Decision] = {}

    # ------------------------------------------------------------ the walk
    def run(self) -> Grouping:
        self.target.mark_skipped(self.graph)
        live = self._live()
        for i, op in enumerate(self.ops):
            if op.kind in SOURCE_KINDS or op.kind == RESULT:
                continue
            refusal = self._unfusable(op) if i in live else Decision(
                Reason.DEAD, "nothing it computes reaches a Result")
            if refusal is not None:
                self.left_out[i] = refusal
                continue
            self._place(i, op)
        return self._grouping()

    def _live(self) -> set[int]:
        """Ops whose value reaches a Result; a subgraph of dead ops would have no output."""
        live: set[int] = set()
        for i in range(len(self.ops) - 1, -1, -1):
            op = self.ops[i]
            if op.kind == RESULT or (op.result and any(u in live for u in self.index.users[op.result])):
                live.add(i)
        return live

    def _unfusable(self, op: GraphOp) -> Decision | None:
        if SKIPPED in op.marks:
            return Decision(Reason.SKIPPED_BY_PLUGIN, op.marks[SKIPPED])
        if op.kind not in self.target.tokenizable:
            why = ("is not elementwise" if not OPS[op.kind].elementwise
                   else f"has no {self.target.name} code generator")
            return Decision(Reason.NOT_TOKENIZABLE, f"{op.kind} {why}")
        for name in op.operands + ((op.result,) if op.result else ()):
            elem = self.index.producer(name).type.elem if name != op.result else op.type.elem
            if elem not in self.target.elem_types:
                return Decision(Reason.UNSUPPORTED_TYPE, f"%{name} is {elem}; {self.target.name} "
                                "kernels handle " + ", ".join(sorted(str(e) for e in self.target.elem_types)))
        why = self.target.refuse(op, self.index) if self.target.refuse is not None else None
        return Decision(Reason.CALLBACK, why) if why is not None else None

    def _place(self, i: int, op: GraphOp) -> None:
        parents: list[int] = []
        producers: list[int] = []
        for operand in op.operands:
            p = self.index.position[operand]
            group = self.owner.get(p)
            if group is not None and group not in parents:
                parents.append(group)
                producers.append(p)
        alone, _ = self._check([i], merging=False)
        if alone is not None:
            self.left_out[i] = Decision(alone.reason, alone.detail + " even on its own")
            return
        if not parents:
            self._new_group(i, Decision(Reason.NO_SUBGRAPH_PARENT, self._no_parent_detail(op)))
            return
        candidate = sorted({m for g in parents for m in self.members[g]} | {i})
        refusal, rank = self._check(candidate, merging=True)
        if refusal is None:
            keep = min(parents)
            for g in parents:
                if g != keep:
                    del self.members[g], self.rank[g], self.start[g]
            self.members[keep] = candidate
            self.rank[keep] = rank
            for m in candidate:
                self.owner[m] = keep
            return
        self._new_group(i, Decision(refusal.reason, refusal.detail, tuple(producers)))

    def _new_group(self, i: int, decision: Decision) -> None:
        group = i  # ids are op indices: unique and stable
        self.members[group] = [i]
        self.rank[group] = Fraction(i)
        self.start[group] = (i, decision)
        self.all_starts[i] = decision
        self.owner[i] = group

    def _no_parent_detail(self, op: GraphOp) -> str:
        sources = []
        for operand in dict.fromkeys(op.operands):
            producer = self.index.producer(operand)
            if producer.is_scalar_constant:
                continue
            where = "left out" if self.index.position[operand] in self.left_out else producer.kind
            sources.append(f"%{operand} ({where})")
        return "its inputs come from " + (", ".join(sources) if sources else "scalar constants only")

    # ------------------------------------------------------------ the checks
    def _node_rank(self, i: int) -> Fraction:
        group = self.owner.get(i)
        return self.rank[group] if group is not None else Fraction(i)

    def _check(self, candidate: list[int], merging: bool) -> tuple[Decision | None, Fraction]:
        inside = set(candidate)
        newest = candidate[-1]
        rank = Fraction(newest)
        if merging:
            cycle, rank = self._bounds(candidate, inside, newest)
            if cycle is not None:
                return cycle, rank
        results = [self.ops[u] for m in candidate if self.ops[m].result
                   for u in self.index.users[self.ops[m].result] if self.ops[u].kind == RESULT]
        if len(results) > 1:
            listed = ", ".join(r.label for r in results)
            return Decision(Reason.RESULTS, f"the subgraph would feed {len(results)} Results "
                            f"({listed}); a subgraph feeds at most one"), rank
        pointers = self.data_pointers(candidate)
        if pointers.total > self.target.data_pointers:
            return Decision(Reason.DATA_POINTERS, f"the subgraph would need {pointers}; "
                            f"{self.target.name} has {self.target.data_pointers}"), rank
        shapes = self._output_shapes_clash(candidate, inside)
        if shapes is not None:
            return shapes, rank
        return None, rank

    def _bounds(self, candidate, inside, newest) -> tuple[Decision | None, Fraction]:
        low, high = None, None            # (rank, op index) of the latest producer / earliest consumer
        for m in candidate:
            op = self.ops[m]
            for operand in op.operands:
                p = self.index.position[operand]
                if p in inside or self.ops[p].kind in SOURCE_KINDS:
                    continue
                r = self._node_rank(p)
                if low is None or r > low[0]:
                    low = (r, p)
            for u in self.index.users.get(op.result, ()) if op.result else ():
                if u in inside or self.ops[u].kind == RESULT:
                    continue
                r = self._node_rank(u)
                if high is None or r < high[0]:
                    high = (r, u)
        if low is not None and high is not None and low[0] >= high[0]:
            feeds, needs = _describe(self.ops[high[1]]), _describe(self.ops[low[1]])
            detail = (f"the merged subgraph would both feed and depend on {feeds}" if low[1] == high[1]
                      else f"the merged subgraph would feed {feeds} and depend on {needs}, which "
                      f"may be reached from {feeds}")
            return Decision(Reason.CYCLE, detail), Fraction(newest)
        lo = low[0] if low else None
        hi = high[0] if high else None
        t = Fraction(newest)
        if (lo is None or lo < t) and (hi is None or t < hi):
            return None, t
        if lo is None:
            return None, hi - 1
        if hi is None:
            return None, lo + 1
        return None, (lo + hi) / 2

    def data_pointers(self, candidate: list[int]) -> DataPointers:
        inside = set(candidate)
        inputs: set[str] = set()
        outputs = 0
        for m in candidate:
            op = self.ops[m]
            for operand in op.operands:
                p = self.index.position[operand]
                if p not in inside and not self.ops[p].is_scalar_constant:
                    inputs.add(operand)
            if op.result and any(u not in inside for u in self.index.users[op.result]):
                outputs += 1
        buffers = self.target.buffers_needed([self.ops[m].kind for m in candidate])
        return DataPointers(len(inputs), outputs, buffers)

    def _output_shapes_clash(self, candidate, inside) -> Decision | None:
        outs = [self.ops[m] for m in candidate if self.ops[m].result
                and any(u not in inside for u in self.index.users[self.ops[m].result])]
        for a in range(len(outs)):
            for b in range(a + 1, len(outs)):
                x, y = outs[a].type.dims, outs[b].type.dims
                if not (broadcasts_to(x, y) or broadcasts_to(y, x)):
                    return Decision(Reason.OUTPUT_SHAPES, f"its outputs {outs[a].label} "
                                    f"({outs[a].type.shape_str()}) and {outs[b].label} "
                                    f"({outs[b].type.shape_str()}) do not broadcast one into the "
                                    "other; a kernel iterates over one domain")
        return None

    # ------------------------------------------------------------ result
    def _grouping(self) -> Grouping:
        ids = sorted(self.members, key=lambda g: self.members[g][0])
        return Grouping(groups=[self.members[g] for g in ids],
                        starts=[self.start[g][1] for g in ids],
                        left_out=dict(sorted(self.left_out.items())),
                        pointers=[self.data_pointers(self.members[g]) for g in ids],
                        all_starts=self.all_starts)


def group_ops(graph: Graph, target: TargetMachine) -> Grouping:
    """Run the marking pass and the tokenizer; the graph must be verified (fully typed)."""
    return Tokenizer(graph, target).run()
