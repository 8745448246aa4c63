"""The differential fuzz in the suite: a fixed-seed sample of random ONNX models (one op,
small CNNs, transformer blocks: ``tests/fuzz/onnx_models.py``) compiled and simulated
against onnxruntime (``tests/fuzz/onnx_check.py``).  A case may be refused with a reason,
never computed wrongly, crash, or end under its lower bound.  ``bench/onnx_fuzz.py``
runs long campaigns; a failure here names the case it remakes."""

from __future__ import annotations

import pytest

from tests.fuzz.onnx_check import check
from tests.fuzz.onnx_models import make

SEED = 20261129
COUNTS = {"op": 60, "cnn": 12, "transformer": 8, "large": 4}
CASES = [(family, i) for family, n in COUNTS.items() for i in range(n)]


@pytest.mark.parametrize("family, index", CASES, ids=[f"{f}-{i}" for f, i in CASES])
def test_case_agrees_with_onnxruntime(family, index, tmp_path):
    outcome = check(make(family, SEED, index), tmp_path, seed=index)
    assert outcome.kind in ("ok", "refused", "disputed"), (
        f"{outcome.kind}: {outcome.detail} (python bench/onnx_fuzz.py --replay {family}:{index} "
        f"--seed {SEED})")


def test_the_sample_is_mostly_run_not_refused(tmp_path):
    """The generators make models vpuc takes: most of a family runs (a generator drifting
    into refusals would leave the fuzz checking nothing)."""
    kinds = [check(make("cnn", SEED, i), tmp_path, seed=i).kind for i in range(COUNTS["cnn"])]
    assert kinds.count("ok") >= COUNTS["cnn"] - 1, kinds
