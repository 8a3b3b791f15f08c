"""The two state warpgroups of the fused walk taking turns on the tensor cores (``walk_issue='turns'``).

Left to themselves, the two warpgroups issue each of a chunk's three rounds of products at the
same moment, wait for them together and then both do their element-wise work while the tensor
cores idle. Taking turns, warpgroup 1 issues a round only after warpgroup 0 has issued it, and
warpgroup 0 its next round only after warpgroup 1 has issued the previous one: the rounds queue
0, 1, 0, 1, ..., so one warpgroup's products run while the other forms the operands of its next.

Two named barriers of 256 threads carry the turn, one per warpgroup: a warpgroup waits on its own
(``bar.sync``) before issuing and arrives on the other's (``bar.arrive``, which does not wait) once
issued. Warpgroup 1 arrives once before the walk so that warpgroup 0 goes first, and warpgroup 0
takes that extra turn once after it, so that no arrival is left over when the CTA ends. The ids
are above those TileLang's own synchronisation and the first pass's merge take.
"""

import re

import tilelang.language as T  # no postponed annotations: TileLang evaluates them with closures

TURN_BARRIER = 8  # warpgroup g waits on TURN_BARRIER + g (TileLang takes 0-4, wy_merge 12)
_TURN = re.compile(r"tileops_gdn::turn_wait\((.*?)tileops_gdn::turn_pass\(", re.S)
_BARRIERS = ("__syncthreads", "tl::__sync_thread_partial(")

SOURCE = f"""
namespace tileops_gdn {{

__device__ __forceinline__ void turn_wait(int group) {{
  asm volatile("bar.sync %0, 256;\\n" ::"r"({TURN_BARRIER} + group) : "memory");
}}

__device__ __forceinline__ void turn_pass(int group) {{
  asm volatile("bar.arrive %0, 256;\\n" ::"r"({TURN_BARRIER} + 1 - group) : "memory");
}}

}}  // namespace tileops_gdn
"""


@T.macro
def take_turn(group):
    """Wait until the other warpgroup has issued its round (warpgroup ``group`` of two)."""
    T.call_extern("handle", "tileops_gdn::turn_wait", group)


@T.macro
def pass_turn(group):
    """Let the other warpgroup issue its round; returns at once."""
    T.call_extern("handle", "tileops_gdn::turn_pass", group)


def barrier_in_turn(source: str) -> bool:
    """Whether a compiled kernel's CUDA source puts a CTA or named barrier inside a turn (between a
    turn_wait and its turn_pass): there both warpgroups would wait for each other for ever. TileLang
    places its own barriers by what it sees of shared memory, so the fused kernel's build checks."""
    return any(b in m.group(1) for m in _TURN.finditer(source) for b in _BARRIERS)
