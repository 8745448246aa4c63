"""A sweep's points: every sampled setting on every model, each with a stable id.

A point's id is a hash of its model's bytes, its input shapes and its parameter
values, so a rerun with the same spec finds the points a result file already holds,
and an edited model file is a new point.  The cost proxy is evaluated here, over the
base architecture's values overridden by the point's.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from vpuc.sweep.params import base_values
from vpuc.sweep.samplers import sample
from vpuc.sweep.spec import SweepSpec, eval_cost


@dataclass(frozen=True)
class Point:
    id: str
    model: str                       # the model's name in the spec
    path: str                        # the model file, absolute
    input_shapes: tuple              # ((name, dims), ...)
    params: tuple                    # ((name, value), ...) in the spec's order
    arch: str
    cost: float
    numerics: bool
    compile_timing: bool = False

    @property
    def values(self) -> dict:
        return dict(self.params)


@lru_cache(maxsize=64)
def file_digest(path: str, mtime_ns: int, size: int) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def digest_of(path: Path) -> str:
    st = path.stat()
    return file_digest(str(path), st.st_mtime_ns, st.st_size)


def point_id(model_digest: str, shapes: dict, params: dict, arch: str, numerics: bool,
             compile_timing: bool = False) -> str:
    what = {"model": model_digest, "shapes": {k: list(v) for k, v in shapes.items()},
            "params": params, "arch": arch, "numerics": numerics}
    if compile_timing:           # (absent when false: ids of earlier results stay valid)
        what["compile_timing"] = True
    key = json.dumps(what, sort_keys=True)
    return hashlib.sha256(key.encode()).hexdigest()[:24]


def points_of(spec: SweepSpec) -> list[Point]:
    settings = sample(spec.axes, spec.sampler, spec.samples, spec.seed)
    base = base_values(spec.arch)
    points = []
    for model in spec.models:
        digest = digest_of(model.path)
        for setting in settings:
            values = {**base, **setting}
            points.append(Point(
                point_id(digest, model.input_shapes, setting, spec.arch, spec.numerics,
                         spec.compile_timing),
                model.name, str(model.path), tuple(sorted(model.input_shapes.items())),
                tuple(setting.items()), spec.arch, eval_cost(spec.cost, values), spec.numerics,
                spec.compile_timing))
    return points
