"""Samplers: the parameter settings of a sweep (each one is run on every model).

- ``grid``: every combination of every axis's values (a range with ``steps``
  gives evenly spaced values, ends included);
- ``random``: ``samples`` settings, each axis drawn uniformly on its own;
- ``latin-hypercube``: ``samples`` settings whose values on every axis fall one
  in each of ``samples`` equal strata of [0, 1) (McKay, Beckman and Conover,
  1979), strata paired at random.

Random and Latin hypercube draws come from ``numpy.random.default_rng(seed)``, so a
seed gives the same settings on every machine; duplicates (a listed axis has fewer
values than samples) are kept once.
"""

from __future__ import annotations

import itertools

import numpy as np

from vpuc.sweep.spec import Axis


def grid(axes: tuple[Axis, ...]) -> list[dict]:
    names = [a.name for a in axes]
    return [dict(zip(names, combo)) for combo in itertools.product(*(a.grid() for a in axes))]


def unit_random(n: int, dims: int, rng: np.random.Generator) -> np.ndarray:
    return rng.random((n, dims))


def unit_latin_hypercube(n: int, dims: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` points in [0, 1)^dims, exactly one in each of the n strata of every axis."""
    u = np.empty((n, dims))
    for d in range(dims):
        u[:, d] = (rng.permutation(n) + rng.random(n)) / n
    return u


def _unique(settings: list[dict]) -> list[dict]:
    seen, out = set(), []
    for s in settings:
        key = tuple(sorted(s.items()))
        if key not in seen:
            seen.add(key)
            out.append(s)
    return out


def sample(axes: tuple[Axis, ...], sampler: str, samples: int | None = None,
           seed: int = 0) -> list[dict]:
    """The settings ``sampler`` picks over ``axes`` (no axes: the one base setting)."""
    if not axes:
        return [{}]
    if sampler == "grid":
        return grid(axes)
    rng = np.random.default_rng(seed)
    unit = unit_random if sampler == "random" else unit_latin_hypercube
    u = unit(samples, len(axes), rng)
    return _unique([{a.name: a.at(float(row[d])) for d, a in enumerate(axes)} for row in u])
