"""Where a kernel's warps stall, by warp role and by section, from Nsight Compute.

    ncu -k regex:fused --launch-count 1 --section WarpStateStats --section SourceCounters -o rep \\
        python bench/studies/gdn_prefill_dev.py --profile
    ncu --import rep.ncu-rep --page source --csv --print-source sass > source.csv
    python bench/studies/fused_stalls.py source.csv [--min 0.5] [--also MOVM]

In the fused GDN prefill kernel the machine code holds the first-pass warpgroup's part, then, from the state
warpgroups' register allocation (``USETMAXREG.TRY_ALLOC``) on, theirs; a kernel without that hand-over (the channel families' first pass) is one role. For each role this sums
the warp-stall samples by reason, then by section: the instructions up to and including the next
wait for the tensor cores, barrier, mbarrier wait or branch (``--also``: more opcodes that end a
section, a regular expression; ``MOVM`` splits the first pass's decays from its inverse).
Sections holding less than ``--min`` percent of the role's samples are counted together.
"""

from __future__ import annotations

import argparse
import collections
import csv
import re
import sys
from dataclasses import dataclass, field

SAMPLES = "Warp Stall Sampling (All Samples)"
HANDOVER = "TRY_ALLOC"  # the state warpgroups take their registers: their code starts here
SECTION_END = re.compile(r"WARPGROUP\.DEPBAR|BAR\.SYNC|SYNCS\.|HGMMA.*gsb0|EXIT|BRA ")


@dataclass
class Section:
    """A run of instructions ending at a synchronising one: its samples, by reason."""

    last: str
    count: int = 0
    samples: float = 0.0
    reasons: collections.Counter = field(default_factory=collections.Counter)


def read_source(path: str) -> tuple[list[str], list[list[str]]]:
    """The header and instruction rows of an Nsight Compute source-page CSV."""
    with open(path, newline="") as handle:
        rows = list(csv.reader(handle))
    start = next((i for i, row in enumerate(rows) if row and row[0] == "Address"), None)
    if start is None:
        sys.exit(f"{path}: no 'Address' header: is this `ncu --page source --csv --print-source sass` output?")
    header = rows[start]
    return header, [row for row in rows[start + 1:] if len(row) == len(header)]


def sections(header: list[str], rows: list[list[str]], also: str = "") -> dict[str, list[Section]]:
    """Each role's sections, in program order."""
    ends = re.compile(SECTION_END.pattern + (f"|{also}" if also else ""))
    column = {name: i for i, name in enumerate(header)}
    reasons = [name for name in header if name.startswith("stall_") and "Not Issued" not in name]
    split = next((i for i, row in enumerate(rows) if HANDOVER in row[column["Source"]]), None)
    roles = ((("first pass", rows[:split]), ("state warpgroups", rows[split:])) if split is not None
             else (("all warps", rows),))
    out = {}
    for role, part in roles:
        found, current = [], None
        for row in part:
            source = row[column["Source"]]
            current = current or Section(last="")
            current.count += 1
            current.samples += float(row[column[SAMPLES]] or 0)
            for name in reasons:
                current.reasons[name[len("stall_"):]] += float(row[column[name]] or 0)
            if ends.search(source):
                current.last = source.strip()
                found.append(current)
                current = None
        if current is not None:
            current.last = "(end)"
            found.append(current)
        out[role] = found
    return out


def report(by_role: dict[str, list[Section]], minimum: float) -> str:
    lines = []
    for role, found in by_role.items():
        total = sum(s.samples for s in found) or 1.0
        reasons = sum((s.reasons for s in found), collections.Counter())
        lines.append(f"{role}: {total:.0f} samples; " +
                     ", ".join(f"{name} {count / total:.0%}" for name, count in reasons.most_common(6)))
        lines.append("  share | instructions | ends at | largest reasons")
        small, smaller = Section(last=""), 0
        for s in found:
            if s.samples / total * 100 < minimum:
                small.count, small.samples, smaller = small.count + s.count, small.samples + s.samples, smaller + 1
                continue
            top = ", ".join(f"{name} {count / s.samples:.0%}" for name, count in s.reasons.most_common(2))
            lines.append(f"  {s.samples / total:6.1%} | {s.count:4d} | {s.last[:56]} | {top}")
        lines.append(f"  {small.samples / total:6.1%} | {small.count:4d} | {smaller} smaller sections |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source_csv")
    parser.add_argument("--min", type=float, default=0.5, help="count sections under this share (percent) together")
    parser.add_argument("--also", default="", help="more opcodes that end a section (a regular expression)")
    args = parser.parse_args()
    print(report(sections(*read_source(args.source_csv), args.also), args.min))


if __name__ == "__main__":
    main()
