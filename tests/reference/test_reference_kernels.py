"""The reference target's kernels: registration, refusals, configs and what each launcher computes."""

import inspect
import itertools

import pytest
import torch

import tileops.linear_attention as ops
from tileops.callspec import CallSpec, make_flags
from tileops.kernels.registry import get_kernel
from tileops.reference import (chunk_gla, deltanet_chunk_backward, deltanet_chunk_forward, gdn_gate,
                               gla_chunk_backward, kda_gate, l2norm, recurrent_delta_rule)
from tileops.targets import REFERENCE, kernel_names
from tileops.tuner.gate import relative_error as rel

FAMILY = {"DeltaNet": "deltanet", "GDN": "gdn", "KDA": "kda", "GLA": "gla"}
INFERENCE = {"DeltaNetFwdOp": None, "GDNFwdOp": "scalar", "KDAFwdOp": "channel", "GLAFwdOp": "channel"}
ENTRIES = sorted(name for name in ops.__all__ if name.endswith("Op"))


def family_of(entry):
    return next(f for prefix, f in FAMILY.items() if entry.startswith(prefix))


def spec_for(entry, mode, dtype=torch.float64, **flags):
    return CallSpec(op=family_of(entry), entry=entry, mode=mode, dtype=dtype, device=torch.device("cpu"),
                    arch="cpu", device_name="cpu", batch=1, tokens=1, heads=1, value_heads=1, dim_k=1, dim_v=1,
                    flags=make_flags(**flags))


def configs(kernel):
    choices = kernel.config_model.choices()
    for values in itertools.product(*choices.values()):
        yield kernel.validate_config(dict(zip(choices, values)))


@pytest.mark.parametrize("entry", ENTRIES)
def test_kernels_are_registered_with_the_op_signature(entry):
    forward_args = list(inspect.signature(getattr(ops, entry).forward).parameters)[1:]
    mode = "decode" if entry in INFERENCE else "step"
    for name in kernel_names(REFERENCE, entry):
        kernel = get_kernel(name)
        assert kernel.family == family_of(entry) and kernel.archs == frozenset({"cpu"})
        assert len(kernel.source_hash) == 16
        config = kernel.default(spec_for(entry, mode))
        assert isinstance(config, kernel.config_model)
        launcher = kernel.build(config, spec_for(entry, mode, chunk_size=16, scale=0.5))
        assert list(inspect.signature(launcher).parameters) == forward_args


@pytest.mark.parametrize("entry", sorted(INFERENCE))
def test_inference_chunk_kernels_have_a_search_space(entry):
    recurrent, chunked = kernel_names(REFERENCE, entry)
    assert get_kernel(recurrent).config_model.choices() == {}
    choices = get_kernel(chunked).config_model.choices()
    assert choices["chunk_size"] == (16, 32, 64, 128) and len(list(configs(get_kernel(chunked)))) >= 8


@pytest.mark.parametrize("entry", sorted(INFERENCE))
def test_recurrent_kernels_serve_decode_only(entry):
    recurrent, chunked = (get_kernel(n) for n in kernel_names(REFERENCE, entry))
    for mode in ("prefill", "varlen"):
        assert "decode" in recurrent.refuse(spec_for(entry, mode))
        assert chunked.refuse(spec_for(entry, mode)) is None
    assert recurrent.refuse(spec_for(entry, "decode")) is None
    other = "KDAFwdOp" if entry != "KDAFwdOp" else "GDNFwdOp"
    assert "serves" in chunked.refuse(spec_for(other, "prefill"))


def inference_call(make_inputs, rng, entry, length, *, varlen, value_heads=2, **flags):
    """(args of the op's forward, args for recurrent_delta_rule after the transforms)."""
    gate = INFERENCE[entry]
    x = make_inputs(1 if varlen else 2, length, 1, 8, 4, gate=gate, value_heads=value_heads,
                    delta=entry != "GLAFwdOp")
    n = 3 if varlen else 2
    state = torch.randn(n, value_heads, 8, 4, generator=rng, dtype=torch.float64)
    cu = torch.tensor([0, 1, length // 2, length]) if varlen else None
    q, k, beta, g = x["q"], x["k"], x["beta"], x["g"]
    A_log = dt_bias = None
    if flags.get("use_gate_in_kernel"):
        A_log = torch.randn(value_heads, generator=rng, dtype=torch.float64)
        dt_bias = torch.randn(value_heads * (8 if gate == "channel" else 1), generator=rng, dtype=torch.float64)
        g = torch.randn(g.shape, generator=rng, dtype=torch.float64)
    if flags.get("use_qk_l2norm_in_kernel"):
        q, k = 3 * q, 2 * k
    if flags.get("use_beta_sigmoid_in_kernel"):
        beta = torch.randn(beta.shape, generator=rng, dtype=torch.float64)
    given_state = state.mT.contiguous() if flags.get("state_v_first") else state
    args = {"DeltaNetFwdOp": (q, k, x["v"], beta, given_state, None, cu),
            "GLAFwdOp": (q, k, x["v"], g, given_state, None, cu)}.get(
        entry, (q, k, x["v"], g, beta, given_state, None, cu, A_log, dt_bias))

    if flags.get("use_qk_l2norm_in_kernel"):
        q, k = l2norm(q), l2norm(k)
    if flags.get("use_beta_sigmoid_in_kernel"):
        beta = (2 if flags.get("allow_neg_eigval") else 1) * torch.sigmoid(beta)
    if flags.get("use_gate_in_kernel"):
        g = gdn_gate(g, A_log, dt_bias) if gate == "scalar" else kda_gate(g, A_log, dt_bias, flags.get("lower_bound"))
    return args, dict(q=q, k=k, v=x["v"], beta=beta, g=g, initial_state=state, cu_seqlens=cu)


ALL_TRANSFORMS = dict(use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True, allow_neg_eigval=True,
                      state_v_first=True, use_gate_in_kernel=True)
CASES = [
    ("DeltaNetFwdOp", {}), ("DeltaNetFwdOp", {"use_qk_l2norm_in_kernel": True}),
    ("GDNFwdOp", {}), ("GDNFwdOp", ALL_TRANSFORMS),
    ("KDAFwdOp", {}), ("KDAFwdOp", ALL_TRANSFORMS), ("KDAFwdOp", dict(ALL_TRANSFORMS, lower_bound=-4.0)),
    ("GLAFwdOp", {}),
]


def run_inference(kernel, entry, mode, args, config=None, **flags):
    spec = spec_for(entry, mode, scale=0.3, **flags)
    return kernel.build(config or kernel.default(spec), spec)(*args)


@pytest.mark.parametrize("entry, flags", CASES)
@pytest.mark.parametrize("varlen", [False, True])
def test_inference_launchers(make_inputs, rng, entry, flags, varlen):
    value_heads = 1 if entry in ("DeltaNetFwdOp", "GLAFwdOp") else 2
    args, ref = inference_call(make_inputs, rng, entry, 21, varlen=varlen, value_heads=value_heads, **flags)
    o_ref, final_ref = recurrent_delta_rule(scale=0.3, **ref)
    kernel = get_kernel(kernel_names(REFERENCE, entry)[1])
    o, final = run_inference(kernel, entry, "varlen" if varlen else "prefill", args, **flags)
    assert rel(o, o_ref) < 1e-10 and rel(final, final_ref.mT if flags.get("state_v_first") else final_ref) < 1e-10


@pytest.mark.parametrize("entry", sorted(INFERENCE))
def test_every_config_gives_the_same_result(make_inputs, rng, entry):
    args, ref = inference_call(make_inputs, rng, entry, 9, varlen=False)
    o_ref, final_ref = recurrent_delta_rule(scale=0.3, **ref)
    kernel = get_kernel(kernel_names(REFERENCE, entry)[1])
    for config in configs(kernel):
        o, final = run_inference(kernel, entry, "prefill", args, config)
        assert rel(o, o_ref) < 1e-10 and rel(final, final_ref) < 1e-10, config


@pytest.mark.parametrize("entry, flags", CASES)
def test_decode_launchers(make_inputs, rng, entry, flags):
    value_heads = 1 if entry in ("DeltaNetFwdOp", "GLAFwdOp") else 2
    args, ref = inference_call(make_inputs, rng, entry, 1, varlen=False, value_heads=value_heads, **flags)
    o, final = run_inference(get_kernel(kernel_names(REFERENCE, entry)[0]), entry, "decode", args, **flags)
    o_ref, final_ref = recurrent_delta_rule(scale=0.3, **ref)
    assert rel(o, o_ref) < 1e-12 and rel(final, final_ref.mT if flags.get("state_v_first") else final_ref) < 1e-12


def test_inference_output_dtypes(make_inputs, rng):
    x = make_inputs(2, 5, 1, 8, 4, gate="scalar", dtype=torch.bfloat16)
    spec = spec_for("GDNFwdOp", "prefill", dtype=torch.bfloat16, scale=0.3, use_qk_l2norm_in_kernel=True)
    kernel = get_kernel("reference.gdn_chunk")
    o, final = kernel.build(kernel.default(spec), spec)(x["q"], x["k"], x["v"], x["g"], x["beta"])
    assert o.dtype == torch.bfloat16 and final.dtype == torch.float32


def build(name, entry, mode, **flags):
    spec = spec_for(entry, mode, **flags)
    kernel = get_kernel(name)
    return kernel.build(kernel.default(spec), spec)


def test_deltanet_chunk_op_launchers(make_inputs, rng):
    x = make_inputs(2, 37, 2, 8, 4)
    q, k, v, beta = (x[n].transpose(1, 2) for n in ("q", "k", "v", "beta"))
    outs = build("reference.deltanet_chunk_fwd", "DeltaNetChunkFwdOp", "chunk_fwd", chunk_size=16)(q, k, v, beta)
    for got, want in zip(outs, deltanet_chunk_forward(q, k, v, beta, chunk_size=16)):
        assert torch.equal(got, want)
    do = torch.randn(2, 2, 37, 4, generator=rng, dtype=torch.float64)
    grads = build("reference.deltanet_chunk_bwd", "DeltaNetChunkBwdOp", "chunk_bwd", chunk_size=16)(do, q, k, v, beta,
                                                                                                    *outs[1:])
    for got, want in zip(grads, deltanet_chunk_backward(do, q, k, v, beta, outs[1], chunk_size=16)):
        assert torch.equal(got, want)


def test_gla_chunk_op_launchers(make_inputs, rng):
    x = make_inputs(2, 37, 2, 8, 4, gate="channel", delta=False)
    q, k, v, g = x["q"], x["k"], x["v"], x["g"]
    state = torch.randn(2, 2, 8, 4, generator=rng, dtype=torch.float64)
    outs = build("reference.gla_chunk_fwd", "GLAChunkFwdOp", "chunk_fwd", chunk_size=16, scale=0.3)(q, k, v, g, state)
    assert len(outs) == 3
    for got, want in zip(outs, chunk_gla(q, k, v, g, scale=0.3, initial_state=state, chunk_size=16)):
        assert torch.equal(got, want)
    do = torch.randn(2, 37, 2, 4, generator=rng, dtype=torch.float64)
    dht = torch.randn(2, 2, 8, 4, generator=rng, dtype=torch.float64)
    grads = build("reference.gla_chunk_bwd", "GLAChunkBwdOp", "chunk_bwd", chunk_size=16, scale=0.3,
                  has_initial_state=True)(q, k, v, g, outs[2], do, dht)
    expected = gla_chunk_backward(q, k, v, g, outs[2], do, dht, scale=0.3, chunk_size=16, has_initial_state=True)
    for got, want in zip(grads, expected):
        assert torch.equal(got, want)


@pytest.mark.parametrize("state_dtype", [torch.float32, torch.bfloat16])
def test_step_launchers(make_inputs, rng, state_dtype):
    x = make_inputs(2, 1, 2, 8, 4, gate="channel", dtype=torch.bfloat16)
    q, k, v, beta, g = (x[n][:, 0] for n in ("q", "k", "v", "beta", "g"))
    state = torch.randn(2, 2, 8, 4, generator=rng).to(state_dtype)
    o, new = build("reference.deltanet_recurrent", "DeltaNetRecurrentFwdOp", "step")(q, k, v, beta, state)
    o_ref, new_ref = recurrent_delta_rule(x["q"], x["k"], x["v"], x["beta"], scale=1.0, initial_state=state)
    assert o.dtype == torch.bfloat16 and new.dtype == state_dtype
    assert torch.equal(o, o_ref[:, 0]) and torch.equal(new, new_ref.to(state_dtype))
    o, new = build("reference.gla_recurrent", "GLARecurrentFwdOp", "step", scale=0.3)(q, k, v, g, state)
    o_ref, new_ref = recurrent_delta_rule(x["q"], x["k"], x["v"], None, x["g"], scale=0.3, initial_state=state)
    assert torch.equal(o, o_ref[:, 0]) and torch.equal(new, new_ref.to(state_dtype))
