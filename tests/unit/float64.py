"""Float64 tensor helpers shared by the pure loss tests (learners/losses.py, learners/hindsight.py)."""

from __future__ import annotations

import pytest
import torch

TOL = dict(rtol=0.0, atol=1e-12)
REF_TOL = dict(rtol=0.0, atol=1e-10)


@pytest.fixture(autouse=True)
def float64():
    """Every tensor created in a test is float64; the global default is restored afterwards."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


def t(x, **kw) -> torch.Tensor:
    return torch.tensor(x, dtype=torch.float64, **kw)


def b(x) -> torch.Tensor:
    return torch.tensor(x, dtype=torch.bool)


def close(a, expected, tol=TOL) -> None:
    expected = torch.as_tensor(expected, dtype=torch.float64)
    torch.testing.assert_close(torch.as_tensor(a, dtype=torch.float64), expected, **tol)


def random_mask(g: torch.Generator, B: int, L_: int) -> torch.Tensor:
    """Right-padded mask with random lengths in [0, L]; row 0 always full, row 1 always empty."""
    lens = torch.randint(0, L_ + 1, (B,), generator=g)
    lens[0], lens[1] = L_, 0
    return torch.arange(L_)[None, :] < lens[:, None]
