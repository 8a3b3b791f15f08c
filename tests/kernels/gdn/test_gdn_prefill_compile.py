"""tl.gdn_prefill without a GPU: registration, refusals, config constraints, and compiling for sm_90a."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from tileops.callspec import CallSpec, make_flags
from tileops.kernels.gdn.prefill import KERNEL
from tileops.kernels.prefill_kernel import PrefillConfig, default, fused_config
from tileops.kernels.hardware import SMEM_BYTES
from tileops.kernels.plans.pieces import PIECE_WIDTHS
from tileops.kernels.plans.tiles import fused_smem_bytes
from tileops.kernels.registry import get_kernel
from tests.kernels.resources import assert_fits_an_sm, launch_smem, needs_nvcc, runtime_dims


def spec(mode: str = "prefill", dtype: torch.dtype = torch.bfloat16, heads: int = 16, value_heads: int = 32,
         dim: int = 128, batch: int = 2, device: str = "cuda", arch: str = "sm90", tokens: int = 4096,
         **flags) -> CallSpec:
    flags.setdefault("scale", dim ** -0.5)
    return CallSpec(op="gdn", entry="GDNFwdOp", mode=mode, dtype=dtype, device=torch.device(device), arch=arch,
                    device_name="NVIDIA H200", batch=batch, tokens=tokens, heads=heads, value_heads=value_heads,
                    dim_k=dim, dim_v=dim, flags=make_flags(**flags))


def test_registered_with_its_modules():
    kernel = get_kernel("tl.gdn_prefill")
    assert kernel.family == "gdn" and kernel.archs == frozenset({"sm90"})
    assert kernel.config_model is PrefillConfig


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


def test_serves_prefill_and_varlen():
    assert KERNEL.refuse(spec()) is None
    assert KERNEL.refuse(spec(mode="varlen", dtype=torch.float16, dim=64)) is None


def test_default_is_valid_and_splits_v_when_few_short_sequences():
    kernel = get_kernel("tl.gdn_prefill")
    few, many = spec(batch=1, tokens=512), spec(batch=16, tokens=512)
    assert default(few).block_v < default(many).block_v
    for call in (few, many, spec(dim=64, heads=2, value_heads=4), spec(batch=1)):
        kernel.validate_config(default(call), call)


def test_default_holds_the_state_value_major_once_64_wide_tiles_fill_half_the_sms():
    # Sequences too short to cut. 32 walks x 2 tiles = 64 CTAs: key-major; 64 walks x 2 = 128:
    # value-major, prefetching; 128 walks x 2 = 256: value-major in two waves, without prefetch.
    few, some, many = (default(spec(batch=b, tokens=512)) for b in (1, 2, 4))
    assert few.state_major == "key" and some.state_major == many.state_major == "value"
    assert not (few.fused or some.fused or many.fused)
    assert some.num_stages > many.num_stages


def test_every_value_of_the_space_is_valid_and_others_are_refused_by_name():
    kernel = get_kernel("tl.gdn_prefill")
    space = PrefillConfig.choices()
    assert set(space) == set(PrefillConfig.model_fields)
    for field, values in space.items():
        for value in values:
            assert getattr(kernel.validate_config({field: value}), field) == value
        numbers = [v for v in values if type(v) is int]
        outside = max(numbers) + 1 if numbers else "bogus"
        with pytest.raises(ValueError, match=field):
            kernel.validate_config({field: outside})


def test_the_tuner_can_reach_every_value_of_the_space():
    """Each value of each field belongs to some config that validates for a call the kernel serves."""
    import itertools

    kernel = get_kernel("tl.gdn_prefill")
    space = PrefillConfig.choices()
    calls = (spec(batch=8), spec(dim=64, heads=2, value_heads=4))
    seen = {field: set() for field in space}
    for values in itertools.product(*space.values()):
        config = dict(zip(space, values))
        for call in calls:
            try:
                kernel.validate_config(config, call)
            except ValueError:
                continue
            for field, value in config.items():
                seen[field].add(value)
            break
    assert seen == {field: set(values) for field, values in space.items()}


def test_default_fuses_once_every_sm_has_a_walk():
    # 8 sequences x 32 value heads = 256 walks >= 132 SMs; 4 x 32 = 128 walks of short sequences are too few.
    # Equal lengths no longer than a piece walk as one uncut piece each; longer ones whole.
    short, long = default(spec(batch=8)), default(spec(batch=8, tokens=16384))
    assert short.fused and long.fused
    assert short.piece_chunks * short.chunk_size >= 4096 and long.piece_chunks == 0
    packed = default(spec(mode="varlen", batch=16))
    assert packed.fused and packed.piece_chunks  # uncut pieces: one launch, longest first
    assert not default(spec(batch=4, tokens=512)).fused
    call = spec(batch=8)
    for stages in (2, 3):
        for moves in ("elementwise", "tma-output"):
            get_kernel("tl.gdn_prefill").validate_config(fused_config(128, walk_moves=moves, stages=stages), call)
            assert fused_smem_bytes(128, 2, stages, moves) <= SMEM_BYTES


@pytest.mark.parametrize("call", [dict(batch=1, tokens=32768), dict(batch=4, tokens=8192, value_heads=16),
                                  dict(batch=8, tokens=4096), dict(batch=8, tokens=16384), dict(batch=1, tokens=512),
                                  dict(mode="varlen", batch=16)])
def test_a_64_wide_state_is_fused_every_call_and_cut_as_a_128_wide_one(call):
    # At K = V = 64 the two-pass chain lost every row timed to the fused kernel with paired waits
    # and the pieces chosen as for 128-wide states (docs/benchmarks.md, 2026-12-06).
    narrow, wide = default(spec(dim=64, **call)), default(spec(**call))
    assert narrow.fused and narrow.walk_issue == "paired" and narrow.num_stages == 3
    assert narrow.piece_chunks == (wide.piece_chunks if wide.fused else PIECE_WIDTHS[-1])
    get_kernel("tl.gdn_prefill").validate_config(narrow, spec(dim=64, **call))


@pytest.mark.parametrize("config, dim, words", [
    (dict(block_v=128), 64, "does not divide"),
    (dict(block_v=128, threads=128), 128, "state cells"),
    (dict(state_major="value", block_v=32, threads=128), 128, "one warpgroup"),
    (dict(state_major="value", block_v=64, threads=256), 128, "threads = 2 \\* block_v"),
    (dict(block_v=128, threads=256, num_stages=2), 128, "shared memory"),
    (dict(min_blocks=2), 128, "min_blocks"),
    (dict(state_major="value", block_v=64, threads=128, fused=True), 128, "whole state"),
    (dict(block_v=128, threads=256, fused=True), 128, "whole state"),
    (dict(state_major="value", block_v=128, threads=256, num_stages=1, fused=True), 128, "num_stages=2"),
    (dict(state_major="value", block_v=64, threads=128, walk_moves="matrix"), 128, "fused kernel only"),
    (dict(block_v=32, threads=256, walk_issue="paired"), 128, "key-major chain takes walk_issue='serial'"),
    (dict(state_major="value", block_v=64, threads=128, num_stages=1, walk_issue="paired"), 128, "needs num_stages=2"),
    (dict(state_major="value", block_v=64, threads=128, walk_moves="tma-output"), 128, "fused kernel only"),
    (dict(block_v=32, threads=256, num_stages=3), 128, "the fused kernel's"),
])
def test_config_constraints(config, dim, words):
    kernel = get_kernel("tl.gdn_prefill")
    with pytest.raises(ValueError, match=words):
        kernel.validate_config(config, spec(dim=dim))


def compile_both(call: CallSpec, config: PrefillConfig):
    from tileops.kernels.launch.chunked_programs import compile_chain, compile_prep

    return compile_prep(config, call), compile_chain(config, call)


@needs_nvcc
def test_default_config_compiles_once_for_any_length():
    call = spec(batch=1, tokens=512)
    config = default(call)
    assert not config.fused
    prep, chain = compile_both(call, config)
    # Lengths and counts are run-time values: another batch and length reuse the compiled programs.
    assert runtime_dims(prep) and runtime_dims(chain)
    again = compile_both(spec(batch=5, tokens=1000), config)
    assert again[0] is prep and again[1] is chain
    for kernel in (prep, chain):
        assert_fits_an_sm(kernel, launch_smem(kernel))


@needs_nvcc
def test_varlen_with_every_transform_compiles():
    call = spec(mode="varlen", dtype=torch.float16, heads=2, value_heads=4, dim=64, batch=1000,
                use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True, allow_neg_eigval=True,
                state_v_first=True, use_gate_in_kernel=True)
    config = PrefillConfig(block_v=32, threads=128)
    prep, chain = compile_both(call, config)
    # The sequence count is a run-time value too.
    again = compile_both(replace(call, batch=3), config)
    assert again[0] is prep and again[1] is chain
    value_major = compile_both(call, PrefillConfig(state_major="value", block_v=64, threads=128))[1]
    assert value_major is not chain and runtime_dims(value_major)


@needs_nvcc
def test_fused_kernel_compiles_and_fits_an_sm():
    from tileops.kernels.launch.chunked import PrefillLauncher
    from tileops.kernels.launch.chunked_programs import compile_fused

    call = spec(batch=8, use_qk_l2norm_in_kernel=True)
    launcher = PrefillLauncher(default(call), call)
    assert launcher.prep is None and launcher.chain is None
    fused, config = launcher.fused, launcher.config
    # It launches with the shared memory the config check estimates, within the budget, and
    # holds its registers without spilling.
    assert launch_smem(fused) == fused_smem_bytes(128, 2, config.num_stages, config.walk_moves) <= SMEM_BYTES
    assert_fits_an_sm(fused, launch_smem(fused))
    # Lengths and piece counts are run-time values.
    assert compile_fused(config, replace(call, batch=3, tokens=777)) is fused


@needs_nvcc
@pytest.mark.parametrize("call, issue", [
    (spec(batch=8), "paired"),
    (spec(mode="varlen", dtype=torch.float16, heads=2, value_heads=4, dim=64, batch=40, state_v_first=True,
          use_qk_l2norm_in_kernel=True), "serial"),
], ids=["bf16-prefill-k128-paired", "fp16-varlen-k64"])
def test_fused_walk_variants_compile(call, issue):
    from tileops.kernels.launch.chunked_programs import compile_fused

    config = fused_config(call.dim_v, walk_moves="matrix", walk_issue=issue)
    get_kernel("tl.gdn_prefill").validate_config(config, call)
    variant = compile_fused(config, call)
    elementwise = compile_fused(fused_config(call.dim_v), call)
    assert variant.get_kernel_source() != elementwise.get_kernel_source()
    elem = call.dtype.itemsize
    assert launch_smem(variant) == fused_smem_bytes(call.dim_k, elem, 2, "matrix") <= SMEM_BYTES


@needs_nvcc
def test_fused_kernel_three_input_stages_fit_as_estimated():
    from tileops.kernels.launch.chunked_programs import compile_fused

    call = spec(mode="varlen", batch=16)
    ahead = fused_config(128, walk_moves="matrix", walk_issue="paired", stages=3)
    get_kernel("tl.gdn_prefill").validate_config(ahead, call)
    kernel = compile_fused(ahead, call)
    assert launch_smem(kernel) == fused_smem_bytes(128, 2, 3, "matrix") <= SMEM_BYTES
    two = compile_fused(fused_config(128, walk_moves="matrix"), call)
    assert launch_smem(two) == fused_smem_bytes(128, 2, 2, "matrix")


@needs_nvcc
def test_value_major_chain_with_paired_waits_compiles_within_the_sms_budgets():
    from tileops.kernels.launch.chunked_programs import compile_chain

    call = spec(batch=4, value_heads=16)
    serial = PrefillConfig(state_major="value", block_v=64, threads=128, num_stages=2)
    paired = serial.model_copy(update=dict(walk_issue="paired"))
    get_kernel("tl.gdn_prefill").validate_config(paired, call)
    chain = compile_chain(paired, call)
    assert_fits_an_sm(chain, launch_smem(chain), spills=True)  # ptxas spills a few bytes of this chain


@needs_nvcc
@pytest.mark.parametrize("dim", [128, 64])
def test_pieces_compile_with_their_warm_start_and_exact_schedule(dim):
    from tileops.kernels.launch.chunked import PrefillLauncher

    call = spec(batch=1, tokens=32768, dim=dim)
    config = default(call)
    assert config.fused and config.piece_chunks  # one long sequence is cut into pieces
    launcher = PrefillLauncher(config, call)
    for program in (launcher.warm_start, launcher.summary, launcher.piece_entries, launcher.fused):
        assert runtime_dims(program)  # lengths, pieces and jobs are run-time values
        assert_fits_an_sm(program, launch_smem(program))
    whole = PrefillLauncher(fused_config(128), spec(batch=8))
    assert whole.warm_start is None and whole.summary is None and whole.fused is not launcher.fused


@needs_nvcc
@pytest.mark.parametrize("call", [
    spec(mode="varlen", dtype=torch.float16, heads=2, value_heads=4, dim=64, state_v_first=True,
         use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True,
         allow_neg_eigval=True),
    spec(heads=4, value_heads=8, state_v_first=True),
], ids=["fp16-varlen-k64-every-transform", "bf16-k128-value-first"])
def test_the_exact_schedule_compiles_for_every_width_layout_and_transform(call):
    from tileops.kernels.launch.chunked_programs import compile_piece_entries, compile_summary

    config = fused_config(call.dim_v, walk_moves="tma-output", stages=3, piece_chunks=16)
    get_kernel("tl.gdn_prefill").validate_config(config, call)
    summary = compile_summary(config, call)
    usage = assert_fits_an_sm(summary, launch_smem(summary))
    assert launch_smem(summary) < fused_smem_bytes(call.dim_k, call.dtype.itemsize, 3, "tma-output")  # no q, M or output
    entries = compile_piece_entries(call)
    assert assert_fits_an_sm(entries, launch_smem(entries)).spilled == 0 and usage.spilled == 0
