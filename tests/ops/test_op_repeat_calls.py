"""An op remembers the calls it has validated: a repeat with the same shapes, dtypes, devices and
plain values skips the checks, anything else is checked in full, and packed-varlen calls, whose
offsets are values, are checked every time."""

from __future__ import annotations

import pytest
import torch

from tileops.linear_attention import GDNFwdOp
from tileops.linear_attention.op import SEEN_CALLS


def tokens(B=2, T=1, H=2, HV=4, K=8, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, T, H, K, generator=gen)
    k = torch.nn.functional.normalize(torch.randn(B, T, H, K, generator=gen), dim=-1)
    v = torch.randn(B, T, HV, K, generator=gen)
    g = -torch.rand(B, T, HV, generator=gen)
    beta = torch.rand(B, T, HV, generator=gen)
    return q, k, v, g, beta


def counting_op(**init) -> GDNFwdOp:
    """A reference GDNFwdOp whose ``described`` attribute counts its full validations."""
    op = GDNFwdOp(target="reference", **init)
    op.described = 0
    describe = op.describe

    def counted(*args, **kwargs):
        op.described += 1
        return describe(*args, **kwargs)

    op.describe = counted
    return op


def test_a_repeated_signature_is_validated_once_and_runs_with_the_same_description():
    op = counting_op()
    first = op(*tokens(seed=1))
    second = op(*tokens(seed=2))  # new values, same signature
    assert op.described == 1
    spec, _ = GDNFwdOp(target="reference").describe(*tokens(seed=2))
    assert list(op._seen.values()) == [spec]
    reference = GDNFwdOp(target="reference")(*tokens(seed=2))
    assert all(torch.equal(a, b) for a, b in zip(second, reference))
    assert not torch.equal(first[0], second[0])


def test_a_new_shape_dtype_or_optional_argument_is_validated_again():
    op = counting_op()
    op(*tokens())
    op(*tokens(B=3))
    op(*(t.double() for t in tokens()))
    q, k, v, g, beta = tokens()
    op(q, k, v, g, beta, torch.zeros(2, 4, 8, 8))
    assert op.described == 4


def test_bad_input_after_a_good_call_still_fails_with_its_message():
    op = counting_op()
    op(*tokens())
    q, k, v, g, beta = tokens()
    with pytest.raises(ValueError, match="k: dim K is 4, but q set K = 8"):
        op(q, k[..., :4], v, g, beta)
    with pytest.raises(TypeError, match="beta must be a torch.Tensor, got list"):
        op(q, k, v, g, [0.5])


def test_packed_varlen_offsets_are_checked_on_every_call():
    op = counting_op()
    q, k, v, g, beta = tokens(B=1, T=5)
    good = torch.tensor([0, 2, 5], dtype=torch.int32)
    op(q, k, v, g, beta, None, good, good.clone())
    bad = torch.tensor([0, 3, 2], dtype=torch.int32)
    with pytest.raises(ValueError, match="non-decreasing"):
        op(q, k, v, g, beta, None, good, bad)
    assert op.described == 2 and not op._seen


def test_the_memory_is_bounded():
    op = counting_op()
    for T in range(1, SEEN_CALLS + 3):
        op(*tokens(T=T))
    assert len(op._seen) <= SEEN_CALLS
