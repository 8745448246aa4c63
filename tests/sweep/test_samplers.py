"""The samplers' properties: a grid is every combination once; random and Latin
hypercube settings stay in their domains and repeat with their seed; a Latin
hypercube puts exactly one sample in each stratum of every axis."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from vpuc.sweep.samplers import grid, sample, unit_latin_hypercube
from vpuc.sweep.spec import Axis

listed = st.builds(lambda name, values: Axis(name, tuple(values)),
                   st.sampled_from(["tiles", "dma_channels", "cmx_bytes", "barriers"]),
                   st.lists(st.integers(1, 64), min_size=1, max_size=4, unique=True))
ranged = st.builds(lambda low, width, steps: Axis("nce_mhz", low=low, high=low + width,
                                                  steps=steps),
                   st.floats(100, 2000), st.floats(0, 1000), st.integers(1, 5))


def distinct_axes(axes):
    seen, out = set(), []
    for a in axes:
        if a.name not in seen:
            seen.add(a.name)
            out.append(a)
    return tuple(out)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(listed, ranged), min_size=1, max_size=4).map(distinct_axes))
def test_grid_is_every_combination_once(axes):
    settings_ = grid(axes)
    assert len(settings_) == math.prod(len(a.grid()) for a in axes)
    assert len({tuple(s.items()) for s in settings_}) == len(settings_)
    for a in axes:
        assert {s[a.name] for s in settings_} == set(a.grid())


@settings(max_examples=40, deadline=None)
@given(ranged)
def test_a_grid_range_holds_both_ends(axis):
    values = axis.grid()
    assert values[0] == axis.low
    if axis.steps > 1 and axis.high > axis.low:
        assert math.isclose(values[-1], axis.high, rel_tol=1e-12)
    assert all(axis.low <= v <= axis.high * (1 + 1e-12) for v in values)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.one_of(listed, ranged), min_size=1, max_size=3).map(distinct_axes),
       st.sampled_from(["random", "latin-hypercube"]), st.integers(1, 30), st.integers(0, 2**32))
def test_random_samplers_stay_in_their_domains_and_repeat_with_their_seed(axes, sampler, n,
                                                                          seed):
    first = sample(axes, sampler, n, seed)
    assert first == sample(axes, sampler, n, seed)
    assert 1 <= len(first) <= n
    for s in first:
        for a in axes:
            v = s[a.name]
            assert v in a.values if a.values else a.low <= v <= a.high


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 50), st.integers(1, 6), st.integers(0, 2**32))
def test_latin_hypercube_has_one_sample_per_stratum_on_every_axis(n, dims, seed):
    u = unit_latin_hypercube(n, dims, np.random.default_rng(seed))
    assert u.shape == (n, dims) and (u >= 0).all() and (u < 1).all()
    for d in range(dims):
        assert sorted(np.floor(u[:, d] * n).astype(int)) == list(range(n))


def test_different_seeds_give_different_samples():
    axes = (Axis("nce_mhz", low=900.0, high=1300.0),)
    assert sample(axes, "random", 8, 1) != sample(axes, "random", 8, 2)


def test_no_axes_is_the_one_base_setting():
    assert sample((), "grid") == [{}] and sample((), "random", 5, 0) == [{}]
