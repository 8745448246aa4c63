"""The Linear IR container: expressions in emission order, loops, the kernel interface.

``LinearIR.exprs`` is the control flow: code for ``exprs[i]`` is emitted before
``exprs[i + 1]``; the connectors carry the data flow, and every input must be
produced above its use.  Passes change the LIR only through the helpers here,
which keep connectors and loop ports consistent (the Snippets Design Guide's ``insert_node``,
``replace_with_node``, ``replace_with_expr``).

Kernel-level facts the emitter needs live here too:

- ``io``: the kernel arguments (``KernelArg``), inputs first, in the order of
  the subgraph's MemRefData;
- ``master_shape``: the iteration domain (after optimize-domain, possibly with
  merged dims), ``domain_groups``: which original master dims each current dim
  merges;
- ``runtime_dims``: for each dim symbol ``Dk`` (original master dim k), the
  argument and the MemRefData dim (innermost first) that hold its size;
- ``increment``: elements per vector iteration of the innermost loops;
- ``frame``: the stack frame the prologue reserves (spill slots, buffer scratchpad).
"""

from __future__ import annotations

from dataclasses import dataclass

from vpuc.fusion.lir.expression import (Expression, ExpressionPort, Node, PortConnector,
                                        PortDescriptor)
from vpuc.fusion.lir.kinds import LOOP_BEGIN, LOOP_END, OUTSIDE_LOOPS
from vpuc.fusion.lir.loop_info import LoopInfo, LoopManager, LoopPort
from vpuc.fusion.lir.registers import RegisterFile, register_file_for
from vpuc.fusion.lir.values import Value
from vpuc.fusion.targets import TargetMachine
from vpuc.ir.types import ElemType


@dataclass
class LoweringConfig:
    target: TargetMachine
    registers: RegisterFile | None = None          # default: the target's register file
    buffer_mode: str = "optimized"                 # allocate-buffers: optimized or simple
    verify: bool = True                            # validate the LIR after every pass

    def __post_init__(self) -> None:
        if self.registers is None:
            self.registers = register_file_for(self.target.name)
        if self.buffer_mode not in ("optimized", "simple"):
            raise ValueError(f"buffer mode '{self.buffer_mode}': expected optimized or simple")


@dataclass
class KernelArg:
    index: int                   # position among the kernel's MemRefData arguments
    kind: str                    # input or output
    memory: str                  # in<i> / out<j>: the memory object Loads and Stores name
    name: str                    # the body value
    shape: tuple[Value, ...]     # memory shape, outermost first, padded to the master rank
    elem: ElemType
    layout: str = ""             # logical layout of the tensor (propagate-layout)
    dims_order: int = 0          # MemRefData dimsOrder code of its memory order (propagate-layout)


@dataclass
class FrameLayout:
    """The kernel's stack frame the prologue reserves, from sp: the buffer scratchpad at
    +0, then the spill slots at ``spill_offset``; ``size`` is what to subtract from sp."""

    scratchpad_size: int = 0
    spill_size: int = 0

    @property
    def spill_offset(self) -> int:
        return -(-self.scratchpad_size // 16) * 16

    @property
    def size(self) -> int:
        return -(-(self.spill_offset + self.spill_size) // 16) * 16


class LinearIR:
    def __init__(self, name: str, config: LoweringConfig, master_shape: tuple[Value, ...],
                 dim_bounds: dict[str, int], increment: int) -> None:
        self.name = name
        self.config = config
        self.master_shape = tuple(Value.of(d) for d in master_shape)
        self.domain_groups: list[tuple[int, ...]] = [(k,) for k in range(len(master_shape))]
        self.dim_bounds = dict(dim_bounds)
        self.increment = increment
        self.exprs: list[Expression] = []
        self.loops = LoopManager()
        self.io: list[KernelArg] = []
        self.runtime_dims: dict[str, tuple[int, int]] = {}
        self.frame = FrameLayout()
        self.live_ranges: list = []          # prepare/liveness.py LiveRange, by init-live-ranges
        self.timings: list[tuple[str, float]] = []
        self._next_id = 0
        self._names: set[str] = set()

    @property
    def rank(self) -> int:
        return len(self.master_shape)

    # ------------------------------------------------------------ creation and wiring
    def fresh_name(self, base: str) -> str:
        name, n = base, 0
        while name in self._names:
            n += 1
            name = f"{base}.{n}"
        self._names.add(name)
        return name

    def create_expression(self, node: Node, inputs: list[PortConnector],
                          out_descs: list[PortDescriptor], loop_ids: list[int] | None = None,
                          names: list[str] | None = None,
                          in_descs: list[PortDescriptor] | None = None) -> Expression:
        """A new expression reading ``inputs``, with fresh output connectors; not yet placed."""
        if in_descs is None:
            in_descs = [c.source.descriptor.clone() for c in inputs]
            for d in in_descs:
                d.reg = None
        expr = Expression(self._next_id, node, in_descs, out_descs, loop_ids)
        self._next_id += 1
        for i, conn in enumerate(inputs):
            expr.inputs.append(conn)
            conn.add_consumer(expr.input_port(i))
        for i in range(len(out_descs)):
            base = names[i] if names and i < len(names) else f"t{expr.id}"
            expr.outputs.append(PortConnector(self.fresh_name(base), expr.output_port(i)))
        return expr

    def set_input(self, port: ExpressionPort, conn: PortConnector) -> None:
        """Make an input port read ``conn`` instead of its current connector."""
        old = port.expr.inputs[port.index]
        old.remove_consumer(port)
        port.expr.inputs[port.index] = conn
        conn.add_consumer(port)

    def add_input(self, expr: Expression, conn: PortConnector, desc: PortDescriptor) -> None:
        expr.inputs.append(conn)
        expr.in_descs.append(desc)
        conn.add_consumer(expr.input_port(len(expr.inputs) - 1))

    # ------------------------------------------------------------ placement
    def position(self, expr: Expression) -> int:
        for i, e in enumerate(self.exprs):
            if e is expr:
                return i
        raise ValueError(f"{expr} is not in the LIR")

    def insert(self, position: int, expr: Expression) -> Expression:
        self.exprs.insert(position, expr)
        return expr

    def move(self, expr: Expression, position: int) -> None:
        """Move ``expr`` so that it lands before the expression now at ``position``."""
        old = self.position(expr)
        del self.exprs[old]
        self.exprs.insert(position - (old < position), expr)

    def remove(self, expr: Expression) -> None:
        """Take an expression out; its outputs must have no consumers left."""
        for conn in expr.outputs:
            if conn.consumers:
                raise ValueError(f"cannot remove {expr}: %{conn.name} is still read")
        for i, conn in enumerate(expr.inputs):
            conn.remove_consumer(expr.input_port(i))
        del self.exprs[self.position(expr)]

    # ------------------------------------------------------------ the Snippets Design Guide's helpers
    def insert_node(self, node: Node, inputs: list[PortConnector], out_descs: list[PortDescriptor],
                    position: int, loop_ids: list[int], consumers: list[ExpressionPort] = (),
                    names: list[str] | None = None,
                    in_descs: list[PortDescriptor] | None = None) -> Expression:
        """Create an expression from ``node``, place it before ``position`` and integrate it.

        It reads ``inputs``; the ``consumers`` ports switch to reading its first output.
        Loop ports follow: in each of its loops, a consumer port that was an entry gives
        way to the new expression's inputs, and a source's output that was an exit gives
        way to its outputs, keeping their pointer shifts.
        """
        expr = self.create_expression(node, inputs, out_descs, loop_ids, names, in_descs)
        self.insert(position, expr)
        for port in consumers:
            self.set_input(port, expr.outputs[0])
        inherit: dict[ExpressionPort, ExpressionPort] = {}
        for i in range(len(inputs)):
            if consumers:
                inherit[expr.input_port(i)] = consumers[0]
        if inputs and expr.outputs:
            inherit[expr.output_port(0)] = inputs[0].source
        for lid in loop_ids:
            self.refresh_loop_ports(lid, inherit)
        return expr

    def replace_with_node(self, old: list[Expression], node: Node,
                          out_descs: list[PortDescriptor] | None = None,
                          loop_ids: list[int] | None = None) -> Expression:
        """Replace connected expressions ``old`` with one expression made from ``node``.

        It reads what ``old`` read from outside and produces what ``old`` produced for
        the outside (the same connectors, so consumers are untouched)."""
        ins, outs = self._boundary(old)
        if out_descs is None:
            out_descs = [p.descriptor.clone() for p, _ in outs]
        in_descs = [p.descriptor.clone() for p in ins]
        expr = Expression(self._next_id, node, in_descs, out_descs,
                          old[0].loop_ids if loop_ids is None else loop_ids)
        self._next_id += 1
        return self.replace_with_expr(old, expr)

    def replace_with_expr(self, old: list[Expression], new: Expression) -> Expression:
        """Replace ``old`` with the unconnected expression ``new`` (see replace_with_node)."""
        ins, outs = self._boundary(old)
        if len(ins) != len(new.in_descs) or len(outs) != len(new.out_descs):
            raise ValueError(f"{new} has {len(new.in_descs)} inputs and {len(new.out_descs)} "
                             f"outputs; the replaced expressions have {len(ins)} and {len(outs)}")
        position = min(self.position(e) for e in old)
        inner = {id(e) for e in old}
        for e in old:
            for i, conn in enumerate(e.inputs):
                conn.remove_consumer(e.input_port(i))
        self.exprs = [e for e in self.exprs if id(e) not in inner]
        for i, port in enumerate(ins):
            conn = port.connector
            new.inputs.append(conn)
            conn.add_consumer(new.input_port(i))
        for i, (port, conn) in enumerate(outs):
            conn.consumers = [c for c in conn.consumers if id(c.expr) not in inner]
            conn.source = new.output_port(i)
            new.outputs.append(conn)
        self.exprs.insert(position, new)
        for i, port in enumerate(ins):
            self.loops.replace_port(port, [new.input_port(i)])
        for i, (port, _) in enumerate(outs):
            self.loops.replace_port(port, [new.output_port(i)])
        return new

    @staticmethod
    def _boundary(old: list[Expression]):
        inner = {id(e) for e in old}
        ins = [p for e in old for p in e.input_ports() if id(p.connector.source.expr) not in inner]
        outs = [(p, p.connector) for e in old for p in e.output_ports()
                if any(id(c.expr) not in inner for c in p.connector.consumers)]
        return ins, outs

    # ------------------------------------------------------------ loops
    def loop_exprs(self, loop_id: int) -> list[Expression]:
        """The expressions inside a loop (not its LoopBegin/LoopEnd), in order."""
        return [e for e in self.exprs if loop_id in e.loop_ids]

    def loop_marker(self, kind: str, loop_id: int) -> Expression | None:
        return next((e for e in self.exprs if e.kind == kind and e.attrs["loop_id"] == loop_id),
                    None)

    def loop_bounds(self, loop_id: int) -> tuple[int, int]:
        """First and last position of a loop, its LoopBegin and LoopEnd included."""
        positions = [i for i, e in enumerate(self.exprs)
                     if loop_id in e.loop_ids
                     or (e.kind in (LOOP_BEGIN, LOOP_END) and e.attrs["loop_id"] == loop_id)]
        if not positions:
            raise ValueError(f"loop {loop_id} has no expressions")
        return positions[0], positions[-1]

    def refresh_loop_ports(self, loop_id: int,
                           inherit: dict[ExpressionPort, ExpressionPort] | None = None) -> None:
        """Recompute a loop's entry and exit ports from its expressions, in order.

        A port that stays keeps its shifts; a new port takes them from ``inherit[port]``
        (the port it replaces) when that was a port of the loop."""
        info = self.loops.get(loop_id)
        entries, exits = io_ports(self.loop_exprs(loop_id))
        old = {lp.port: lp for lp in info.ports}

        def carry(port: ExpressionPort) -> LoopPort:
            if port in old:
                return old[port]
            source = (inherit or {}).get(port)
            if source is not None and source in old:
                return old[source].with_port(port)
            return LoopPort(port)

        info.entries = [carry(p) for p in entries]
        info.exits = [carry(p) for p in exits]
        self.sync_loop_end(loop_id)

    def sync_loop_end(self, loop_id: int) -> None:
        """Make a LoopEnd read the pointer of every port of its loop, then the counter."""
        end = self.loop_marker(LOOP_END, loop_id)
        if end is None:
            return
        counter = end.inputs[-1]
        for i, conn in enumerate(end.inputs):
            conn.remove_consumer(end.input_port(i))
        end.inputs, end.in_descs = [], []
        info = self.loops.get(loop_id)
        for lp in info.ports:
            conn = lp.port.connector
            self.add_input(end, conn, conn.source.descriptor.clone())
        self.add_input(end, counter, counter.source.descriptor.clone())

    # ------------------------------------------------------------ queries
    def connectors(self) -> list[PortConnector]:
        return [c for e in self.exprs for c in e.outputs]

    def exprs_of_kind(self, *kinds: str) -> list[Expression]:
        return [e for e in self.exprs if e.kind in kinds]

    def arg(self, memory: str) -> KernelArg | None:
        return next((a for a in self.io if a.memory == memory), None)

    def loop_info(self, loop_id: int) -> LoopInfo:
        return self.loops.get(loop_id)


def io_ports(exprs: list[Expression]) -> tuple[list[ExpressionPort], list[ExpressionPort]]:
    """Entry and exit ports of a group of expressions (OpenVINO's get_io_loop_ports).

    Loop-invariant registers (Scalars, Masks) are not ports: they are not memory and
    are not shifted.  LoopBegin/LoopEnd of inner loops are not part of the group, and a
    LoopEnd reading a pointer does not make it leave the loop."""
    exprs = [e for e in exprs if e.kind not in (LOOP_BEGIN, LOOP_END)]
    inside = {id(e) for e in exprs}
    entries, exits = [], []
    for e in exprs:
        for port in e.input_ports():
            source = port.connector.source.expr
            if id(source) not in inside and source.kind not in OUTSIDE_LOOPS - {"Parameter"}:
                entries.append(port)
        for port in e.output_ports():
            if any(id(c.expr) not in inside and c.expr.kind != LOOP_END
                   for c in port.connector.consumers):
                exits.append(port)
    return entries, exits
