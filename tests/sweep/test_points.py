"""Points and their parameters: ids, the cost proxy, timing parameters through the cost
model, compile options passed only where the compile API takes them, numerics."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from vpuc import api
from vpuc.diagnostics import VpucError
from vpuc.sweep.params import sim_arch_of, structure_of
from vpuc.sweep.points import points_of
from vpuc.sweep.spec import load_spec
from vpuc.sweep.work import run_point

ROOT = Path(__file__).resolve().parents[2]
CONV = ROOT / "examples" / "graph_conv.vir"


def spec(tmp_path, parameters: str, sweep: str = "") -> Path:
    path = tmp_path / "spec.toml"
    path.write_text(f'[sweep]\n{sweep}\n[[models]]\npath = "{CONV}"\n\n'
                    f'[parameters]\n{parameters}\n')
    return path


def test_ids_are_stable_and_distinct(tmp_path):
    s = load_spec(spec(tmp_path, "tiles = [1, 2]\nnce_mhz = [975, 1300]"))
    first, again = points_of(s), points_of(s)
    assert [p.id for p in first] == [p.id for p in again]
    assert len({p.id for p in first}) == 4


def test_cost_proxy_uses_base_values_for_what_is_not_swept(tmp_path):
    s = load_spec(spec(tmp_path, "tiles = [1, 2]", 'cost = "cmx_bytes * tiles / 2 ** 20"'))
    assert [p.cost for p in points_of(s)] == [2.0, 4.0]      # 2 MiB of CMX per tile


def test_timing_parameters_go_through_the_cost_model(tmp_path):
    base = sim_arch_of("NPU37XX", structure_of("NPU37XX", {}), {})
    half = sim_arch_of("NPU37XX", structure_of("NPU37XX", {}), {"ddr_bandwidth_mbps": 15600.0})
    slow = sim_arch_of("NPU37XX", structure_of("NPU37XX", {}), {"nce_mhz": 650.0})
    macs = sim_arch_of("NPU37XX", structure_of("NPU37XX", {}), {"dpu_macs_per_cycle": 2048.0})
    assert half.ddr_bytes_per_cycle == base.ddr_bytes_per_cycle / 2
    assert slow.nce_mhz == 650 and slow.ddr_bytes_per_cycle == 2 * base.ddr_bytes_per_cycle
    assert macs.dpu.dense_macs_per_cycle == {k: 2 * v for k, v in
                                             base.dpu.dense_macs_per_cycle.items()}


def test_a_faster_ddr_is_never_slower(tmp_path):
    s = load_spec(spec(tmp_path, "ddr_bandwidth_mbps = [7800, 31200]"))
    slow, fast = (run_point(p, str(tmp_path / "cache")) for p in points_of(s))
    assert slow["error"] is None and fast["error"] is None
    assert fast["cycles"] < slow["cycles"]
    assert len(list((tmp_path / "cache").glob("*.blob"))) == 1   # one structure: one compile


def test_schedule_is_refused_where_the_compile_api_takes_none(tmp_path, monkeypatch):
    def compile_without(source, arch=None, format="fb", *, report=None, input_shapes=None):
        raise AssertionError("not called")
    monkeypatch.setattr(api, "compile", compile_without)
    with pytest.raises(VpucError) as exc:
        load_spec(spec(tmp_path, 'schedule = ["asap", "alap"]'))
    assert "takes no 'schedule' option" in str(exc.value) and ":7:1:" in str(exc.value)


def test_schedule_passes_through_where_the_compile_api_takes_it(tmp_path, monkeypatch):
    original, seen = api.compile, []

    def compile_with(source, arch=None, format="fb", *, schedule=None, **options):
        seen.append(schedule)
        return original(source, arch, format, **options)
    monkeypatch.setattr(api, "compile", compile_with)
    s = load_spec(spec(tmp_path, 'schedule = ["asap", "alap"]\ntiles = [2]'))
    rows = [run_point(p, None) for p in points_of(s)]
    assert seen == ["asap", "alap"] and all(r["error"] is None for r in rows)


def test_compile_options_reach_the_blob(tmp_path):
    s = load_spec(spec(tmp_path, 'format = ["fb", "elf"]'))
    fb, elf = (run_point(p, None) for p in points_of(s))
    assert fb["cycles"] == elf["cycles"] and fb["blob_bytes"] != elf["blob_bytes"]


def test_numerics_runs_with_values(tmp_path):
    s = load_spec(spec(tmp_path, "tiles = [2]", "numerics = true"))
    (row,) = (run_point(p, None) for p in points_of(s))
    assert row["error"] is None and row["cycles"] > 0


def test_a_blob_model_takes_timing_parameters_but_not_a_new_structure(tmp_path):
    blob = tmp_path / "conv.blob"
    api.write_blob(api.compile(CONV, report=api.CompileReport()), "fb", blob)
    path = tmp_path / "blob.toml"
    path.write_text(f'[[models]]\npath = "{blob}"\n[parameters]\ntiles = [1, 2]\n'
                    "ddr_bandwidth_mbps = [31200]\n")
    one, two = (run_point(p, None) for p in points_of(load_spec(path)))
    assert two["error"] is None and two["cycles"] > 0
    assert one["error_stage"] == "simulate" and "tiles = 2" in one["error"]


def test_structure_parameters_replace_arch_fields():
    arch = structure_of("NPU37XX", {"tiles": 1, "dma_channels": 1, "nce_mhz": 900.0})
    assert (arch.tiles, arch.dma_channels) == (1, 1)
    assert dataclasses.replace(arch, tiles=2, dma_channels=2) == structure_of("NPU37XX", {})


def test_compile_timing_gives_the_compiler_each_points_timing(tmp_path, monkeypatch):
    original, seen = api.compile, []

    def spy(source, arch=None, format="fb", *, timing=None, **options):
        seen.append(timing)
        return original(source, arch, format, timing=timing, **options)
    monkeypatch.setattr(api, "compile", spy)
    latencies = "ddr_read_latency_cycles = [870, 100000]"
    shared = load_spec(spec(tmp_path, latencies))
    own = load_spec(spec(tmp_path, latencies, "compile_timing = true"))
    assert {p.id for p in points_of(shared)}.isdisjoint(p.id for p in points_of(own))
    for p in points_of(shared):
        assert run_point(p, str(tmp_path / "shared"))["error"] is None
    assert seen == [None] and len(list((tmp_path / "shared").glob("*.blob"))) == 1
    seen.clear()
    rows = [run_point(p, str(tmp_path / "own")) for p in points_of(own)]
    assert all(r["error"] is None for r in rows)
    assert [t.dma.ddr_read_latency for t in seen] == [870.0, 100000.0]
    assert len(list((tmp_path / "own").glob("*.blob"))) == 2


def test_the_cmx_budget_is_in_the_compile_key(tmp_path):
    """Points that differ in the tiling limit compile separately; a timing-only difference
    shares the compile."""
    from vpuc.sweep.work import compile_key
    s = load_spec(spec(tmp_path, "cmx_budget = [16384, 65536]\nnce_mhz = [975, 1300]"))
    keys = {}
    for p in points_of(s):
        keys.setdefault(p.values["cmx_budget"], set()).add(compile_key(p))
    assert all(len(k) == 1 for k in keys.values())
    assert keys[16384] != keys[65536]


def test_a_budget_beyond_the_tiles_cmx_is_the_points_error(tmp_path):
    s = load_spec(spec(tmp_path, "cmx_budget = [4194304]"))
    row = run_point(points_of(s)[0])
    assert row["error_stage"] == "compile" and row.get("cycles") is None
    assert "the CMX budget must be a whole number of bytes from 1 to NPU37XX's 2097152" \
        in row["error"]


def test_points_of_one_compile_run_together_compile_once(tmp_path, monkeypatch):
    """``run_points`` (a task of the engine) compiles its chunk's blob once, without a
    cache, and gives each point the row ``run_point`` gives it alone."""
    from vpuc.sweep.work import run_points
    points = points_of(load_spec(spec(tmp_path, "nce_mhz = [650, 975, 1300]")))
    alone = [run_point(p, None) for p in points]
    original, compiles = api.compile, []

    def counted(*args, **kwargs):
        compiles.append(args[0])
        return original(*args, **kwargs)
    monkeypatch.setattr(api, "compile", counted)
    together = run_points(points, None)
    assert len(compiles) == 1 and together == alone
    assert len({r["cycles"] for r in together}) == 3


def test_chunks_group_points_by_compile_and_stay_small(tmp_path, monkeypatch):
    from vpuc.sweep import engine
    from vpuc.sweep.work import compile_key
    monkeypatch.setattr(engine, "CHUNK_POINTS", 2)
    points = points_of(load_spec(spec(tmp_path, "tiles = [1, 2]\nnce_mhz = [650, 975, 1300]")))
    groups = engine._chunks_by_compile(points)
    assert len(groups) == 2                            # two structures
    for key, chunks in groups:
        assert [len(c) for c in chunks] == [2, 1]
        assert {compile_key(p) for c in chunks for p in c} == {key}
    assert sorted(p.id for _, chunks in groups for c in chunks for p in c) \
        == sorted(p.id for p in points)
