"""Hardware facts: the SM count comes from the device when there is one, else from the arch."""

from __future__ import annotations

import torch

from tileops.callspec import CallSpec, make_flags
from tileops.kernels import hardware
from tileops.kernels.prefill_kernel import default


def call(batch: int, device: str = "cuda") -> CallSpec:
    return CallSpec(op="gdn", entry="GDNFwdOp", mode="prefill", dtype=torch.bfloat16, device=torch.device(device),
                    arch="sm90", device_name="NVIDIA H100 PCIe", batch=batch, tokens=512, heads=16, value_heads=32,
                    dim_k=128, dim_v=128, flags=make_flags(scale=128 ** -0.5))


def visible_gpu(monkeypatch, sms: int) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(hardware, "device_sms", lambda index: sms)


def test_without_a_gpu_the_arch_gives_the_sm_count(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert hardware.sm_count(torch.device("cuda"), "sm90") == 132
    assert hardware.sm_count(torch.device("cuda"), "sm80") == 108
    assert hardware.sm_count(torch.device("cpu"), "sm90") == 132


def test_a_visible_gpu_gives_its_own_sm_count(monkeypatch):
    visible_gpu(monkeypatch, 114)
    assert hardware.sm_count(torch.device("cuda"), "sm90") == 114
    assert hardware.sm_count(torch.device("cuda:0"), "sm90") == 114


def test_the_default_fills_the_sms_the_device_has(monkeypatch):
    # 4 sequences x 32 value heads = 128 walks of 8 chunks: one for each of an H100 PCIe's 114 SMs,
    # too few for an H200's 132.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert not default(call(4)).fused
    visible_gpu(monkeypatch, 114)
    assert default(call(4)).fused


def test_the_compile_target_of_hopper_is_sm_90a():
    assert hardware.compile_target("sm90") == {"kind": "cuda", "arch": "sm_90a"}
    assert hardware.compile_target("sm80") == {"kind": "cuda", "arch": "sm_80"}
