"""What ``vpuc fuse`` prints: which ops went where, and why every cut was made.

``as_json`` is the machine form; ``as_text`` renders the same data for people.
Ops are named by their value (``%y``); subgraphs by ``sgN`` in order of their
first op.
"""

from __future__ import annotations

from vpuc.fusion.subgraph import Tokenization, Unit
from vpuc.fusion.tokenizer import Decision


def _op(tok: Tokenization, i: int) -> dict:
    op = tok.graph.ops[i]
    return {"op": op.label, "kind": op.kind}


def _decision(tok: Tokenization, decision: Decision) -> dict:
    data = {"reason": str(decision.reason), "detail": decision.detail}
    if decision.cut_from:
        data["cut_from"] = sorted({_unit_id(tok, tok.unit(i)) for i in decision.cut_from})
    return data


def _unit_id(tok: Tokenization, unit: Unit) -> str:
    kind, n = unit
    return tok.subgraphs[n].name if kind == "sg" else tok.graph.ops[n].label


def target_json(target) -> dict:
    return {"name": target.name, "data_pointers": target.data_pointers,
            "vector_registers": target.vector_registers,
            "lanes": {str(e): n for e, n in sorted(target.lanes.items(), key=lambda kv: kv[0].value)}}


def as_json(tok: Tokenization) -> dict:
    """One graph's tokenization (the target is reported once, by the caller)."""
    return {
        "graph": tok.graph.name,
        "subgraphs": [{
            "name": sub.name,
            "ops": [_op(tok, i) for i in sub.ops],
            "inputs": [f"%{v}" for v in sub.inputs],
            "outputs": [f"%{v}" for v in sub.outputs],
            "data_pointers": {"inputs": sub.pointers.inputs, "outputs": sub.pointers.outputs,
                              "buffers": sub.pointers.buffers, "total": sub.pointers.total},
            "start": {"op": tok.graph.ops[sub.ops[0]].label, **_decision(tok, sub.start)},
        } for sub in tok.subgraphs],
        "left_out": [{**_op(tok, i), **_decision(tok, d)} for i, d in tok.left_out.items()],
        "boundaries": [{"from": _unit_id(tok, b.source), "to": _unit_id(tok, b.target),
                        "values": [f"%{v}" for v in b.values], "reason": str(b.decision.reason),
                        "at": tok.graph.ops[b.explained_at].label}
                       for b in tok.boundaries()],
    }


def as_text(tok: Tokenization) -> str:
    data = as_json(tok)
    subs, left = data["subgraphs"], data["left_out"]
    lines = [f"graph @{data['graph']} for {tok.target.name} ({tok.target.data_pointers} data pointers "
             f"per subgraph): {_count(len(subs), 'subgraph')}, {_count(len(left), 'op')} left out"]
    for sub in subs:
        lines.append("")
        ops = ", ".join(f"{o['op']} {o['kind']}" for o in sub["ops"])
        lines.append(f"{sub['name']}: {ops}")
        ptr = sub["data_pointers"]
        lines.append(f"  in: {', '.join(sub['inputs']) or '-'}; out: {', '.join(sub['outputs']) or '-'}; "
                     f"{ptr['total']} data pointers ({ptr['inputs']} in, {ptr['outputs']} out, "
                     f"{ptr['buffers']} buffers)")
        start = sub["start"]
        cut = f" (cut from {', '.join(start['cut_from'])})" if "cut_from" in start else ""
        lines.append(f"  starts at {start['op']}: {start['reason']}{cut}: {start['detail']}")
    if left:
        lines += ["", "left out:"]
        lines += [f"  {o['op']} {o['kind']}: {o['reason']}: {o['detail']}" for o in left]
    if data["boundaries"]:
        lines += ["", "boundaries:"]
        for b in data["boundaries"]:
            lines.append(f"  {b['from']} -> {b['to']} via {', '.join(b['values'])}: {b['reason']}, "
                         f"at {b['at']}")
    return "\n".join(lines) + "\n"


def _count(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")
