"""Device script for the exact schedule's entries chain: the shipped program against one that reads Φ
along its rows.

    python bench/studies/entries_chain.py --compile   # build every program for sm90 (no GPU needed), ptxas's usage
    python bench/studies/entries_chain.py             # on the GPU: outputs compared, then µs of each program

In the key-major state layout the shipped ``programs.piece_entries`` fills its Φᵀ tile down Φ's
columns (one scalar load a thread, 128 floats apart). The variant is the same program with the
fill's loop turned (a thread's loads run along Φ's rows) and the tile padded by a column, so that
the transposing stores stay free of bank conflicts. Its products are the same FMAs in the same
order, so its entries must equal the shipped program's bit for bit. The value-major program,
whose fill already runs along rows, is timed beside them as the bound. Rows: B1×T32768 at HV32
(pieces of 128 chunks, summaries over spans of 64: five chain steps) and at HV16 (pieces of 64:
six steps), K = V = 128.
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import os
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from tileops.kernels.launch.chunked_programs import PASS_CONFIGS  # noqa: E402
from tileops.kernels.launch.compiled import compiled  # noqa: E402
from tileops.kernels.plans.entries import entry_plan  # noqa: E402
from tileops.kernels.plans.pieces import host_plan, summary_span  # noqa: E402
import tileops.kernels.programs.piece_entries as shipped  # noqa: E402

ROWS = {"HV32": (32768, 32, 128), "HV16": (32768, 16, 64)}  # tokens, value heads, piece chunks
DIM, CHUNK, SMS = 128, 64, 132
VARIANT = "entries_rows_variant"


def variant_module():
    """The shipped program's source with Φ's fill turned to run along its rows and the tile padded,
    registered as a module so that ``compiled`` can build it by name."""
    source = inspect.getsource(shipped)
    edits = [("phi_s = T.alloc_shared([D, D], f32)", "phi_s = T.alloc_shared([D, D + 1], f32)"),
             ("for m, i in T.Parallel(D, D):", "for i, m in T.Parallel(D, D):")]
    for old, new in edits:
        assert source.count(old) == 1, f"the shipped program no longer reads {old!r}"
        source = source.replace(old, new)
    path = os.path.join(tempfile.mkdtemp(), f"{VARIANT}.py")  # TileLang reads a program's source file
    with open(path, "w") as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location(VARIANT, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[VARIANT] = module
    spec.loader.exec_module(module)
    return module


def programs(value_heads: int) -> dict:
    """The key-major shipped and variant programs and the value-major shipped one."""
    variant_module()
    key = dict(value_heads=value_heads, dim=DIM, state_v_first=False)
    return {"key-major": compiled(f"{shipped.__name__}:piece_entries_program", key, "sm90", PASS_CONFIGS),
            "key-major, rows": compiled(f"{VARIANT}:piece_entries_program", key, "sm90", PASS_CONFIGS),
            "value-major": compiled(f"{shipped.__name__}:piece_entries_program", dict(key, state_v_first=True),
                                    "sm90", PASS_CONFIGS)}


def chain_inputs(tokens: int, value_heads: int, piece_chunks: int, device: torch.device):
    """The plan's tables for one sequence, random summaries, every piece pointed at its entry row."""
    lengths = (tokens,)
    span = summary_span(lengths, CHUNK, piece_chunks, value_heads, SMS)
    ep = entry_plan(lengths, piece_chunks, CHUNK, value_heads, device, span)
    pieces = host_plan(lengths, piece_chunks, CHUNK, value_heads, device).count
    gen = torch.Generator(device=device).manual_seed(0)
    summaries = torch.randn(ep.jobs, value_heads, DIM, DIM, generator=gen, device=device) / DIM ** 0.5
    walk_rows = (torch.arange(pieces, dtype=torch.int32, device=device) + 1)[:, None].expand(pieces, value_heads)
    return ep, summaries, walk_rows.contiguous(), span


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--compile", action="store_true")
    args = parser.parse_args()
    for name, (tokens, value_heads, piece_chunks) in ROWS.items():
        built = programs(value_heads)
        if args.compile:
            from tests.kernels.resources import ptxas_usage
            for label, program in built.items():
                print(name, label, {k: (u.registers, u.spilled) for k, u in ptxas_usage(program).items()})
            continue
        from tileops.tuner.timing import time_cuda

        device = torch.device("cuda")
        ep, summaries, walk_rows, span = chain_inputs(tokens, value_heads, piece_chunks, device)
        steps = int((ep.transition_slot[0] >= 0).sum())
        outs = {}
        for label, program in built.items():
            entries = torch.zeros(ep.sequences + walk_rows.shape[0], value_heads, DIM, DIM, device=device)
            stored = summaries.transpose(-1, -2).contiguous() if label == "value-major" else summaries

            def run(program=program, stored=stored, entries=entries):
                program(stored, ep.chain_piece, ep.state_slot, ep.transition_slot, walk_rows, ep.sequences, entries)
            run()
            torch.cuda.synchronize()
            outs[label] = entries.transpose(-1, -2) if label == "value-major" else entries
            print(f"{name} (spans of {span} chunks, {steps} steps) {label:16} "
                  f"{time_cuda(run).median_ms * 1e3:8.1f} µs", flush=True)
        same = torch.equal(outs["key-major"], outs["key-major, rows"])
        gap = (outs["key-major"] - outs["value-major"]).abs().max().item()
        print(f"{name}: rows variant bit-equal to the shipped program: {same}; value-major differs by at most {gap:.2e}")


if __name__ == "__main__":
    main()
