"""tileops.functional against FLA 0.6.0: the public call signatures (transcribed below from FLA's
fla/ops/<family>/{chunk,fused_recurrent}.py, so FLA need not be installed), the return convention,
agreement with the ops, gradients, and refusals of what tileops does not do."""

from __future__ import annotations

import inspect

import pytest
import torch

import tileops.functional as F
import tileops.linear_attention as la
from tests.support.op_inputs import cu_seqlens_of, gen, kda_raw_gate, single_thread, state, valid_call

# FLA 0.6.0's signatures, parameter by parameter: name=default, bare name for no default, **kwargs.
FLA_SIGNATURES = {
    "chunk_gated_delta_rule": "q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False, "
        "use_qk_l2norm_in_kernel=False, use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False, "
        "state_v_first=False, cu_seqlens=None, cu_seqlens_cpu=None, chunk_indices=None, cp_context=None, **kwargs",
    "fused_recurrent_gated_delta_rule": "q, k, v, g=None, gk=None, gv=None, beta=None, scale=None, "
        "initial_state=None, output_final_state=False, use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False, "
        "A_log=None, dt_bias=None, use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False, state_v_first=False, "
        "cu_seqlens=None, **kwargs",
    "chunk_kda": "q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False, "
        "use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False, use_beta_sigmoid_in_kernel=False, "
        "allow_neg_eigval=False, safe_gate=False, lower_bound=None, disable_recompute=False, "
        "return_intermediate_states=False, state_v_first=False, cu_seqlens=None, cu_seqlens_cpu=None, "
        "cp_context=None, use_graph=False, max_num_seqs=None, **kwargs",
    "fused_recurrent_kda": "q, k, v, g, beta, A_log=None, dt_bias=None, scale=None, initial_state=None, "
        "output_final_state=False, use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False, "
        "use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False, lower_bound=None, state_v_first=False, "
        "cu_seqlens=None, **kwargs",
    "chunk_gla": "q, k, v, g, scale=None, initial_state=None, output_final_state=False, state_v_first=False, "
        "cu_seqlens=None, cu_seqlens_cpu=None",
    "fused_recurrent_gla": "q, k, v, gk=None, gv=None, scale=None, initial_state=None, output_final_state=False, "
        "reverse=False, state_v_first=False, cu_seqlens=None, **kwargs",
    "chunk_delta_rule": "q, k, v, beta, scale=None, initial_state=None, output_final_state=False, "
        "use_qk_l2norm_in_kernel=False, cu_seqlens=None, cu_seqlens_cpu=None, **kwargs",
    "fused_recurrent_delta_rule": "q, k, v, beta=None, scale=None, initial_state=None, output_final_state=False, "
        "use_qk_l2norm_in_kernel=False, cu_seqlens=None",
}


def rendered(fn) -> str:
    """A signature in the transcription's form."""
    out = []
    for p in inspect.signature(fn).parameters.values():
        if p.kind is p.VAR_KEYWORD:
            out.append(f"**{p.name}")
        else:
            assert p.kind is p.POSITIONAL_OR_KEYWORD, p
            out.append(p.name if p.default is p.empty else f"{p.name}={p.default!r}")
    return ", ".join(out)


def test_exactly_the_fla_functions_are_exported():
    assert sorted(F.__all__) == sorted(FLA_SIGNATURES)


@pytest.mark.parametrize("name", sorted(FLA_SIGNATURES))
def test_signature_is_fla_s(name):
    assert rendered(getattr(F, name)) == FLA_SIGNATURES[name]


def tokens(name: str, seed: int, **sizes) -> dict:
    return valid_call(name, gen(seed), **{**dict(B=1, T=5, H=1, K=4, V=4), **sizes})[1]


@pytest.mark.parametrize("fn,op,name", [
    (F.chunk_gated_delta_rule, la.GDNFwdOp, "GDNFwdOp"), (F.fused_recurrent_gated_delta_rule, la.GDNFwdOp, "GDNFwdOp"),
    (F.chunk_kda, la.KDAFwdOp, "KDAFwdOp"), (F.fused_recurrent_kda, la.KDAFwdOp, "KDAFwdOp"),
    (F.chunk_gla, la.GLAFwdOp, "GLAFwdOp"), (F.chunk_delta_rule, la.DeltaNetFwdOp, "DeltaNetFwdOp"),
    (F.fused_recurrent_delta_rule, la.DeltaNetFwdOp, "DeltaNetFwdOp")])
def test_functions_equal_their_op_and_return_the_state_only_when_asked(fn, op, name):
    fwd = tokens(name, 1)
    h0 = fwd.pop("initial_state")
    o, final_state = op(scale=0.5)(**fwd, initial_state=h0)
    got, none = fn(**fwd, scale=0.5, initial_state=h0)
    assert none is None
    torch.testing.assert_close(got, o)
    got, got_state = fn(**fwd, scale=0.5, initial_state=h0, output_final_state=True)
    torch.testing.assert_close(got_state, final_state)


def test_fused_recurrent_gla_takes_the_gate_as_gk_and_equals_chunk_gla():
    fwd = tokens("GLAFwdOp", 2)
    h0, g = fwd.pop("initial_state"), fwd.pop("g")
    want = F.chunk_gla(**fwd, g=g, initial_state=h0, output_final_state=True)
    got = F.fused_recurrent_gla(**fwd, gk=g, initial_state=h0, output_final_state=True)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


def test_fused_recurrent_gated_delta_rule_per_key_gate_is_kda():
    fwd = tokens("KDAFwdOp", 3)
    g = fwd.pop("g")
    want = F.chunk_kda(**fwd, g=g, output_final_state=True)
    got = F.fused_recurrent_gated_delta_rule(**fwd, gk=g, output_final_state=True)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


def test_state_v_first_is_the_transposed_state():
    fwd = tokens("GLAFwdOp", 4)
    h0 = fwd.pop("initial_state")
    o, ht = F.chunk_gla(**fwd, initial_state=h0, output_final_state=True)
    o2, ht2 = F.chunk_gla(**fwd, initial_state=h0.mT.contiguous(), output_final_state=True, state_v_first=True)
    torch.testing.assert_close(o2, o)
    torch.testing.assert_close(ht2, ht.mT)


def test_packed_varlen_and_gradients_through_chunk_kda_with_the_gate_in_kernel():
    g = gen(5)
    fwd = tokens("KDAFwdOp", 5, K=2, V=2)
    fwd["g"], A_log, dt_bias = kda_raw_gate(g, 1, 5, 1, 2)
    fwd["initial_state"] = state(g, 2, 1, 2, 2)
    cu = cu_seqlens_of([2, 3])
    names = list(fwd) + ["A_log", "dt_bias"]

    def f(*xs):
        args = dict(zip(names, xs))
        return F.chunk_kda(**{n: args[n] for n in fwd}, A_log=args["A_log"], dt_bias=args["dt_bias"],
                           use_gate_in_kernel=True, use_qk_l2norm_in_kernel=True, output_final_state=True,
                           cu_seqlens=cu, cu_seqlens_cpu=cu)

    leaves = [x.clone().requires_grad_() for x in (*fwd.values(), A_log, dt_bias)]
    with single_thread():
        assert torch.autograd.gradcheck(f, leaves, eps=1e-6, atol=1e-5)


def test_gradients_through_chunk_gated_delta_rule_reach_every_input():
    fwd = tokens("GDNFwdOp", 6)
    leaves = {n: x.clone().requires_grad_() for n, x in fwd.items()}
    o, ht = F.chunk_gated_delta_rule(**leaves, output_final_state=True)
    (o.sum() + ht.sum()).backward()
    assert all(x.grad is not None and x.grad.abs().sum() > 0 for x in leaves.values())


def test_what_tileops_does_not_do_is_refused_by_name():
    fwd = tokens("GLAFwdOp", 7)
    fwd.pop("initial_state")
    g = fwd.pop("g")
    with pytest.raises(NotImplementedError, match="fused_recurrent_gla: gv"):
        F.fused_recurrent_gla(**fwd, gk=g, gv=torch.zeros_like(fwd["v"]))
    with pytest.raises(NotImplementedError, match="reverse"):
        F.fused_recurrent_gla(**fwd, gk=g, reverse=True)
    gdn = tokens("GDNFwdOp", 8)
    with pytest.raises(TypeError, match="head_first"):
        F.chunk_gated_delta_rule(**gdn, head_first=False)
    with pytest.raises(ValueError, match="chunk_size"):
        F.chunk_gated_delta_rule(**gdn, chunk_size=128)


def test_a_training_chunk_gla_call_takes_the_backward_op(monkeypatch):
    """Inputs that require grad, whole 64-token chunks and no initial state: chunk_gla runs
    GLAChunkFwdOp, whose gradient is GLAChunkBwdOp's (the kernels on a GPU), equal to the
    gradient through GLAFwdOp; otherwise GLAFwdOp serves it as before."""
    calls = []
    forward = la.GLAChunkBwdOp.forward

    def counted(self, *args):
        calls.append(len(args))
        return forward(self, *args)

    monkeypatch.setattr(la.GLAChunkBwdOp, "forward", counted)
    fwd = tokens("GLAFwdOp", 6, T=128, K=8, V=4)
    fwd.pop("initial_state")
    names = list(fwd)
    leaves = [x.clone().requires_grad_() for x in fwd.values()]
    o, ht = F.chunk_gla(*leaves, scale=0.5, output_final_state=True, state_v_first=True)
    (o.square().sum() + ht.sin().sum()).backward()
    assert calls == [7]
    want = [x.clone().requires_grad_() for x in fwd.values()]
    o2, ht2 = la.GLAFwdOp(scale=0.5)(*want)
    (o2.square().sum() + ht2.mT.sin().sum()).backward()
    torch.testing.assert_close(o, o2)
    for name, got, expected in zip(names, leaves, want):
        torch.testing.assert_close(got.grad, expected.grad, msg=name)
    F.chunk_gla(*(x[:, :100] for x in leaves), scale=0.5)  # not whole chunks: GLAFwdOp
    with torch.no_grad():
        F.chunk_gla(*leaves, scale=0.5)
    assert calls == [7]
    with pytest.raises(ValueError, match="scale"):
        F.chunk_gla(*leaves, scale=-0.5)  # refused as GLAFwdOp refuses it, not taken for the default
