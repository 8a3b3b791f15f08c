"""Edges of the op calls: full resets (log decay −inf) give the recurrence's exact result, empty heads
or widths and absurd chunk sizes get named errors, mixed dtypes and disagreeing offsets are said as
they are."""

from __future__ import annotations

import pytest
import torch

import tileops.linear_attention as la
from tests.support.op_inputs import OP_NAMES, cu_seqlens_of, gen, valid_call
from tileops.reference.delta_rule.naive import recurrent_delta_rule

RESETS = [0, 6, 7, 19]


@pytest.mark.parametrize("name, varlen", [(name, varlen) for name in ("GDNFwdOp", "KDAFwdOp", "GLAFwdOp")
                                           for varlen in (False, True)] + [("GLAChunkFwdOp", False)])
def test_a_full_reset_is_exact_in_every_gated_op(name, varlen):
    ctor, fwd = valid_call(name, gen(3), B=2, T=24, K=8, V=8, chunk_size=8)
    fwd["g"][:, RESETS] = float("-inf")
    fwd.pop("initial_state", None)
    if varlen:
        fwd = {n: x[:1] for n, x in fwd.items()}
        fwd["cu_seqlens"] = cu_seqlens_of([5, 11, 8])
    o = getattr(la, name)(**ctor)(**fwd)[0]
    beta = fwd.get("beta")
    scale = fwd["q"].shape[-1] ** -0.5
    expected, _ = recurrent_delta_rule(fwd["q"], fwd["k"], fwd["v"], beta, fwd["g"], scale=scale,
                                       cu_seqlens=fwd.get("cu_seqlens"))
    assert torch.isfinite(o).all()
    torch.testing.assert_close(o, expected, rtol=1e-9, atol=1e-9)


def test_kda_lower_bound_must_be_finite_and_negative():
    for bad in (float("-inf"), float("nan"), 0.0, 1.0, True, "x"):
        with pytest.raises(ValueError, match="lower_bound must be a finite negative number"):
            la.KDAFwdOp(use_gate_in_kernel=True, lower_bound=bad)
    assert la.KDAFwdOp(use_gate_in_kernel=True, lower_bound=-5).lower_bound == -5.0


@pytest.mark.parametrize("name", OP_NAMES)
@pytest.mark.parametrize("dim", ["H", "K", "V"])
def test_empty_heads_or_widths_are_named_errors(name, dim):
    ctor, fwd = valid_call(name, gen(0), **{dim: 0})
    with pytest.raises(ValueError, match=r"has (H|HV|K|V|DK|DV) = 0 .*heads and widths must be at least 1"):
        getattr(la, name)(**ctor)(**fwd)


@pytest.mark.parametrize("name", ["DeltaNetChunkFwdOp", "DeltaNetChunkBwdOp", "GLAChunkFwdOp", "GLAChunkBwdOp"])
def test_absurd_chunk_sizes_are_refused_at_construction(name):
    for bad in (0, -1, 10**9, 1025, 2.0):
        with pytest.raises(ValueError, match="chunk_size must be a positive int of at most 1024"):
            getattr(la, name)(chunk_size=bad)
    getattr(la, name)(chunk_size=1024)


def test_mixed_dtypes_are_reported_as_a_mismatch():
    _, fwd = valid_call("GDNFwdOp", gen(0))
    fwd["q"], fwd["k"] = fwd["q"].half(), fwd["k"].float()
    with pytest.raises(TypeError, match=r"k is float32 but q is float16; they must share one dtype"):
        la.GDNFwdOp()(**fwd)


def test_disagreeing_offsets_on_the_cpu_are_a_named_error():
    _, fwd = valid_call("GDNFwdOp", gen(0), B=1, T=12)
    fwd.pop("initial_state")
    fwd["cu_seqlens"], fwd["cu_seqlens_cpu"] = cu_seqlens_of([4, 8]), cu_seqlens_of([6, 6])
    with pytest.raises(ValueError, match=r"cu_seqlens and cu_seqlens_cpu disagree: cu_seqlens\[1\] = 4, "
                                         r"cu_seqlens_cpu\[1\] = 6"):
        la.GDNFwdOp()(**fwd)
    fwd["cu_seqlens_cpu"] = cu_seqlens_of([4, 8])
    la.GDNFwdOp()(**fwd)
