"""Cutting sequences into pieces for the fused GDN prefill: the plan on the host, and the widths the
default picks. The kernels themselves run in tests/test_gdn_prefill_gpu.py."""

from __future__ import annotations

import pytest
import torch

from tileops.kernels.plans.pieces import host_plan, piece_bounds, piece_width, plan_for
from tileops.kernels.prefill_kernel import PrefillConfig
from tileops.kernels.hardware import ARCH_SMS

CPU = torch.device("cpu")


def test_sequences_are_cut_every_width_from_their_own_start():
    # 200 tokens in pieces of 1 chunk (64): 64, 64, 64, 8; then a sequence of 0 and one of 64.
    bounds = piece_bounds((200, 0, 64), 1, 64)
    assert bounds == [(0, 64, 0, 0), (64, 128, 0, 0), (128, 192, 0, 0), (192, 200, 0, 0),
                      (200, 200, 200, 1), (200, 264, 200, 2)]
    assert host_plan((200, 0, 64), 1, 64, 1, CPU).count == len(bounds)


@pytest.mark.parametrize("lengths, width", [((32768,), 128), ((3000, 77, 1100, 0, 1024), 16), ((8192,) * 4, 64),
                                            ((5, 1, 700), 0)])
def test_pieces_tile_every_sequence_exactly(lengths, width):
    bounds = piece_bounds(lengths, width, 64)
    assert len(bounds) == host_plan(lengths, width, 64, 1, CPU).count
    offsets = [0, *torch.tensor(lengths).cumsum(0).tolist()]
    for seq, length in enumerate(lengths):
        mine = [b for b in bounds if b[3] == seq]
        assert mine[0][0] == offsets[seq] and mine[-1][1] == offsets[seq + 1]
        assert all(a[1] == b[0] for a, b in zip(mine, mine[1:]))  # contiguous, in order
        assert all(b[2] == offsets[seq] for b in mine)
        assert all((b[0] - b[2]) % 64 == 0 for b in mine)  # every cut on a chunk boundary
        if width:
            assert all(b[1] - b[0] <= width * 64 for b in mine)
        else:
            assert len(mine) == 1


def test_the_plan_keeps_each_sequences_last_state_and_repeats_per_value_head():
    plan = host_plan((200, 64), 1, 64, 3, CPU)
    assert plan.count == 5 and plan.cut
    # Longest first, ties in sequence order: 200 = 64 + 64 + 64 + 8, then 64.
    assert plan.start.tolist() == [0, 64, 128, 200, 192] and plan.seq.tolist() == [0, 0, 0, 1, 0]
    assert plan.out_row.tolist() == [-1, -1, -1, 1, 0]
    assert plan.starts.shape == (5, 3) and plan.starts[:, 2].tolist() == plan.start.tolist()
    assert plan.entry_rows.shape == (2, 5, 3)
    assert plan.entry_rows[0].eq(-1).all() and plan.entry_rows[1][:, 0].tolist() == plan.seq.tolist()
    assert all(t.dtype == torch.int32 for t in (plan.start, plan.end, plan.first, plan.seq, plan.starts,
                                                plan.entry_rows))


def test_known_lengths_run_longest_first_and_uncut_plans_need_no_warm_up():
    lengths = (100, 4096, 0, 700, 4096, 1)
    plan = host_plan(lengths, 128, 64, 2, CPU)
    assert not plan.cut  # no sequence longer than 128 chunks
    walked = (plan.end - plan.start).tolist()
    assert walked == sorted(walked, reverse=True) and sorted(walked) == sorted(lengths)
    assert plan.seq.tolist() == [1, 4, 3, 0, 5, 2]  # equal lengths keep their order
    assert plan.out_row.tolist() == plan.seq.tolist()  # every piece is its sequence's last
    assert plan.entry_rows[1][:, 1].tolist() == plan.seq.tolist()
    assert host_plan(lengths, 16, 64, 2, CPU).cut


def test_packed_offsets_on_the_device_only_walk_sequences_whole():
    cu = torch.tensor([0, 5, 300, 300, 1000], dtype=torch.int32)
    whole = plan_for(16, 64, 2, 1, 1000, cu, None, CPU)
    assert whole.start.tolist() == [0, 5, 300, 300] and whole.end.tolist() == [5, 300, 300, 1000]
    assert whole.out_row.tolist() == [0, 1, 2, 3] and whole.starts.shape == (4, 2) and not whole.cut
    assert whole.entry_rows[0].eq(-1).all() and whole.entry_rows[1][:, 1].tolist() == [0, 1, 2, 3]
    assert whole.starts[:, 1].tolist() == [0, 5, 300, 300]
    again = plan_for(16, 64, 2, 1, 2000, cu * 2, None, CPU)  # other offsets, same count: the rows are reused
    assert again.entry_rows is whole.entry_rows and again.starts[:, 0].tolist() == [0, 10, 600, 600]
    cut = plan_for(1, 64, 2, 1, 1000, cu, cu, CPU)
    assert cut.count == 1 + 5 + 1 + 11


SMS = ARCH_SMS["sm90"]


def test_piece_width_fills_the_sms_with_few_cuts():
    # Few long walks are cut; walks that already fill the SMs twice, or too short to cut, are not.
    assert piece_width(256, 64, SMS) == 0  # B8 x T4096 x HV32: already two full waves
    assert piece_width(32, 8, SMS) == 0  # too short to cut
    for walks, chunks in ((32, 512), (64, 128), (16, 1024), (100, 300)):
        width = piece_width(walks, chunks, SMS)
        assert width in PrefillConfig.choices()["piece_chunks"] and 0 < width < chunks
        assert walks * -(-chunks // width) > walks  # more CTAs than uncut walks
        assert -(-chunks // width) * walks <= 4 * SMS * -(-walks // SMS)  # within a few waves
    assert piece_width(SMS, 64, SMS) in PrefillConfig.choices()["piece_chunks"]


def test_explain_says_how_few_long_sequences_run_whatever_the_gates():
    # B1 x T32768 at HV32 on an H200, its gates about -1e-3 a token: the explanation names the cut
    # into pieces and the exact entries that serve such gates (decided on the device per piece).
    from tileops import dispatch
    from tileops.cases import Case
    from tileops.tuner.cases import make_inputs, spec_for_arch

    case = Case("gdn", 1, 32768, 16, 32, 128)
    assert -1.1e-3 < make_inputs(case.smallest(), seed=0, gates="weak")[3].mean() < -0.9e-3
    explanation = dispatch.explain_spec("GDNFwdOp", None, spec_for_arch(case, "sm90", "NVIDIA H200"))
    assert explanation.kernel == "tl.gdn_prefill" and explanation.config["piece_chunks"] == 128
    text = str(explanation)
    assert "plan:   one fused kernel over pieces of at most 128 chunks" in text
    assert "32 (sequence, value head) walks for 132 SMs" in text
    assert "from its exact entry state" in text and "bounded whatever the gates" in text
    assert "each summary over 64 of a piece's chunks: 352 such jobs" in text  # 160 whole ones spill a wave


def test_host_plans_keep_their_lengths_for_the_exact_schedule():
    cu = torch.tensor([0, 5, 300, 300, 1000], dtype=torch.int32)
    assert plan_for(1, 64, 2, 1, 1000, cu, cu, CPU).lengths == (5, 295, 0, 700)
    assert plan_for(16, 64, 2, 3, 2500, None, None, CPU).lengths == (2500,) * 3
    assert plan_for(16, 64, 2, 1, 1000, cu, None, CPU).lengths == ()  # device offsets only: walked whole
