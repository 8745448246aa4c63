"""The differential fuzz in the suite: a fixed-seed sample of random ONNX models (one op,
small CNNs, transformer blocks, large layers, the op forms of opsets 11 to 23:
``tests/fuzz/onnx_models.py``, each at an opset drawn for it) compiled and simulated
against onnxruntime (``tests/fuzz/onnx_check.py``).  A case may be refused with a reason,
never computed wrongly, crash, or end under its lower bound.  ``bench/onnx_fuzz.py``
runs long campaigns; a failure here names the case it remakes."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from tempfile import TemporaryDirectory

import pytest

from tests.fuzz.onnx_check import Outcome, check
from tests.fuzz.onnx_models import make

SEED = 20261129
COUNTS = {"op": 60, "cnn": 12, "transformer": 8, "large": 4, "forms": 24, "normred": 16, "more": 16,
          "rnn": 8,
          "extra": 16,
          "gather": 12,
          "quant": 12}
# the families whose cases compile in well under a second also go through `vpuc import`
# and are compiled again from the VIR it writes (onnx_check's ``import`` outcome)
ROUND_TRIP = ("op", "forms", "normred", "more", "extra", "gather", "quant")
CASES = [(family, i) for family, n in COUNTS.items() for i in range(n)]


@lru_cache(maxsize=None)
def _outcome(family: str, index: int) -> Outcome:
    """The case's outcome, checked once for both tests that read it."""
    with TemporaryDirectory() as tmp:
        return check(make(family, SEED, index), Path(tmp), seed=index,
                     round_trip=family in ROUND_TRIP)


@pytest.mark.parametrize("family, index", CASES, ids=[f"{f}-{i}" for f, i in CASES])
def test_case_agrees_with_onnxruntime(family, index):
    outcome = _outcome(family, index)
    assert outcome.kind in ("ok", "refused", "disputed"), (
        f"{outcome.kind}: {outcome.detail} (python bench/onnx_fuzz.py --replay {family}:{index} "
        f"--seed {SEED})")


def test_the_sample_is_mostly_run_not_refused():
    """The generators make models vpuc takes: most of a family runs (a generator drifting
    into refusals would leave the fuzz checking nothing)."""
    kinds = [_outcome("cnn", i).kind for i in range(COUNTS["cnn"])]
    assert kinds.count("ok") >= COUNTS["cnn"] - 1, kinds
