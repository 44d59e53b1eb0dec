"""Bézier maths of the search space (rope_adapter.search.bezier)."""

from __future__ import annotations

import numpy as np
import pytest

from rope_adapter.search.bezier import (
    BezierSpace,
    bernstein_basis,
    bezier_point,
    factors_from_control_points,
    fit_control_points,
    layer_depths,
)


def test_bernstein_partition_of_unity_and_endpoints():
    t = np.linspace(0, 1, 11)
    for n in range(0, 6):
        b = bernstein_basis(n, t)
        np.testing.assert_allclose(b.sum(axis=-1), 1.0)
        np.testing.assert_allclose(b[0], np.eye(n + 1)[0])
        np.testing.assert_allclose(b[-1], np.eye(n + 1)[-1])


@pytest.mark.parametrize("degree", [1, 2, 3, 5])
def test_curve_endpoints_are_first_and_last_control_points(degree):
    rng = np.random.default_rng(degree)
    cp = rng.normal(size=(degree + 1, 2))
    np.testing.assert_allclose(bezier_point(cp, 0.0), cp[0])
    np.testing.assert_allclose(bezier_point(cp, 1.0), cp[-1])
    # de Casteljau agrees with the Bernstein form
    t = np.linspace(0, 1, 7)
    np.testing.assert_allclose(bezier_point(cp, t), bernstein_basis(degree, t) @ cp, atol=1e-12)
    assert bezier_point(cp, t).shape == (7, 2)


def test_constant_control_points_give_constant_factors():
    for mode, cp in [("fixed", [1.3] * 4), ("free", [[0, 1.3], [0.7, 1.3], [0.8, 1.3], [1, 1.3]])]:
        f = factors_from_control_points(cp, 30, x_mode=mode)
        assert f.shape == (30,)
        np.testing.assert_allclose(f, 1.3)


def test_degree_one_is_a_line():
    f = factors_from_control_points([[0, 1.0], [1, 2.0]], 5)
    np.testing.assert_allclose(f, [1.0, 1.25, 1.5, 1.75, 2.0])
    np.testing.assert_allclose(factors_from_control_points([1.0, 2.0], 5), f)  # 1-D ys in fixed mode


def test_layer_depths():
    np.testing.assert_allclose(layer_depths(3), [0.0, 0.5, 1.0])


def test_free_mode_with_even_xs_equals_fixed_mode():
    ys = [1.0, 1.8, 0.9, 1.4]
    cp = np.stack([np.arange(4) / 3, ys], axis=1)
    np.testing.assert_allclose(
        factors_from_control_points(cp, 30, "free"), factors_from_control_points(cp, 30, "fixed"), atol=1e-12
    )


def test_free_mode_solves_x_of_t():
    cp = np.array([[0, 1.0], [0.1, 1.2], [0.9, 1.7], [1, 2.0]])
    f = factors_from_control_points(cp, 12, "free")
    pts = bezier_point(cp, np.linspace(0, 1, 200001))
    for d, s in zip(layer_depths(12), f, strict=True):
        # the curve point whose x is d, found on a dense grid, has the factor's height
        j = np.argmin(np.abs(pts[:, 0] - d))
        assert abs(pts[j, 1] - s) < 1e-4
    # moving interior xs changes the factors (unlike fixed mode)
    assert not np.allclose(f, factors_from_control_points(cp[:, 1], 12, "fixed"))


@pytest.mark.parametrize("degree", [1, 2, 3, 4])
def test_fit_recovers_control_points(degree):
    rng = np.random.default_rng(degree)
    ys = rng.uniform(0.8, 2.2, size=degree + 1)
    cp = np.stack([np.arange(degree + 1) / degree, ys], axis=1)
    for num_layers in (degree + 1, 30):
        f = factors_from_control_points(cp, num_layers)
        np.testing.assert_allclose(fit_control_points(f, degree), cp, atol=1e-9)
        np.testing.assert_allclose(fit_control_points(f, degree, x_mode="free"), cp, atol=1e-9)


def test_fit_uniform_factors_is_a_constant_curve():
    cp = fit_control_points(np.full(30, 1.5), 3)
    np.testing.assert_allclose(cp[:, 1], 1.5)


def test_space_param_names_bounds_and_roundtrip():
    space = BezierSpace()
    assert space.param_names() == ["y0", "y1", "y2", "y3"]
    bounds = space.param_bounds()
    for inner in ("y1", "y2"):
        low, high = bounds[inner]
        assert low < space.s_min and high > space.s_max  # constraints, not the sampler bounds, decide feasibility
    assert bounds["y0"] == bounds["y3"] == (space.s_min, space.s_max)  # the first and last layer's factors
    wide = BezierSpace(endpoint_margin=True).param_bounds()
    assert wide["y0"] == wide["y3"] == wide["y1"]
    cp = fit_control_points(np.linspace(1, 1.8, 30), 3)
    params = space.encode(cp)
    np.testing.assert_allclose(space.decode(params), cp)

    free = BezierSpace(degree=3, x_mode="free")
    assert free.param_names() == ["y0", "y1", "y2", "y3", "x1", "x2"]
    assert free.param_bounds()["x1"] == (0.0, 1.0)
    params = {"y0": 1, "y1": 1.2, "y2": 1.5, "y3": 2, "x1": 0.2, "x2": 0.6}
    cp = free.decode(params)
    np.testing.assert_allclose(cp[:, 0], [0, 0.2, 0.6, 1])
    assert free.encode(cp) == pytest.approx(params)


def test_constraint_signs():
    space = BezierSpace(s_min=1.0, s_max=2.0)
    inside = space.decode({"y0": 1.0, "y1": 1.2, "y2": 1.6, "y3": 2.0})
    assert all(v <= 0 for v in space.constraint_values(inside, 30))
    below = space.decode({"y0": 0.8, "y1": 1.2, "y2": 1.6, "y3": 1.9})
    lo, hi = space.constraint_values(below, 30)
    assert lo == pytest.approx(0.2) and hi < 0
    above = space.decode({"y0": 1.1, "y1": 2.5, "y2": 2.5, "y3": 1.1})
    lo, hi = space.constraint_values(above, 30)
    assert lo < 0 and hi > 0
    # a control point outside the bounds is fine as long as the factors stay inside
    bump = space.decode({"y0": 1.0, "y1": 2.2, "y2": 2.2, "y3": 1.0})
    assert max(space.factors(bump, 30)) < 2.0
    assert all(v <= 0 for v in space.constraint_values(bump, 30))

    free = BezierSpace(x_mode="free")
    ordered = free.decode({"y0": 1, "y1": 1.2, "y2": 1.5, "y3": 2, "x1": 0.2, "x2": 0.6})
    assert all(v <= 0 for v in free.constraint_values(ordered, 30))
    unordered = free.decode({"y0": 1, "y1": 1.2, "y2": 1.5, "y3": 2, "x1": 0.7, "x2": 0.3})
    values = free.constraint_values(unordered, 30)
    assert len(values) == 3 and values[2] == pytest.approx(0.4)


def test_bad_inputs():
    with pytest.raises(ValueError, match="num_layers"):
        factors_from_control_points([1.0, 2.0], 1)
    with pytest.raises(ValueError, match="finite"):
        factors_from_control_points([1.0, float("nan")], 4)
    with pytest.raises(ValueError, match="shape"):
        factors_from_control_points(np.ones((3, 3)), 4)
    with pytest.raises(ValueError, match="degree"):
        factors_from_control_points([[0, 1.0]], 4)
    with pytest.raises(ValueError, match="evenly spaced"):
        factors_from_control_points([[0, 1.0], [0.2, 1.0], [1, 1.0]], 4, "fixed")
    with pytest.raises(ValueError, match="non-decreasing"):
        factors_from_control_points([[0, 1.0], [0.8, 1.0], [0.2, 1.0], [1, 1.0]], 4, "free")
    with pytest.raises(ValueError, match="x_0 = 0"):
        factors_from_control_points([[0.1, 1.0], [1, 1.0]], 4, "free")
    with pytest.raises(ValueError, match="x_mode"):
        factors_from_control_points([1.0, 2.0], 4, "wiggly")
    with pytest.raises(ValueError, match="1-D"):
        fit_control_points(np.ones((3, 2)), 1)
    with pytest.raises(ValueError, match="degree <= 2"):
        fit_control_points(np.ones(3), 3)
    with pytest.raises(ValueError, match="finite"):
        fit_control_points([1.0, np.inf, 1.0], 1)
    with pytest.raises(ValueError, match="num_layers"):
        fit_control_points([1.0], 1)
    with pytest.raises(ValueError, match="s_min must be smaller"):
        BezierSpace(s_min=2.0, s_max=2.0)
    with pytest.raises(ValueError, match="degree"):
        BezierSpace(degree=0)
    with pytest.raises(ValueError, match="x_mode"):
        BezierSpace(x_mode="wiggly")
    with pytest.raises(ValueError, match=r"missing parameters \['y3'\]"):
        BezierSpace().decode({"y0": 1, "y1": 1, "y2": 1})
    with pytest.raises(ValueError, match="expected 4 control points"):
        BezierSpace().encode([1.0, 2.0])
    with pytest.raises(ValueError, match="shape"):
        BezierSpace().constraint_values(np.ones((2, 2)), 4)


@pytest.mark.parametrize("x_mode", ["fixed", "free"])
def test_end_ys_beyond_the_bounds_are_never_feasible_and_bounding_them_cuts_infeasible_draws(x_mode):
    """The curve passes through its end control points at the first and last layer, so widening the end ys only
    adds draws that no interior ys can make feasible."""
    rng = np.random.default_rng(0)
    counts = {}
    for endpoint_margin in (True, False):
        space = BezierSpace(degree=2, s_min=0.8, s_max=1.25, x_mode=x_mode, endpoint_margin=endpoint_margin)
        infeasible = 0
        for _ in range(600):
            params = {name: rng.uniform(low, high) for name, (low, high) in space.param_bounds().items()}
            values = space.constraint_values(space.decode(params), 24)
            feasible = all(v <= 0 for v in values)
            if not space.s_min <= params["y0"] <= space.s_max or not space.s_min <= params["y2"] <= space.s_max:
                assert not feasible
            infeasible += not feasible
        counts[endpoint_margin] = infeasible / 600
    assert counts[True] > 5 / 9 - 0.05  # widened ends alone: 1 - (2/3)^2 of the draws
    assert counts[False] < counts[True] - 0.3
