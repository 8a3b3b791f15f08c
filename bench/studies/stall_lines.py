"""Where a kernel's warps stall, line by line of its CUDA source, from Nsight Compute.

    ncu -k regex:prep_channel --launch-skip 1 --launch-count 1 --section WarpStateStats \\
        --section SourceCounters -o rep python bench/studies/call_timeline.py --op gla --profile
    ncu --import rep.ncu-rep --page source --csv --print-source sass > source.csv
    python bench/studies/stall_lines.py source.csv KERNEL_CU [--min 0.3]

KERNEL_CU is the program's CUDA source as TileLang generated it (``kernel.cu`` in the program's
folder of the compile cache). The script compiles it here as TileLang does (nvcc, sm_90a, line
info, with fast math or without: whichever gives the profiled code), lists the machine code with ``nvdisasm -gi`` and checks that it is the profiled code
instruction by instruction; each instruction's samples then go to its line of the kernel: for
code inlined from a header or a helper, the line of the kernel body that called it. Printed: the
lines holding at least ``--min`` percent of the samples, in source order, with their largest stall
reasons and their text, then the same samples by the helper line they ran in.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile

from fused_stalls import SAMPLES, read_source

LOCATION = re.compile(r'//## File "([^"]+)", line (\d+)(.*)')
INLINED = re.compile(r'inlined at "([^"]+)", line (\d+)')
INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")


def tool(name: str) -> str:
    """A CUDA tool from PATH, else the copy that ships with Triton's wheel."""
    found = shutil.which(name)
    if found:
        return found
    try:
        import triton
    except ImportError:
        sys.exit(f"{name} not found: put the CUDA toolkit's bin on PATH (or pip install triton)")
    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name)


def listing(kernel_cu: str, fast_math: bool) -> tuple[list[tuple[str, str, list[tuple[str, int]]]], str]:
    """(offset, instruction, [(file, line) innermost first]) for each instruction of the source compiled
    here (with ``--use_fast_math``, TileLang's fast-math pass config, or without), and the path the
    line information names."""
    from tilelang import env

    work = tempfile.mkdtemp()
    source, cubin = os.path.join(work, "kernel.cu"), os.path.join(work, "kernel.cubin")
    shutil.copy(kernel_cu, source)
    subprocess.run([tool("nvcc"), "--cubin", "-O3", "-lineinfo", "-gencode", "arch=compute_90a,code=sm_90a",
                    "-std=c++20", "-I" + env.TILELANG_TEMPLATE_PATH, "-I" + env.CUTLASS_INCLUDE_DIR, "-w"]
                   + (["--use_fast_math"] if fast_math else []) + ["-o", cubin, source], check=True, capture_output=True)
    text = subprocess.run([tool("nvdisasm"), "-gi", "-c", cubin], check=True, capture_output=True, text=True).stdout
    out, where = [], []
    for line in text.splitlines():
        found = LOCATION.search(line)
        if found:
            where = [(found.group(1), int(found.group(2)))] + [(f, int(n)) for f, n in INLINED.findall(found.group(3))]
            continue
        found = INSTRUCTION.search(line)
        if found:
            out.append((found.group(1), found.group(2), where))
    return out, source


def opcode(text: str) -> str:
    return re.sub(r"\s+", " ", text.strip().rstrip(";")).split(" ")[0 if not text.strip().startswith("@") else 1]


def attribute(csv_path: str, kernel_cu: str):
    """Samples and stall reasons per kernel line (the call site in the kernel body) and per innermost kernel line."""
    header, rows = read_source(csv_path)
    column = {name: i for i, name in enumerate(header)}
    for fast_math in (False, True):  # the program was built with or without fast math
        code, source = listing(kernel_cu, fast_math)
        mismatched = len(rows) if len(code) != len(rows) else sum(
            opcode(row[column["Source"]]) != opcode(text) for row, (_, text, _) in zip(rows, code))
        if mismatched <= len(rows) // 100:
            break
    else:
        sys.exit(f"{kernel_cu} compiles (with fast math or without) to other code than the profiled kernel's "
                 f"{len(rows)} instructions: not the same program")
    reasons = [name for name in header if name.startswith("stall_") and "Not Issued" not in name]
    body = next(i for i, text in enumerate(open(kernel_cu).read().splitlines(), 1) if "__global__" in text)
    parent: dict[int, int] = {}  # a helper's line -> where it was last seen inlined (nvdisasm names one level)
    by_site, by_line = collections.defaultdict(collections.Counter), collections.defaultdict(collections.Counter)
    for row, (_, _, where) in zip(rows, code):
        mine = [n for f, n in where if f == source]
        if not mine:
            continue
        for inner, outer in zip(mine, mine[1:]):
            parent[inner] = outer
        for _ in range(8):  # up the helpers to the kernel body
            if mine[-1] >= body or mine[-1] not in parent:
                break
            mine.append(parent[mine[-1]])
        samples = float(row[column[SAMPLES]] or 0)
        for key, table in ((mine[-1], by_site), (mine[0], by_line)):
            table[key]["samples"] += samples
            for name in reasons:
                table[key][name[len("stall_"):]] += float(row[column[name]] or 0)
    return by_site, by_line


def report(table: dict, lines: list[str], minimum: float, title: str) -> str:
    total = sum(c["samples"] for c in table.values()) or 1.0
    out = [f"{title}: {total:.0f} samples", "  share |  line | largest reasons | source"]
    shown = 0.0
    for number in sorted(table):
        counts = table[number]
        share = counts["samples"] / total
        if share * 100 < minimum:
            continue
        shown += share
        top = ", ".join(f"{k} {v / (counts['samples'] or 1.0):.0%}" for k, v in  # a line may hold no sample
                        sorted(((k, v) for k, v in counts.items() if k != "samples"), key=lambda kv: -kv[1])[:2])
        text = lines[number - 1].strip() if 0 < number <= len(lines) else ""
        out.append(f"  {share:6.1%} | {number:5d} | {top:28s} | {text[:110]}")
    out.append(f"  {1 - shown:6.1%} | lines under {minimum} % each")
    return "\n".join(out)


def steps(table: dict, ranges: list[str]) -> str:
    """The samples of each named range of kernel lines (``name:first-last``) and its largest reasons."""
    total = sum(c["samples"] for c in table.values()) or 1.0
    out = []
    for text in ranges:
        name, _, span = text.rpartition(":")
        first, last = (int(n) for n in span.split("-"))
        counts = sum((c for n, c in table.items() if first <= n <= last), collections.Counter())
        samples = counts.pop("samples", 0.0) or 1.0
        top = ", ".join(f"{k} {v / samples:.0%}" for k, v in counts.most_common(3))
        out.append(f"  {samples / total:6.1%} | {name} (lines {first}-{last}) | {top}")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source_csv", help="ncu --page source --csv --print-source sass output")
    parser.add_argument("kernel_cu", help="the profiled program's generated CUDA source")
    parser.add_argument("--min", type=float, default=0.3, help="leave out lines under this share (percent)")
    parser.add_argument("--step", action="append", default=[],
                        help="NAME:FIRST-LAST, a step of the kernel as a range of its lines: print the steps' shares")
    args = parser.parse_args()
    lines = open(args.kernel_cu).read().splitlines()
    by_site, by_line = attribute(args.source_csv, args.kernel_cu)
    if args.step:
        print("by step (lines of the kernel body):\n" + steps(by_site, args.step))
        return
    tables = zip((by_site, by_line),
                 ("by line of the kernel body (inlined code at its call)",
                  "by innermost line of the kernel's source (helpers' own lines)"))
    print("\n\n".join(report(table, lines, args.min, title) for table, title in tables))


if __name__ == "__main__":
    main()
