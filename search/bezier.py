"""Bézier curves over decoder depth: the search space of per-layer RoPE scaling factors.

A curve of degree ``n`` has ``n + 1`` control points ``(x_i, y_i)``. Layer ``l`` of an ``L``-layer model sits at
depth ``d_l = l / (L - 1)`` and receives the curve's height at that depth as its factor ``s_l``:

- ``x_mode="fixed"``: the control xs are evenly spaced (``x_i = i / n``), so ``x(t) = t`` and ``s_l = y(d_l)``.
  Only the ys are searched.
- ``x_mode="free"``: the interior xs are searched too. They must be non-decreasing with ``x_0 = 0`` and
  ``x_n = 1``; then ``x(t)`` is strictly increasing (its derivative is a non-negative, not identically zero,
  combination of Bernstein polynomials), ``x(t) = d_l`` has exactly one root, found by vectorised bisection, and
  ``s_l = y(t)``.

Everything here is pure numpy and deterministic; :class:`BezierSpace` maps Optuna-style parameter dictionaries
to control points and back and gives the constraint values (feasible when all are ``<= 0``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import comb
from typing import Literal

import numpy as np

from rope_adapter.errors import LrsError
from rope_adapter.factors import FACTOR_MAX, FACTOR_MIN
from rope_adapter.numbers import as_int, as_real

XMode = Literal["fixed", "free"]
X_MODES: tuple[str, ...] = ("fixed", "free")
_X_TOL = 1e-9
_BISECTION_STEPS = 64  # halves [0, 1] to below float64 resolution


def _check_x_mode(x_mode: str) -> None:
    if x_mode not in X_MODES:
        raise ValueError(f"x_mode must be one of {X_MODES}, got {x_mode!r}")


def _as_control_points(control_points: np.ndarray | list) -> np.ndarray:
    """Validate an array of control points of shape ``(n + 1, dim)`` with ``n >= 1`` and finite values."""
    cp = np.asarray(control_points, dtype=np.float64)
    if cp.ndim != 2 or cp.shape[0] < 2 or cp.shape[1] < 1:
        raise ValueError(f"control_points must have shape (degree + 1, dim) with degree >= 1, got shape {cp.shape}")
    if not np.all(np.isfinite(cp)):
        raise ValueError(f"control_points must be finite, got {cp.tolist()}")
    return cp


def _check_num_layers(num_layers: int) -> None:
    if isinstance(num_layers, bool) or not isinstance(num_layers, (int, np.integer)) or num_layers < 2:
        raise ValueError(f"num_layers must be an integer >= 2 (depth l/(L-1) needs two layers), got {num_layers!r}")


def layer_depths(num_layers: int) -> np.ndarray:
    """Depths ``d_l = l / (L - 1)`` of the ``L`` layers, from 0 (first layer) to 1 (last layer)."""
    _check_num_layers(num_layers)
    return np.arange(num_layers, dtype=np.float64) / (num_layers - 1)


def even_xs(degree: int) -> np.ndarray:
    """The evenly spaced control xs ``i / degree`` that make ``x(t) = t``."""
    if degree < 1:
        raise ValueError(f"degree must be >= 1, got {degree}")
    return np.arange(degree + 1, dtype=np.float64) / degree


def bernstein_basis(degree: int, t: np.ndarray | float) -> np.ndarray:
    """Bernstein polynomials ``B_{i,n}(t)``, shape ``t.shape + (degree + 1,)``."""
    if degree < 0:
        raise ValueError(f"degree must be >= 0, got {degree}")
    t = np.asarray(t, dtype=np.float64)[..., None]
    i = np.arange(degree + 1)
    coeff = np.array([comb(degree, k) for k in i], dtype=np.float64)
    return coeff * t**i * (1.0 - t) ** (degree - i)


def bezier_point(control_points: np.ndarray | list, t: np.ndarray | float) -> np.ndarray:
    """Point(s) of the Bézier curve at parameter(s) ``t`` by de Casteljau's algorithm (any degree, any dimension).

    Args:
        control_points: shape ``(n + 1, dim)``.
        t: a scalar or an array of parameters in ``[0, 1]``.

    Returns:
        shape ``t.shape + (dim,)``: ``(dim,)`` for a scalar ``t``.
    """
    cp = _as_control_points(control_points)
    t_arr = np.asarray(t, dtype=np.float64)
    if not np.all(np.isfinite(t_arr)):
        raise ValueError("t must be finite")
    tt = t_arr[..., None, None]  # broadcast against (points, dim)
    pts = np.broadcast_to(cp, t_arr.shape + cp.shape).copy()
    for _ in range(cp.shape[0] - 1):
        pts = (1.0 - tt) * pts[..., :-1, :] + tt * pts[..., 1:, :]
    return pts[..., 0, :]


def _solve_t(xs: np.ndarray, depths: np.ndarray) -> np.ndarray:
    """Solve ``x(t) = d`` for every depth by bisection; ``x`` is the 1-D Bézier with control values ``xs``.

    ``x(0) = 0 <= d <= 1 = x(1)``, so a root exists even when the xs are out of order; it is unique when they are
    ordered.
    """
    lo = np.zeros_like(depths)
    hi = np.ones_like(depths)
    degree = len(xs) - 1
    for _ in range(_BISECTION_STEPS):
        mid = 0.5 * (lo + hi)
        x_mid = bernstein_basis(degree, mid) @ xs
        below = x_mid < depths
        lo = np.where(below, mid, lo)
        hi = np.where(below, hi, mid)
    return 0.5 * (lo + hi)


def _factors_unchecked(cp: np.ndarray, num_layers: int, x_mode: str) -> np.ndarray:
    depths = layer_depths(num_layers)
    degree = cp.shape[0] - 1
    t = depths if x_mode == "fixed" else _solve_t(cp[:, 0], depths)
    return bernstein_basis(degree, t) @ cp[:, 1]


def _normalise_curve(control_points: np.ndarray | list, x_mode: str) -> np.ndarray:
    """Accept ``(n + 1,)`` ys (fixed mode only) or ``(n + 1, 2)`` points; return validated ``(n + 1, 2)`` points."""
    _check_x_mode(x_mode)
    arr = np.asarray(control_points, dtype=np.float64)
    if arr.ndim == 1:
        if x_mode != "fixed":
            raise ValueError("x_mode='free' needs (degree + 1, 2) control points with their xs, got a 1-D array")
        if arr.shape[0] < 2:
            raise ValueError(f"need at least 2 control ys (degree >= 1), got {arr.shape[0]}")
        arr = np.stack([even_xs(arr.shape[0] - 1), arr], axis=1)
    cp = _as_control_points(arr)
    if cp.shape[1] != 2:
        raise ValueError(f"control_points must have shape (degree + 1, 2) as (x, y) pairs, got {cp.shape}")
    xs = cp[:, 0]
    if x_mode == "fixed":
        if not np.allclose(xs, even_xs(cp.shape[0] - 1), atol=_X_TOL, rtol=0):
            raise ValueError(
                f"x_mode='fixed' needs evenly spaced control xs i/n, got {xs.tolist()}; use x_mode='free' for others"
            )
    else:
        if abs(xs[0]) > _X_TOL or abs(xs[-1] - 1.0) > _X_TOL:
            raise ValueError(f"x_mode='free' needs x_0 = 0 and x_n = 1, got {xs.tolist()}")
        if np.any(np.diff(xs) < -_X_TOL):
            raise ValueError(f"x_mode='free' needs non-decreasing control xs, got {xs.tolist()}")
    return cp


def factors_from_control_points(
    control_points: np.ndarray | list, num_layers: int, x_mode: XMode = "fixed"
) -> np.ndarray:
    """Per-layer factors: the curve's height at each layer depth ``d_l = l / (L - 1)``.

    Args:
        control_points: ``(degree + 1, 2)`` (x, y) pairs; in fixed mode also a 1-D array of the ys.
        num_layers: ``L >= 2``.
        x_mode: ``"fixed"`` (xs evenly spaced, ``s_l = y(d_l)``) or ``"free"`` (solve ``x(t) = d_l``).

    Returns:
        float64 array of shape ``(num_layers,)``.
    """
    _check_num_layers(num_layers)
    cp = _normalise_curve(control_points, x_mode)
    return _factors_unchecked(cp, num_layers, x_mode)


def fit_control_points(factors: np.ndarray | list, degree: int = 3, x_mode: XMode = "fixed") -> np.ndarray:
    """Least-squares control points whose curve best matches the given per-layer factors.

    The fit uses the Bernstein basis at ``t = d_l`` with evenly spaced xs, which is a valid curve in both modes
    (free mode with even xs equals fixed mode), so the inverse is linear and unique. Use it for warm starts
    (for example uniform factors, or factors from another model) and for reports.

    Returns:
        ``(degree + 1, 2)`` control points.
    """
    _check_x_mode(x_mode)
    f = np.asarray(factors, dtype=np.float64)
    if f.ndim != 1:
        raise ValueError(f"factors must be 1-D (one per layer), got shape {f.shape}")
    _check_num_layers(f.shape[0])
    if not np.all(np.isfinite(f)):
        raise ValueError(f"factors must be finite, got {f.tolist()}")
    if isinstance(degree, bool) or not isinstance(degree, (int, np.integer)) or degree < 1:
        raise ValueError(f"degree must be an integer >= 1, got {degree!r}")
    if degree + 1 > f.shape[0]:
        raise ValueError(
            f"cannot fit {degree + 1} control points to {f.shape[0]} factors: use degree <= {f.shape[0] - 1}"
        )
    basis = bernstein_basis(degree, layer_depths(f.shape[0]))
    ys, *_ = np.linalg.lstsq(basis, f, rcond=None)
    return np.stack([even_xs(degree), ys], axis=1)


@dataclass(frozen=True)
class BezierSpace:
    """The search space: control points of a Bézier curve of per-layer factors, with bounds and constraints.

    Parameters are named ``y0 .. y{degree}`` (control heights) and, in free mode, ``x1 .. x{degree-1}`` (interior
    control xs; ``x0 = 0`` and ``x{degree} = 1`` are fixed).

    Why the sampler's y range is wider than ``[s_min, s_max]``: at any interior depth a Bézier curve is a strict
    weighted average of its control ys, so with control ys confined to ``[s_min, s_max]`` a curve can touch
    ``s_max`` (or ``s_min``) in the middle layers only if all control points sit there. A bump that peaks exactly
    at ``s_max``, or a curve that hugs ``s_min`` over the first layers and then rises steeply, needs control points
    beyond the bounds. The sampler therefore draws the interior ys from ``[s_min - m, s_max + m]`` with
    ``m = margin * (s_max - s_min)`` and the constraints, evaluated on the actual per-layer factors, decide
    feasibility; nothing is clipped, so the factors a trial reports are exactly the curve's values.

    The first and last control ys are the factors of the first and last layer (the curve passes through its end
    points, and layer depths run from exactly 0 to exactly 1), so an end y beyond the bounds is infeasible
    whatever the other parameters are. They are drawn from ``[s_min, s_max]``: with margin 0.25 and a degree-2
    curve, widened end ys alone make about 5 of 9 random proposals infeasible. ``endpoint_margin=True`` widens them
    too, the sampler range of studies made before this rule (so they resume with the distributions they hold).

    Factors near 1: the parameters are continuous, so a factor like 1.02 is as reachable as 1.5; with the default
    ``s_min = 1`` a curve whose first control points equal 1 stays within a hair of 1 over the first layers
    (``y0 = y1 = y2 = 1`` makes the first two derivatives vanish at depth 0). A polynomial cannot be exactly
    constant over part of the depth range unless it is constant everywhere; that is the price of a 4-parameter
    search space.
    """

    degree: int = field(default=3, metadata={"help": "Degree n of the Bézier curve (n + 1 control points)."})
    s_min: float = field(default=1.0, metadata={"help": "Smallest allowed per-layer factor."})
    s_max: float = field(default=2.0, metadata={"help": "Largest allowed per-layer factor."})
    x_mode: XMode = field(
        default="fixed", metadata={"help": "'fixed': even control xs; 'free': interior xs are searched too."}
    )
    margin: float = field(
        default=0.25,
        metadata={"help": "Interior control ys are sampled from [s_min - m, s_max + m], m = margin * (s_max - s_min)."},
    )
    endpoint_margin: bool = field(
        default=False,
        metadata={
            "help": "Widen the first and last control ys by the margin too (always infeasible beyond the bounds; "
            "the sampler range of studies made before end ys were kept in bounds)."
        },
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "degree", as_int(self.degree, "degree", low=1))
        for name in ("s_min", "s_max", "margin"):  # any number type, kept as a float; LrsError naming it otherwise
            object.__setattr__(self, name, as_real(getattr(self, name), name))
        if not self.s_min < self.s_max:
            raise LrsError(f"s_min must be smaller than s_max, got s_min={self.s_min}, s_max={self.s_max}")
        if self.s_min <= 0:
            raise LrsError(f"s_min must be positive (factors divide inv_freq), got {self.s_min}")
        if self.s_min < FACTOR_MIN or self.s_max > FACTOR_MAX:
            raise LrsError(
                f"s_min and s_max must lie in the adapter's factor range [{FACTOR_MIN:g}, {FACTOR_MAX:g}], got "
                f"[{self.s_min:g}, {self.s_max:g}]"
            )
        if self.margin < 0:
            raise LrsError(f"margin must be >= 0, got {self.margin}")
        _check_x_mode(self.x_mode)

    def param_names(self) -> list[str]:
        """Parameter names in a fixed order: ``y0 .. y{n}`` then, in free mode, ``x1 .. x{n-1}``."""
        names = [f"y{i}" for i in range(self.degree + 1)]
        if self.x_mode == "free":
            names += [f"x{i}" for i in range(1, self.degree)]
        return names

    def param_bounds(self) -> dict[str, tuple[float, float]]:
        """``{name: (low, high)}`` for the sampler (see the class docstring for why interior ys go beyond the
        bounds and end ys do not)."""
        m = self.margin * (self.s_max - self.s_min)
        # a negative lower y bound would allow curves that can never be feasible anyway; keep it positive
        y_low = max(self.s_min - m, self.s_min / 2)
        wide = (float(y_low), float(self.s_max + m))
        ends = wide if self.endpoint_margin else (float(self.s_min), float(self.s_max))
        bounds = {f"y{i}": ends if i in (0, self.degree) else wide for i in range(self.degree + 1)}
        if self.x_mode == "free":
            bounds.update({f"x{i}": (0.0, 1.0) for i in range(1, self.degree)})
        return bounds

    def decode(self, params: dict[str, float]) -> np.ndarray:
        """Control points ``(degree + 1, 2)`` from a parameter dictionary (extra keys are ignored).

        In free mode the xs are returned as given, ordered or not: :meth:`constraint_values` reports disorder.
        """
        missing = [name for name in self.param_names() if name not in params]
        if missing:
            raise ValueError(f"missing parameters {missing}; this space expects {self.param_names()}")
        ys = np.array([float(params[f"y{i}"]) for i in range(self.degree + 1)])
        xs = even_xs(self.degree)
        if self.x_mode == "free":
            xs = np.array([0.0] + [float(params[f"x{i}"]) for i in range(1, self.degree)] + [1.0])
        cp = np.stack([xs, ys], axis=1)
        if not np.all(np.isfinite(cp)):
            raise ValueError(f"parameters must be finite, got {params}")
        return cp

    def encode(self, control_points: np.ndarray | list) -> dict[str, float]:
        """Parameter dictionary of control points (for example from :func:`fit_control_points`, as a warm start)."""
        cp = _normalise_curve(control_points, self.x_mode)
        if cp.shape[0] != self.degree + 1:
            raise ValueError(f"expected {self.degree + 1} control points for degree {self.degree}, got {cp.shape[0]}")
        params = {f"y{i}": float(cp[i, 1]) for i in range(self.degree + 1)}
        if self.x_mode == "free":
            params.update({f"x{i}": float(cp[i, 0]) for i in range(1, self.degree)})
        return params

    def factors(self, control_points: np.ndarray | list, num_layers: int) -> np.ndarray:
        """Per-layer factors of (valid) control points in this space's x mode."""
        return factors_from_control_points(control_points, num_layers, self.x_mode)

    def constraint_values(self, control_points: np.ndarray | list, num_layers: int) -> list[float]:
        """Optuna-style constraints, feasible when every value is ``<= 0``.

        ``[s_min - min(factors), max(factors) - s_max]`` and, in free mode, ``max_i (x_i - x_{i+1})`` (positive
        when the control xs are out of order). With unordered xs the factors are still defined (bisection finds a
        root of ``x(t) = d_l``), so the bound constraints stay informative for the sampler.
        """
        _check_num_layers(num_layers)
        cp = _as_control_points(control_points)
        if cp.shape != (self.degree + 1, 2):
            raise ValueError(f"expected control points of shape {(self.degree + 1, 2)}, got {cp.shape}")
        if self.x_mode == "fixed":
            cp = _normalise_curve(cp, "fixed")
        elif abs(cp[0, 0]) > _X_TOL or abs(cp[-1, 0] - 1.0) > _X_TOL:
            raise ValueError(f"x_mode='free' needs x_0 = 0 and x_n = 1, got {cp[:, 0].tolist()}")
        f = _factors_unchecked(cp, num_layers, self.x_mode)
        values = [float(self.s_min - f.min()), float(f.max() - self.s_max)]
        if self.x_mode == "free":
            values.append(float(np.max(cp[:-1, 0] - cp[1:, 0])))
        return values
