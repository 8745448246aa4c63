"""Deadlocks, races, out-of-bounds kernel accesses and --max-cycles: exact messages."""

from __future__ import annotations

from tests.sim.simlib import NO_VERIFY, run_cli

DATA = "tests/sim/data"


def test_deadlock_lists_every_blocked_task_with_its_barriers(capsys, monkeypatch):
    code, _, err = run_cli(["run", f"{DATA}/deadlock.vir", "-p", NO_VERIFY], capsys, monkeypatch)
    assert code == 1
    assert err == (
        "tests/sim/data/deadlock.vir:10:3: error: deadlock at cycle 0: nothing is running and no "
        "task can start; 3 tasks never ran. Blocked at the head of their queues:\n"
        "  load_a (DMA channel 0): waits on %b_loaded: 1 producer left (load_b)\n"
        "  load_b (DMA channel 1): waits on %a_loaded: 1 producer left (load_a)\n"
        "  (1 more queued behind them)\n"
        "      load_a: dma %in -> %a channel 0 waits(%b_loaded) updates(%a_loaded)\n"
        "      ^\n")


def test_the_verifier_reports_the_same_deadlock_before_the_run(capsys, monkeypatch):
    code, out, err = run_cli(["run", f"{DATA}/deadlock.vir"], capsys, monkeypatch)
    assert code == 1 and out == ""
    assert "error: deadlock: the barriers and task order form a cycle" in err


def test_deadlock_on_a_physical_barrier_that_cannot_be_reprogrammed(capsys, monkeypatch):
    code, _, err = run_cli(["run", f"{DATA}/physical_deadlock.vir", "-p", NO_VERIFY], capsys,
                           monkeypatch)
    assert code == 1
    assert err.splitlines()[:5] == [
        "tests/sim/data/physical_deadlock.vir:16:3: error: deadlock at cycle 897: nothing is "
        "running and no task can start; 3 tasks never ran. Blocked at the head of their queues:",
        "  consume_second (DMA channel 1): %second is not programmed yet (physical barrier 0 still "
        "holds %first); waits on %second: 1 producer left (use_second)",
        "  use_second (DMA channel 0): %second is not programmed yet (physical barrier 0 still "
        "holds %first)",
        "  (1 more queued behind them)",
        "      consume_second: dma %b -> %c channel 1 waits(%second)"]


def test_the_verifier_reports_the_race_before_the_run(capsys, monkeypatch):
    code, out, err = run_cli(["run", f"{DATA}/race.vir"], capsys, monkeypatch)
    assert code == 1 and out == ""
    assert "error: race on cmx %x, bytes 0..2048: load (DMA channel 0) writes %x and relu " \
        "(ACT_SHAVE tile 0) reads %x, and no barrier orders the two tasks" in err


# The run-time detector is the second line: these runs skip the verifier.
def test_race_between_a_running_dma_and_a_kernel(capsys, monkeypatch):
    code, out, err = run_cli(["run", f"{DATA}/race.vir", "-p", NO_VERIFY], capsys, monkeypatch)
    assert code == 1
    assert "total" in out           # the run finishes and reports; the race fails it
    assert err == (
        "tests/sim/data/race.vir:16:3: error: race on CMX of tile 0 bytes 0x0..0x7ff: load (DMA "
        "channel 0) writes %x and relu (ACT_SHAVE tile 0) reads %x, and no barrier orders the two "
        "tasks\n"
        "      relu: sw @relu on tile 0 inputs(%x as %i) outputs(%y as %o) updates(%done) {\n"
        "      ^\n"
        "tests/sim/data/race.vir:12:3: note: load is here\n"
        "      load: dma %in -> %x channel 0\n"
        "      ^\n")


def test_race_that_did_not_overlap_in_time_is_still_reported(capsys, monkeypatch):
    code, _, err = run_cli(["run", f"{DATA}/late_race.vir", "-p", NO_VERIFY], capsys, monkeypatch)
    assert code == 1
    assert err.splitlines()[0] == (
        "tests/sim/data/late_race.vir:18:3: error: race on CMX of tile 0 bytes 0x800..0xfff: relu "
        "(ACT_SHAVE tile 0) writes %y and store (DMA channel 0) reads %y, and no barrier orders "
        "the two tasks")


def test_races_can_be_switched_off(capsys, monkeypatch):
    code, _, err = run_cli(["run", f"{DATA}/race.vir", "--no-races", "-p", NO_VERIFY], capsys, monkeypatch)
    assert code == 0 and err == ""


def test_out_of_bounds_kernel_store_names_task_kernel_pc_and_address(capsys, monkeypatch):
    code, out, err = run_cli(["run", f"{DATA}/oob.vir"], capsys, monkeypatch)
    assert code == 1 and out == ""
    assert err == (
        "@oob: section .text at offset 0x18: error: bad: kernel @oob (asm \"oob.s\") on tile 0: "
        "pc 0x1d000018 (.text+0x18) 'sw s3, 0(s2)': store of 4 bytes at 0x1f100080: outside the "
        "mapped part of WIN_F (0x1f000000..0x1f0000ff)\n")


def test_max_cycles_stops_a_long_run(capsys, monkeypatch):
    code, _, err = run_cli(["run", f"{DATA}/one_dma.vir", "--max-cycles", "100"], capsys,
                           monkeypatch)
    assert code == 1
    assert err == ("error: the run passed --max-cycles 100 (next event at cycle 891); 1 task "
                   "running (load), 0 not started\n")
