"""``vpuc run --report-dir``: the per-layer CSVs and summary.json, their columns, and
their sums against the run's own totals, for every example and an imported ONNX model."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from runtime_sim.layer_report import layer_of
from tests.sim.simlib import REPO, run_cli

EXAMPLES = sorted(p.name for p in (REPO / "examples").glob("*.vir"))

COLUMNS = {
    "compute_report.csv": ["layer", "engines", "units", "start", "end", "cycles",
                           "cycles_after_prefetch", "busy_cycles", "dpu_cycles", "shave_cycles", "dma_cycles", "macs",
                           "dpu_utilization_percent"],
    "bandwidth_report.csv": ["layer", "ddr_read_bytes", "ddr_write_bytes", "ddr_bytes",
                             "achieved_gbps", "dma_bytes", "cmx_bytes", "shave_ddr_read_bytes"],
    "detailed_access_report.csv": ["layer", "channel", "transfers", "bytes", "ddr_read_bytes",
                                   "ddr_write_bytes", "busy_cycles", "stall_cycles"],
}
ENGINE_KIND = {"DMA": "dma_cycles", "DPU": "dpu_cycles", "SHAVE": "shave_cycles"}


def read_csv(path: Path) -> tuple[list[str], list[dict]]:
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames), list(reader)


def report(tmp_path, capsys, monkeypatch, source, *extra) -> tuple[Path, dict, str]:
    out = tmp_path / "report"
    code, stdout, err = run_cli(["run", source, "--timing-only", "--json", "--report-dir", out,
                                 *extra], capsys, monkeypatch)
    assert code == 0, err
    return out, json.loads(stdout), stdout


def check_sums(out: Path, summary: dict) -> dict[str, list[dict]]:
    tables = {}
    for name, columns in COLUMNS.items():
        header, rows = read_csv(out / name)
        assert header == columns, name
        tables[name] = rows
    compute, bandwidth = tables["compute_report.csv"], tables["bandwidth_report.csv"]
    access = tables["detailed_access_report.csv"]
    units = summary["units"]
    slack = 0.002 * max(units, 1)      # summary.json rounds each figure to 3 decimals
    assert [r["layer"] for r in compute] == [r["layer"] for r in bandwidth]
    assert len({r["layer"] for r in compute}) == len(compute)
    assert sum(int(r["units"]) for r in compute) == units
    assert sum(int(r["macs"]) for r in compute) == summary["dpu_macs"]
    busy = sum(e["busy_cycles"] for e in summary["engines"])
    assert sum(float(r["busy_cycles"]) for r in compute) == pytest.approx(busy, abs=slack)
    for prefix, column in ENGINE_KIND.items():
        kind_busy = sum(e["busy_cycles"] for e in summary["engines"]
                        if e["name"].startswith(prefix))
        assert sum(float(r[column]) for r in compute) == pytest.approx(kind_busy, abs=slack)
    for r in compute:
        start, end, cycles = float(r["start"]), float(r["end"]), float(r["cycles"])
        assert 0 <= start <= end <= summary["cycles"] + 0.001
        assert cycles == pytest.approx(end - start, abs=0.002)
        assert 0 <= float(r["cycles_after_prefetch"]) <= cycles + 0.002
        assert 0 <= float(r["dpu_utilization_percent"]) <= 100
        assert (float(r["dpu_utilization_percent"]) > 0) == (int(r["macs"]) > 0)
    dma = summary["dma"]
    assert sum(int(r["ddr_bytes"]) for r in bandwidth) == dma["ddr_bytes"]
    assert sum(int(r["dma_bytes"]) for r in bandwidth) == dma["bytes"]
    for r in bandwidth:
        assert int(r["ddr_read_bytes"]) + int(r["ddr_write_bytes"]) == int(r["ddr_bytes"])
    assert sum(int(r["transfers"]) for r in access) == dma["transfers"]
    assert sum(int(r["bytes"]) for r in access) == dma["bytes"]
    dma_stall = sum(e["stall_cycles"] for e in summary["engines"] if e["name"].startswith("DMA"))
    assert sum(float(r["stall_cycles"]) for r in access) == pytest.approx(dma_stall, abs=slack)
    channels = {e["name"] for e in summary["engines"] if e["name"].startswith("DMA")}
    assert {r["channel"] for r in access} <= channels
    return tables


@pytest.mark.parametrize("example", EXAMPLES)
def test_every_example_reports_add_up(example, tmp_path, capsys, monkeypatch):
    out, summary, stdout = report(tmp_path, capsys, monkeypatch, f"examples/{example}")
    assert (out / "summary.json").read_text() == stdout      # exactly what --json prints
    check_sums(out, summary)


def test_summary_json_is_the_json_output_without_json_too(tmp_path, capsys, monkeypatch):
    out, summary, _ = report(tmp_path, capsys, monkeypatch, "examples/conv_2tiles.vir")
    code, stdout, err = run_cli(["run", "examples/conv_2tiles.vir", "--timing-only",
                                 "--report-dir", tmp_path / "plain"], capsys, monkeypatch)
    assert code == 0, err
    assert "total" in stdout                                   # the summary table, not JSON
    assert json.loads((tmp_path / "plain" / "summary.json").read_text()) == summary


def test_a_gather_from_ddr_counts_the_rows_its_kernel_reads(tmp_path, capsys, monkeypatch):
    out, _, _ = report(tmp_path, capsys, monkeypatch, "examples/gather_ddr.vir")
    _, bandwidth = read_csv(out / "bandwidth_report.csv")
    rows = {r["layer"]: r for r in bandwidth}
    # 8 rows of 64 f16 read straight from the 1000-row table; no DMA touches the table
    assert rows["gather"]["shave_ddr_read_bytes"] == str(8 * 64 * 2)
    assert rows["gather"]["ddr_bytes"] == "0"
    assert float(rows["gather"]["achieved_gbps"]) > 0
    assert all(r["shave_ddr_read_bytes"] == "0" for name, r in rows.items() if name != "gather")


def test_clamp_reads_and_writes_its_tensor_once(tmp_path, capsys, monkeypatch):
    out, _, _ = report(tmp_path, capsys, monkeypatch, "examples/clamp.vir")
    tensor = 16 * 32 * 32 * 2                                  # 1x16x32x32xf16
    _, bandwidth = read_csv(out / "bandwidth_report.csv")
    rows = {r["layer"]: r for r in bandwidth}
    assert (rows["load"]["ddr_read_bytes"], rows["load"]["ddr_write_bytes"]) == (str(tensor), "0")
    assert (rows["store"]["ddr_read_bytes"], rows["store"]["ddr_write_bytes"]) == ("0", str(tensor))
    assert rows["clamp"]["ddr_bytes"] == "0"
    _, compute = read_csv(out / "compute_report.csv")
    assert [(r["layer"], r["engines"]) for r in compute] == [
        ("load", "DMA"), ("clamp", "ACT_SHAVE"), ("store", "DMA")]


def test_dpu_variants_belong_to_their_task(tmp_path, capsys, monkeypatch):
    out, summary, _ = report(tmp_path, capsys, monkeypatch, "examples/conv_2tiles.vir")
    _, compute = read_csv(out / "compute_report.csv")
    layers = {r["layer"]: r for r in compute}
    assert layers["conv0"]["units"] == "2" and layers["conv0"]["engines"] == "DPU"
    assert int(layers["conv0"]["macs"]) + int(layers["conv1"]["macs"]) == summary["dpu_macs"]


@pytest.mark.parametrize("label, layer", [
    ("conv_3.convolution.load_w.t0", "conv_3"), ("sg0.load2.relu_5", "sg0"),
    ("conv0.a", "conv0"), ("load_in0", "load_in0"), ("s0.0.1", "s0")])
def test_layer_of_a_label(label, layer):
    assert layer_of(label) == layer


def conv_relu_sigmoid(path: Path) -> str:
    from vpuc.onnx_import.zoo import ModelBuilder
    m = ModelBuilder(0)
    x = m.input("x", [1, 16, 16, 16])
    y = m.node("Conv", [x, m.weight([16, 16, 3, 3]), m.weight([16])], pads=[1, 1, 1, 1])
    m.output(m.node("Sigmoid", [m.node("Relu", [y])]))
    return m.save(path)


def test_onnx_model_reports_one_row_per_graph_layer(tmp_path, capsys, monkeypatch):
    model = conv_relu_sigmoid(tmp_path / "crs.onnx")
    out, summary, _ = report(tmp_path, capsys, monkeypatch, model)
    tables = check_sums(out, summary)
    compute = tables["compute_report.csv"]
    # The conv is one layer with every MAC (16x16 outputs x 16 channels x 16*3*3 taps);
    # relu and sigmoid fuse into one generated kernel, one layer.
    conv = [r for r in compute if "DPU" in r["engines"]]
    assert len(conv) == 1 and int(conv[0]["macs"]) == 16 * 16 * 16 * 16 * 3 * 3
    assert "DMA" in conv[0]["engines"]       # its weight and activation loads belong to it
    # The default schedule runs the sigmoid on the conv's output blocks in CMX
    # (fuse_epilogue): its ACT SHAVE tasks belong to the conv's layer.  Layer by layer
    # (--schedule naive) it is a layer of its own.
    assert len(compute) == 1 and "ACT_SHAVE" in conv[0]["engines"]
    out, summary, _ = report(tmp_path / "naive", capsys, monkeypatch, model, "--schedule", "naive")
    compute = check_sums(out, summary)["compute_report.csv"]
    assert len(compute) == 2
    shave = [r for r in compute if "ACT_SHAVE" in r["engines"]]
    assert len(shave) == 1 and int(shave[0]["macs"]) == 0


def test_report_dir_that_is_a_file_is_an_error(tmp_path, capsys, monkeypatch):
    target = tmp_path / "file"
    target.write_text("x")
    code, _, err = run_cli(["run", "examples/clamp.vir", "--timing-only", "--report-dir", target],
                           capsys, monkeypatch)
    assert code == 1 and "cannot create the report directory" in err and "Traceback" not in err


# Layer ``a`` loads, clamps and stores; layer ``b`` clamps a constant whose load (b.load_w)
# waits on nothing, so it runs on channel 1 while ``a`` works: a prefetch.  ``b``'s own work
# starts at b.clamp, which waits for a's store and for the load.
PREFETCH_PROGRAM = """module @prefetch arch NPU37XX

kernel @clamp(input: memref<*xf16>, output: memref<*xf16>, minVal: f16, maxVal: f16) from library "clamp"
kernel @runtime() from library "runtime"

runtime @runtime stacks(16384, 16384)

input %in : 1x16x32x32xf16 NHWC
output %out : 1x16x32x32xf16 NHWC
output %out2 : 1x16x8x8xf16 NHWC
const %w : 1x16x8x8xf16 NHWC = splat 2.0
cmx %a_in : 1x16x32x32xf16 NHWC tile 0 at 0
cmx %a_out : 1x16x32x32xf16 NHWC tile 0 at 32768
cmx %b_in : 1x16x8x8xf16 NHWC tile 0 at 65536
cmx %b_out : 1x16x8x8xf16 NHWC tile 0 at 69632

barrier %b0 = physical 0
barrier %b1 = physical 1
barrier %b2 = physical 2
barrier %b3 = physical 3
barrier %b4 = physical 4

tasks DMA {
  a.load: dma %in -> %a_in channel 0 updates(%b0)
  b.load_w: dma %w -> %b_in channel 1 updates(%b3)
  a.store: dma %a_out -> %out channel 0 waits(%b1) updates(%b2)
  b.store: dma %b_out -> %out2 channel 0 waits(%b4)
}

tasks ACT_SHAVE {
  a.clamp: sw @clamp on tile 0 inputs(%a_in as %x) outputs(%a_out as %y) waits(%b0) updates(%b1) {
    %lo = const 0.0 : f16
    %hi = const 6.0 : f16
    run(%x, %y, %lo, %hi)
  }
  b.clamp: sw @clamp on tile 0 inputs(%b_in as %x) outputs(%b_out as %y) waits(%b2, %b3) updates(%b4) {
    %lo = const 0.0 : f16
    %hi = const 1.0 : f16
    run(%x, %y, %lo, %hi)
  }
}
"""


def test_cycles_after_prefetch_start_at_the_first_unit_that_is_not_a_prefetch(
        tmp_path, capsys, monkeypatch):
    source = tmp_path / "prefetch.vir"
    source.write_text(PREFETCH_PROGRAM)
    out, summary, _ = report(tmp_path, capsys, monkeypatch, str(source))
    check_sums(out, summary)
    _, units = read_csv(out / "tasks.csv")
    start = {r["name"]: float(r["start"]) for r in units}
    end = {r["name"]: float(r["end"]) for r in units}
    # the schedule the hand computation relies on: the load ran during layer a
    assert start["b.load_w"] < end["a.store"] <= start["b.clamp"]
    _, compute = read_csv(out / "compute_report.csv")
    rows = {r["layer"]: r for r in compute}
    b = rows["b"]
    assert float(b["cycles"]) == pytest.approx(end["b.store"] - start["b.load_w"], abs=0.002)
    assert float(b["cycles_after_prefetch"]) == pytest.approx(
        end["b.store"] - start["b.clamp"], abs=0.002)
    assert float(b["cycles_after_prefetch"]) < float(b["cycles"])
    # layer a has no prefetch: both columns are its span
    a = rows["a"]
    assert float(a["cycles_after_prefetch"]) == pytest.approx(
        end["a.store"] - start["a.load"], abs=0.002)
    assert a["cycles_after_prefetch"] == a["cycles"]
