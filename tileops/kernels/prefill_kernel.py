"""The chunked prefill kernel of the delta-rule families, for Hopper, in two passes or in one.

1. ``chunk_prep``: per (value head, 64-token window), fully parallel: input transforms, γ, the
   WY solve T' = (I + A)⁻¹ diag(β), the chunk's masked attention M and the per-row decays.
2. the chain: per (V tile, value head, sequence), sequential over the sequence's chunks:
   Δ = T'(V − e^γ K S), the outputs and the state update, the state in registers. Two layouts
   of it: key-major (``programs.chain_key``: S, K × block_v, any V tile down to 32 columns, so a few
   long sequences still fill the GPU) and value-major (``programs.chain_value``: Sᵀ, every
   product reads its left operand from registers; faster once 64-column tiles fill the SMs).

``fused`` (``chunk_fused``) runs both in one warp-specialised kernel per (sequence, value head):
the value-major walk over the whole state, and one more warpgroup that forms the next chunk's
T', M and decays in shared memory meanwhile, so that neither goes through global memory. With
``piece_chunks`` it walks pieces of the sequences instead (``pieces``), so that few long
sequences still fill the SMs: each after a short warm-up walk of the chunks before it where the
decays forget the earlier state within a few chunks (``warm_start``), else from its exact entry
state (``plans.entries``), whatever the gates. Without a gate (DeltaNet) the programs read no g
and every cut piece takes its exact entry state.

A family registers it with ``register_prefill``: its name, whether it has a gate and its ops'
argument order; the config space (chunk length; the chain's layout, V tile, threads, pipeline
depth), the refusals, the default and the plan are shared.
"""

from __future__ import annotations

from typing import Literal, Optional

from tileops.callspec import CallSpec
from tileops.kernels.base import KernelDef
from tileops.kernels.config import TiledConfig
from tileops.kernels.calls import shape_problem
from tileops.kernels.hardware import MAX_STATE_CELLS, SMEM_BYTES, WARPGROUP, sm_count
from tileops.kernels.launch.chunked import PrefillLauncher
from tileops.kernels.plans.entries import WARM_REACH
from tileops.kernels.plans.pieces import PIECE_WIDTHS, piece_width, summary_jobs, summary_span, summary_tile
from tileops.kernels.plans.tiles import FUSED_CHUNK, FUSED_STAGES, chain_smem_bytes, fused_smem_bytes
from tileops.kernels.registry import register


class PrefillConfig(TiledConfig):
    """The chain's layout and tiling: ``block_v`` state columns per CTA, its threads, stages and CTAs
    per SM. Value-major takes one warpgroup per 64 columns: ``threads`` = 2 · ``block_v``.
    ``fused`` runs the value-major walk over the whole state (``block_v`` = V) with the first
    pass in the same kernel, on one more warpgroup than ``threads`` counts; its ``num_stages``
    are its input stages, 2 or 3 (with 3 and the matrix moves its output goes out through the V
    tile instead of a tile of its own; the copy engine's output takes two tiles). ``walk_moves`` and
    ``walk_issue``: how the fused walk moves Vᵀ into registers and Oᵀ out, element by element
    (Oᵀ stored row by row, or whole tiles by the copy engine: ``"tma-output"``) or by transposing
    8 × 8 matrix loads and stores (``walk_moves``, fused only), and whether a
    value-major walk's independent products wait one by one or in pairs (``walk_issue``, the
    fused kernel and the value-major chain). ``piece_chunks`` (fused only): cut sequences longer
    than that many chunks into pieces walked side by side; 0 walks every sequence whole. A piece
    after the first starts from a short warm-up walk of the chunks before it where the decays
    forget the earlier state within ``plans.entries.WARM_REACH`` chunks (``warm_start``), else
    from its entry state by the exact schedule of ``plans.entries``, whose time does not depend on
    the gates."""

    chunk_size: Literal[64] = 64
    state_major: Literal["key", "value"] = "key"
    block_v: Literal[32, 64, 128] = 64
    threads: Literal[128, 256] = 256
    num_stages: Literal[1, 2, 3] = 2
    min_blocks: Literal[1] = 1  # no occupancy hint; the field keeps stored configs valid
    fused: Literal[False, True] = False
    walk_moves: Literal["elementwise", "matrix", "tma-output"] = "elementwise"
    walk_issue: Literal["serial", "paired"] = "serial"
    piece_chunks: Literal[(0,) + PIECE_WIDTHS] = 0

    def problem(self, spec: CallSpec) -> Optional[str]:
        return tile_problem(self, spec.dim_k, spec.dim_v, spec.dtype.itemsize)


def fused_problem(config: PrefillConfig, dim_k: int, dim_v: int, elem: int) -> Optional[str]:
    """Why ``config`` cannot run fused, or None."""
    if (config.state_major, config.block_v, config.threads) != ("value", dim_v, 2 * dim_v):
        return (f"the fused kernel walks the whole state value-major: state_major='value', block_v={dim_v}, "
                f"threads={2 * dim_v}, not {config.state_major!r}, {config.block_v}, {config.threads}")
    if config.chunk_size != FUSED_CHUNK or config.num_stages < FUSED_STAGES:
        return (f"the fused kernel takes chunk_size={FUSED_CHUNK} and num_stages={FUSED_STAGES} or 3 (its input "
                f"stages), not {config.chunk_size}, {config.num_stages}")
    smem = fused_smem_bytes(dim_k, elem, config.num_stages, config.walk_moves)
    if smem > SMEM_BYTES:
        return f"the fused kernel needs {smem} bytes of shared memory, more than {SMEM_BYTES}"
    return None


def fused_config(dim_v: int, walk_moves: str = "elementwise", walk_issue: str = "serial",
                 stages: int = FUSED_STAGES, piece_chunks: int = 0) -> PrefillConfig:
    """The fused kernel's config for a V-wide state."""
    return PrefillConfig(state_major="value", block_v=dim_v, threads=2 * dim_v, num_stages=stages,
                            fused=True, walk_moves=walk_moves, walk_issue=walk_issue, piece_chunks=piece_chunks)


def paired_problem(walk_issue: str, num_stages: int) -> Optional[str]:
    """Why a two-pass chain cannot pair its products' waits at this pipeline depth, or None.
    TileLang's software pipeline refills a stage's tiles right after the last product that reads
    them; it takes a paired product for finished when issued, so with one stage the next chunk's
    tiles land while the products still read this chunk's."""
    if walk_issue == "paired" and num_stages < 2:
        return ("walk_issue='paired' needs num_stages=2: with one stage the next chunk's tiles would be loaded "
                "while the paired products still read this chunk's")
    return None


def register_problem(config: PrefillConfig, dim_k: int) -> Optional[str]:
    """Why the chain's threads cannot hold their share of the state, or None."""
    if config.state_major == "value":
        if config.block_v < 64 or config.threads != 2 * config.block_v:
            return (f"the value-major chain takes one warpgroup (128 threads) per 64 state columns: "
                    f"block_v 64 or 128 with threads = 2 * block_v, not block_v={config.block_v}, "
                    f"threads={config.threads}")
        return None
    cells = dim_k * config.block_v // config.threads
    if cells > MAX_STATE_CELLS:
        return (f"{config.threads} threads would hold {cells} state cells each (at most {MAX_STATE_CELLS}); "
                f"use more threads or a smaller block_v")
    return None


def tile_problem(config: PrefillConfig, dim_k: int, dim_v: int, elem: int) -> Optional[str]:
    """Why ``config`` cannot tile a K x V state, or None."""
    if config.piece_chunks and not config.fused:
        return (f"piece_chunks={config.piece_chunks} cuts sequences for the fused kernel; the two-pass chain "
                f"walks them whole (piece_chunks=0)")

    if config.fused:
        return fused_problem(config, dim_k, dim_v, elem)
    if config.num_stages > 2:
        return (f"num_stages={config.num_stages} is the fused kernel's (its input stages); the two-pass chain "
                f"pipelines 1 or 2")
    if config.walk_moves != "elementwise":
        return (f"walk_moves={config.walk_moves!r} serves the fused kernel only (the two-pass chain's software "
                f"pipeline orders its tiles by what it sees TileLang load); use walk_moves='elementwise'")
    if config.walk_issue != "serial" and config.state_major != "value":
        return (f"walk_issue={config.walk_issue!r} pairs the value-major walk's products; the key-major chain "
                f"takes walk_issue='serial'")
    problem = paired_problem(config.walk_issue, config.num_stages)
    if problem:
        return problem
    if dim_v % config.block_v:
        return f"block_v={config.block_v} does not divide V={dim_v}"
    problem = register_problem(config, dim_k)
    if problem:
        return problem
    smem = chain_smem_bytes(config.chunk_size, dim_k, config.block_v, config.num_stages, config.state_major == "key",
                            elem)
    if smem > SMEM_BYTES:
        return (f"the chain needs {smem} bytes of shared memory (at most {SMEM_BYTES}); use fewer stages or a "
                f"smaller block_v")
    return None


def prefill_problem(name: str, spec: CallSpec) -> Optional[str]:
    """Why prefill kernel ``name`` cannot serve ``spec``, or None."""
    if spec.device.type != "cuda":
        return f"{name} runs on CUDA devices; this call is on {spec.device.type}"
    if spec.arch != "sm90":
        return f"{name} is built for sm90 (Hopper: wgmma); the device is {spec.arch}"
    if spec.mode == "decode":
        return f"{name} serves prefill; single-token calls go to the decode kernel"
    if spec.mode not in ("prefill", "varlen"):
        return f"{name} serves prefill and packed varlen calls, not {spec.mode}"
    problem = shape_problem(name, spec)
    if problem:
        return problem
    if spec.tokens < 1 or spec.batch < 1:
        return f"{name} needs at least one token and one sequence"
    return None


# Measured on the H200 (bf16, K = V = 128, 2026-11-30, ``bench/studies/gdn_prefill_dev.py``): fused runs
# B8×T4096 HV32 (256 walks) in 0.63 ms against 0.83 for two passes and 16 mixed sequences in
# 0.73 against 0.89, and loses B1×T32768 HV32 (32 walks: 2.45 ms against 1.45) and B4×T8192
# HV16 (64 walks: 0.62 against 0.48): one CTA walks all 128 columns, so few walks leave SMs
# idle. The value-major chain runs the two-pass B8 in 0.454 ms against 0.491 key-major, 16 mixed
# sequences in 0.518 against 0.559 and B4×T8192 HV16 (128 tiles) in 0.283 against 0.321, and
# loses B1×T32768 HV32 (64 tiles: 1.115 against 1.074 key-major with 32-wide tiles); 128-wide
# tiles lost to 64 on every shape, 16-wide to 32.
#
# Pieces (2026-12-01, same script): B1×T32768 HV32 in pieces of 128 chunks, each CTA walking its
# piece's warm-up first, runs in 0.69 ms against 1.32 for the tuned two-pass key-major chain and
# 0.73 with the walk ahead (matrix moves, paired waits, three input stages; pieces of 64: 0.76),
# B4×T8192 HV16 in pieces of 64 in 0.36 against 0.48 (ahead 0.38, pieces of 32: 0.40). Cutting
# B8×T4096 HV32 (0.88 against 0.62) or the 16 mixed sequences (0.70 against 0.65), which fill
# the SMs whole, loses. Packed calls take pieces of 128 chunks even when no sequence is that
# long: uncut pieces are one launch, and with host offsets they run longest first (``pieces``):
# the 16 mixed sequences in 0.65 ms against 0.73 in their own order.
#
# With the first pass on its accumulator registers and q, k, v by TMA (2026-12-01, later,
# ``tileops-tune`` on the H200): B1 in pieces of 128 in 0.475 ms, B8 fused whole in 0.472, B4 in
# pieces of 64 in 0.256 and the 16 mixed sequences uncut in 0.477; no other config beat these
# by more than the 2% noise band (the matrix moves now lose: B8 0.525 against 0.477).
#
# With the walk unmasked (T' is zero past a sequence's end) and its V and output tiles in the
# copy engine's swizzle (2026-12-01, evening, ``bench/studies/gdn_prefill_dev.py``'s timing): B1 0.454,
# B8 0.445, B4 0.247 and the 16 mixed sequences 0.446 ms with the same configs, against 0.490,
# 0.477, 0.269 and 0.483 for the build before in the same run; the matrix moves still lose
# (B8 0.488). The walk being faster, the fused calls now take three input stages, so that a
# chunk's first pass need not wait for the walk two chunks back (``tileops-tune`` weighs them
# against two: the shipped winners are among its candidates).
#
# With the first pass's prefix sums under its products and the output stored by the copy
# engine (2026-12-01, 17:30 UTC, same script, the build before in the same run): B1 0.412, B8
# 0.415, B4 0.228 and the 16 mixed sequences 0.408 ms against 0.435, 0.431-0.438, 0.239 and
# 0.433; the elementwise output loses (0.423, 0.441, 0.232, 0.421), and leaving the state
# update running under it ties or loses (``walk_issue='overlapped'``: 0.411, 0.420, 0.229,
# 0.408).
# B8 walked as uncut pieces (the pieces' program, from per-CTA bounds) takes 0.397 ms against
# 0.414-0.418 for the whole-sequence program, twice each in one call.
# DeltaNet at K = V = 64 (2026-12-03, ``tileops-tune`` on the H200, bf16 and fp16 alike): the fused
# kernel over pieces of 32 chunks with paired waits ran B4×T8192 H16 in 0.280 ms against 0.458 for
# the two-pass key-major chain, and B1×T32768 H16 in 0.370 against 0.975.
SMALL_EXACT_PIECES = 32
# GDN at K = V = 64 (2026-12-06, on an H100; docs/benchmarks.md): the fused kernel with paired waits,
# three input stages and the pieces ``piece_width`` picks for 128-wide states beat the two-pass
# chain on all 13 rows timed under benchmark, weak and zero gates, in CUDA graphs by 1.3-9.7x;
# DeltaNet's many or short sequences at K = 64 walked uncut (or whole) by 2.6-3.1x.


def default(spec: CallSpec, gated: bool = True) -> PrefillConfig:
    """Fused for a 128-wide state once there is a (sequence, value head) walk for every SM, or
    once cutting the sequences into pieces (``piece_width``) fills them: the copy engine's output
    and three input stages, packed calls and equal lengths no longer than a piece as uncut pieces
    (one launch; packed ones longest first). Otherwise two passes: value-major 64-column tiles
    once they cover half the SMs (prefetching the next chunk while they fit in one wave), else
    key-major: a 64-wide V tile, or 32 when fewer than 64 walks would leave SMs idle, two lean
    CTAs per SM (128 threads, no prefetch) once the tiles fill two waves, else one CTA of 256
    threads with prefetch. A 64-wide state takes the fused kernel with paired waits for every
    call, cut as above, but without a gate few long sequences go in pieces of 32 chunks (the
    measurements behind each choice are above).
    """
    walks = spec.batch * spec.value_heads
    sms = sm_count(spec.device, spec.arch)
    per_sequence = spec.tokens // spec.batch if spec.mode == "varlen" else spec.tokens
    chunks = -(-per_sequence // FUSED_CHUNK)
    width = piece_width(walks, chunks, sms, exact=not gated)
    # Uncut pieces, one launch: packed calls then run longest first (host offsets), and equal
    # lengths no longer than a piece walk faster than the whole-sequence program.
    uncut = spec.mode == "varlen" or chunks <= PIECE_WIDTHS[-1]
    pieces = width or (PIECE_WIDTHS[-1] if uncut else 0)
    if spec.dim_v == 128 and (walks >= sms or width):
        # Three input stages: the first pass of a chunk need not wait for the walk two chunks back.
        config = fused_config(spec.dim_v, walk_moves="tma-output", stages=3, piece_chunks=pieces)
        if tile_problem(config, spec.dim_k, spec.dim_v, spec.dtype.itemsize) is None:
            return config
    if spec.dim_v == 64:
        # A 64-wide state, fused with paired waits: cut as a 128-wide state is, but without a gate
        # few long sequences go in pieces of 32 chunks.
        cut = SMALL_EXACT_PIECES if width and not gated else pieces
        config = fused_config(64, walk_issue="paired", stages=3, piece_chunks=cut)
        if tile_problem(config, spec.dim_k, spec.dim_v, spec.dtype.itemsize) is None:
            return config
    tiles = walks * (spec.dim_v // 64)
    if 2 * tiles >= sms:
        config = PrefillConfig(state_major="value", block_v=64, threads=WARPGROUP,
                                  num_stages=2 if tiles <= sms else 1)
    else:
        block_v = min(spec.dim_v, 64 if walks >= 64 else 32)
        if walks * (spec.dim_v // block_v) >= 2 * sms:
            config = PrefillConfig(block_v=block_v, threads=128, num_stages=1)
        else:
            config = PrefillConfig(block_v=block_v, threads=256, num_stages=2)
    if tile_problem(config, spec.dim_k, spec.dim_v, spec.dtype.itemsize) is None:
        return config
    return PrefillConfig(block_v=32, threads=256, num_stages=1)


def plan(config: PrefillConfig, spec: CallSpec, gated: bool = True) -> str:
    """How ``config`` runs ``spec``, in words (``gated``: whether the family has a gate)."""
    walks = spec.batch * spec.value_heads
    sms = sm_count(spec.device, spec.arch)
    told = f"{walks} (sequence, value head) walks for {sms} SMs"
    if not config.fused:
        tiles = walks * (spec.dim_v // config.block_v)
        return (f"two passes: every chunk's WY solve at once, then the {config.state_major}-major chain over "
                f"{config.block_v}-column V tiles ({tiles} CTAs; {told})")
    if not config.piece_chunks:
        return f"one fused kernel, a CTA per (sequence, value head): {told}"
    cut = (f"one fused kernel over pieces of at most {config.piece_chunks} chunks ({told}; sequences longer "
           f"than a piece are cut). ")
    exact = "every piece's state and transition summarised at once, then chained through each sequence"
    if summary_tile(spec, config.piece_chunks, config.chunk_size):
        exact += " (each summary on two CTAs of 64 value rows: so few would leave SMs idle)"
    elif spec.mode != "varlen":
        span = summary_span((spec.tokens,), config.chunk_size, config.piece_chunks, walks, sms)
        if span < config.piece_chunks:
            exact += (f" (each summary over {span} of a piece's chunks: "
                      f"{walks * summary_jobs(-(-spec.tokens // config.chunk_size), config.piece_chunks, span)} "
                      f"such jobs fill the SMs' waves better than whole pieces)")
    if not gated:
        return (cut + "Without a gate nothing is forgotten: a piece after its sequence's first starts from its "
                f"exact entry state: {exact}")
    return (cut + f"A piece after its sequence's first starts from a warm-up walk where the gates forget the "
            f"state before it within {WARM_REACH} chunks, else (gates that barely decay, or none) from its exact "
            f"entry state: {exact}. Decided on the device per piece and value head, so the time is bounded "
            f"whatever the gates")


def register_prefill(name: str, family: str, gated: bool, module: str, order=None) -> KernelDef:
    """Register prefill kernel ``name`` of ``family``. ``gated``: whether its ops take a log decay
    g (without one the programs read none). ``order(launcher)``, where given, maps the family's op
    arguments onto the launcher's (q, k, v, g, beta, initial_state, cu_seqlens, cu_seqlens_cpu,
    A_log, dt_bias), the gated delta rule's own order."""
    def refuse(spec: CallSpec) -> Optional[str]:
        return prefill_problem(name, spec)

    def build(config: PrefillConfig, spec: CallSpec):
        problem = refuse(spec) or tile_problem(config, spec.dim_k, spec.dim_v, spec.dtype.itemsize)
        if problem:
            raise ValueError(problem)
        launcher = PrefillLauncher(config, spec, gated)
        return launcher if order is None else order(launcher)

    def explain(config: PrefillConfig, spec: CallSpec) -> str:
        return plan(config, spec, gated)

    return register(KernelDef(name=name, family=family, archs=frozenset({"sm90"}), config_model=PrefillConfig,
                              build=build, refuse=refuse, default=lambda spec: default(spec, gated),
                              modules=(module,), plan=explain))
