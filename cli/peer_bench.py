"""Times a peer library (FLA or the published TileOPs) on benchmark rows, in its own process: its
forward, or on a training row its forward and backward.

Run from outside the project root with the peer on PYTHONPATH. The peer's package is also named
``tileops``, so our timing protocol is loaded from its file, not imported through the package.
Prints one JSON object per row.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F

def _own(name: str, path: Path):
    """One of our modules that imports nothing of the package, loaded from its file."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_ROOT = Path(__file__).resolve().parents[1]
time_cuda = _own("_tileops_timing", _ROOT / "tuner" / "timing.py").time_cuda
log_decays = _own("_tileops_cases", _ROOT / "tileops" / "cases.py").log_decays


def inputs(case: dict) -> dict:
    """Random inputs of a row's op (same distributions as ours): g per value head for GDN, per key
    channel for KDA and GLA (in the input dtype with the row's ``gate16``), none for DeltaNet, drawn
    as the row's ``gates`` say; beta for the delta rule only."""
    gen = torch.Generator(device="cuda").manual_seed(1)
    seqlens = case["seqlens"]
    b, t = (1, sum(seqlens)) if seqlens else (case["batch"], case["tokens"])
    n = len(seqlens) if seqlens else b
    h, hv, d, op = case["heads"], case["value_heads"], case["dim"], case["op"]
    dt = torch.bfloat16
    q = torch.randn(b, t, h, d, device="cuda", generator=gen).to(dt)
    k = F.normalize(torch.randn(b, t, h, d, device="cuda", generator=gen), dim=-1).to(dt)
    v = torch.randn(b, t, hv, d, device="cuda", generator=gen).to(dt)
    gate = {"gdn": ((b, t, hv), 8), "kda": ((b, t, hv, d), 8), "gla": ((b, t, h, d), 16)}.get(op)
    g = None if gate is None else log_decays(
        case.get("gates", "benchmark"), gate[0], lambda s: torch.randn(*s, device="cuda", generator=gen),
        lambda s: torch.rand(*s, device="cuda", generator=gen), gate[1])
    if g is not None and case.get("gate16"):  # KDA's and GLA's gate in the input dtype, as the specification has it
        g = g.to(dt)
    beta = None if op == "gla" else torch.rand(b, t, hv, device="cuda", generator=gen) * 0.9 + 0.05
    state = 0.1 * torch.randn(n, hv, d, d, device="cuda", generator=gen)
    cu = None
    if seqlens:
        cu = torch.tensor([0] + seqlens, device="cuda").cumsum(0).to(torch.int32)
    return dict(q=q, k=k, v=v, g=g, beta=beta, state=state, cu=cu)


def train_inputs(case: dict, device: str = "cuda") -> dict:
    """Random inputs of a training row (same distributions as ours), in the layout our ops take:
    q, k (normalised), v and the output's gradient do in the row's dtype, with DeltaNet's betas in
    (0, 1) (BHSD) or GLA's log decays drawn as the row's ``gates`` say (BTHD), in fp32 (the row's dtype
    for a float64 row, or GLA's with ``gate16``)."""
    gen = torch.Generator(device=device).manual_seed(1)
    gla = case["op"] == "gla"
    b, t, h, d = case["batch"], case["tokens"], case["heads"], case["dim"]
    shape = (b, t, h, d) if gla else (b, h, t, d)
    dt = getattr(torch, case["dtype"])
    q = torch.randn(shape, device=device, generator=gen).to(dt)
    k = F.normalize(torch.randn(shape, device=device, generator=gen), dim=-1).to(dt)
    v = torch.randn(shape, device=device, generator=gen).to(dt)
    if gla:
        x = log_decays(case.get("gates", "benchmark"), shape,
                       lambda s: torch.randn(*s, device=device, generator=gen),
                       lambda s: torch.rand(*s, device=device, generator=gen), 16)
    else:
        x = torch.rand(shape[:3], device=device, generator=gen) * 0.9 + 0.05
    do = torch.randn(shape, device=device, generator=gen).to(dt)
    x = x.to(dt if dt == torch.float64 or gla and case.get("gate16") else torch.float32)
    return dict(q=q, k=k, v=v, do=do, **({"g": x} if gla else {"beta": x}))


def fla_train_runner(x: dict):
    """FLA's training step: the family's chunked function forward and its backward through autograd,
    the gradients of q, k, v and beta (DeltaNet: chunk_delta_rule in BTHD, scale 1 as our ops) or
    g (GLA: chunk_gla, BTHD already, scale K^-1/2) for ``do`` (torch.autograd.grad: o.backward(do)
    without accumulating into .grad across repeats). Returns them BTHD."""
    if "g" in x:
        from fla.ops.gla import chunk_gla

        leaves = [t.detach().clone().requires_grad_() for t in (x["q"], x["k"], x["v"], x["g"])]
        do, scale = x["do"], x["q"].shape[-1] ** -0.5

        def step():
            o, _ = chunk_gla(*leaves, scale=scale)
            return torch.autograd.grad(o, leaves, do)
        return step
    from fla.ops.delta_rule import chunk_delta_rule

    leaves = [t.transpose(1, 2).contiguous().requires_grad_() for t in (x["q"], x["k"], x["v"], x["beta"])]
    do = x["do"].transpose(1, 2).contiguous()

    def step():
        o, _ = chunk_delta_rule(*leaves, scale=1.0)
        return torch.autograd.grad(o, leaves, do)
    return step


def tileops_train_runner(x: dict):
    """The published TileOPs training step: the family's chunked forward op, then its backward op
    on what the forward saved (the same API as ours), betas and decays in the token dtype as it
    takes them."""
    import tileops.linear_attention as peer

    q, k, v, do = x["q"], x["k"], x["v"], x["do"]
    if "g" in x:
        # Its GLA forward returns (o, final_state, h); its backward takes (do, dfinal_state, q, k, v, g, h).
        forward, backward = peer.GLAChunkFwdOp(), peer.GLAChunkBwdOp()
        g = x["g"].to(q.dtype)

        def step():
            _, final, h = forward(q, k, v, g)
            return backward(do, torch.zeros_like(final), q, k, v, g, h)
        return step
    forward, backward = peer.DeltaNetChunkFwdOp(), peer.DeltaNetChunkBwdOp()
    beta = x["beta"].to(q.dtype)

    def step():
        _, *saved = forward(q, k, v, beta)
        return backward(do, q, k, v, beta, *saved)
    return step


def fla_runner(case: dict, x: dict):
    """FLA's function for the row: its fused recurrence for decode, its chunked form otherwise."""
    decode = case["tokens"] == 1 and not case["seqlens"]
    cu = None if x["cu"] is None else x["cu"].long()
    common = dict(initial_state=x["state"], output_final_state=True, cu_seqlens=cu)
    if case["op"] == "gdn":
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule as chunk, fused_recurrent_gated_delta_rule as step
        args, extra = (x["q"], x["k"], x["v"]), dict(g=x["g"], beta=x["beta"])
    elif case["op"] == "kda":
        from fla.ops.kda import chunk_kda as chunk, fused_recurrent_kda as step
        args, extra = (x["q"], x["k"], x["v"], x["g"], x["beta"]), {}
    elif case["op"] == "gla":
        from fla.ops.gla import chunk_gla as chunk, fused_recurrent_gla as step
        args, extra = (x["q"], x["k"], x["v"], x["g"]), {}  # the chunked form names it g, the recurrence gk
    else:
        from fla.ops.delta_rule import chunk_delta_rule as chunk, fused_recurrent_delta_rule as step
        args, extra = (x["q"], x["k"], x["v"], x["beta"]), {}
    fn = step if decode else chunk
    return lambda: fn(*args, **extra, **common)


def tileops_runner(case: dict, x: dict):
    """The published TileOPs op of the row's family (the same API as ours), its gates and betas
    in the token dtype as it takes them, int64 offsets."""
    import tileops.linear_attention as peer

    op = getattr(peer, {"gdn": "GDNFwdOp", "kda": "KDAFwdOp", "gla": "GLAFwdOp", "deltanet": "DeltaNetFwdOp"}[case["op"]])()
    dt = x["q"].dtype
    params = [p.to(dt) for p in (x["g"], x["beta"]) if p is not None]
    cu = None if x["cu"] is None else x["cu"].long()
    cu_cpu = None if cu is None else cu.cpu()
    return lambda: op(x["q"], x["k"], x["v"], *params, x["state"], cu, cu_cpu)


def runner(peer: str, case: dict):
    """A zero-argument callable running the peer on the row: its forward, or for a training row
    (entry "train") its forward and backward."""
    if case.get("entry") == "train":
        x = train_inputs(case)
        return fla_train_runner(x) if peer == "fla" else tileops_train_runner(x)
    x = inputs(case)
    return fla_runner(case, x) if peer == "fla" else tileops_runner(case, x)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--peer", choices=("fla", "tileops"), required=True)
    parser.add_argument("--cases", required=True, help="JSON list of rows")
    parser.add_argument("--hold", action="store_true",
                        help="After the first call of every row, print {\"warmed\": true} and time the rows "
                             "only once a line arrives on stdin (so that another peer's compiles never "
                             "overlap these timings)")
    args = parser.parse_args()

    def failed(case: dict, err: Exception) -> None:  # a peer that cannot run a row leaves a gap, not a crash
        print(json.dumps({"label": case["label"], "peer": args.peer, "ms": None,
                          "error": f"{type(err).__name__}: {err}"[:300]}), flush=True)
        traceback.print_exc(file=sys.stderr)

    ready = []  # (row, its runner) after a first call that compiled and autotuned it
    for case in json.loads(args.cases):
        try:
            fn = runner(args.peer, case)
            fn()
            torch.cuda.synchronize()
            ready.append((case, fn))
        except Exception as err:
            failed(case, err)
    if args.hold:
        print(json.dumps({"warmed": True}), flush=True)
        sys.stdin.readline()
    for case, fn in ready:
        try:
            ms = time_cuda(fn).median_ms
            print(json.dumps({"label": case["label"], "peer": args.peer, "ms": ms}), flush=True)
        except Exception as err:
            failed(case, err)


if __name__ == "__main__":
    main()
