"""The constraints of a search trial, in Optuna's convention (feasible when every value is ``<= 0``).

They are evaluated in the cheapest order: the factor bounds ``[s_min, s_max]`` (and, in free x mode, the order of the control xs), per-layer bounds,
a bound on the step between neighbouring layers, user callables, then the perplexity guard (a short text may
not lose more than a given fraction of perplexity). A trial that breaks a cheap constraint is not scored on the
task: its objective values are ``-inf`` (each sampler reads its constraint values: constrained NSGA-II ranks
infeasible trials by their total violation, GPSampler models feasibility; see
:mod:`search.samplers`), and the report marks it ``evaluated: false``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from rope_adapter.errors import LrsError
from rope_adapter.numbers import as_int, as_real, parse_number

from .bezier import BezierSpace, factors_from_control_points

UserConstraint = Callable[[np.ndarray], float]
FACTOR_TOLERANCE = 1e-9
"""Bound constraints are reported minus this, so that a curve sitting exactly on a bound is not made infeasible
by rounding (the curve's value is a Bernstein sum, which can land one ulp beyond the bound)."""

_LAYER_BOUND = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+))?\s*:\s*([^:]+?)\s*:\s*([^:]+?)\s*$")


@dataclass(frozen=True)
class LayerBound:
    """Layers ``first..last`` (inclusive) must have factors in ``[low, high]``."""

    first: int
    last: int
    low: float
    high: float

    @classmethod
    def parse(cls, text: str) -> LayerBound:
        """``"FIRST-LAST:LOW:HIGH"`` or ``"LAYER:LOW:HIGH"``, e.g. ``"25-29:1.0:1.0"`` keeps the last five at 1.
        LOW and HIGH are numbers as the command line writes them (``1.2``, ``3/2``, ``1e0``)."""
        match = _LAYER_BOUND.match(text) if isinstance(text, str) else None
        if match is None:
            raise LrsError(f"layer bound {text!r} is not FIRST-LAST:LOW:HIGH (e.g. '0-4:1.0:1.2')")
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) is not None else first
        try:
            low, high = parse_number(match.group(3)), parse_number(match.group(4))
        except ValueError:
            raise LrsError(f"layer bound {text!r}: LOW and HIGH must be numbers") from None
        return cls(first, last, low, high)

    def __post_init__(self) -> None:
        """Any number type (:mod:`rope_adapter.numbers`) is kept as a plain int or float; anything else, a
        non-finite bound or a layer that is not a whole number is an :class:`LrsError` naming the field."""
        for name in ("first", "last"):
            object.__setattr__(self, name, as_int(getattr(self, name), f"layer bound {name}"))
        for name in ("low", "high"):
            object.__setattr__(self, name, as_real(getattr(self, name), f"layer bound {name}"))
        if self.first < 0 or self.last < self.first:
            raise LrsError(f"layer bound {self}: need 0 <= first <= last")
        if self.low > self.high:
            raise LrsError(f"layer bound {self}: need low <= high")

    def __str__(self) -> str:
        return f"{self.first}-{self.last}:{self.low:g}:{self.high:g}"


@dataclass(frozen=True)
class FactorConstraints:
    """Every constraint that depends on the factors alone (cheap: no forward pass).

    Values, in :meth:`names` order: ``s_min - min(f)``, ``max(f) - s_max``, (free x mode) the control xs' disorder,
    per layer bound ``low - min(f[first..last])`` and ``max(f[first..last]) - high``, ``max |f[l+1] - f[l]| -
    max_step`` and each user callable ``c(factors)``. The bound values are lowered by :data:`FACTOR_TOLERANCE`.
    A curve whose control ys are all equal gives exactly that factor on every layer.
    """

    space: BezierSpace
    num_layers: int
    layer_bounds: tuple[LayerBound, ...] = ()
    max_step: float | None = None
    user: tuple[UserConstraint, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "num_layers", as_int(self.num_layers, "num_layers", low=1))
        object.__setattr__(self, "max_step", as_real(self.max_step, "max_step", optional=True))

    def names(self) -> list[str]:
        """One name per constraint value."""
        names = ["factor >= s_min", "factor <= s_max"]
        if self.space.x_mode == "free":
            names.append("control xs ordered")
        for bound in self.layer_bounds:
            names += [
                f"layers {bound.first}-{bound.last} >= {bound.low:g}",
                f"layers {bound.first}-{bound.last} <= {bound.high:g}",
            ]
        if self.max_step is not None:
            names.append(f"step between layers <= {self.max_step:g}")
        names += [f"user constraint {getattr(c, '__name__', i)}" for i, c in enumerate(self.user)]
        return names

    def check_feasible_space(self) -> None:
        """Raise ``ValueError`` when the bounds leave no factor set at all (checked before any model work)."""
        if self.max_step is not None and not self.max_step >= 0:
            raise ValueError(f"max_step must be >= 0, got {self.max_step}")
        low = np.full(self.num_layers, self.space.s_min)
        high = np.full(self.num_layers, self.space.s_max)
        for bound in self.layer_bounds:
            if bound.last >= self.num_layers:
                raise ValueError(
                    f"layer bound {bound} names layer {bound.last}, but the model has {self.num_layers} layers "
                    f"(0..{self.num_layers - 1})"
                )
            low[bound.first : bound.last + 1] = np.maximum(low[bound.first : bound.last + 1], bound.low)
            high[bound.first : bound.last + 1] = np.minimum(high[bound.first : bound.last + 1], bound.high)
        empty = np.flatnonzero(low > high)
        if empty.size:
            layer = int(empty[0])
            raise ValueError(
                f"the bounds leave no factor for layer {layer}: it must be >= {low[layer]:g} and <= {high[layer]:g} "
                f"(s_min={self.space.s_min:g}, s_max={self.space.s_max:g}, layer bounds "
                f"{[str(b) for b in self.layer_bounds]}); the search space is empty"
            )
        if self.max_step is not None:
            # the tightest neighbours: a step of at least low[l+1] - high[l] (or low[l] - high[l+1]) is forced
            forced = np.maximum(low[1:] - high[:-1], low[:-1] - high[1:])
            if forced.size and forced.max() > self.max_step + 1e-12:
                layer = int(np.argmax(forced))
                raise ValueError(
                    f"the layer bounds force a step of {forced[layer]:g} between layers {layer} and {layer + 1}, "
                    f"more than max_step={self.max_step:g}; the search space is empty"
                )

    def evaluate(self, control_points: np.ndarray) -> tuple[np.ndarray | None, list[float]]:
        """Factors (None when the control xs are out of order, so no curve is defined) and constraint values."""
        cp = np.asarray(control_points, dtype=np.float64)
        values = self.space.constraint_values(cp, self.num_layers)
        ordered = self.space.x_mode == "fixed" or values[2] <= 0
        factors = factors_from_control_points(cp, self.num_layers, self.space.x_mode) if ordered else None
        extra = len(self.names()) - len(values)
        values[0] -= FACTOR_TOLERANCE
        values[1] -= FACTOR_TOLERANCE
        if factors is None:
            return None, values + [0.0] * extra
        if np.all(cp[:, 1] == cp[0, 1]):  # a constant curve: exactly that value (Bernstein sums round to 1 +- ulp)
            factors = np.full(self.num_layers, cp[0, 1])
        values[0] = float(self.space.s_min - factors.min()) - FACTOR_TOLERANCE
        values[1] = float(factors.max() - self.space.s_max) - FACTOR_TOLERANCE
        for bound in self.layer_bounds:
            part = factors[bound.first : bound.last + 1]
            values += [
                float(bound.low - part.min()) - FACTOR_TOLERANCE,
                float(part.max() - bound.high) - FACTOR_TOLERANCE,
            ]
        if self.max_step is not None:
            values.append(float(np.abs(np.diff(factors)).max() - self.max_step) if factors.size > 1 else -self.max_step)
        for constraint in self.user:
            value = float(constraint(factors.copy()))
            if math.isnan(value):
                raise ValueError(f"user constraint {constraint!r} returned NaN")
            values.append(value)
        return factors, values


def perplexity_constraint(nll: float, base_nll: float, max_increase: float) -> float:
    """``ppl / base_ppl - 1 - max_increase`` with ``ppl = exp(nll)``: feasible (<= 0) when perplexity rises by at
    most the fraction ``max_increase``."""
    return float(math.exp(nll - base_nll) - 1.0 - max_increase)
