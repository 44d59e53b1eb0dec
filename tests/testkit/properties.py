"""Hypothesis strategies and checks shared by the property-based tests: numbers in every type users pass, values
that are not numbers, odd paths, and a snapshot of a folder tree to show that nothing outside a target changed.

Every property test runs with :data:`SETTINGS`: derandomized (the same examples on every run and machine, so the
suite is not flaky), a modest number of examples and no deadline (a loaded CI machine must not fail a test)."""

from __future__ import annotations

import math
import os
import stat
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

SETTINGS = settings(
    derandomize=True,
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
"""The settings of every property test (see the module's notes)."""

FEW = settings(SETTINGS, max_examples=25)
"""For properties whose examples each cost a model forward or a save."""

# ------------------------------------------------------------------------------------------------ numbers


def real_forms(x: float) -> list[Any]:
    """``x`` in every number type a user may pass for it (each one exactly ``x``)."""
    forms = [x, np.float64(x), np.array(x), torch.tensor(x, dtype=torch.float64), Fraction(x), Decimal(x)]
    with np.errstate(over="ignore"):
        exact_in_float32 = float(np.float32(x)) == x
    if exact_in_float32:
        forms += [np.float32(x), torch.tensor(x, dtype=torch.float32)]
    if x == int(x) and abs(x) < 2**53:
        forms += [int(x), np.int64(int(x))]
    return forms


def int_forms(n: int) -> list[Any]:
    """``n`` in every type a user may pass for a whole number (each one exactly ``n``)."""
    forms = [n, Fraction(n), Decimal(n)]
    if abs(n) < 2**62:
        forms += [np.int64(n), np.array(n), torch.tensor(n), np.array(n, dtype=np.int64)]
    if abs(n) < 2**53:
        forms += [float(n), np.float64(n)]
    if 0 <= n < 256:
        forms += [np.uint8(n), torch.tensor(n, dtype=torch.uint8)]
    return forms


finite_reals = st.floats(allow_nan=False, allow_infinity=False, min_value=-1e300, max_value=1e300)
"""Finite floats (any magnitude a float holds comfortably)."""

not_numbers = st.one_of(
    st.booleans(),
    st.just(np.bool_(True)),
    st.just(torch.tensor(True)),
    st.none(),
    st.text(max_size=5),
    st.binary(max_size=3),
    st.complex_numbers(allow_nan=False, allow_infinity=False, max_magnitude=10),
    st.just(np.complex128(1 + 1j)),
    st.lists(st.floats(), max_size=2),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=1),
    st.just(np.ones(2)),
    st.just(torch.ones(2, 2)),
    st.just(object()),
)
"""Values that are not one number (text that looks like one included)."""

non_finite = st.one_of(
    st.sampled_from([math.nan, math.inf, -math.inf, np.float32("nan"), np.float64("-inf"), torch.tensor(math.inf)]),
    st.sampled_from([Decimal("NaN"), Decimal("sNaN"), Decimal("Infinity"), Decimal("1e400")]),
    st.integers(min_value=10**309, max_value=10**400),  # float() of it overflows
    st.just(Fraction(10**400, 3)),
)
"""Numbers with no finite float value."""

anything = st.one_of(
    finite_reals.flatmap(lambda x: st.sampled_from(real_forms(x))),
    st.integers(min_value=-(10**20), max_value=10**20).flatmap(lambda n: st.sampled_from(int_forms(n))),
    not_numbers,
    non_finite,
)
"""A number in any type, a number with no finite value, or something that is not a number."""

FLOAT_DTYPES = [np.float16, np.float32, np.float64, torch.float16, torch.bfloat16, torch.float32, torch.float64]


def in_dtype(values: list[float], dtype: Any) -> Any:
    """``values`` as a 1-D numpy array or torch tensor of ``dtype``."""
    if isinstance(dtype, torch.dtype):
        return torch.tensor(values, dtype=dtype)
    return np.array(values, dtype=dtype)


def as_stored(values: list[float], dtype: Any) -> list[float]:
    """What ``values`` are once held in ``dtype`` (float16 and bfloat16 round), as Python floats."""
    if isinstance(dtype, torch.dtype):
        return torch.tensor(values, dtype=dtype).double().tolist()
    return [float(v) for v in np.array(values, dtype=dtype)]


# ------------------------------------------------------------------------------------------------ paths

odd_names = st.one_of(
    st.sampled_from(["", " ", "\t", "  \n", "with space", "ünïcødé", "名前", "-dash", ".hidden", "a.b.json"]),
    st.text(alphabet=st.characters(codec="utf-8", exclude_characters="/\x00"), min_size=1, max_size=8),
)
"""One component of a path: blank ones, unicode, spaces, dots, anything a file system takes (no slash, no NUL)."""

PLACES = ("new", "new-nested", "relative", "existing-file", "existing-empty-folder", "existing-folder")
PLACES += ("symlink-to-folder", "symlink-to-file", "dangling-symlink", "under-a-file")
"""Where an output path points, relative to a sandbox: see :func:`make_place`."""


def make_place(root: Path, place: str, name: str) -> str:
    """Make the situation ``place`` for an output named ``name`` under ``root`` (a sandbox holding ``elsewhere/``,
    a folder the output may only reach through a symlink) and return the path text a user would give (a blank
    ``name`` is given as it is, in any place)."""
    if not name.strip():  # a blank path is given as it is: "" or "  ", never joined to a folder
        return name
    target = root / name
    if place == "new":
        return str(target)
    if place == "new-nested":
        return str(root / name / "sub" / name)
    if place == "relative":  # the test runs with root as the current folder
        return name
    if place == "existing-file":
        target.write_bytes(b"a user's file\n")
    elif place == "existing-empty-folder":
        target.mkdir()
    elif place == "existing-folder":
        target.mkdir()
        (target / "notes.txt").write_bytes(b"a user's notes\n")
    elif place == "symlink-to-folder":
        target.symlink_to(root / "elsewhere", target_is_directory=True)
    elif place == "symlink-to-file":
        target.symlink_to(root / "elsewhere" / "keep.txt")
    elif place == "dangling-symlink":
        target.symlink_to(root / "no-such-thing")
    elif place == "under-a-file":
        target.write_bytes(b"a user's file\n")
        return str(target / "out")
    return str(target)


def sandbox(root: Path) -> Path:
    """``root`` with ``elsewhere/keep.txt``: a folder that only a symlink leads to."""
    (root / "elsewhere").mkdir(parents=True)
    (root / "elsewhere" / "keep.txt").write_bytes(b"keep me\n")
    return root


def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under ``root`` (symlinks not followed): its kind, mode and bytes or link target."""
    out: dict[str, tuple] = {}
    for folder, dirs, names in os.walk(root):
        for name in dirs + names:
            path = Path(folder, name)
            st_ = os.lstat(path)
            key = str(path.relative_to(root))
            if stat.S_ISLNK(st_.st_mode):
                out[key] = ("link", os.readlink(path))
            elif stat.S_ISDIR(st_.st_mode):
                out[key] = ("dir", stat.S_IMODE(st_.st_mode))
            else:
                out[key] = ("file", stat.S_IMODE(st_.st_mode), path.read_bytes())
    return out


def changes(before: dict[str, tuple], after: dict[str, tuple]) -> set[str]:
    """Entries added, removed or changed between two snapshots."""
    return {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
