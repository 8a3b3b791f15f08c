"""Every argument check of the ops: the exception type, and a message that names the argument and
says what was expected and what was received. Bad input never reaches a kernel."""

from __future__ import annotations

import pytest
import torch

import tileops.linear_attention as la
from tileops.dispatch import router

from tests.support.op_inputs import (F64, OP_NAMES, cu_seqlens_of, delta_rule_tokens, gen, log_decay, randn, single_thread, state, uniform, valid_call)


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    with single_thread():
        yield


def raises(exc: type, fn, *needles: str) -> str:
    """Call ``fn``; assert it raises ``exc`` whose message contains every needle. Returns the message."""
    with pytest.raises(exc) as info:
        fn()
    message = str(info.value)
    for needle in needles:
        assert needle in message, f"{needle!r} not in {message!r}"
    return message


def call(name: str, init: dict, args: dict, **changes):
    """A thunk calling op ``name`` with ``args`` updated by ``changes``."""
    cls = getattr(la, name)
    return lambda: cls(**init)(**{**args, **changes})


def gdn_args(seed: int = 0, *, B: int = 2, T: int = 6, H: int = 2, HV: int = 2, K: int = 8, V: int = 16,
             dtype=F64) -> dict:
    g = gen(seed)
    q, k, v = delta_rule_tokens(g, B, T, H, HV, K, V, dtype)
    return dict(q=q, k=k, v=v, g=log_decay(g, B, T, HV, dtype=dtype),
                beta=uniform(g, B, T, HV, lo=0.1, hi=0.9, dtype=dtype))


def packed_args(lengths=(3, 1, 4), *, seed: int = 1) -> dict:
    args = gdn_args(seed, B=1, T=sum(lengths))
    args["cu_seqlens"] = cu_seqlens_of(lengths)
    return args


def gdn(**init):
    return la.GDNFwdOp(**init)


# ---------------------------------------------------------------- generic checks, every op


@pytest.mark.parametrize("name", OP_NAMES)
def test_valid_call_passes_validation(name):
    init, args = valid_call(name, gen(3))
    spec, call_args = getattr(la, name)(**init).describe(**args)
    assert spec.entry == name
    assert all(a is b for a, b in zip(call_args, args.values()))


@pytest.mark.parametrize("name", OP_NAMES)
def test_wrong_rank(name):
    init, args = valid_call(name, gen(4))
    q = args["q"]
    message = raises(ValueError, call(name, init, args, q=q[0]), "q", f"{q.dim()}-D", f"{q.dim() - 1}-D",
                     str(list(q[0].shape)))
    assert "[B, " in message


@pytest.mark.parametrize("name", OP_NAMES)
def test_non_tensor_argument(name):
    init, args = valid_call(name, gen(5))
    raises(TypeError, call(name, init, args, k=args["k"].tolist()), "k", "torch.Tensor", "list")


@pytest.mark.parametrize("name", OP_NAMES)
def test_integer_tensor(name):
    init, args = valid_call(name, gen(6))
    raises(TypeError, call(name, init, args, q=args["q"].to(torch.int64)), "q", "int64", "float16", "bfloat16")


@pytest.mark.parametrize("name", OP_NAMES)
def test_k_dtype_differs_from_q(name):
    init, args = valid_call(name, gen(7))
    raises(TypeError, call(name, init, args, k=args["k"].float()), "k", "float32", "float64")


@pytest.mark.parametrize("name", OP_NAMES)
def test_tensors_on_different_devices(name):
    init, args = valid_call(name, gen(8))
    raises(ValueError, call(name, init, args, v=args["v"].to("meta")), "v", "meta", "cpu", "one device")


@pytest.mark.parametrize("name", OP_NAMES)
def test_k_width_mismatch(name):
    init, args = valid_call(name, gen(9))
    k = args["k"][..., :-1]
    dim = "DK" if name.startswith("DeltaNetChunk") or "Recurrent" in name else "K"
    raises(ValueError, call(name, init, args, k=k), "k", f"dim {dim} is 7", f"q set {dim} = 8", str(list(k.shape)))


# ---------------------------------------------------------------- shapes


def test_v_width_mismatch_against_initial_state():
    args = gdn_args()
    bad = state(gen(1), 2, 2, 8, 12)
    raises(ValueError, lambda: gdn()(**args, initial_state=bad), "initial_state", "dim V is 12", "v set V = 16")


def test_v_width_mismatch_in_backward_do():
    init, args = valid_call("DeltaNetChunkBwdOp", gen(10))
    do = args["do"][..., :-2]
    raises(ValueError, call("DeltaNetChunkBwdOp", init, args, do=do), "do", "dim DV is 14", "v set DV = 16")


def test_v_width_mismatch_in_gla_backward_do():
    init, args = valid_call("GLAChunkBwdOp", gen(11))
    raises(ValueError, call("GLAChunkBwdOp", init, args, do=args["do"][..., :3]), "do", "dim V is 3", "V = 16")


def test_t_mismatch():
    args = gdn_args()
    raises(ValueError, lambda: gdn()(**{**args, "v": args["v"][:, :5]}), "v", "dim T is 5", "q set T = 6")
    raises(ValueError, lambda: gdn()(**{**args, "g": args["g"][:, :4]}), "g", "dim T is 4", "q set T = 6")
    raises(ValueError, lambda: gdn()(**{**args, "beta": args["beta"][:, :3]}), "beta", "dim T is 3", "q set T = 6")


def test_s_mismatch_in_chunked_deltanet():
    init, args = valid_call("DeltaNetChunkFwdOp", gen(12))
    raises(ValueError, call("DeltaNetChunkFwdOp", init, args, beta=args["beta"][..., :4]), "beta", "dim S is 4",
           "q set S = 5")


def test_gate_has_wrong_rank_for_kda():
    args = gdn_args()
    raises(ValueError, lambda: la.KDAFwdOp()(**args), "g", "4-D", "[B, T, HV, K]", "3-D")


def test_gate_has_wrong_rank_for_gdn():
    args = gdn_args()
    g = args["g"].unsqueeze(-1).expand(-1, -1, -1, 8).contiguous()
    raises(ValueError, lambda: gdn()(**{**args, "g": g}), "g", "3-D", "[B, T, HV]", "4-D")


def test_hv_not_multiple_of_h():
    args = gdn_args(H=2, HV=3)
    raises(ValueError, lambda: gdn()(**args), "HV = 3", "H = 2", "multiple")


def test_gla_needs_equal_value_heads():
    init, args = valid_call("GLAFwdOp", gen(13))
    v = torch.cat([args["v"], args["v"]], 2)
    raises(ValueError, call("GLAFwdOp", init, args, v=v), "v", "dim H is 4", "q set H = 2")


def test_zero_tokens():
    args = gdn_args(T=0)
    raises(ValueError, lambda: gdn()(**args), "T = 0")
    init, gla = valid_call("GLAFwdOp", gen(14), T=0)
    raises(ValueError, call("GLAFwdOp", init, gla, initial_state=None), "T = 0")
    init, chunk = valid_call("DeltaNetChunkFwdOp", gen(15), T=0)
    raises(ValueError, call("DeltaNetChunkFwdOp", init, chunk), "S = 0")


# ---------------------------------------------------------------- dtypes of gates, betas, states


def test_beta_integer():
    args = gdn_args()
    raises(TypeError, lambda: gdn()(**{**args, "beta": args["beta"].to(torch.int32)}), "beta", "int32", "float64")


def test_half_inputs_with_float64_gate():
    args = gdn_args(dtype=torch.bfloat16)
    raises(TypeError, lambda: gdn()(**{**args, "g": args["g"].double()}), "g", "float64", "bfloat16", "float32")


def test_initial_state_half_precision():
    args = gdn_args(dtype=torch.bfloat16)
    bad = state(gen(2), 2, 2, 8, 16, dtype=torch.float16)
    raises(TypeError, lambda: gdn()(**args, initial_state=bad), "initial_state", "float16", "float32")


def test_initial_state_wrong_shape():
    args = gdn_args()
    bad = state(gen(3), 3, 2, 8, 16)
    raises(ValueError, lambda: gdn()(**args, initial_state=bad), "initial_state", "dim N is 3", "N = 2",
           "[N, HV, K, V]", "[2, 2, 8, 16]")


def test_initial_state_wrong_rank():
    args = gdn_args()
    bad = state(gen(4), 2, 8, 16)
    raises(ValueError, lambda: gdn()(**args, initial_state=bad), "initial_state", "4-D", "3-D")


def test_initial_state_value_major_given_to_key_major_op():
    args = gdn_args()
    value_major = state(gen(5), 2, 2, 16, 8)
    raises(ValueError, lambda: gdn()(**args, initial_state=value_major), "initial_state", "state_v_first",
           "key-major", "[2, 2, 8, 16]")


def test_initial_state_key_major_given_to_value_major_op():
    args = gdn_args()
    key_major = state(gen(6), 2, 2, 8, 16)
    raises(ValueError, lambda: gdn(state_v_first=True)(**args, initial_state=key_major), "initial_state",
           "state_v_first=True", "value-major", "[2, 2, 16, 8]")


def test_initial_state_value_major_given_to_kda():
    g = gen(7)
    args = gdn_args()
    args["g"] = log_decay(g, 2, 6, 2, 8)
    raises(ValueError, lambda: la.KDAFwdOp()(**args, initial_state=state(g, 2, 2, 16, 8)), "state_v_first")


def test_initial_state_for_varlen_has_one_row_per_sequence():
    args = packed_args()
    raises(ValueError, lambda: gdn()(**args, initial_state=state(gen(8), 1, 2, 8, 16)), "initial_state",
           "dim N is 1", "N = 3")


def test_initial_state_on_other_device():
    args = gdn_args()
    raises(ValueError, lambda: gdn()(**args, initial_state=state(gen(9), 2, 2, 8, 16).to("meta")),
           "initial_state", "meta")


# ---------------------------------------------------------------- packed varlen


def test_cu_seqlens_not_integer():
    args = packed_args()
    raises(TypeError, lambda: gdn()(**{**args, "cu_seqlens": args["cu_seqlens"].float()}), "cu_seqlens",
           "float32", "int32", "int64")


def test_cu_seqlens_not_1d():
    args = packed_args()
    raises(ValueError, lambda: gdn()(**{**args, "cu_seqlens": args["cu_seqlens"][None]}), "cu_seqlens", "1-D",
           "2-D")


def test_cu_seqlens_not_starting_at_zero():
    args = packed_args()
    bad = torch.tensor([1, 4, 5, 8], dtype=torch.int32)
    raises(ValueError, lambda: gdn()(**{**args, "cu_seqlens": bad}), "cu_seqlens", "start at 0", "got 1")


def test_cu_seqlens_decreasing():
    args = packed_args()
    bad = torch.tensor([0, 5, 3, 8], dtype=torch.int64)
    raises(ValueError, lambda: gdn()(**{**args, "cu_seqlens": bad}), "cu_seqlens", "non-decreasing", "3", "5")


def test_cu_seqlens_not_ending_at_t():
    args = packed_args()
    bad = torch.tensor([0, 3, 4, 7], dtype=torch.int32)
    raises(ValueError, lambda: gdn()(**{**args, "cu_seqlens": bad}), "cu_seqlens", "end at T = 8", "got 7")


def test_cu_seqlens_with_batch_above_one():
    args = gdn_args(B=2, T=6)
    raises(ValueError, lambda: gdn()(**args, cu_seqlens=cu_seqlens_of([2, 4])), "cu_seqlens", "B == 1", "B = 2")


def test_cu_seqlens_too_short():
    args = packed_args()
    raises(ValueError, lambda: gdn()(**{**args, "cu_seqlens": torch.tensor([0], dtype=torch.int32)}),
           "cu_seqlens", "at least 2")


def test_cu_seqlens_cpu_without_cu_seqlens():
    args = gdn_args(B=1, T=8)
    raises(ValueError, lambda: gdn()(**args, cu_seqlens_cpu=cu_seqlens_of([3, 5])), "cu_seqlens_cpu",
           "without cu_seqlens")


def test_cu_seqlens_cpu_of_other_length():
    args = packed_args()
    raises(ValueError, lambda: gdn()(**args, cu_seqlens_cpu=cu_seqlens_of([3, 5])), "cu_seqlens_cpu",
           "dim N+1 is 3", "cu_seqlens set N+1 = 4")


def test_cu_seqlens_cpu_bad_offsets_are_reported_under_its_name():
    args = packed_args()
    bad = torch.tensor([0, 3, 4, 9], dtype=torch.int32)
    raises(ValueError, lambda: gdn()(**args, cu_seqlens_cpu=bad), "cu_seqlens_cpu", "end at T = 8", "got 9")


@pytest.mark.parametrize("name", ["DeltaNetFwdOp", "KDAFwdOp", "GLAFwdOp"])
def test_varlen_checks_on_every_inference_op(name):
    init, args = valid_call(name, gen(16), B=1, T=8)
    args["initial_state"] = None
    raises(ValueError, call(name, init, args, cu_seqlens=torch.tensor([0, 5, 3, 8])), "cu_seqlens", "non-decreasing")
    raises(ValueError, call(name, init, args, cu_seqlens_cpu=cu_seqlens_of([8])), "cu_seqlens_cpu")


# ---------------------------------------------------------------- flags and gate parameters


@pytest.mark.parametrize("cls", [la.GDNFwdOp, la.KDAFwdOp])
def test_allow_neg_eigval_needs_beta_sigmoid(cls):
    raises(ValueError, lambda: cls(allow_neg_eigval=True), "allow_neg_eigval", "use_beta_sigmoid_in_kernel")
    assert cls(allow_neg_eigval=True, use_beta_sigmoid_in_kernel=True).allow_neg_eigval


def test_gate_in_kernel_without_a_log():
    args = gdn_args()
    raises(ValueError, lambda: gdn(use_gate_in_kernel=True)(**args, dt_bias=randn(gen(1), 2)), "A_log",
           "use_gate_in_kernel")
    kda = {**args, "g": log_decay(gen(2), 2, 6, 2, 8)}
    raises(ValueError, lambda: la.KDAFwdOp(use_gate_in_kernel=True)(**kda), "A_log", "use_gate_in_kernel")


@pytest.mark.parametrize("given", ["A_log", "dt_bias"])
def test_gate_parameters_without_gate_in_kernel(given):
    args = gdn_args()
    raises(ValueError, lambda: gdn()(**args, **{given: randn(gen(3), 2)}), given, "use_gate_in_kernel=True")


def test_gdn_gate_in_kernel_without_dt_bias():
    args = gdn_args()
    raises(ValueError, lambda: gdn(use_gate_in_kernel=True)(**args, A_log=randn(gen(4), 2)), "dt_bias",
           "use_gate_in_kernel=True")


def test_gate_parameter_shapes():
    args = gdn_args()
    op = gdn(use_gate_in_kernel=True)
    raises(ValueError, lambda: op(**args, A_log=randn(gen(5), 3), dt_bias=randn(gen(6), 2)), "A_log",
           "dim HV is 3", "HV = 2")
    raises(ValueError, lambda: op(**args, A_log=randn(gen(5), 2), dt_bias=randn(gen(6), 4)), "dt_bias",
           "dim HV is 4", "HV = 2")
    kda = {**args, "g": log_decay(gen(7), 2, 6, 2, 8)}
    raises(ValueError, lambda: la.KDAFwdOp(use_gate_in_kernel=True)(**kda, A_log=randn(gen(5), 2),
                                                                    dt_bias=randn(gen(6), 15)),
           "dt_bias", "15", "16")


def test_kda_lower_bound_without_gate_in_kernel():
    raises(ValueError, lambda: la.KDAFwdOp(lower_bound=-5.0), "lower_bound", "use_gate_in_kernel=True")


@pytest.mark.parametrize("bound", [0.0, 2.0, float("nan"), "x"])
def test_kda_lower_bound_must_be_negative(bound):
    raises(ValueError, lambda: la.KDAFwdOp(use_gate_in_kernel=True, lower_bound=bound), "lower_bound", repr(bound))


@pytest.mark.parametrize("name", ["DeltaNetFwdOp", "GDNFwdOp", "KDAFwdOp", "GLAFwdOp"])
@pytest.mark.parametrize("scale", [-1.0, 0.0, float("nan"), float("inf")])
def test_bad_scale(name, scale):
    raises(ValueError, lambda: getattr(la, name)(scale=scale), "scale", "positive", repr(scale))


@pytest.mark.parametrize("name", ["GLAChunkFwdOp", "GLAChunkBwdOp", "GLARecurrentFwdOp"])
@pytest.mark.parametrize("scale", [float("nan"), None, "0.5"])
def test_bad_gla_chunk_scale(name, scale):
    raises(ValueError, lambda: getattr(la, name)(scale=scale), "scale", repr(scale))


@pytest.mark.parametrize("name", ["DeltaNetChunkFwdOp", "DeltaNetChunkBwdOp", "GLAChunkFwdOp", "GLAChunkBwdOp"])
@pytest.mark.parametrize("chunk_size", [0, -16, 1.5, True, "64"])
def test_bad_chunk_size(name, chunk_size):
    raises(ValueError, lambda: getattr(la, name)(chunk_size=chunk_size), "chunk_size", "positive int",
           repr(chunk_size))


def test_bad_target_type():
    raises(TypeError, lambda: gdn(target=3), "target", "int")


# ---------------------------------------------------------------- saved forward tensors of the backward ops


def test_gla_backward_h_with_wrong_chunk_count():
    init, args = valid_call("GLAChunkBwdOp", gen(17), T=5, chunk_size=4)
    h = args["h"]
    bad = torch.cat([h, h[:, :1]], 1)
    raises(ValueError, call("GLAChunkBwdOp", init, args, h=bad), "h", "dim NT+1 is 4", "NT+1 = 3", "chunk_size = 4")


def test_gla_backward_h_must_be_state_precision():
    init, args = valid_call("GLAChunkBwdOp", gen(18))
    raises(TypeError, call("GLAChunkBwdOp", init, args, h=args["h"].float()), "h", "float32", "float64")


def test_gla_backward_dht_shape():
    init, args = valid_call("GLAChunkBwdOp", gen(19))
    raises(ValueError, call("GLAChunkBwdOp", init, args, dht=args["dht"][:1]), "dht", "dim B is 1", "B = 2")


def test_deltanet_backward_aw_with_wrong_chunk():
    init, args = valid_call("DeltaNetChunkBwdOp", gen(20), chunk_size=4)
    bad = torch.cat([args["Aw"], args["Aw"]], -1)
    raises(ValueError, call("DeltaNetChunkBwdOp", init, args, Aw=bad), "Aw", "dim BC is 8", "BC = 4", "chunk_size")


def test_deltanet_backward_s_with_wrong_chunk_count():
    init, args = valid_call("DeltaNetChunkBwdOp", gen(21), T=5, chunk_size=4)
    raises(ValueError, call("DeltaNetChunkBwdOp", init, args, S=args["S"][:, :, :2]), "S", "dim NC+1 is 2",
           "NC+1 = 3")


# ---------------------------------------------------------------- targets


@pytest.fixture
def clean_router():
    router.clear()
    yield
    router.clear()


def test_unknown_target_lists_known_targets(clean_router):
    args = gdn_args()
    raises(ValueError, lambda: gdn(target="nope")(**args), "'nope'", "GDNFwdOp", "known targets", "reference",
           "builtin", "register_target")


def test_unknown_target_lists_registered_ones(clean_router):
    la.register_target("listed_elsewhere", "GDNFwdOp", lambda *a: None)
    try:
        raises(ValueError, lambda: gdn(target="nope")(**gdn_args()), "listed_elsewhere")
    finally:
        la.unregister_target("listed_elsewhere", "GDNFwdOp")


@pytest.mark.parametrize("name", OP_NAMES)
def test_builtin_target_on_cpu_points_to_reference(name, clean_router):
    init, args = valid_call(name, gen(22))
    cls = getattr(la, name)
    raises(ValueError, lambda: cls(**init, target=la.BUILTIN)(**args), name, "BUILTIN", "cpu",
           "target='reference'")


def test_bad_input_never_reaches_a_kernel(clean_router):
    calls = []

    def spy(*args, **kwargs):
        calls.append((args, kwargs))
        return "served"

    la.register_target("spy", "GDNFwdOp", spy)
    try:
        op = gdn(target="spy")
        args = gdn_args()
        bad_inputs = [
            {**args, "k": args["k"][..., :4]},
            {**args, "beta": args["beta"].to(torch.int32)},
            {**args, "v": args["v"].tolist()},
            {**args, "initial_state": state(gen(1), 2, 2, 16, 8)},
            {**args, "cu_seqlens": cu_seqlens_of([2, 4])},
            {**args, "A_log": randn(gen(2), 2)},
            {**gdn_args(T=0)},
        ]
        for bad in bad_inputs:
            with pytest.raises((ValueError, TypeError)):
                op(**bad)
        assert calls == []
        assert op(**args) == "served"
        assert len(calls) == 1
    finally:
        la.unregister_target("spy", "GDNFwdOp")
