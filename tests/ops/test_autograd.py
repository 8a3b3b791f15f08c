"""Autograd through the ops: float64 gradcheck of every forward op on the CPU (equal length, packed
varlen, decode, with an initial state and its gradient, the input transforms), gradients for a
target that returns detached tensors, and a clear error for backpropagating through a backward op."""

from __future__ import annotations

import pytest
import torch

import tileops.linear_attention as la
from tests.support.op_inputs import (cu_seqlens_of, gdn_raw_gate, gen, kda_raw_gate, single_thread, state,
                                     valid_call)

FORWARD_OPS = ("DeltaNetChunkFwdOp", "DeltaNetRecurrentFwdOp", "DeltaNetFwdOp", "GDNFwdOp", "KDAFwdOp",
               "GLAChunkFwdOp", "GLARecurrentFwdOp", "GLAFwdOp")
TINY = dict(B=1, T=3, H=1, K=2, V=2, chunk_size=2)


def gradcheck(op, fwd: dict) -> None:
    """gradcheck of ``op(**fwd)`` in every floating-point tensor of ``fwd`` at once."""
    names = [n for n, x in fwd.items() if isinstance(x, torch.Tensor) and x.is_floating_point()]
    assert names, "nothing to differentiate"

    def f(*xs):
        return tuple(op(**{**fwd, **dict(zip(names, xs))}))

    leaves = [fwd[n].detach().clone().requires_grad_() for n in names]
    with single_thread():
        assert torch.autograd.gradcheck(f, leaves, eps=1e-6, atol=1e-5)


@pytest.mark.parametrize("name", FORWARD_OPS)
def test_gradcheck_every_forward_op(name):
    init, fwd = valid_call(name, gen(11), **TINY)
    gradcheck(getattr(la, name)(**init), fwd)


@pytest.mark.parametrize("name", ["DeltaNetFwdOp", "GDNFwdOp", "KDAFwdOp", "GLAFwdOp"])
def test_gradcheck_packed_varlen_with_initial_state(name):
    g = gen(12)
    _, fwd = valid_call(name, g, B=1, T=5, H=1, K=2, V=2)
    cu = cu_seqlens_of([2, 3])
    fwd.update(initial_state=state(g, 2, 1, 2, 2), cu_seqlens=cu, cu_seqlens_cpu=cu)
    gradcheck(getattr(la, name)(), fwd)


@pytest.mark.parametrize("name", ["DeltaNetFwdOp", "GDNFwdOp", "KDAFwdOp", "GLAFwdOp"])
def test_gradcheck_decode_step(name):
    _, fwd = valid_call(name, gen(13), B=2, T=1, H=1, K=2, V=2)
    gradcheck(getattr(la, name)(), fwd)


def test_gradcheck_gdn_input_transforms_and_value_major_state():
    g = gen(14)
    _, fwd = valid_call("GDNFwdOp", g, B=1, T=3, H=1, K=2, V=2)
    fwd["g"], fwd["A_log"], fwd["dt_bias"] = gdn_raw_gate(g, 1, 3, 1)
    fwd["initial_state"] = fwd["initial_state"].mT.contiguous()
    op = la.GDNFwdOp(scale=0.7, use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True,
                     allow_neg_eigval=True, state_v_first=True, use_gate_in_kernel=True)
    gradcheck(op, fwd)


def test_gradcheck_kda_raw_gate_with_lower_bound():
    g = gen(15)
    _, fwd = valid_call("KDAFwdOp", g, B=1, T=3, H=1, K=2, V=2)
    fwd["g"], fwd["A_log"], fwd["dt_bias"] = kda_raw_gate(g, 1, 3, 1, 2)
    gradcheck(la.KDAFwdOp(use_gate_in_kernel=True, lower_bound=-3.0), fwd)


def test_gradcheck_grouped_value_heads():
    g = gen(16)
    q, k = (torch.nn.functional.normalize(torch.randn(1, 3, 1, 2, generator=g, dtype=torch.float64), dim=-1)
            for _ in range(2))
    fwd = dict(q=q, k=k, v=torch.randn(1, 3, 2, 2, generator=g, dtype=torch.float64),
               g=-torch.rand(1, 3, 2, generator=g, dtype=torch.float64) * 0.5,
               beta=torch.rand(1, 3, 2, generator=g, dtype=torch.float64), initial_state=state(g, 1, 2, 2, 2))
    gradcheck(la.GDNFwdOp(), fwd)


def test_gradients_reach_every_input_and_match_the_reference_recurrence():
    """The op's gradients equal those of autograd through the reference recurrence itself."""
    from tileops.reference import recurrent_delta_rule

    _, fwd = valid_call("GDNFwdOp", gen(17), B=1, T=4, H=1, K=3, V=2)
    leaves = {n: x.clone().requires_grad_() for n, x in fwd.items()}
    o, s = la.GDNFwdOp()(**leaves)
    (o.square().sum() + s.sum()).backward()
    expect = {n: x.clone().requires_grad_() for n, x in fwd.items()}
    o2, s2 = recurrent_delta_rule(expect["q"], expect["k"], expect["v"], expect["beta"], expect["g"],
                                  scale=3 ** -0.5, initial_state=expect["initial_state"])
    (o2.square().sum() + s2.sum()).backward()
    for n in fwd:
        assert leaves[n].grad is not None and leaves[n].grad.abs().sum() > 0, n
        torch.testing.assert_close(leaves[n].grad, expect[n].grad)


def test_target_returning_detached_tensors_still_gives_gradients():
    """A kernel without a backward (here a registered target computing under no_grad, as a GPU
    kernel does) never detaches: the gradient comes from the reference."""
    _, fwd = valid_call("GLAFwdOp", gen(18), B=1, T=3, H=1, K=2, V=2)
    reference = la.GLAFwdOp(target="reference")

    def detached(*args):
        with torch.no_grad():
            return tuple(x.detach() for x in reference(*args))

    la.register_target("detached", la.GLAFwdOp, detached)
    try:
        op = la.GLAFwdOp(target="detached")
        leaves = {n: x.clone().requires_grad_() for n, x in fwd.items()}
        o, s = op(**leaves)
        assert o.grad_fn is not None and s.grad_fn is not None
        o.sum().backward()
        want = {n: x.clone().requires_grad_() for n, x in fwd.items()}
        reference(**want)[0].sum().backward()
        for n in fwd:
            torch.testing.assert_close(leaves[n].grad, want[n].grad)
    finally:
        la.unregister_target("detached", la.GLAFwdOp)


def test_no_grad_calls_return_plain_tensors():
    _, fwd = valid_call("GDNFwdOp", gen(19), **TINY)
    leaves = {n: x.clone().requires_grad_() for n, x in fwd.items()}
    with torch.no_grad():
        o, s = la.GDNFwdOp()(**leaves)
    assert o.grad_fn is None and s.grad_fn is None


@pytest.mark.parametrize("name", ["DeltaNetChunkBwdOp", "GLAChunkBwdOp"])
def test_backward_ops_refuse_to_be_differentiated(name):
    init, fwd = valid_call(name, gen(20), **TINY)
    leaves = {n: x.clone().requires_grad_() for n, x in fwd.items()}
    grads = getattr(la, name)(**init)(**leaves)
    with pytest.raises(RuntimeError, match=f"{name} has no backward"):
        grads[0].sum().backward()


def test_the_chunked_forward_takes_its_gradient_from_the_backward_op():
    """Trained through o alone, DeltaNetChunkFwdOp's gradient is DeltaNetChunkBwdOp's (the kernel on a
    GPU), and equals autograd through the recurrence; when a saved tensor carries a gradient too,
    the reference gives all of them."""
    from tileops.reference import recurrent_delta_rule

    calls = []
    forward, backward = la.DeltaNetChunkFwdOp(2, target="reference"), la.DeltaNetChunkBwdOp(2, target="reference")

    def spy(*args):
        calls.append(len(args))
        return backward(*args)

    la.register_target("spy", la.DeltaNetChunkFwdOp, forward)
    la.register_target("spy", la.DeltaNetChunkBwdOp, spy)
    try:
        _, fwd = valid_call("DeltaNetChunkFwdOp", gen(21), B=1, T=5, H=2, K=3, V=2, chunk_size=2)
        op = la.DeltaNetChunkFwdOp(2, target="spy")
        for through_states in (False, True):
            leaves = {n: x.clone().requires_grad_() for n, x in fwd.items()}
            o, S, *_ = op(**leaves)
            (o.square().sum() + (S.sum() if through_states else 0)).backward()
            want = {n: x.clone().requires_grad_() for n, x in fwd.items()}
            o2, _ = recurrent_delta_rule(*(want[n].transpose(1, 2) for n in ("q", "k", "v", "beta")), scale=1.0)
            loss = o2.transpose(1, 2).square().sum()
            if through_states:
                loss = loss + la.DeltaNetChunkFwdOp(2, target="reference")(**want)[1].sum()
            loss.backward()
            assert calls == [10], through_states  # the backward op ran once, for the first loss only
            for n in fwd:
                torch.testing.assert_close(leaves[n].grad, want[n].grad)
    finally:
        la.unregister_target("spy", la.DeltaNetChunkFwdOp)
        la.unregister_target("spy", la.DeltaNetChunkBwdOp)


def test_glas_chunked_forward_takes_its_gradient_from_the_backward_op():
    """Trained through o and the final state, GLAChunkFwdOp's gradient is GLAChunkBwdOp's (the
    kernel on a GPU) and equals autograd through the recurrence; with an initial state (whose
    gradient the backward op does not give) the reference gives all of them."""
    from tileops.reference.gla.naive import recurrent_gla

    calls = []
    forward, backward = la.GLAChunkFwdOp(2, target="reference"), la.GLAChunkBwdOp(2, target="reference")

    def spy(*args):
        calls.append(len(args))
        return backward(*args)

    la.register_target("spy", la.GLAChunkFwdOp, lambda *args: (lambda out: (*out, out.h))(forward(*args)))
    la.register_target("spy", la.GLAChunkBwdOp, spy)
    try:
        _, fwd = valid_call("GLAChunkFwdOp", gen(22), B=1, T=6, H=2, K=3, V=2, chunk_size=2)
        op = la.GLAChunkFwdOp(2, target="spy")
        for with_state in (False, True):
            initial = 0.1 * torch.randn(1, 2, 3, 2, dtype=torch.float64, generator=gen(23)) if with_state else None
            inputs = dict(fwd, initial_state=initial)
            leaves = {n: x.clone().requires_grad_() if x is not None else None for n, x in inputs.items()}
            o, final = op(**leaves)
            (o.square().sum() + final.sin().sum()).backward()
            want = {n: x.clone().requires_grad_() if x is not None else None for n, x in inputs.items()}
            o2, final2 = recurrent_gla(want["q"], want["k"], want["v"], want["g"], scale=3 ** -0.5,
                                       initial_state=want["initial_state"])
            (o2.square().sum() + final2.sin().sum()).backward()
            assert calls == [7], with_state  # the backward op ran once, without the initial state only
            for n, x in leaves.items():
                if x is not None:
                    torch.testing.assert_close(x.grad, want[n].grad)
    finally:
        la.unregister_target("spy", la.GLAChunkFwdOp)
        la.unregister_target("spy", la.GLAChunkBwdOp)
