"""Device script for tl.gdn_prefill: correctness against the float64 reference, then timings.

    python bench/studies/gdn_prefill_dev.py --compile [--jobs N]   # fill TileLang's cache (works without a GPU)
    python bench/studies/gdn_prefill_dev.py [--only check|time] [--rows B1 B4] [--weak-decay]  # on the GPU
    ncu ... python bench/studies/gdn_prefill_dev.py --profile [CONFIG_JSON]  # one call of the second benchmark shape

Correctness: fresh random inputs per case, ‖out − ref‖ / ‖ref‖ on o and the final state against
``tileops.reference`` in float64. Timings: the four benchmark shapes (bf16, K = V = 128) with the
default config and the other layouts, median of CUDA-event timed runs; two passes together and
apart.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from typing import Optional

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from tileops.callspec import CallSpec, make_flags  # noqa: E402
from tileops.kernels.prefill_kernel import PrefillConfig, default, fused_config  # noqa: E402
from tileops.tuner.gate import in_float64, relative_error  # noqa: E402
from tileops.tuner.presets import PRESETS  # noqa: E402

SMS = 132
# Scales the gates of every case (--weak-decay sets it to 0.005, about e^-0.0004 a token: no
# piece's warm-up stops before its sequence's start, the worst case of pieces).
DECAY_SCALE = 1.0


@dataclasses.dataclass(frozen=True)
class Case:
    """One call shape: equal lengths (batch × seq_len) or packed ``lens``."""

    name: str
    dtype: torch.dtype
    heads: int
    value_heads: int
    dim: int
    batch: int = 1
    seq_len: int = 0
    lens: tuple[int, ...] = ()
    l2norm: bool = False
    gate: bool = False
    sigmoid: bool = False
    neg_eigval: bool = False
    v_first: bool = False
    init: bool = False
    config: Optional[dict] = None

    @property
    def varlen(self) -> bool:
        return bool(self.lens)

    @property
    def tokens(self) -> int:
        return sum(self.lens) if self.varlen else self.seq_len

    def op_flags(self) -> dict:
        """GDNFwdOp's constructor arguments for this case."""
        return dict(scale=self.dim ** -0.5, use_qk_l2norm_in_kernel=self.l2norm,
                    use_beta_sigmoid_in_kernel=self.sigmoid, allow_neg_eigval=self.neg_eigval,
                    state_v_first=self.v_first, use_gate_in_kernel=self.gate)

    def spec(self) -> CallSpec:
        flags = make_flags(**self.op_flags())
        return CallSpec(op="gdn", entry="GDNFwdOp", mode="varlen" if self.varlen else "prefill",
                        dtype=self.dtype, device=torch.device("cuda"), arch="sm90", device_name="NVIDIA H200",
                        batch=len(self.lens) if self.varlen else self.batch, tokens=self.tokens,
                        heads=self.heads, value_heads=self.value_heads, dim_k=self.dim, dim_v=self.dim,
                        flags=flags)

    def cfg(self) -> PrefillConfig:
        spec = self.spec()
        return PrefillConfig(**self.config) if self.config else default(spec)


def mixed_lengths(total: int, count: int, seed: int) -> tuple[int, ...]:
    """``count`` lengths summing to ``total``, spread over two orders of magnitude."""
    gen = torch.Generator().manual_seed(seed)
    w = torch.exp(torch.rand(count, generator=gen) * math.log(100.0))
    lens = (w / w.sum() * total).floor().long()
    lens[0] += total - int(lens.sum())
    return tuple(int(x) for x in lens)


def short_lengths(count: int, seed: int) -> tuple[int, ...]:
    gen = torch.Generator().manual_seed(seed)
    return tuple(int(x) for x in torch.randint(0, 90, (count,), generator=gen))


BF, FP = torch.bfloat16, torch.float16
FUSED = fused_config(128).model_dump()
# The fused walk's variants: matrix moves with paired waits, and with three input stages.
FUSED_BOTH = fused_config(128, walk_moves="matrix", walk_issue="paired").model_dump()
FUSED_AHEAD = fused_config(128, walk_moves="matrix", walk_issue="paired", stages=3).model_dump()
# Whole output tiles stored by the copy engine, with serial and paired waits.
TMA_SERIAL = dict(walk_moves="tma-output", stages=3)
TMA_PAIRED = dict(walk_moves="tma-output", walk_issue="paired", stages=3)
# Pieces: sequences cut every 16 (32, 64, 128) chunks, each piece walked from its warm-up's state.
def pieces(width: int, **variant) -> dict:
    return fused_config(128, piece_chunks=width, **variant).model_dump()


CHECKS = [
    Case("bf16 H16/32 K128 B2x200 init", BF, 16, 32, 128, batch=2, seq_len=200, init=True),
    Case("bf16 H16/32 K128 B8x130", BF, 16, 32, 128, batch=8, seq_len=130),
    Case("bf16 H16/16 K128 B4x64 init", BF, 16, 16, 128, batch=4, seq_len=64, init=True),
    Case("bf16 H16/32 K128 varlen 1000 short", BF, 16, 32, 128, lens=short_lengths(1000, 1), init=True),
    Case("bf16 H16/32 K128 varlen mixed", BF, 16, 32, 128, lens=mixed_lengths(3000, 16, 2)),
    Case("fp16 H2/4 K64 B3x300 l2+gate+sig", FP, 2, 4, 64, batch=3, seq_len=300, l2norm=True, gate=True,
         sigmoid=True, init=True),
    Case("bf16 H2/4 K64 varlen 1000 l2+sig+neg vfirst", BF, 2, 4, 64, lens=short_lengths(1000, 3), l2norm=True,
         sigmoid=True, neg_eigval=True, v_first=True, init=True),
    Case("bf16 H2/2 K128 varlen long vfirst", BF, 2, 2, 128, lens=(3001,), v_first=True, init=True),
    Case("bf16 H16/32 K128 B2x200 bv128 s1", BF, 16, 32, 128, batch=2, seq_len=200, init=True,
         config=dict(block_v=128, num_stages=1)),
    Case("bf16 H16/32 K128 varlen mixed init fused", BF, 16, 32, 128, lens=mixed_lengths(3000, 16, 2), init=True,
         config=FUSED),
    Case("bf16 H16/32 K128 varlen mixed init fused matrix+paired", BF, 16, 32, 128, lens=mixed_lengths(3000, 16, 2),
         init=True, config=FUSED_BOTH),
    Case("bf16 H16/32 K128 varlen mixed init fused ahead", BF, 16, 32, 128, lens=mixed_lengths(3000, 16, 2),
         init=True, config=FUSED_AHEAD),
    Case("fp16 H2/4 K64 B3x300 l2+gate+sig fused ahead", FP, 2, 4, 64, batch=3, seq_len=300, l2norm=True, gate=True,
         sigmoid=True, init=True,
         config=fused_config(64, walk_moves="matrix", walk_issue="paired", stages=3).model_dump()),
    Case("bf16 H16/32 K128 B8x130 init fused tma-output", BF, 16, 32, 128, batch=8, seq_len=130, init=True,
         config=fused_config(128, **TMA_SERIAL).model_dump()),
    Case("bf16 H16/32 K128 varlen 1000 short fused tma-output paired", BF, 16, 32, 128,
         lens=short_lengths(1000, 6), init=True, config=fused_config(128, **TMA_PAIRED).model_dump()),
    Case("bf16 H16/32 K128 varlen mixed 12000 init pieces16 tma-output", BF, 16, 32, 128,
         lens=mixed_lengths(12000, 16, 4), init=True, config=pieces(16, **TMA_SERIAL)),
    Case("fp16 H2/4 K64 B3x300 l2+gate+sig fused tma-output", FP, 2, 4, 64, batch=3, seq_len=300, l2norm=True,
         gate=True, sigmoid=True, init=True, config=fused_config(64, **TMA_SERIAL).model_dump()),
    Case("bf16 H16/32 K128 B2x3000 init pieces16", BF, 16, 32, 128, batch=2, seq_len=3000, init=True,
         config=pieces(16)),
    Case("bf16 H16/32 K128 varlen mixed 12000 init pieces16", BF, 16, 32, 128, lens=mixed_lengths(12000, 16, 4),
         init=True, config=pieces(16)),
    Case("fp16 H2/4 K64 B3x2000 l2+gate+sig pieces16", FP, 2, 4, 64, batch=3, seq_len=2000, l2norm=True, gate=True,
         sigmoid=True, init=True, config=fused_config(64, piece_chunks=16).model_dump()),
    Case("bf16 H16/16 K128 B1x9000 vfirst init pieces16 ahead", BF, 16, 16, 128, batch=1, seq_len=9000, v_first=True,
         init=True, config=pieces(16, walk_moves="matrix", walk_issue="paired", stages=3)),
]

BENCH = [
    Case("B1 T32768 HV32", BF, 16, 32, 128, batch=1, seq_len=32768),
    Case("B8 T4096 HV32", BF, 16, 32, 128, batch=8, seq_len=4096),
    Case("B4 T8192 HV16", BF, 16, 16, 128, batch=4, seq_len=8192),
    Case("varlen16 T32768 HV32", BF, 16, 32, 128,
         lens=next(c.seqlens for c in PRESETS["qwen3-next"]["gdn"] if c.seqlens)),
]
# Besides the default: the walk's variants (the elementwise output, paired waits), each shape's
# default timed again last (the spread against its first time is the noise band).
BENCH_CONFIGS = {
    "B1 T32768 HV32": [pieces(128, stages=3), pieces(128, **TMA_PAIRED), pieces(128, **TMA_SERIAL)],
    "B8 T4096 HV32": [fused_config(128, stages=3).model_dump(), fused_config(128, **TMA_PAIRED).model_dump(),
                      fused_config(128, **TMA_SERIAL).model_dump()],
    "B4 T8192 HV16": [pieces(64, stages=3), pieces(64, **TMA_PAIRED), pieces(64, **TMA_SERIAL)],
    # The default walks the 16 sequences uncut, longest first.
    "varlen16 T32768 HV32": [pieces(128, stages=3), pieces(128, **TMA_PAIRED), pieces(128, **TMA_SERIAL)],
}
PEERS_MS = {"B1 T32768 HV32": (1.94, 0.55), "B8 T4096 HV32": (1.87, 0.39), "B4 T8192 HV16": (0.85, 0.31),
            "varlen16 T32768 HV32": (2.31, 0.42)}


def bench_cases() -> list[Case]:
    out = []
    for case in BENCH:
        out += [dataclasses.replace(case, config=cfg) for cfg in [None] + BENCH_CONFIGS[case.name]]
    return out


# --- compiling ----------------------------------------------------------------------------------

def _compile_one(job: tuple) -> str:
    from tileops.kernels.launch.chunked_programs import compile_chain, compile_fused, compile_prep

    from tileops.kernels.launch.chunked_programs import compile_warm_start

    kind, case = job
    spec, cfg = case.spec(), case.cfg()
    {"chain": compile_chain, "prep": compile_prep, "fused": compile_fused, "warm": compile_warm_start}[kind](cfg, spec)
    return f"{kind} {case.name} {cfg.to_json()}"


def compile_all(jobs: int) -> None:
    todo, seen = [], set()
    for case in CHECKS + bench_cases():
        spec, cfg = case.spec(), case.cfg()
        programs = ((("fused", (cfg.to_json(), spec.program_facts)),) if cfg.fused else
                    (("chain", (cfg.to_json(), spec.program_facts)), ("prep", (cfg.chunk_size, spec.program_facts))))
        if cfg.piece_chunks:
            programs += (("warm", (cfg.chunk_size, spec.program_facts)),)
        for kind, key in programs:
            if (kind, key) not in seen:
                seen.add((kind, key))
                todo.append((kind, case))
    print(f"compiling {len(todo)} programs with {jobs} workers", flush=True)
    with ProcessPoolExecutor(jobs) as pool:
        for line in pool.map(_compile_one, todo):
            print("  compiled", line, flush=True)


# --- inputs and reference -----------------------------------------------------------------------

def make_inputs(case: Case, gen: torch.Generator) -> dict:
    dev = "cuda"
    B = 1 if case.varlen else case.batch
    T, H, HV, D = case.tokens, case.heads, case.value_heads, case.dim

    def randn(*shape):
        return torch.randn(*shape, generator=gen, device=dev, dtype=torch.float32)

    q, k = randn(B, T, H, D), randn(B, T, H, D)
    if not case.l2norm:
        q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
    v = randn(B, T, HV, D)
    if case.gate:
        g = randn(B, T, HV)
        a_log = torch.rand(HV, generator=gen, device=dev) * 1.5 - 2.0
        dt_bias = 0.5 * randn(HV)
    else:
        g = F.logsigmoid(randn(B, T, HV) + 2.0) * 0.5 * DECAY_SCALE
        a_log = dt_bias = None
    beta = randn(B, T, HV) if case.sigmoid else torch.rand(B, T, HV, generator=gen, device=dev) * 0.8 + 0.1
    n = len(case.lens) if case.varlen else B
    h0 = randn(n, HV, D, D) * 0.1 if case.init else None
    cu = None
    if case.varlen:
        cu = torch.tensor([0] + list(torch.tensor(case.lens).cumsum(0)), dtype=torch.int32, device=dev)
    dt = case.dtype
    return dict(q=q.to(dt), k=k.to(dt), v=v.to(dt), g=g.to(dt), beta=beta.to(dt), initial_state=h0,
                cu_seqlens=cu, cu_seqlens_cpu=None if cu is None else cu.cpu(), A_log=a_log, dt_bias=dt_bias)


def reference(case: Case, x: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """(o, final_state) of the float64 reference op on the same arguments."""
    from tileops.linear_attention import GDNFwdOp

    return GDNFwdOp(**case.op_flags(), target="reference")(*in_float64(args_of(x)))


def args_of(x: dict) -> tuple:
    return (x["q"], x["k"], x["v"], x["g"], x["beta"], x["initial_state"], x["cu_seqlens"],
            x["cu_seqlens_cpu"], x["A_log"], x["dt_bias"])


def run_checks() -> list[str]:
    from tileops.kernels.launch.chunked import PrefillLauncher

    rows = ["case | config | o rel | state rel | o rel (2nd length)"]
    gen = torch.Generator(device="cuda").manual_seed(0)
    for case in CHECKS:
        try:
            launcher = PrefillLauncher(case.cfg(), case.spec())
            errs = []
            for attempt in range(2):
                # A second, different length through the same compiled kernels.
                c = case if attempt == 0 else dataclasses.replace(
                    case, seq_len=case.seq_len + 37, lens=case.lens[: max(1, len(case.lens) // 2)])
                x = make_inputs(c, gen)
                torch.cuda.synchronize()
                o, ht = launcher(*args_of(x))
                torch.cuda.synchronize()
                ro, rh = reference(c, x)
                errs.append((relative_error(o, ro), relative_error(ht, rh)))
            rows.append(f"{case.name} | {case.cfg().to_json()} | {errs[0][0]:.2e} | {errs[0][1]:.2e} | {errs[1][0]:.2e}")
        except Exception as err:  # report and go on to the next case
            rows.append(f"{case.name} | FAILED {type(err).__name__}: {str(err).splitlines()[-1][:200]}")
        print(rows[-1], flush=True)
    return rows


# --- timing -------------------------------------------------------------------------------------

def median_ms(fn, reps: int = 30) -> float:
    for _ in range(3):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for s, e in zip(starts, ends):
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) for s, e in zip(starts, ends))
    return times[len(times) // 2]


def run_bench() -> list[str]:
    from tileops.kernels.launch.chunked import PrefillLauncher

    rows = ["shape | config | ms total | first pass | chain | FLA / TileOPs ms"]
    gen = torch.Generator(device="cuda").manual_seed(1)
    for case in bench_cases():
        try:
            launcher = PrefillLauncher(case.cfg(), case.spec())
            x = make_inputs(case, gen)
            args = args_of(x)
            total = median_ms(lambda: launcher(*args))
            pieces = time_pieces(launcher, x) if launcher.warm_start is not None else None
            if pieces:
                passes = "pieces: warm starts {:.3f} | walk {:.3f}".format(*pieces)
            elif launcher.warm_start is not None:
                passes = "uncut pieces, longest first | -"
            elif launcher.fused is not None:
                passes = "one kernel | -"
            else:
                passes = "{:.3f} | {:.3f}".format(*time_passes(launcher, case, x))
            peers = PEERS_MS[case.name]
            rows.append(f"{case.name} | {case.cfg().to_json()} | {total:.3f} | {passes} | {peers[0]} / {peers[1]}")
        except Exception as err:
            rows.append(f"{case.name} | FAILED {type(err).__name__}: {str(err).splitlines()[-1][:200]}")
        print(rows[-1], flush=True)
    return rows


def time_passes(launcher, case: Case, x: dict) -> tuple[float, float]:
    """Each pass alone, on the buffers one full call would use."""
    q, k, v, g, beta = (x[n] for n in ("q", "k", "v", "g", "beta"))
    B, T, H, K = q.shape
    HV = v.shape[2]
    tokens = B * T
    dev = q.device
    tp = torch.empty(HV, tokens, 64, dtype=q.dtype, device=dev)
    m = torch.empty(HV, tokens, 64, dtype=q.dtype, device=dev)
    f = torch.empty(4, HV, tokens, dtype=torch.float32, device=dev)
    o = torch.empty(tokens, HV, K, dtype=q.dtype, device=dev)
    n = len(case.lens) if case.varlen else B
    ht = torch.empty(n, HV, K, K, dtype=torch.float32, device=dev)
    fk, fq, fv = k.reshape(tokens, H, K), q.reshape(tokens, H, K), v.reshape(tokens, HV, K)
    fg, fb = g.reshape(tokens, HV).float(), beta.reshape(tokens, HV).float()
    zero = launcher.no_gate(dev)
    prep = launcher.prep
    if case.varlen:
        cu = x["cu_seqlens"]
        p = median_ms(lambda: prep(fq, fk, fg, fb, zero, zero, cu, tp, m, f))
        c = median_ms(lambda: launcher.chain(fq, fk, fv, tp, m, f, ht, cu, o, ht, 0))
    else:
        p = median_ms(lambda: prep(fq, fk, fg, fb, zero, zero, tp, m, f, T))
        c = median_ms(lambda: launcher.chain(fq, fk, fv, tp, m, f, ht, o, ht, T, 0))
    return p, c


def time_pieces(launcher, x: dict) -> Optional[tuple[float, float]]:
    """A call in pieces, split where its launches meet: where the warm-ups begin (``warm_start``),
    and the walk of the pieces with their warm-ups (the call's own buffers); None when no piece is
    cut (one launch)."""
    from tileops.kernels.plans.pieces import plan_for

    q, k, v, g, beta = (x[n] for n in ("q", "k", "v", "g", "beta"))
    B, T, H, K = q.shape
    HV = v.shape[2]
    tokens = B * T
    zero = launcher.no_gate(q.device)
    cu = x["cu_seqlens"]
    plan = plan_for(launcher.config.piece_chunks, 64, HV, B, T, cu, x["cu_seqlens_cpu"], q.device)
    if not plan.cut:
        return None
    inputs = (q.reshape(tokens, H, K), k.reshape(tokens, H, K), v.reshape(tokens, HV, K),
              g.reshape(tokens, HV).float(), beta.reshape(tokens, HV).float(), zero, zero)
    n = len(cu) - 1 if cu is not None else B
    final = torch.empty(n, HV, K, K, device=q.device)
    h0 = final if x["initial_state"] is None else x["initial_state"]
    has_init = int(x["initial_state"] is not None)
    o = torch.empty(tokens, HV, K, dtype=q.dtype, device=q.device)
    begin, init_row = launcher.warm_starts(plan, inputs, has_init)
    warm = median_ms(lambda: launcher.warm_starts(plan, inputs, has_init))
    walk = median_ms(lambda: launcher.walk_pieces(plan, inputs, h0, begin, init_row, o, final))
    return warm, walk


def profile_once(config: Optional[str]) -> None:
    """One call of the B8 benchmark shape with its default config (or ``config``, JSON), for a
    profiler to catch."""
    from tileops.kernels.launch.chunked import PrefillLauncher

    case = BENCH[1] if config is None else dataclasses.replace(BENCH[1], config=json.loads(config))
    launcher = PrefillLauncher(case.cfg(), case.spec())
    args = args_of(make_inputs(case, torch.Generator(device="cuda").manual_seed(2)))
    launcher(*args)
    torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2)))
    parser.add_argument("--only", choices=("check", "time"))
    parser.add_argument("--profile", nargs="?", const="", default=None, metavar="CONFIG_JSON",
                        help="one B8 call, with its default config or this one")
    parser.add_argument("--rows", nargs="*", default=None, help="time only the benchmark shapes whose name starts so")
    parser.add_argument("--checks", nargs="*", default=None, help="check only the cases whose name holds one of these")
    parser.add_argument("--weak-decay", action="store_true", help="gates 200x weaker (pieces' worst case)")
    args = parser.parse_args()
    if args.weak_decay:
        global DECAY_SCALE
        DECAY_SCALE = 0.005
    if args.checks:
        CHECKS[:] = [case for case in CHECKS if any(part in case.name for part in args.checks)]
    if args.rows:
        BENCH[:] = [case for case in BENCH if any(case.name.startswith(row) for row in args.rows)]
    if args.compile:
        compile_all(args.jobs)
        return
    if args.profile is not None:
        profile_once(args.profile or None)
        return
    rows = []
    if args.only != "time":
        rows += run_checks()
    if args.only != "check":
        rows += run_bench()
    print("\n".join(["", "=" * 20] + rows))


if __name__ == "__main__":
    main()
