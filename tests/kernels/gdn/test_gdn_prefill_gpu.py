"""tl.gdn_prefill on an sm90 GPU against the float64 reference recurrence."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tileops.callspec import CallSpec, make_flags
from tileops.kernels.gdn.prefill import KERNEL
from tileops.kernels.hardware import sm_count
from tileops.kernels.plans.pieces import summary_span
from tileops.kernels.prefill_kernel import PrefillConfig, default, fused_config
from tileops.linear_attention import GDNFwdOp
from tileops.tuner.gate import in_float64, relative_error

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                       reason="needs an sm90 (Hopper) GPU"),
]

TOL = 2e-2  # bf16 / fp16 operands in every product, fp32 accumulation and state


def call_spec(*, mode, dtype, heads, value_heads, dim, batch, tokens, device_name=None, **flags) -> CallSpec:
    """The sm90 call; ``device_name`` defaults to this machine's GPU (given, it needs none)."""
    return CallSpec(op="gdn", entry="GDNFwdOp", mode=mode, dtype=dtype, device=torch.device("cuda"),
                    arch="sm90", device_name=device_name or torch.cuda.get_device_name(), batch=batch, tokens=tokens,
                    heads=heads, value_heads=value_heads, dim_k=dim, dim_v=dim,
                    flags=make_flags(scale=dim ** -0.5, **flags))


def inputs(gen, B, T, H, HV, D, dtype, *, n, init, logits, gate):
    def randn(*shape):
        return torch.randn(*shape, generator=gen, device="cuda")

    q, k = F.normalize(randn(B, T, H, D), dim=-1), F.normalize(randn(B, T, H, D), dim=-1)
    v = randn(B, T, HV, D)
    g = randn(B, T, HV) if gate else F.logsigmoid(randn(B, T, HV) + 2.0) * 0.5
    beta = randn(B, T, HV) if logits else torch.rand(B, T, HV, generator=gen, device="cuda") * 0.8 + 0.1
    h0 = randn(n, HV, D, D) * 0.1 if init else None
    a_log = torch.rand(HV, generator=gen, device="cuda") * 1.5 - 2.0 if gate else None
    dt_bias = 0.5 * randn(HV) if gate else None
    return [x.to(dtype) for x in (q, k, v, g, beta)], h0, a_log, dt_bias


OP_FLAGS = ("scale", "use_qk_l2norm_in_kernel", "use_beta_sigmoid_in_kernel", "allow_neg_eigval",
            "state_v_first", "use_gate_in_kernel")


def reference(q, k, v, g, beta, h0, a_log, dt_bias, cu, spec):
    """(o, final_state) of the float64 reference op on the same arguments."""
    op = GDNFwdOp(**{name: spec.flag(name) for name in OP_FLAGS if spec.flag(name) is not None}, target="reference")
    return op(*in_float64((q, k, v, g, beta, h0, cu, None, a_log, dt_bias)))


def rel(out, ref):
    assert torch.isfinite(out).all()
    return relative_error(out, ref)


CASES = [
    dict(dtype=torch.bfloat16, heads=4, value_heads=8, dim=128, lengths=(200, 263)),
    dict(dtype=torch.float16, heads=2, value_heads=4, dim=64, lengths=(130, 64), use_qk_l2norm_in_kernel=True,
         use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True),
    dict(dtype=torch.bfloat16, heads=2, value_heads=4, dim=64, lengths=(97,), state_v_first=True,
         use_beta_sigmoid_in_kernel=True, allow_neg_eigval=True),
]


# The call's default, and each layout forced: every feature case runs on each. The fused kernel's
# walk variants: "fused-matrix" moves Vᵀ and Oᵀ by transposing matrix loads and stores,
# "fused-paired" waits for its independent products in pairs, "fused-ahead" does both with three
# input stages, its first pass up to two chunks ahead, "fused-3" takes three input stages with the
# elementwise moves and an output tile, "fused-tma" (the large calls' default) stores whole output tiles by the copy engine;
# "value-paired" is the two-pass value-major chain with paired waits; "fused-pieces" cuts
# sequences into pieces of 16 chunks (the 1500-token one here); "fused-paired-3" is what a 64-wide
# state's default takes for many sequences too long to walk as one piece each.
FUSED_LAYOUTS = {"fused": {}, "fused-matrix": dict(walk_moves="matrix"), "fused-paired": dict(walk_issue="paired"),
                 "fused-paired-3": dict(walk_issue="paired", stages=3),
                 "fused-ahead": dict(walk_moves="matrix", walk_issue="paired", stages=3), "fused-3": dict(stages=3),
                 "fused-tma": dict(walk_moves="tma-output", stages=3), "fused-pieces": dict(piece_chunks=16)}
LAYOUTS = ("default", "key", "value", "value-paired", *FUSED_LAYOUTS)


def layout_config(layout: str, spec: CallSpec) -> PrefillConfig:
    """The config a test runs ``spec`` with in ``layout``."""
    if layout in FUSED_LAYOUTS:
        return fused_config(spec.dim_v, **FUSED_LAYOUTS[layout])
    value = dict(state_major="value", block_v=64, threads=128, num_stages=2)
    forced = {"key": dict(block_v=32, threads=256, num_stages=1), "value": value,
              "value-paired": dict(value, walk_issue="paired")}.get(layout)
    return default(spec) if forced is None else PrefillConfig(**forced)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("init", [False, True])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_equal_lengths_two_lengths_one_build(case, init, layout):
    from tileops.kernels.launch.chunked import PrefillLauncher

    case = dict(case)
    dtype, H, HV, D, lengths = (case.pop(n) for n in ("dtype", "heads", "value_heads", "dim", "lengths"))
    B = 3
    spec = call_spec(mode="prefill", dtype=dtype, heads=H, value_heads=HV, dim=D, batch=B, tokens=lengths[0], **case)
    assert KERNEL.refuse(spec) is None
    launch = PrefillLauncher(layout_config(layout, spec), spec)
    gen = torch.Generator(device="cuda").manual_seed(len(lengths) + init)
    for T in lengths:  # a new length runs on the same compiled kernels
        toks, h0, a_log, dt_bias = inputs(gen, B, T, H, HV, D, dtype, n=B, init=init,
                                          logits=spec.flag("use_beta_sigmoid_in_kernel"),
                                          gate=spec.flag("use_gate_in_kernel"))
        o, ht = launch(*toks, h0, None, None, a_log, dt_bias)
        ro, rh = reference(*toks, h0, a_log, dt_bias, None, spec)
        assert o.dtype == dtype and o.shape == (B, T, HV, D)
        assert rel(o, ro) < TOL and rel(ht, rh) < TOL


@pytest.mark.parametrize("lengths", [
    tuple(int(x) for x in torch.randint(0, 70, (1000,), generator=torch.Generator().manual_seed(0))),
    (1500,),
    (5, 64, 0, 129, 1, 700),
])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_packed_varlen(lengths, layout):
    from tileops.kernels.launch.chunked import PrefillLauncher

    H, HV, D, dtype = 2, 4, 64, torch.bfloat16
    n, T = len(lengths), sum(lengths)
    spec = call_spec(mode="varlen", dtype=dtype, heads=H, value_heads=HV, dim=D, batch=n, tokens=T,
                     use_qk_l2norm_in_kernel=True)
    launch = PrefillLauncher(layout_config(layout, spec), spec)
    gen = torch.Generator(device="cuda").manual_seed(n)
    toks, h0, _, _ = inputs(gen, 1, T, H, HV, D, dtype, n=n, init=True, logits=False, gate=False)
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
    o, ht = launch(*toks, h0, cu, cu.cpu(), None, None)
    ro, rh = reference(*toks, h0, None, None, cu, spec)
    assert rel(o, ro) < TOL and rel(ht, rh) < TOL


WIDE_LENGTHS = (5, 64, 0, 1100, 129, 1, 3001, 700)
WIDE_LAYOUTS = ("default", "fused", "fused-pieces")


@pytest.mark.parametrize("layout", WIDE_LAYOUTS)
def test_packed_wide_state_longest_first(layout):
    # A 128-wide state: the default walks these uncut, longest first, and "fused" in their order;
    # pieces of 16 cut the 3001 and 1100-token sequences, and their pieces run longest first too.
    from tileops.kernels.launch.chunked import PrefillLauncher

    lengths = WIDE_LENGTHS
    H, HV, D, dtype = 4, 32, 128, torch.bfloat16  # 256 walks: the default fuses
    n, T = len(lengths), sum(lengths)
    spec = call_spec(mode="varlen", dtype=dtype, heads=H, value_heads=HV, dim=D, batch=n, tokens=T)
    config = layout_config(layout, spec)
    assert config.fused and bool(config.piece_chunks) == (layout != "fused")
    launch = PrefillLauncher(config, spec)
    gen = torch.Generator(device="cuda").manual_seed(11)
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
    for init in (False, True):
        toks, h0, _, _ = inputs(gen, 1, T, H, HV, D, dtype, n=n, init=init, logits=False, gate=False)
        o, ht = launch(*toks, h0, cu, cu.cpu(), None, None)
        ro, rh = reference(*toks, h0, None, None, cu, spec)
        assert rel(o, ro) < TOL and rel(ht, rh) < TOL


def test_strided_inputs_from_one_projection():
    # q, k and v as views of one fused projection, as engines compute them: the launcher packs them.
    from tileops.kernels.launch.chunked import PrefillLauncher

    B, T, H, HV, D, dtype = 2, 300, 4, 32, 128, torch.bfloat16
    spec = call_spec(mode="prefill", dtype=dtype, heads=H, value_heads=HV, dim=D, batch=B, tokens=T)
    launch = PrefillLauncher(fused_config(D), spec)
    gen = torch.Generator(device="cuda").manual_seed(5)
    (q, k, v, g, beta), h0, _, _ = inputs(gen, B, T, H, HV, D, dtype, n=B, init=True, logits=False, gate=False)
    fused = torch.cat([q.flatten(2), k.flatten(2), v.flatten(2)], dim=-1)
    views = (fused[..., :H * D].view(B, T, H, D), fused[..., H * D:2 * H * D].view(B, T, H, D),
             fused[..., 2 * H * D:].view(B, T, HV, D))
    assert not any(x.is_contiguous() for x in views)
    o, ht = launch(*views, g, beta, h0, None, None, None, None)
    ro, rh = reference(q, k, v, g, beta, h0, None, None, None, spec)
    assert rel(o, ro) < TOL and rel(ht, rh) < TOL


def warm_begin_expected(k, g, beta, plan, l2norm, sequences):
    """Per (piece, value head) of ``plan``: where ``warm_start`` should begin and the row it should
    start from, from the bound computed in float64 on the host (a piece whose warm-up would reach
    back more than WARM_REACH chunks: its own start and entry row N + p), and how close the bound
    came to the cut."""
    from tileops.kernels.plans.entries import WARM_REACH
    from tileops.kernels.programs.warm_start import FORGOTTEN

    HV = g.shape[1]
    group = HV // k.shape[1]
    squares = torch.ones_like(g, dtype=torch.float64) if l2norm else (
        k.double().pow(2).sum(-1).repeat_interleave(group, dim=1))
    a = g.double() + torch.log((1 - beta.double() * squares).abs()).clamp(min=0)
    begins, rows, margin = [], [], float("inf")
    for p, (start, first, seq) in enumerate(zip(plan.start.tolist(), plan.first.tolist(), plan.seq.tolist())):
        begin_row, row_row = [], []
        for hv in range(HV):
            bound, at = 0.0, start
            while at > first and (start - at) // 64 < WARM_REACH:
                bound += float(a[at - 64:at, hv].sum())
                at -= 64
                if bound < FORGOTTEN:
                    break
            margin = min(margin, abs(bound - FORGOTTEN))
            exact = at > first and bound >= FORGOTTEN
            begin_row.append(start if exact else at)
            row_row.append(sequences + p if exact else (seq if at == first else -1))
        begins.append(begin_row)
        rows.append(row_row)
    return torch.tensor(begins, dtype=torch.int32), torch.tensor(rows, dtype=torch.int32), margin


@pytest.mark.parametrize("decay, l2norm, beta_max, walked", [
    (0.08, True, 1.0, "short"),  # real decays: a few chunks of warm-up
    (0.002, True, 1.0, "exact"),  # weak ones: beyond the reach, the exact entry
    (0.08, False, 1.0, None),  # keys of norm about 1.4: the bound's key term now and then
    (0.08, False, 2.0, "exact"),  # steps that stretch the state: the key term outgrows the decay
])
def test_warm_start_stops_where_the_bound_drops_below_fp32_roundoff(decay, l2norm, beta_max, walked):
    from tileops.kernels.plans.pieces import host_plan
    from tileops.kernels.launch.chunked_programs import compile_warm_start

    H, HV, D, T = 2, 4, 128, 8192
    spec = call_spec(mode="prefill", dtype=torch.bfloat16, heads=H, value_heads=HV, dim=D, batch=1, tokens=T,
                     use_qk_l2norm_in_kernel=l2norm)
    gen = torch.Generator(device="cuda").manual_seed(7)
    k = torch.randn(T, H, D, generator=gen, device="cuda").to(torch.bfloat16) * (1.0 if l2norm else 0.12)
    g = -decay * torch.rand(T, HV, generator=gen, device="cuda") * 2
    beta = torch.rand(T, HV, generator=gen, device="cuda") * beta_max
    plan = host_plan((T,), 16, 64, HV, torch.device("cuda"))
    begin = torch.empty(plan.count, HV, dtype=torch.int32, device="cuda")
    init_row = torch.empty_like(begin)
    no_gate = torch.zeros(HV, device="cuda")
    compile_warm_start(fused_config(D, piece_chunks=16), spec)(k, g, beta, no_gate, no_gate, plan.start, plan.first,
                                                              plan.seq, 1, 1, begin, init_row)
    expected, rows, margin = warm_begin_expected(k, g, beta, plan, l2norm, 1)
    assert margin > 1e-3  # no cut so close to the threshold that fp32 and float64 could disagree
    assert torch.equal(begin.cpu(), expected) and torch.equal(init_row.cpu(), rows)
    later = plan.start.cpu() > plan.first.cpu()
    if walked == "short":
        assert (plan.start.cpu()[later, None] - expected[later]).max() <= 8 * 64 and (rows < 1).all()
    elif walked == "exact":
        assert (rows[later] >= 1).all()


PIECE_CASES = [
    dict(dtype=torch.bfloat16, heads=4, value_heads=8, dim=128),
    dict(dtype=torch.float16, heads=2, value_heads=4, dim=64, use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
         use_beta_sigmoid_in_kernel=True, state_v_first=True),
    dict(dtype=torch.bfloat16, heads=2, value_heads=4, dim=128, use_beta_sigmoid_in_kernel=True,
         allow_neg_eigval=True),
]
PIECE_LENGTHS = (3000, 77, 1100, 0, 1024)  # the packed half of the test: two sequences cut, three whole


def gates_of(decay, g, a_log, dtype):
    """The test's gates under ``decay``: as drawn ("real": a few chunks' warm-up), 100x weaker (the
    exact entries), or none at all; an in-kernel gate's A_log moved to match."""
    if decay == "weak":
        g = (g.float() * 0.01).to(dtype)
        a_log = None if a_log is None else a_log - 4.0
    elif decay == "zero":
        g = torch.zeros_like(g) if a_log is None else g
        a_log = None if a_log is None else torch.full_like(a_log, -100.0)  # e^-100 times softplus: no decay
    return g, a_log


@pytest.mark.parametrize("case", PIECE_CASES)
@pytest.mark.parametrize("decay", ["real", "weak", "zero"])
def test_pieces_of_long_sequences_match_the_reference(case, decay):
    """Sequences cut into pieces of 16 chunks: under real decays each starts after a warm-up of a
    few chunks, under weak or no decays from its entry state by the exact schedule; equal lengths
    with an initial state, then packed lengths with and without host offsets."""
    from tileops.kernels.launch.chunked import PrefillLauncher

    case = dict(case)
    dtype, H, HV, D = (case.pop(n) for n in ("dtype", "heads", "value_heads", "dim"))
    B, T = 2, 2500
    spec = call_spec(mode="prefill", dtype=dtype, heads=H, value_heads=HV, dim=D, batch=B, tokens=T, **case)
    config = fused_config(D, piece_chunks=16)
    gen = torch.Generator(device="cuda").manual_seed(11)
    flags = dict(logits=spec.flag("use_beta_sigmoid_in_kernel"), gate=spec.flag("use_gate_in_kernel"))
    toks, h0, a_log, dt_bias = inputs(gen, B, T, H, HV, D, dtype, n=B, init=True, **flags)
    toks[3], a_log = gates_of(decay, toks[3], a_log, dtype)
    o, ht = PrefillLauncher(config, spec)(*toks, h0, None, None, a_log, dt_bias)
    ro, rh = reference(*toks, h0, a_log, dt_bias, None, spec)
    assert rel(o, ro) < TOL and rel(ht, rh) < TOL

    lengths = PIECE_LENGTHS
    varlen = call_spec(mode="varlen", dtype=dtype, heads=H, value_heads=HV, dim=D, batch=len(lengths),
                       tokens=sum(lengths), **case)
    launch = PrefillLauncher(config, varlen)
    for init in (True, False):
        toks, h0, a_log, dt_bias = inputs(gen, 1, sum(lengths), H, HV, D, dtype, n=len(lengths), init=init,
                                          **flags)
        toks[3], a_log = gates_of(decay, toks[3], a_log, dtype)
        cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
        ro, rh = reference(*toks, h0, a_log, dt_bias, cu, varlen)
        for host in (cu.cpu(), None):  # without host offsets the sequences are walked whole
            o, ht = launch(*toks, h0, cu, host, a_log, dt_bias)
            assert rel(o, ro) < TOL and rel(ht, rh) < TOL


SPAN_CASES = PIECE_CASES[:2]
SPAN_CALLS = (("prefill", (5000, 5000), True), ("varlen", PIECE_LENGTHS, False))


@pytest.mark.parametrize("case", SPAN_CASES)
@pytest.mark.parametrize("decay", ["weak", "zero"])
def test_summaries_over_spans_shorter_than_a_piece_match_the_reference(case, decay):
    """Pieces of 32 chunks summarised over spans of 16 (what the plan picks where whole pieces'
    jobs spill over a wave): the states inside a piece go through the first piece's entry row;
    equal lengths in three pieces with an initial state, packed lengths with one cut sequence."""
    from tileops.kernels.launch.chunked import PrefillLauncher

    case = dict(case)
    dtype, H, HV, D = (case.pop(n) for n in ("dtype", "heads", "value_heads", "dim"))
    config = fused_config(D, piece_chunks=32)
    gen = torch.Generator(device="cuda").manual_seed(5)
    flags = dict(logits=case.get("use_beta_sigmoid_in_kernel", False), gate=case.get("use_gate_in_kernel", False))
    for mode, lengths, init in SPAN_CALLS:
        varlen = mode == "varlen"
        spec = call_spec(mode=mode, dtype=dtype, heads=H, value_heads=HV, dim=D, batch=len(lengths),
                         tokens=sum(lengths) if varlen else lengths[0], **case)
        launch = PrefillLauncher(config, spec)
        launch.summary_span = lambda lengths: 16
        B, T = (1, sum(lengths)) if varlen else (len(lengths), lengths[0])
        toks, h0, a_log, dt_bias = inputs(gen, B, T, H, HV, D, dtype, n=len(lengths), init=init, **flags)
        toks[3], a_log = gates_of(decay, toks[3], a_log, dtype)
        cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device="cuda") \
            if varlen else None
        o, ht = launch(*toks, h0, cu, None if cu is None else cu.cpu(), a_log, dt_bias)
        ro, rh = reference(*toks, h0, a_log, dt_bias, cu, spec)
        assert rel(o, ro) < TOL and rel(ht, rh) < TOL


@pytest.mark.parametrize("D, decay", [(128, "weak"), (64, "weak"), (64, "real")])
def test_the_exact_schedule_serves_few_long_sequences_by_default(D, decay):
    # B1 x T32768 at HV32 (the benchmark's few-long-sequences row): the default cuts it into
    # pieces, and under gates that barely decay the pieces start from exact entries (under real
    # ones, after warm-ups).
    from tileops.kernels.launch.chunked import PrefillLauncher

    H, HV, T, dtype = 16, 32, 32768, torch.bfloat16
    spec = call_spec(mode="prefill", dtype=dtype, heads=H, value_heads=HV, dim=D, batch=1, tokens=T)
    config = default(spec)
    assert config.fused and config.piece_chunks
    # Four pieces a head, 160 summaries of whole pieces for 132 SMs: the summaries walk half pieces.
    assert summary_span((T,), config.chunk_size, config.piece_chunks, HV, sm_count(spec.device, spec.arch)) < \
        config.piece_chunks
    gen = torch.Generator(device="cuda").manual_seed(3)
    toks, h0, _, _ = inputs(gen, 1, T, H, HV, D, dtype, n=1, init=True, logits=False, gate=False)
    if decay == "weak":
        toks[3] = torch.full_like(toks[3], -1e-3)
    o, ht = PrefillLauncher(config, spec)(*toks, h0, None, None, None, None)
    ro, rh = reference(*toks, h0, None, None, None, spec)
    assert rel(o, ro) < TOL and rel(ht, rh) < TOL


@pytest.mark.parametrize("layout", ["default", "value", "fused", "fused-pieces"])
def test_a_full_reset_is_exact_in_every_prefill_program(layout):
    # A log decay of -inf (a full reset) at a chunk's first token, inside a chunk and at a piece's
    # first token, in equal and packed calls: every output finite and as the reference's.
    from tileops.kernels.launch.chunked import PrefillLauncher

    H, HV, D, dtype, T = 2, 4, 64, torch.bfloat16, 2500
    spec = call_spec(mode="prefill", dtype=dtype, heads=H, value_heads=HV, dim=D, batch=2, tokens=T)
    launch = PrefillLauncher(layout_config(layout, spec), spec)
    gen = torch.Generator(device="cuda").manual_seed(13)
    toks, h0, _, _ = inputs(gen, 2, T, H, HV, D, dtype, n=2, init=True, logits=False, gate=False)
    for t in (0, 5, 64, 1024, 1030, T - 1):
        toks[3][:, t, ::2] = float("-inf")
    o, ht = launch(*toks, h0, None, None, None, None)
    ro, rh = reference(*toks, h0, None, None, None, spec)
    assert rel(o, ro) < TOL and rel(ht, rh) < TOL


def test_huge_a_log_in_the_kernels_gate_is_a_reset_not_nan():
    # exp(A_log) overflows fp32 from A_log = 89: the in-kernel gate then forgets the state (or,
    # where softplus underflows, keeps it), never NaN.
    from tileops.kernels.launch.chunked import PrefillLauncher

    H, HV, D, dtype, T = 2, 4, 64, torch.bfloat16, 2500
    spec = call_spec(mode="prefill", dtype=dtype, heads=H, value_heads=HV, dim=D, batch=1, tokens=T,
                     use_gate_in_kernel=True)
    gen = torch.Generator(device="cuda").manual_seed(17)
    toks, h0, a_log, dt_bias = inputs(gen, 1, T, H, HV, D, dtype, n=1, init=True, logits=False, gate=True)
    a_log = torch.tensor([89.0, 120.0, 0.0, -3.0], device="cuda")
    toks[3][0, ::7, 1] = -200.0  # softplus underflows: e^A_log times 0
    for config in (default(spec), fused_config(D), fused_config(D, piece_chunks=16)):
        o, ht = PrefillLauncher(config, spec)(*toks, h0, None, None, a_log, dt_bias)
        ro, rh = reference(*toks, h0, a_log, dt_bias, None, spec)
        assert rel(o, ro) < TOL and rel(ht, rh) < TOL


@pytest.mark.parametrize("layout", ["default", "key", "value", "fused", "fused-pieces"])
def test_wrong_device_offsets_stay_inside_the_tensors(layout):
    # Offsets on the device that contradict the tokens (past the end, negative, decreasing) are
    # not checked without a host sync; the kernels clamp them: the call completes, and the next
    # call with true offsets is right (a write out of bounds would have faulted the context).
    from tileops.kernels.launch.chunked import PrefillLauncher

    H, HV, D, dtype, lengths = 2, 4, 64, torch.bfloat16, (300, 5, 700)
    T = sum(lengths)
    spec = call_spec(mode="varlen", dtype=dtype, heads=H, value_heads=HV, dim=D, batch=len(lengths), tokens=T)
    launch = PrefillLauncher(layout_config(layout, spec), spec)
    gen = torch.Generator(device="cuda").manual_seed(19)
    toks, h0, _, _ = inputs(gen, 1, T, H, HV, D, dtype, n=len(lengths), init=True, logits=False, gate=False)
    for wrong in ([0, 5000, -7, 1000], [-100, 900, 200, 1 << 30], [T, 0, T, 3]):
        launch(*toks, h0, torch.tensor(wrong, dtype=torch.int32, device="cuda"), None, None, None)
        torch.cuda.synchronize()
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
    o, ht = launch(*toks, h0, cu, None, None, None)
    ro, rh = reference(*toks, h0, None, None, cu, spec)
    assert rel(o, ro) < TOL and rel(ht, rh) < TOL
