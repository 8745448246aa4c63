"""Serialization of a Linear IR: its control flow (complete, round-trips) and its data flow.

- ``control_flow_json(lir)``: everything, in emission order -- kernel
  arguments, loops with their port shifts, the frame, and every expression
  (LoopBegin/LoopEnd included) with attributes, loops, connectors, port
  descriptors, registers and ``live_regs``.  ``lir_from_json`` rebuilds an
  equivalent LIR (same text, same JSON, same behaviour), so a LIR can be
  stored, diffed, or handed to an emitter written in another process.
- ``data_flow_json(lir)``: the expressions as a graph (nodes and value
  edges) without the control-flow markers, as OpenVINO's SerializeDataFlow.

Numbers whose type is known (shapes, work amounts, shifts) are ints, or the
text of a ``Value`` when dynamic (``"16*D2"``).  Attributes keep their types
with tags: ``{"$value": "16"}`` (a ``Value``), ``{"$elem": "f16"}``; registers are
their names (``v3``, ``vec#3``); lists stand for tuples.
"""

from __future__ import annotations

from typing import Any

from vpuc.fusion.lir.expression import (Expression, ExpressionPort, Node, PortConnector,
                                        PortDescriptor, Reg)
from vpuc.fusion.lir.linear_ir import KernelArg, LinearIR, LoweringConfig
from vpuc.fusion.lir.loop_info import LoopInfo, LoopPort
from vpuc.fusion.lir.kinds import LOOP_MARKERS
from vpuc.fusion.lir.registers import RegisterFile
from vpuc.fusion.lir.values import Value, parse
from vpuc.fusion.targets import get_target
from vpuc.ir.types import ELEM_BY_NAME, ElemType

FORMAT = "vpuc-lir/1"


# ----------------------------------------------------------------- values
def enc(x: Any) -> Any:
    if isinstance(x, Value):
        return {"$value": str(x)}
    if isinstance(x, ElemType):
        return {"$elem": x.value}
    if isinstance(x, Reg):
        return str(x)
    if isinstance(x, (tuple, list)):
        return [enc(v) for v in x]
    if isinstance(x, dict):
        return {k: enc(v) for k, v in x.items()}
    return x


def dec(x: Any) -> Any:
    if isinstance(x, dict) and set(x) == {"$value"}:
        return parse(x["$value"])
    if isinstance(x, dict) and set(x) == {"$elem"}:
        return ELEM_BY_NAME[x["$elem"]]
    if isinstance(x, list):
        return tuple(dec(v) for v in x)
    if isinstance(x, dict):
        return {k: dec(v) for k, v in x.items()}
    return x


def num(x) -> int | str:
    """A number whose type is known: an int, or a dynamic value's text."""
    v = Value.of(x)
    return v.static if v.static is not None else str(v)


def unnum(j: int | str) -> Value:
    return Value(j) if isinstance(j, int) else parse(j)


_REG_PREFIX = {"s": "gpr", "v": "vec", "m": "mask"}


def dec_reg(text: str | None) -> Reg | None:
    if text is None:
        return None
    if "#" in text:
        cls, index = text.split("#")
        return Reg(cls, int(index))
    return Reg(_REG_PREFIX[text[0]], int(text[1:]), physical=True)


def _desc(d: PortDescriptor) -> dict:
    return {"shape": [num(x) for x in d.shape], "elem": d.elem.value, "layout": list(d.layout),
            "subtensor": [num(x) for x in d.subtensor], "reg": enc(d.reg)}


def _undesc(j: dict) -> PortDescriptor:
    subtensor = tuple(x if isinstance(x, int) else unnum(x) for x in j["subtensor"])
    return PortDescriptor(tuple(unnum(x) for x in j["shape"]), ELEM_BY_NAME[j["elem"]],
                          tuple(j["layout"]), subtensor, dec_reg(j["reg"]))


def _port(lp: LoopPort) -> dict:
    return {"port": str(lp.port), "is_incremented": lp.is_incremented,
            "ptr_increment": num(lp.ptr_increment),
            "finalization_offset": num(lp.finalization_offset), "data_size": lp.data_size}


# ----------------------------------------------------------------- control flow
def control_flow_json(lir: LinearIR) -> dict:
    cfg = lir.config
    return {
        "format": FORMAT, "name": lir.name, "target": cfg.target.name,
        "registers": {"name": cfg.registers.name,
                      "allocatable": {k: list(v) for k, v in cfg.registers.allocatable.items()}},
        "buffer_mode": cfg.buffer_mode, "increment": lir.increment,
        "master_shape": [num(x) for x in lir.master_shape], "domain_groups": [list(g) for g in
                                                                 lir.domain_groups],
        "dim_bounds": lir.dim_bounds,
        "runtime_dims": {k: list(v) for k, v in lir.runtime_dims.items()},
        "io": [{"index": a.index, "kind": a.kind, "memory": a.memory, "name": a.name,
                "shape": [num(x) for x in a.shape], "elem": a.elem.value, "layout": a.layout,
                "dims_order": a.dims_order} for a in lir.io],
        "frame": {"scratchpad_size": lir.frame.scratchpad_size,
                  "spill_size": lir.frame.spill_size},
        "loops": [{"id": i.id, "dim_idx": i.dim_idx, "work_amount": num(i.work_amount),
                   "increment": num(i.increment), "kind": i.kind,
                   "evaluate_once": i.evaluate_once, "initialized": i.initialized,
                   "counter_slot": i.counter_slot, "entries": [_port(p) for p in i.entries],
                   "exits": [_port(p) for p in i.exits]} for i in lir.loops],
        "next_loop_id": lir.loops.next_id,
        "expressions": [{"id": e.id, "kind": e.kind, "attrs": enc(e.attrs),
                         "loop_ids": list(e.loop_ids),
                         "inputs": [c.name for c in e.inputs],
                         "outputs": [c.name for c in e.outputs],
                         "in_descs": [_desc(d) for d in e.in_descs],
                         "out_descs": [_desc(d) for d in e.out_descs],
                         "live_regs": sorted(str(r) for r in e.live_regs)}
                        for e in lir.exprs],
        "next_id": lir._next_id,
    }


def lir_from_json(data: dict) -> LinearIR:
    if data.get("format") != FORMAT:
        raise ValueError(f"not a serialized LIR ({FORMAT}): format {data.get('format')!r}")
    target = get_target(data["target"])
    regs = data["registers"]
    config = LoweringConfig(target, buffer_mode=data["buffer_mode"])
    config.registers = RegisterFile(regs["name"], {k: tuple(v) for k, v in
                                                   regs["allocatable"].items()},
                                    config.registers.reserved, config.registers.spill_bytes)
    lir = LinearIR(data["name"], config, tuple(unnum(x) for x in data["master_shape"]),
                   data["dim_bounds"],
                   data["increment"])
    lir.domain_groups = [tuple(g) for g in data["domain_groups"]]
    lir.runtime_dims = {k: tuple(v) for k, v in data["runtime_dims"].items()}
    lir.io = [KernelArg(a["index"], a["kind"], a["memory"], a["name"],
                        tuple(unnum(x) for x in a["shape"]),
                        ELEM_BY_NAME[a["elem"]], a["layout"], a["dims_order"]) for a in data["io"]]
    lir.frame.scratchpad_size = data["frame"]["scratchpad_size"]
    lir.frame.spill_size = data["frame"]["spill_size"]
    conns: dict[str, PortConnector] = {}
    by_id: dict[int, Expression] = {}
    for j in data["expressions"]:
        e = Expression(j["id"], Node(j["kind"], dec(j["attrs"])),
                       [_undesc(d) for d in j["in_descs"]], [_undesc(d) for d in j["out_descs"]],
                       j["loop_ids"])
        e.live_regs = frozenset(dec_reg(r) for r in j["live_regs"])
        for i, name in enumerate(j["inputs"]):
            conn = conns[name]
            e.inputs.append(conn)
            conn.add_consumer(e.input_port(i))
        for i, name in enumerate(j["outputs"]):
            conns[name] = PortConnector(name, e.output_port(i))
            e.outputs.append(conns[name])
            lir._names.add(name)
        lir.exprs.append(e)
        by_id[e.id] = e
    for j in data["loops"]:
        info = LoopInfo(j["id"], j["dim_idx"], unnum(j["work_amount"]), unnum(j["increment"]),
                        [_unport(p, by_id) for p in j["entries"]],
                        [_unport(p, by_id) for p in j["exits"]], j["kind"], j["evaluate_once"],
                        j["initialized"], j["counter_slot"])
        lir.loops.loops[info.id] = info
    lir.loops.next_id = data["next_loop_id"]
    lir._next_id = data["next_id"]
    return lir


def _unport(j: dict, by_id: dict[int, Expression]) -> LoopPort:
    text = j["port"]                       # e12.in0
    eid, rest = text[1:].split(".")
    kind = "in" if rest.startswith("in") else "out"
    port = ExpressionPort(by_id[int(eid)], kind, int(rest[len(kind):]))
    return LoopPort(port, j["is_incremented"], unnum(j["ptr_increment"]),
                    unnum(j["finalization_offset"]), j["data_size"])


# ----------------------------------------------------------------- data flow
def data_flow_json(lir: LinearIR) -> dict:
    """Nodes and value edges, without LoopBegin/LoopEnd (the data flow only)."""
    nodes, edges = [], []
    for e in lir.exprs:
        if e.kind in LOOP_MARKERS:
            continue
        nodes.append({"id": f"e{e.id}", "kind": e.kind, "attrs": enc(e.attrs),
                      "outputs": [{"name": c.name, **_desc(d)} for c, d in
                                  zip(e.outputs, e.out_descs)]})
        for port in e.input_ports():
            source = port.connector.source
            if source.expr.kind in LOOP_MARKERS:
                continue
            edges.append({"from": str(source), "to": str(port), "value": port.connector.name})
    return {"format": FORMAT + "-dataflow", "name": lir.name, "nodes": nodes, "edges": edges}
