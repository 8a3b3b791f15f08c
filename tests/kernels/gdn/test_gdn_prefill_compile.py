"""tl.gdn_prefill without a GPU: registration, refusals, config constraints, and compiling for sm_90a."""

from __future__ import annotations

import re
import shutil

import pytest
import torch

from tileops.callspec import CallSpec, make_flags
from tileops.kernels.gdn.prefill import GDNPrefillConfig, default, fused_config, refuse
from tileops.kernels.hardware import SMEM_BYTES
from tileops.kernels.plans.tiles import fused_smem_bytes
from tileops.kernels.registry import get_kernel

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is needed to compile for sm_90a")


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
    assert kernel.config_model is GDNPrefillConfig
    assert len(kernel.source_hash) == 16


@pytest.mark.parametrize("call, words", [
    (spec(device="cpu", arch="cpu"), "CUDA"),
    (spec(arch="sm80"), "sm90"),
    (spec(mode="decode"), "decode"),
    (spec(dtype=torch.float32), "float16 or bfloat16"),
    (spec(dim=96), "64- or 128-wide"),
    (spec(heads=3, value_heads=4), "multiple of H"),
])
def test_refuses_in_words(call, words):
    assert words in refuse(call)


def test_serves_prefill_and_varlen():
    assert refuse(spec()) is None
    assert refuse(spec(mode="varlen", dtype=torch.float16, dim=64)) is None


def test_default_is_valid_and_splits_v_when_few_short_sequences():
    kernel = get_kernel("tl.gdn_prefill")
    few, many = spec(batch=1, tokens=512), spec(batch=16, tokens=512)
    assert default(few).block_v < default(many).block_v
    for call in (few, many, spec(dim=64, heads=2, value_heads=4), spec(batch=1)):
        kernel.validate_config(default(call), call)


def test_default_holds_the_state_value_major_once_64_wide_tiles_fill_half_the_sms():
    # Sequences too short to cut. 32 walks x 2 tiles = 64 CTAs: key-major, 32-wide; 64 walks x 2 = 128:
    # value-major, prefetching; 128 walks x 2 = 256: value-major in two waves.
    few, some, many = (default(spec(batch=b, tokens=512)) for b in (1, 2, 4))
    assert (few.state_major, few.block_v) == ("key", 32)
    assert (some.state_major, some.block_v, some.threads, some.num_stages) == ("value", 64, 128, 2)
    assert (many.state_major, many.num_stages, many.fused) == ("value", 1, False)


def test_the_tuner_sees_every_layout():
    space = GDNPrefillConfig.choices()
    assert space["state_major"] == ("key", "value") and space["fused"] == (False, True)
    assert space["walk_moves"] == ("elementwise", "matrix", "tma-output")
    assert space["walk_issue"] == ("serial", "paired")
    assert space["min_blocks"] == (1,)
    assert space["num_stages"] == (1, 2, 3)


def test_default_fuses_once_every_sm_has_a_walk():
    # 8 sequences x 32 value heads = 256 walks >= 132 SMs; 4 x 32 = 128 walks of short sequences are too few.
    # Equal lengths no longer than a piece also walk as uncut pieces; longer ones whole.
    assert default(spec(batch=8)) == fused_config(128, walk_moves="tma-output", stages=3, piece_chunks=128)
    assert default(spec(batch=8, tokens=16384)) == fused_config(128, walk_moves="tma-output", stages=3)
    packed = default(spec(mode="varlen", batch=16))
    # Uncut pieces: one launch, longest first.
    assert packed == fused_config(128, walk_moves="tma-output", stages=3, piece_chunks=128)
    assert not default(spec(batch=4, tokens=512)).fused
    assert not default(spec(batch=64, dim=64, heads=2, value_heads=4)).fused  # measured at 128 only
    call = spec(batch=8)
    for stages in (2, 3):
        for moves in ("elementwise", "tma-output"):
            get_kernel("tl.gdn_prefill").validate_config(fused_config(128, walk_moves=moves, stages=stages), call)
            assert fused_smem_bytes(128, 2, stages, moves) <= SMEM_BYTES


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
    (dict(state_major="value", block_v=64, threads=128, walk_moves="tma-output"), 128, "fused kernel only"),
    (dict(block_v=32, threads=256, num_stages=3), 128, "the fused kernel's"),
])
def test_config_constraints(config, dim, words):
    kernel = get_kernel("tl.gdn_prefill")
    with pytest.raises(ValueError, match=words):
        kernel.validate_config(config, spec(dim=dim))


def compile_both(call: CallSpec, config: GDNPrefillConfig):
    from tileops.kernels.launch.chunked_programs import compile_chain, compile_prep

    return compile_prep(config, call), compile_chain(config, call)


@needs_nvcc
def test_default_config_compiles_once_for_any_length():
    call = spec()
    prep, chain = compile_both(call, default(call))
    source = chain.get_kernel_source()
    assert "wgmma" in source
    # Lengths and counts are kernel arguments, not constants baked into the program.
    assert "int seq_len" in source and "int tokens" in source
    assert "int tokens" in prep.get_kernel_source()
    # A second build of the same program is TileLang's cached kernel, not a new compile.
    again = compile_both(call, default(call))
    assert again[0] is prep and again[1] is chain


@needs_nvcc
def test_varlen_with_every_transform_compiles():
    call = spec(mode="varlen", dtype=torch.float16, heads=2, value_heads=4, dim=64, batch=1000,
                use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True, allow_neg_eigval=True,
                state_v_first=True, use_gate_in_kernel=True)
    config = GDNPrefillConfig(block_v=32, threads=128)
    prep, chain = compile_both(call, config)
    assert "cu_seqlens" in prep.get_kernel_source() and "cu_seqlens" in chain.get_kernel_source()
    assert "int nseq" in chain.get_kernel_source()
    # The WY solve's merge on the tensor cores, in the call's dtype.
    assert "tileops_gdn::wy_merge_f16(" in prep.get_kernel_source()
    # The value-major chain of the same call: its products take the state from registers.
    value_major = compile_both(call, GDNPrefillConfig(state_major="value", block_v=64, threads=128))[1]
    assert "wgmma_rs" in value_major.get_kernel_source()


@needs_nvcc
def test_fused_kernel_compiles_warp_specialised():
    from tileops.kernels.launch.chunked import PrefillLauncher

    call = spec(batch=8, use_qk_l2norm_in_kernel=True)
    launcher = PrefillLauncher(default(call), call)
    assert launcher.prep is None and launcher.chain is None
    source = launcher.fused.get_kernel_source()
    # Two state warpgroups take registers from the first-pass warpgroup; inputs arrive by cp.async
    # on the stage barriers; lengths stay run-time arguments (equal lengths walk as uncut pieces,
    # their bounds in tables).
    assert "__launch_bounds__(384, 1)" in source
    assert "warpgroup_reg_alloc<192>" in source and "warpgroup_reg_dealloc<120>" in source
    assert "mbarrier_cp_async_arrive_noinc" in source and "wgmma_rs" in source
    assert "int pieces" in source and "int tokens" in source and "__restrict__ begin" in source
    # The first pass works on its accumulators: decays and masks, then the inverse on mma.sync in
    # fp16, with no fp32 tile of A in shared memory.
    assert "tileops_gdn::chunk_pairs<true>(" in source and "tileops_gdn::chunk_inverse(" in source
    # The gates' prefix sums run while K Kᵀ and K Qᵀ do: between their issue and their wait.
    first_pass = source[source.index("tileops_gdn::chunk_gates<true>("):]
    assert first_pass.index("tl::wait_wgmma<0>();") < first_pass.index("tileops_gdn::chunk_pairs<true>(")
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16" in source and "wy_merge" not in source.split("}  // namespace")[-1]
    # T' and Mᵀ go to the stage by matrix stores; q, k and v arrive by the copy engine, one thread
    # issuing them, and the kernel launches with the shared memory the config check estimates.
    assert source.count("tileops_gdn::store_swizzled<__nv_bfloat16>(") == 2
    assert all(f"tl::tma_load({name}_desc" in source for name in "qkv") and "tl_shuffle_elect<256>" in source
    # By default three input stages: the first pass waits for the walk to leave a stage of its
    # results. The output goes out by the copy engine from two tiles of its own, whole chunks at
    # once (the last, cut at the sequence's end, row by row), its reads of a tile waited for a
    # chunk later.
    assert launcher.config.num_stages == 3 and "consumed[" in source and "void* o_s" in source
    assert "tl::tma_store(o_desc" in source and "tl::tma_store_wait<1, true>();" in source
    assert launch_smem(launcher.fused) == fused_smem_bytes(128, 2, 3, "tma-output") <= SMEM_BYTES


def walker_barriers(source: str) -> int:
    """How many barriers of the state warpgroups (TileLang's named barrier 3) a fused kernel's
    source holds, before and in its chunk loop."""
    return source.count("tl::__sync_thread_partial(3, ")


def product_waits(source: str) -> int:
    """How many waits for the tensor cores a kernel's source holds."""
    return source.count("tl::warpgroup_wait<0>();") + source.count("tl::wait_wgmma<0>();")


@needs_nvcc
@pytest.mark.parametrize("call, issue", [
    (spec(batch=8), "paired"),
    (spec(mode="varlen", dtype=torch.float16, heads=2, value_heads=4, dim=64, batch=40, state_v_first=True,
          use_qk_l2norm_in_kernel=True), "serial"),
], ids=["bf16-prefill-k128-paired", "fp16-varlen-k64"])
def test_fused_walk_variants_compile_with_fewer_barriers_and_waits(call, issue):
    from tileops.kernels.launch.chunked_programs import compile_fused

    variant = compile_fused(fused_config(call.dim_v, walk_moves="matrix", walk_issue=issue), call).get_kernel_source()
    elementwise = compile_fused(fused_config(call.dim_v), call).get_kernel_source()
    half = "__half" if call.dtype == torch.float16 else "__nv_bfloat16"
    # Vᵀ comes in and Oᵀ goes out by transposing 8 x 8 matrix moves, in the call's dtype.
    assert f"tileops_gdn::x_operand<{half}>(" in variant and f"tileops_gdn::output_rows<{half}>(" in variant
    assert "ldmatrix.sync.aligned.m8n8.x4.trans" in variant and "stmatrix.sync.aligned.m8n8.x4.trans" in variant
    assert "tileops_gdn::x_operand" not in elementwise and "tileops_gdn::output_rows" not in elementwise
    # Each warp stores the output columns it wrote, so the walk's warps meet less often.
    assert walker_barriers(variant) < walker_barriers(elementwise)
    # Paired, the walk waits three times a chunk instead of five.
    assert product_waits(variant) == product_waits(elementwise) - (2 if issue == "paired" else 0)


def launch_smem(kernel) -> int:
    """The dynamic shared memory a compiled TileLang kernel launches with: its host code's last
    integer launch argument."""
    return int(re.findall(r"v_int64\) = \(\(int64_t\)(\d+)\);", kernel.get_host_source())[-1])


@needs_nvcc
def test_fused_kernel_three_input_stages_fit_as_estimated():
    from tileops.kernels.launch.chunked_programs import compile_fused

    call = spec(mode="varlen", batch=16)
    ahead = fused_config(128, walk_moves="matrix", walk_issue="paired", stages=3)
    kernel = compile_fused(ahead, call)
    source = kernel.get_kernel_source()
    # The first pass waits for the walk to leave a stage of its results; the output goes out
    # through the chunk's V tile, so there is no output tile.
    assert "consumed[" in source and "void* o_s" not in source
    assert launch_smem(kernel) == fused_smem_bytes(128, 2, 3, "matrix") <= SMEM_BYTES
    get_kernel("tl.gdn_prefill").validate_config(ahead, call)
    # Two stages keep an output tile and no such barrier.
    two = compile_fused(fused_config(128, walk_moves="matrix"), call)
    assert "consumed[" not in two.get_kernel_source() and launch_smem(two) == fused_smem_bytes(128, 2, 2, "matrix")


@needs_nvcc
def test_value_major_chain_pairs_its_waits():
    from tileops.kernels.launch.chunked_programs import compile_chain

    call = spec(batch=4, value_heads=16)
    serial = GDNPrefillConfig(state_major="value", block_v=64, threads=128, num_stages=2)
    paired = serial.model_copy(update=dict(walk_issue="paired"))
    get_kernel("tl.gdn_prefill").validate_config(paired, call)
    waits = [product_waits(compile_chain(config, call).get_kernel_source()) for config in (serial, paired)]
    # Three waits a chunk instead of five, in each copy of the step the software pipeline makes.
    assert waits[1] * 5 == waits[0] * 3


@needs_nvcc
def test_pieces_compile_with_their_warm_start():
    from tileops.kernels.launch.chunked import PrefillLauncher

    call = spec(batch=1, tokens=32768)
    config = default(call)
    assert config == fused_config(128, walk_moves="tma-output", stages=3, piece_chunks=128)
    launcher = PrefillLauncher(config, call)
    walk, start = launcher.fused.get_kernel_source(), launcher.warm_start.get_kernel_source()
    # Each CTA walks its piece's warm-up, then the piece: bounds per (piece, value head), outputs
    # from the piece's own first token on.
    assert "__restrict__ start" in walk and "int pieces" in walk and "wgmma" in walk
    assert "logf" in start and "int has_init" in start and "break;" in start  # stops once the bound is low
    whole = PrefillLauncher(fused_config(128), spec(batch=8))
    assert whole.warm_start is None and "__restrict__ start" not in whole.fused.get_kernel_source()
