"""The prefill launcher's inputs reach the programs dense and 16-byte aligned, copied only when
they are not (TileLang refuses strided tensors; TMA needs aligned addresses)."""

from __future__ import annotations

import torch

from tileops.kernels.plans.packing import packed


def test_dense_inputs_pass_through_uncopied():
    x = torch.randn(2, 64, 4, 32)
    y = packed(x, 128, 4, 32)
    assert y.data_ptr() == x.data_ptr() and y.shape == (128, 4, 32) and y.is_contiguous()


def test_a_slice_of_a_fused_projection_is_packed():
    qkv = torch.randn(2, 64, 3 * 4 * 32)
    k = qkv[..., 4 * 32:2 * 4 * 32].view(2, 64, 4, 32)  # strided: each token's row is three heads wide
    assert not k.is_contiguous()
    y = packed(k, 128, 4, 32)
    assert y.is_contiguous() and y.data_ptr() % 16 == 0 and torch.equal(y, k.reshape(128, 4, 32))


def test_a_misaligned_dense_view_is_copied_to_an_aligned_address():
    flat = torch.randn(1 + 128 * 4 * 32)
    x = flat[1:].view(128, 4, 32)  # dense, 4 bytes past an aligned address
    assert x.is_contiguous() and x.data_ptr() % 16
    y = packed(x, 128, 4, 32)
    assert y.data_ptr() % 16 == 0 and torch.equal(y, x)
