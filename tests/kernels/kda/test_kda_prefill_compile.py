"""tl.kda_prefill without a GPU: registration, refusals, the default, dispatch's choice for every
flag KDAFwdOp takes, and both passes compiled for sm_90a (registers, spills, shared memory)."""

from __future__ import annotations

import itertools
import re

import pytest
import torch

from tileops import dispatch
from tileops.callspec import CallSpec, make_flags
from tileops.kernels.channel_prefill_kernel import ChannelPrefillConfig
from tileops.kernels.kda.prefill import KERNEL
from tests.kernels.resources import assert_fits_an_sm, blocks_per_sm, launch_smem, needs_nvcc, runtime_dims


def spec(mode: str = "prefill", dtype: torch.dtype = torch.bfloat16, heads: int = 32, value_heads: int = 32,
         dim: int = 128, batch: int = 4, device: str = "cuda", arch: str = "sm90", tokens: int = 8192,
         **flags) -> CallSpec:
    flags.setdefault("scale", dim ** -0.5)
    return CallSpec(op="kda", entry="KDAFwdOp", mode=mode, dtype=dtype, device=torch.device(device), arch=arch,
                    device_name="NVIDIA H200", batch=batch, tokens=tokens, heads=heads, value_heads=value_heads,
                    dim_k=dim, dim_v=dim, flags=make_flags(**flags))


@pytest.mark.parametrize("call, words", [
    (spec(device="cpu", arch="cpu"), "CUDA"),
    (spec(arch="sm80"), "sm90"),
    (spec(mode="decode"), "decode"),
    (spec(dtype=torch.float32), "float16 or bfloat16"),
    (spec(dim=96), "64- or 128-wide"),
    (spec(heads=3, value_heads=4), "multiple of H"),
])
def test_refuses_in_words(call, words):
    assert words in KERNEL.refuse(call)


FLAGS = [dict(zip(("use_qk_l2norm_in_kernel", "use_beta_sigmoid_in_kernel", "state_v_first", "use_gate_in_kernel"),
                  values)) for values in itertools.product((False, True), repeat=4)]


@pytest.mark.parametrize("mode", ["prefill", "varlen"])
@pytest.mark.parametrize("dim", [64, 128])
@pytest.mark.parametrize("flags", FLAGS, ids=lambda f: "-".join(k for k, v in f.items() if v) or "plain")
def test_dispatch_serves_every_flag_in_tree(mode, dim, flags):
    """Every flag combination of KDAFwdOp's prefill at K = V ∈ {64, 128} goes to the in-tree kernel,
    whose default fits the call."""
    extra = dict(allow_neg_eigval=True) if flags["use_beta_sigmoid_in_kernel"] else {}
    if flags["use_gate_in_kernel"]:
        extra.update(lower_bound=-5.0, has_dt_bias=True)
    call = spec(mode=mode, dim=dim, heads=4, value_heads=8, batch=1 if mode == "varlen" else 2, **flags, **extra)
    explanation = dispatch.explain_spec("KDAFwdOp", None, call)
    assert explanation.kernel == "tl.kda_prefill", explanation
    KERNEL.validate_config(KERNEL.default(call), call)


def test_the_default_takes_one_stage_only_where_the_call_is_cut():
    from tileops.kernels.gla.prefill import KERNEL as GLA

    assert KERNEL.default(spec(batch=4)) == ChannelPrefillConfig(num_stages=2)  # 256 tiles, uncut
    assert KERNEL.default(spec(batch=1, tokens=32768)) == ChannelPrefillConfig(num_stages=2)  # H32: three walks do not pay
    assert KERNEL.default(spec(batch=1, tokens=32768, heads=8, value_heads=8)) == ChannelPrefillConfig(num_stages=1)
    gla = spec(batch=1, tokens=32768, heads=16, value_heads=16)
    assert GLA.default(gla) == ChannelPrefillConfig(num_stages=1)
    assert GLA.default(spec(batch=4, heads=16, value_heads=16)) == ChannelPrefillConfig(num_stages=2)


@pytest.mark.parametrize("gate", [torch.bfloat16, torch.float32])
def test_the_call_says_which_dtype_its_gate_comes_in(gate):
    """A per-channel gate in the input dtype (the specification's) or in fp32: the spec says which
    (the tuning key does not: only the first pass reads g), and the first pass reads it so."""
    from tileops.linear_attention import GLAChunkFwdOp, GLAFwdOp, KDAFwdOp

    q = torch.randn(1, 64, 2, 64, dtype=torch.bfloat16)
    g = -torch.rand(1, 64, 2, 64).to(gate)
    for op, args in ((KDAFwdOp(), (q, q, q, g, torch.rand(1, 64, 2))), (GLAFwdOp(), (q, q, q, g)),
                     (GLAChunkFwdOp(), (q, q, q, g))):
        call, _ = op.describe(*args)
        assert call.flag("gate_dtype") == (None if gate == torch.bfloat16 else "float32")
        assert "gate_dtype" not in dict(call.tuned_flags) and call.gate_dtype == gate


@needs_nvcc
@pytest.mark.parametrize("call, config, gate", [
    (spec(gate_dtype="float32"), ChannelPrefillConfig(), "float"),
    (spec(mode="varlen", batch=1, dim=64, heads=2, value_heads=4, dtype=torch.float16, use_qk_l2norm_in_kernel=True,
          use_beta_sigmoid_in_kernel=True, allow_neg_eigval=True, state_v_first=True, use_gate_in_kernel=True,
          lower_bound=-5.0), ChannelPrefillConfig(num_stages=1), "half_t"),
], ids=["bf16-k128-fp32-gate", "fp16-k64-packed-every-flag"])
def test_both_passes_compile_for_sm90a(call, config, gate):
    launcher = KERNEL.build(config, call)
    for program in (launcher.prep, launcher.chain):
        assert "tokens" in runtime_dims(program)  # lengths and counts are run-time values
        assert_fits_an_sm(program, launch_smem(program))
    prep = launcher.prep.get_kernel_source()
    assert "decay" in prep and "ku" in launcher.chain.get_kernel_source()
    assert re.search(rf"\b{gate}\* __restrict__ g\b", prep)  # g read as the call passes it


@needs_nvcc
def test_two_first_passes_share_an_sm():
    """The first pass is latency-bound: a second block on the SM hides what one block waits for.
    At K = 128 its q, k and γ tiles, the products' operands and the solve's must fit half an SM."""
    assert blocks_per_sm(KERNEL.build(ChannelPrefillConfig(), spec()).prep) >= 2



@needs_nvcc
def test_few_long_sequences_compile_their_cut_with_the_transitions():
    """B1×T32768 H16: 32 walks of one CTA for 132 SMs, cut in four pieces of 128 windows (three
    walks of 128 against one of 512); at H32 (64 walks) three walks of a piece would not pay."""
    from tileops.kernels.launch.chunked_channel import ChannelPrefillLauncher

    cpu = torch.device("cpu")
    long_one = ChannelPrefillLauncher(ChannelPrefillConfig(), spec(batch=1, tokens=32768, heads=16, value_heads=16))
    assert long_one.cut_plan((32768,), cpu).count == 4 and long_one.cut_plan((8192,) * 4, cpu) is None
    for program in (long_one.cut_prep, long_one.cut_chain, long_one.cut_finals, long_one.cut_transition):
        assert "cu_seqlens" in program.get_kernel_source()
        assert_fits_an_sm(program, launch_smem(program))
    # The walks for a piece's final state and its transition read neither Q_o nor M and write no
    # output; the transition's reads no V either.
    chain, finals, transition = (program.get_kernel_source() for program in
                                 (long_one.cut_chain, long_one.cut_finals, long_one.cut_transition))
    touches = {program: {name for name in ("q", "m", "o", "v", "h0") if re.search(rf"__restrict__ {name}\b", program)}
               for program in (chain, finals, transition)}  # the kernel's parameters: those it touches
    assert touches == {chain: {"q", "m", "o", "v", "h0"}, finals: {"v", "h0"}, transition: set()}
    # The entries: a thread's row of a 32-column tile in registers, the tile in shared memory, no spills.
    usage = assert_fits_an_sm(long_one.cut_entries, launch_smem(long_one.cut_entries))
    assert usage.registers <= 128 and {"pieces", "seqs"} <= runtime_dims(long_one.cut_entries)
    assert launch_smem(long_one.cut_entries) == 128 * 32 * 4
    for walked_whole in (spec(batch=1, tokens=32768), spec(batch=1, tokens=32768, heads=16, value_heads=16,
                                                           state_v_first=True)):
        assert ChannelPrefillLauncher(ChannelPrefillConfig(), walked_whole).cut_chain is None
