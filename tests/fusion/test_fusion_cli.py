"""``vpuc fuse`` beyond the goldens: JSON shape, graph selection, bodies that parse back."""

from __future__ import annotations

import json

from vpuc.cli import main
from vpuc.vir.parser import parse_text

TWO_GRAPHS = """module @m
graph @a {
  %x = Parameter() : 1x8xf16
  %y = Relu(%x)
  %s = Softmax(%y)
  %z = Exp(%s)
  Result(%z)
}
graph @b {
  %x = Parameter() : 4xf32
  %y = Sigmoid(%x)
  Result(%y)
}
"""


def run(args, capsys):
    capsys.readouterr()
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_json_report(tmp_path, capsys):
    path = tmp_path / "net.vir"
    path.write_text(TWO_GRAPHS)
    code, out, err = run(["fuse", str(path), "--json", "--target", "x64"], capsys)
    assert code == 0 and err == ""
    data = json.loads(out)
    assert data["target"]["data_pointers"] == 11 and data["target"]["lanes"]["f32"] == 8
    a, b = data["graphs"]
    assert [s["name"] for s in a["subgraphs"]] == ["sg0", "sg1"]
    assert a["left_out"] == [{"op": "%s", "kind": "Softmax", "reason": "not-tokenizable",
                              "detail": "Softmax is not elementwise"}]
    assert {(x["from"], x["to"]) for x in a["boundaries"]} == {("sg0", "%s"), ("%s", "sg1")}
    assert b["subgraphs"][0]["data_pointers"]["total"] == 2


def test_graph_selection_and_bodies_parse_back(tmp_path, capsys):
    path = tmp_path / "net.vir"
    path.write_text(TWO_GRAPHS)
    code, out, _ = run(["fuse", str(path), "--graph", "b"], capsys)
    assert code == 0 and out.startswith("graph @b for shave")
    code, out, _ = run(["fuse", str(path), "--dataflow"], capsys)
    module = parse_text(out, "<bodies>")
    assert [g.name for g in module.graphs] == ["a.sg0", "a.sg1", "b.sg0"]
    code, _, err = run(["fuse", str(path), "--graph", "c"], capsys)
    assert code == 1 and "no graph @c" in err
