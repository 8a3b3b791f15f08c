"""Facts about the device a call runs on: architecture tag and marketing name, cached per device."""

from __future__ import annotations

import functools

import torch


@functools.lru_cache(maxsize=None)
def _cuda_facts(index: int) -> tuple[str, str]:
    major, minor = torch.cuda.get_device_capability(index)
    return f"sm{major}{minor}", torch.cuda.get_device_name(index)


def device_facts(device: torch.device) -> tuple[str, str]:
    """(arch, device name) for a tensor's device: ("sm90", "NVIDIA H200") or ("cpu", "cpu")."""
    if device.type == "cuda":
        return _cuda_facts(device.index if device.index is not None else torch.cuda.current_device())
    return device.type, device.type


def current_arch() -> str:
    """The architecture of the current default device: the CUDA device if there is one, else cpu."""
    if torch.cuda.is_available():
        return _cuda_facts(torch.cuda.current_device())[0]
    return "cpu"


def current_device_name() -> str:
    """The name of the current default device, as recorded in tuning rows."""
    if torch.cuda.is_available():
        return _cuda_facts(torch.cuda.current_device())[1]
    return "cpu"
