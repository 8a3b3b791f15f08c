"""Every op through its public class on CPU, against the token-by-token reference in float64."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Optional

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tileops import dispatch
import tileops.linear_attention as la
from tileops.reference.delta_rule.naive import recurrent_delta_rule
from tileops.reference.transforms import beta_transform, gdn_gate, kda_gate, l2norm

from tests.support.op_inputs import (F64, cu_seqlens_of, delta_rule_tokens, gdn_raw_gate, gen, kda_raw_gate, log_decay, randn, rel_err, single_thread, state, uniform, unit)


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    with single_thread():
        yield


TOL = 1e-10
HALF_TOL = 2e-2
TARGETS = [None, "reference"]


def close(actual: torch.Tensor, expected: torch.Tensor, tol: float = TOL, what: str = "") -> None:
    err = rel_err(actual, expected)
    assert err < tol, f"{what} relative error {err:.3e} >= {tol:.0e}"


def bhsd(x: torch.Tensor) -> torch.Tensor:
    """[B, T, H, D] <-> [B, H, T, D] (and [B, T, H] <-> [B, H, T])."""
    return x.transpose(1, 2)


# ================================================================ DeltaNet chunked forward / backward


def deltanet_chunk_inputs(seed: int, B: int, H: int, S: int, DK: int, DV: int) -> tuple[torch.Tensor, ...]:
    g = gen(seed)
    return (unit(g, B, H, S, DK), unit(g, B, H, S, DK), randn(g, B, H, S, DV),
            uniform(g, B, H, S, lo=0.05, hi=0.95))


def chunk_op(cls, chunk_size: Optional[int], target, **kwargs):
    if chunk_size is None:
        return cls(**kwargs, target=target)
    return cls(chunk_size, **kwargs, target=target)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("S, chunk_size", [(1, None), (37, 16), (70, None), (64, None), (48, 16)])
def test_deltanet_chunk_fwd(S, chunk_size, target):
    B, H, DK, DV = 2, 2, 8, 16
    q, k, v, beta = deltanet_chunk_inputs(S, B, H, S, DK, DV)
    out = chunk_op(la.DeltaNetChunkFwdOp, chunk_size, target)(q, k, v, beta)
    assert isinstance(out, tuple) and len(out) == 6
    o, states, Aw, Au, w, u = out
    BC = chunk_size or 64
    NC = math.ceil(S / BC)
    assert list(o.shape) == [B, H, S, DV]
    assert list(states.shape) == [B, H, NC + 1, DK, DV]
    assert list(Aw.shape) == list(Au.shape) == [B, H, S, BC]
    assert list(w.shape) == [B, H, S, DK]
    assert list(u.shape) == [B, H, S, DV]
    assert o.dtype == F64 and states.dtype == F64

    ref_o, _ = recurrent_delta_rule(bhsd(q), bhsd(k), bhsd(v), bhsd(beta), scale=1.0)
    close(o, bhsd(ref_o), what="o")

    assert torch.equal(states[:, :, 0], torch.zeros(B, H, DK, DV, dtype=F64))
    for c in range(1, NC + 1):
        end = min(c * BC, S)
        _, prefix_state = recurrent_delta_rule(bhsd(q[:, :, :end]), bhsd(k[:, :, :end]), bhsd(v[:, :, :end]),
                                               bhsd(beta[:, :, :end]), scale=1.0)
        close(states[:, :, c], prefix_state, what=f"S[:, :, {c}]")

    for c in range(NC):
        r0, r1 = c * BC, min((c + 1) * BC, S)
        kc, vc, bc = k[:, :, r0:r1], v[:, :, r0:r1], beta[:, :, r0:r1, None]
        A = ((bc * kc) @ kc.mT).tril(-1)
        inverse = torch.linalg.inv(torch.eye(r1 - r0, dtype=F64) + A)
        close(Aw[:, :, r0:r1, :r1 - r0], inverse, what=f"Aw chunk {c}")
        close(Au[:, :, r0:r1, :r1 - r0], inverse, what=f"Au chunk {c}")
        assert torch.equal(Aw[:, :, r0:r1, r1 - r0:], torch.zeros_like(Aw[:, :, r0:r1, r1 - r0:]))
        close(w[:, :, r0:r1], inverse @ (bc * kc), what=f"w chunk {c}")
        close(u[:, :, r0:r1], inverse @ (bc * vc), what=f"u chunk {c}")


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("S, chunk_size", [(37, 16), (70, None), (1, 16)])
def test_deltanet_chunk_bwd(S, chunk_size, target):
    B, H, DK, DV = 2, 2, 8, 16
    q, k, v, beta = deltanet_chunk_inputs(100 + S, B, H, S, DK, DV)
    do = randn(gen(200 + S), B, H, S, DV)
    saved = chunk_op(la.DeltaNetChunkFwdOp, chunk_size, target)(q, k, v, beta)
    grads = chunk_op(la.DeltaNetChunkBwdOp, chunk_size, target)(do, q, k, v, beta, *saved[1:])
    assert isinstance(grads, tuple) and len(grads) == 4

    leaves = [x.clone().requires_grad_() for x in (q, k, v, beta)]
    o, _ = recurrent_delta_rule(*(bhsd(x) for x in leaves), scale=1.0)
    expected = torch.autograd.grad((bhsd(o) * do).sum(), leaves)
    for name, got, want, x in zip(("dq", "dk", "dv", "dbeta"), grads, expected, (q, k, v, beta)):
        assert got.shape == x.shape and got.dtype == x.dtype, name
        close(got, want, what=name)


# ================================================================ single-step decode ops


def deltanet_step(q, k, v, beta, S):
    """The spec's step with key-major S [.., DK, DV]: its "S @ k" is Sᵀk here."""
    v_new = beta[..., None] * (v - torch.einsum("bhkv,bhk->bhv", S, k))
    o = torch.einsum("bhkv,bhk->bhv", S, q) + (q * k).sum(-1, keepdim=True) * v_new
    return o, S + k[..., :, None] * v_new[..., None, :]


@pytest.mark.parametrize("target", TARGETS)
def test_deltanet_recurrent_step(target):
    g = gen(11)
    B, H, DK, DV = 2, 2, 8, 16
    q, k, v = unit(g, B, H, DK), unit(g, B, H, DK), randn(g, B, H, DV)
    beta, S = uniform(g, B, H, lo=0.1, hi=0.9), state(g, B, H, DK, DV)
    S_before = S.clone()
    o, S_new = la.DeltaNetRecurrentFwdOp(target=target)(q, k, v, beta, S)
    want_o, want_S = deltanet_step(q, k, v, beta, S)
    assert list(o.shape) == [B, H, DV] and list(S_new.shape) == [B, H, DK, DV]
    close(o, want_o, what="o")
    close(S_new, want_S, what="new_state")
    close(o, torch.einsum("bhkv,bhk->bhv", want_S, q), what="o = S_newᵀq")
    assert torch.equal(S, S_before)


def test_deltanet_recurrent_chain_equals_chunked_forward():
    B, H, S, DK, DV = 2, 2, 9, 8, 16
    q, k, v, beta = deltanet_chunk_inputs(12, B, H, S, DK, DV)
    op = la.DeltaNetRecurrentFwdOp()
    st_ = torch.zeros(B, H, DK, DV, dtype=F64)
    outs = []
    for t in range(S):
        o, st_ = op(q[:, :, t], k[:, :, t], v[:, :, t], beta[:, :, t], st_)
        outs.append(o)
    o_chunk, states = la.DeltaNetChunkFwdOp(chunk_size=4)(q, k, v, beta)[:2]
    close(torch.stack(outs, 2), o_chunk, what="o")
    close(st_, states[:, :, -1], what="final state")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_deltanet_recurrent_step_low_precision(dtype):
    g = gen(13)
    B, H, DK, DV = 2, 2, 16, 16
    q, k, v = unit(g, B, H, DK, dtype=dtype), unit(g, B, H, DK, dtype=dtype), randn(g, B, H, DV, dtype=dtype)
    beta, S = uniform(g, B, H, lo=0.1, hi=0.9, dtype=torch.float32), state(g, B, H, DK, DV, dtype=torch.float32)
    o, S_new = la.DeltaNetRecurrentFwdOp()(q, k, v, beta, S)
    assert o.dtype == dtype and S_new.dtype == torch.float32
    want_o, want_S = deltanet_step(*(x.to(F64) for x in (q, k, v, beta, S)))
    tol = 1e-6 if dtype == torch.float32 else HALF_TOL
    close(o, want_o, tol, "o")
    close(S_new, want_S, tol, "new_state")


def gla_step(q, k, v, gk, S, scale):
    S_new = gk.exp()[..., None] * S + k[..., :, None] * v[..., None, :]
    return scale * torch.einsum("bhkv,bhk->bhv", S_new, q), S_new


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("scale", [None, -1.0, 0.0, 0.3])
def test_gla_recurrent_step(scale, target):
    g = gen(14)
    B, H, DK, DV = 2, 2, 8, 16
    q, k, v = randn(g, B, H, DK), randn(g, B, H, DK), randn(g, B, H, DV)
    gk, S = log_decay(g, B, H, DK), state(g, B, H, DK, DV)
    op = la.GLARecurrentFwdOp(target=target) if scale is None else la.GLARecurrentFwdOp(scale, target=target)
    o, S_new = op(q, k, v, gk, S)
    want_o, want_S = gla_step(q, k, v, gk, S, 0.3 if scale == 0.3 else DK ** -0.5)
    assert list(o.shape) == [B, H, DV] and list(S_new.shape) == [B, H, DK, DV]
    close(o, want_o, what="o")
    close(S_new, want_S, what="new_state")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_gla_recurrent_step_low_precision(dtype):
    g = gen(15)
    B, H, DK, DV = 2, 2, 16, 16
    q, k, v = (randn(g, B, H, d, dtype=dtype) for d in (DK, DK, DV))
    gk, S = log_decay(g, B, H, DK, dtype=torch.float32), state(g, B, H, DK, DV, dtype=torch.float32)
    o, S_new = la.GLARecurrentFwdOp()(q, k, v, gk, S)
    assert o.dtype == dtype and S_new.dtype == torch.float32
    want_o, want_S = gla_step(*(x.to(F64) for x in (q, k, v, gk, S)), DK ** -0.5)
    close(o, want_o, HALF_TOL, "o")
    close(S_new, want_S, HALF_TOL, "new_state")


def test_gla_recurrent_chain_equals_gla_forward():
    g = gen(16)
    B, T, H, K, V = 2, 7, 2, 8, 16
    q, k, v = (randn(g, B, T, H, d) for d in (K, K, V))
    gk, h0 = log_decay(g, B, T, H, K), state(g, B, H, K, V)
    step = la.GLARecurrentFwdOp(0.4)
    S, outs = h0, []
    for t in range(T):
        o, S = step(q[:, t], k[:, t], v[:, t], gk[:, t], S)
        outs.append(o)
    o_full, final = la.GLAFwdOp(0.4)(q, k, v, gk, h0)
    close(torch.stack(outs, 1), o_full, what="o")
    close(S, final, what="final state")


# ================================================================ GLA chunked forward / backward


def gla_inputs(seed: int, B: int, T: int, H: int, K: int, V: int, dtype=F64):
    g = gen(seed)
    return (randn(g, B, T, H, K, dtype=dtype), randn(g, B, T, H, K, dtype=dtype), randn(g, B, T, H, V, dtype=dtype),
            log_decay(g, B, T, H, K, dtype=dtype), state(g, B, H, K, V))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("with_state", [False, True])
@pytest.mark.parametrize("T, chunk_size", [(1, None), (37, 16), (70, None)])
def test_gla_chunk_fwd(T, chunk_size, with_state, target):
    B, H, K, V = 2, 2, 8, 16
    q, k, v, gk, h0 = gla_inputs(T + with_state, B, T, H, K, V)
    h0 = h0 if with_state else None
    result = chunk_op(la.GLAChunkFwdOp, chunk_size, target)(q, k, v, gk, h0)
    assert len(result) == 2
    o, ht = result
    assert list(o.shape) == [B, T, H, V] and list(ht.shape) == [B, H, K, V]
    ref_o, ref_ht = recurrent_delta_rule(q, k, v, None, gk, scale=K ** -0.5, initial_state=h0)
    close(o, ref_o, what="o")
    close(ht, ref_ht, what="final_state")

    BC = chunk_size or 64
    NT = math.ceil(T / BC)
    h = result.h
    assert list(h.shape) == [B, NT + 1, H, K, V]
    if h0 is None:
        assert torch.equal(h[:, 0], torch.zeros(B, H, K, V, dtype=F64))
    else:
        close(h[:, 0], h0, what="h[:, 0]")
    for c in range(1, NT + 1):
        end = min(c * BC, T)
        _, want = recurrent_delta_rule(q[:, :end], k[:, :end], v[:, :end], None, gk[:, :end], scale=1.0,
                                       initial_state=h0)
        close(h[:, c], want, what=f"h[:, {c}]")


@pytest.mark.parametrize("scale", [-1.0, 0.0, 0.25])
def test_gla_chunk_fwd_scale(scale):
    B, T, H, K, V = 1, 20, 2, 8, 16
    q, k, v, gk, _ = gla_inputs(17, B, T, H, K, V)
    o, _ = la.GLAChunkFwdOp(16, scale)(q, k, v, gk)
    ref_o, _ = recurrent_delta_rule(q, k, v, None, gk, scale=scale if scale > 0 else K ** -0.5)
    close(o, ref_o)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("with_state", [False, True])
@pytest.mark.parametrize("T, chunk_size, scale", [(37, 16, -1.0), (70, None, 0.3), (5, 16, -1.0)])
def test_gla_chunk_bwd(T, chunk_size, scale, with_state, target):
    B, H, K, V = 2, 2, 8, 16
    q, k, v, gk, h0 = gla_inputs(50 + T + with_state, B, T, H, K, V)
    h0 = h0 if with_state else None
    g = gen(60 + T)
    do, dht = randn(g, B, T, H, V), randn(g, B, H, K, V)
    fwd = la.GLAChunkFwdOp(scale=scale) if chunk_size is None else la.GLAChunkFwdOp(chunk_size, scale)
    h = fwd(q, k, v, gk, h0).h
    bwd_kwargs = dict(scale=scale, has_initial_state=with_state)
    grads = chunk_op(la.GLAChunkBwdOp, chunk_size, target, **bwd_kwargs)(q, k, v, gk, h, do, dht)
    assert len(grads) == 4

    leaves = [x.clone().requires_grad_() for x in (q, k, v, gk)]
    o, ht = recurrent_delta_rule(leaves[0], leaves[1], leaves[2], None, leaves[3],
                                 scale=scale if scale > 0 else K ** -0.5, initial_state=h0)
    expected = torch.autograd.grad((o * do).sum() + (ht * dht).sum(), leaves)
    for name, got, want, x in zip(("dq", "dk", "dv", "dg"), grads, expected, (q, k, v, gk)):
        assert got.shape == x.shape and got.dtype == x.dtype, name
        close(got, want, what=name)


# ================================================================ inference ops: DeltaNet, GDN, KDA, GLA


@dataclass(frozen=True)
class Flags:
    l2: bool = False
    sigmoid: bool = False
    neg: bool = False
    v_first: bool = False
    gate: bool = False
    lower_bound: Optional[float] = None
    dt_bias: bool = True
    scale: Optional[float] = None

    def __str__(self) -> str:
        on = [n for n in ("l2", "sigmoid", "neg", "v_first", "gate") if getattr(self, n)]
        if self.gate and self.lower_bound is not None:
            on.append(f"lb{self.lower_bound}")
        if self.gate and not self.dt_bias:
            on.append("no_dt_bias")
        if self.scale is not None:
            on.append(f"scale{self.scale}")
        return "-".join(on) or "plain"


PLAIN = Flags()
KINDS = ("deltanet", "gdn", "kda", "gla")


def make_op(kind: str, f: Flags = PLAIN, target=None):
    if kind == "deltanet":
        return la.DeltaNetFwdOp(f.scale, f.l2, target=target)
    if kind == "gla":
        return la.GLAFwdOp(f.scale, target=target)
    common = (f.scale, f.l2, f.sigmoid, f.neg, f.v_first, f.gate)
    if kind == "gdn":
        return la.GDNFwdOp(*common, target=target)
    return la.KDAFwdOp(*common, f.lower_bound, target=target)


def inference_inputs(kind: str, seed: int, *, B: int = 2, T: int = 37, H: int = 1, HV: Optional[int] = None,
                     K: int = 8, V: int = 16, f: Flags = PLAIN, dtype=F64, with_state: bool = True,
                     lengths: Optional[list[int]] = None) -> dict:
    """Forward keyword arguments of one call; ``lengths`` makes it packed varlen."""
    g = gen(seed)
    HV = H if kind in ("deltanet", "gla") or HV is None else HV
    if lengths is not None:
        B, T = 1, sum(lengths)
    params = torch.float32 if dtype in (torch.float16, torch.bfloat16) else F64
    q, k, v = delta_rule_tokens(g, B, T, H, HV, K, V, dtype, normalized=not f.l2)
    if f.l2:
        q, k = 3 * q, 3 * k
    args = dict(q=q, k=k, v=v)
    if kind == "gla":
        args["g"] = log_decay(g, B, T, H, K, dtype=params)
    elif kind in ("gdn", "kda") and f.gate:
        raw, A_log, dt_bias = (gdn_raw_gate(g, B, T, HV, params) if kind == "gdn"
                               else kda_raw_gate(g, B, T, HV, K, params))
        args.update(g=raw, A_log=A_log, dt_bias=dt_bias if f.dt_bias else None)
    elif kind == "gdn":
        args["g"] = log_decay(g, B, T, HV, dtype=params)
    elif kind == "kda":
        args["g"] = log_decay(g, B, T, HV, K, dtype=params)
    if kind != "gla":
        args["beta"] = (randn(g, B, T, HV, dtype=params) if f.sigmoid
                        else uniform(g, B, T, HV, lo=0.05, hi=0.95, dtype=params))
    N = B if lengths is None else len(lengths)
    if with_state:
        args["initial_state"] = state(g, N, HV, *((V, K) if f.v_first else (K, V)), dtype=params)
    if lengths is not None:
        args["cu_seqlens"] = cu_seqlens_of(lengths)
    return args


def expected(kind: str, f: Flags, args: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """(o, final_state) in float64: the transforms applied here, then the naive recurrence."""
    a = {n: x.to(F64) if isinstance(x, torch.Tensor) and x.is_floating_point() else x for n, x in args.items()}
    q, k = a["q"], a["k"]
    scale = f.scale if f.scale is not None else q.shape[-1] ** -0.5
    if f.l2 and kind != "gla":
        q, k = l2norm(q), l2norm(k)
    beta = a.get("beta")
    if beta is not None:
        beta = beta_transform(beta, sigmoid=f.sigmoid, neg_eigval=f.neg)
    g = a.get("g")
    if f.gate:
        g = (gdn_gate(g, a["A_log"], a["dt_bias"]) if kind == "gdn"
             else kda_gate(g, a["A_log"], a.get("dt_bias"), f.lower_bound))
    h0 = a.get("initial_state")
    if h0 is not None and f.v_first:
        h0 = h0.mT
    o, final = recurrent_delta_rule(q, k, a["v"], beta, g, scale=scale, initial_state=h0,
                                    cu_seqlens=a.get("cu_seqlens"))
    return o, final.mT if f.v_first else final


def check(kind: str, f: Flags, args: dict, target=None, tol: float = TOL) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the op, compare with ``expected``; returns the op's (o, final_state)."""
    inputs = {n: x.clone() for n, x in args.items() if isinstance(x, torch.Tensor)}
    result = make_op(kind, f, target)(**args)
    assert isinstance(result, tuple) and len(result) == 2
    o, final = result
    want_o, want_final = expected(kind, f, args)
    assert o.shape == want_o.shape and o.dtype == args["q"].dtype
    assert final.shape == want_final.shape
    assert final.dtype == (F64 if args["q"].dtype == F64 else torch.float32)
    close(o, want_o, tol, "o")
    close(final, want_final, tol, "final_state")
    for n, x in inputs.items():
        assert torch.equal(args[n], x), f"{n} was modified in place"
    return o, final


BETA_MODES = [(False, False), (True, False), (True, True)]

GDN_FLAGS = [Flags(l2=l2, sigmoid=s, neg=n, v_first=vf, gate=gate)
             for l2, (s, n), vf, gate in itertools.product([False, True], BETA_MODES, [False, True], [False, True])]

KDA_GATES = [dict(gate=False)] + [dict(gate=True, lower_bound=lb, dt_bias=db)
                                  for lb, db in itertools.product([None, -5.0], [False, True])]
KDA_FLAGS = [Flags(l2=l2, sigmoid=s, neg=n, v_first=vf, **gate)
             for l2, (s, n), vf, gate in itertools.product([False, True], BETA_MODES, [False, True], KDA_GATES)]


@pytest.mark.parametrize("f", GDN_FLAGS, ids=str)
def test_gdn_flag_combinations(f):
    check("gdn", f, inference_inputs("gdn", 300, H=1, HV=2, f=f))


@pytest.mark.parametrize("f", KDA_FLAGS, ids=str)
def test_kda_flag_combinations(f):
    check("kda", f, inference_inputs("kda", 400, H=1, HV=2, f=f))


@pytest.mark.parametrize("kind", ["deltanet", "gdn", "kda"])
def test_l2norm_flag(kind):
    check(kind, Flags(l2=True), inference_inputs(kind, 310, H=2, HV=2, f=Flags(l2=True)))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("scale", [0.3, 1.0])
def test_explicit_scale(kind, scale):
    f = Flags(scale=scale)
    check(kind, f, inference_inputs(kind, 320, H=2, HV=2, f=f))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("with_state", [False, True])
@pytest.mark.parametrize("T", [1, 37, 64, 70])
@pytest.mark.parametrize("kind", KINDS)
def test_lengths_and_initial_state(kind, T, with_state, target):
    check(kind, PLAIN, inference_inputs(kind, 330 + T, T=T, H=2, HV=2, with_state=with_state), target)


@pytest.mark.parametrize("group", [2, 4])
@pytest.mark.parametrize("kind", ["gdn", "kda"])
@pytest.mark.parametrize("f", [PLAIN, Flags(l2=True, sigmoid=True, v_first=True, gate=True)], ids=str)
def test_grouped_value_heads(kind, group, f):
    args = inference_inputs(kind, 340 + group, T=37, H=2, HV=2 * group, V=8, f=f)
    check(kind, f, args)


def test_grouped_value_heads_share_query_key_heads():
    """Value heads j·G … j·G + G − 1 read query/key head j: repeating q and k changes nothing."""
    args = inference_inputs("gdn", 345, T=20, H=2, HV=4)
    o, final = make_op("gdn")(**args)
    wide = {**args, "q": args["q"].repeat_interleave(2, 2), "k": args["k"].repeat_interleave(2, 2)}
    o_wide, final_wide = make_op("gdn")(**wide)
    close(o, o_wide)
    close(final, final_wide)


VARLEN_LENGTHS = [[5, 1, 23, 12], [70, 1, 9], [1, 1, 3]]


@pytest.mark.parametrize("lengths", VARLEN_LENGTHS, ids=lambda ls: "_".join(map(str, ls)))
@pytest.mark.parametrize("kind, f", [("deltanet", PLAIN), ("gdn", PLAIN), ("kda", PLAIN), ("gla", PLAIN),
                                     ("gdn", Flags(l2=True, sigmoid=True, neg=True, v_first=True, gate=True)),
                                     ("kda", Flags(sigmoid=True, gate=True, lower_bound=-5.0))], ids=str)
def test_varlen_equals_separate_sequences(kind, f, lengths):
    args = inference_inputs(kind, 350 + len(lengths), H=2, HV=2, f=f, lengths=lengths)
    o, final = check(kind, f, args)
    op = make_op(kind, f)
    offsets = args["cu_seqlens"].tolist()
    for n, (start, end) in enumerate(zip(offsets[:-1], offsets[1:])):
        one = {name: (x[:, start:end] if name in ("q", "k", "v", "g", "beta") else x) for name, x in args.items()}
        one["initial_state"] = args["initial_state"][n:n + 1]
        one["cu_seqlens"] = None
        o_n, final_n = op(**one)
        close(o[:, start:end], o_n, what=f"o of sequence {n}")
        close(final[n:n + 1], final_n, what=f"final state of sequence {n}")
    o_cpu, final_cpu = op(**args, cu_seqlens_cpu=args["cu_seqlens"].clone())
    close(o_cpu, o)
    close(final_cpu, final)


@pytest.mark.parametrize("kind", KINDS)
def test_varlen_without_initial_state(kind):
    args = inference_inputs(kind, 360, H=2, HV=2, with_state=False, lengths=[4, 1, 30])
    check(kind, PLAIN, args)


@settings(max_examples=10, deadline=None, database=None)
@given(lengths=st.lists(st.integers(1, 24), min_size=3, max_size=5), seed=st.integers(0, 2 ** 16))
def test_gdn_varlen_any_partition(lengths, seed):
    f = Flags(sigmoid=True, gate=True)
    check("gdn", f, inference_inputs("gdn", seed, H=2, HV=4, f=f, lengths=lengths))


@pytest.mark.parametrize("kind, f", [("deltanet", PLAIN), ("deltanet", Flags(l2=True)), ("gdn", PLAIN),
                                     ("gdn", Flags(l2=True, sigmoid=True, neg=True, v_first=True, gate=True)),
                                     ("kda", PLAIN), ("kda", Flags(sigmoid=True, v_first=True, gate=True,
                                                                   lower_bound=-5.0)),
                                     ("gla", PLAIN)], ids=str)
def test_decode_chain_equals_prefill(kind, f):
    T = 6
    args = inference_inputs(kind, 370, T=T, H=2, HV=4, f=f)
    op = make_op(kind, f)
    o_prefill, final_prefill = op(**args)
    carried, outputs = args["initial_state"], []
    for t in range(T):
        step = {name: (x[:, t:t + 1] if name in ("q", "k", "v", "g", "beta") else x) for name, x in args.items()}
        step["initial_state"] = carried
        o_t, carried = op(**step)
        assert o_t.shape[1] == 1
        outputs.append(o_t)
    close(torch.cat(outputs, 1), o_prefill, what="o")
    close(carried, final_prefill, what="final state")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("T", [1, 37])
@pytest.mark.parametrize("kind, f", [("deltanet", PLAIN), ("gdn", PLAIN), ("kda", PLAIN), ("gla", PLAIN),
                                     ("gdn", Flags(l2=True, sigmoid=True, v_first=True, gate=True)),
                                     ("kda", Flags(l2=True, sigmoid=True, gate=True))], ids=str)
def test_half_precision_inputs(kind, f, T, dtype):
    args = inference_inputs(kind, 380 + T, T=T, H=2, HV=4, K=16, V=16, f=f, dtype=dtype)
    assert args["initial_state"].dtype == torch.float32
    check(kind, f, args, tol=HALF_TOL)


@pytest.mark.parametrize("kind", ["gdn", "gla"])
def test_half_precision_varlen(kind):
    args = inference_inputs(kind, 390, H=2, HV=2, K=16, V=16, dtype=torch.bfloat16, lengths=[9, 1, 30])
    check(kind, PLAIN, args, tol=HALF_TOL)


def test_half_precision_gates_in_input_dtype():
    args = inference_inputs("gdn", 395, T=20, H=2, HV=2, K=16, V=16, dtype=torch.bfloat16)
    args["g"], args["beta"] = args["g"].bfloat16(), args["beta"].bfloat16()
    check("gdn", PLAIN, args, tol=HALF_TOL)


def test_gdn_and_kda_agree_on_a_channel_constant_gate():
    """KDA with the same decay on every key channel is GDN."""
    args = inference_inputs("gdn", 396, T=40, H=2, HV=4)
    o_gdn, s_gdn = make_op("gdn")(**args)
    kda_args = {**args, "g": args["g"].unsqueeze(-1).expand(-1, -1, -1, 8).contiguous()}
    o_kda, s_kda = make_op("kda")(**kda_args)
    close(o_kda, o_gdn)
    close(s_kda, s_gdn)


# ================================================================ explain on CPU


@pytest.fixture
def no_database(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEOPS_DB", str(tmp_path / "tuning.db"))
    dispatch.reset()
    yield
    dispatch.reset()


@pytest.mark.parametrize("T", [1, 37])
@pytest.mark.parametrize("kind", KINDS)
def test_explain_names_the_reference_kernel(kind, T, no_database):
    args = inference_inputs(kind, 400, T=T, H=2, HV=2)
    op = make_op(kind)
    explanation = dispatch.explain(op, *args.values())
    assert explanation.target == "reference"
    assert explanation.kernel == f"reference.{kind}_{'recurrent' if T == 1 else 'chunk'}"
    assert explanation.source == "default"
    assert explanation.key is not None and explanation.key.arch == "cpu"
    assert explanation.kernel in str(explanation)
    assert explanation.passed_over == ()
    if T > 1 and explanation.config and "chunk_size" in explanation.config:
        assert explanation.config["chunk_size"] == 64
    check(kind, PLAIN, args)

