"""Shared fixtures: a per-test random generator and random inputs of the linear-attention recurrences."""

import zlib

import pytest
import torch
import torch.nn.functional as F

# The tuning-database fixtures (SQLite, PostgreSQL and MariaDB URLs, a tiny test kernel).
pytest_plugins = ("tests.support.db",)


@pytest.fixture
def rng(request):
    """A generator seeded from the test's id: fresh inputs per test, reproducible failures."""
    return torch.Generator().manual_seed(zlib.crc32(request.node.nodeid.encode()))


@pytest.fixture
def make_inputs(rng):
    """make(B, T, H, K, V, gate=None|"scalar"|"channel", value_heads=H, delta=True, dtype=float64)
    -> dict(q, k, v, beta, g) in BTHD: keys L2-normalised, betas in (0, 1), log decays negative."""
    def make(B, T, H, K, V, *, gate=None, value_heads=None, delta=True, dtype=torch.float64):
        HV = value_heads or H

        def randn(*shape):
            return torch.randn(*shape, generator=rng, dtype=torch.float64)

        k = randn(B, T, H, K)
        gates = {None: None, "scalar": (B, T, HV), "channel": (B, T, HV, K)}
        raw = {"q": randn(B, T, H, K), "k": k / k.norm(dim=-1, keepdim=True), "v": randn(B, T, HV, V),
               "beta": torch.sigmoid(randn(B, T, HV)) if delta else None,
               "g": None if gate is None else F.logsigmoid(randn(*gates[gate]))}
        return {name: None if x is None else x.to(dtype) for name, x in raw.items()}
    return make
