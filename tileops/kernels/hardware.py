"""What the kernels assume of the GPU: SM count, per-SM budgets, warp sizes and the compile target.

The SM count comes from the device when the call has one (an H100 PCIe has 114 SMs, an H100 SXM
or H200 132), else from the architecture's flagship part, for compiling and tuning without a GPU.
"""

from __future__ import annotations

import functools

import torch

SMEM_BYTES = 227 * 1024  # opt-in shared memory per block on sm90
SMEM_SLACK = 8 * 1024  # alignment of TileLang's buffers, beyond what the estimates count
REGISTERS = 65536  # 32-bit registers per SM
MAX_STATE_CELLS = 64  # fp32 state cells a thread holds in registers before they spill
WARP = 32
WARPGROUP = 128  # the threads of one wgmma
VEC = 4  # fp32 lanes in one 16-byte access
ARCH_SMS = {"sm80": 108, "sm90": 132}  # without a device: an A100, an H100 SXM or H200


@functools.lru_cache(maxsize=None)
def device_sms(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def sm_count(device: torch.device, arch: str) -> int:
    """The SMs a call's kernels spread over: the device's own count when it is a visible GPU."""
    if device.type == "cuda" and torch.cuda.is_available():
        return device_sms(device.index if device.index is not None else torch.cuda.current_device())
    return ARCH_SMS.get(arch, ARCH_SMS["sm90"])


def compile_target(arch: str) -> dict:
    """TileLang's target for an arch tag: sm90 builds sm_90a (wgmma and setmaxnreg need the 'a')."""
    return {"kind": "cuda", "arch": f"sm_{arch[2:]}{'a' if arch == 'sm90' else ''}"}
