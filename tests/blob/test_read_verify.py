"""What reading a blob verifies: the rules over each record always; the rules over the
whole schedule (deadlock, physical barrier reuse, races) with ``schedule_rules=True``,
and otherwise at run time, where the simulator catches each of them."""

import pytest
from blob_testlib import REPO

from vpuc import api
from vpuc.blob import read_blob, write_blob
from vpuc.diagnostics import VpucError

DATA = REPO / "tests" / "sim" / "data"
NO_VERIFY = "assign-windows,pack-kernel-args"


def unverified_blob(name: str) -> bytes:
    """The blob of a program the verifier rejects, compiled without it."""
    source = DATA / name
    return write_blob(api.compile(source, passes=NO_VERIFY, name=str(source)), "fb")


@pytest.mark.parametrize("name, static, runtime", [
    ("race.vir", "race on cmx %x", "race on CMX of tile 0"),
    ("deadlock.vir", "deadlock", "deadlock at cycle 0"),
    ("physical_deadlock.vir", "share physical barrier", "is not programmed yet"),
])
def test_schedule_rules_are_checked_on_request_and_at_run_time(name, static, runtime):
    data = unverified_blob(name)
    with pytest.raises(VpucError) as refused:
        read_blob(data, "bad.blob", schedule_rules=True)
    assert static in str(refused.value)
    program = read_blob(data, "bad.blob")              # the records are sound
    try:
        result = api.simulate(program)
    except VpucError as exc:
        assert runtime in str(exc)
    else:
        assert any(runtime in str(race) for race in result.races), result.races


def test_record_rules_still_refuse_a_broken_record():
    """A kernel's tensor larger than its memory: the engines rely on this rule."""
    program = api.compile(REPO / "examples" / "clamp.vir")
    buffer = next(b for b in program.module.buffers if b.offset is not None and b.tile is not None)
    buffer.offset = program.arch.cmx_bytes - 16       # runs past the end of CMX
    data = write_blob(program, "fb")
    with pytest.raises(VpucError, match="does not verify"):
        read_blob(data, "bad.blob")
