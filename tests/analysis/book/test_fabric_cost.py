"""One fabric's formula as ``predict`` prints it (issue 30's mutation check): the latency and
bandwidth texts of every branch (rings, one line, lines over two axes, a ring with a line, a
chip's cores beside a ring, AllToAll on rings and mixed, a switch), each with its numbers, and
a chip without a two-way W priced over lines alone.

One fabric's formula pinned with constants that tell each factor apart (issue 30): odd ring
sizes (ceil(N/2) hops), two axes (k), a line's (N-1)/N, a ring mixed with a line (W_eff), the
AllToAll's max over axes and its 1/4, a chip's cores at their own W, and a switch.
"""

from __future__ import annotations

import pytest

from analysis.book.fabric_cost import ring_line_cost, switch_cost
from analysis.book.hardware import Hardware

# one-way 1 GB/s a link, both ways 2 GB/s, 1 us a hop; UNI has no two-way W at all
HW = Hardware("t", "tpu", link_bw_unidir_Bps=1e9, link_bw_bidir_Bps=2e9, hop_latency_s=1e-6)
UNI = Hardware("u", "tpu", link_bw_unidir_Bps=1e9, hop_latency_s=1e-6)


@pytest.mark.parametrize(
    "args, hops, bw_s, lat_txt, bw_txt",
    [
        (
            ("all_gather", 4e9, [3, 5], [True, True], HW),
            5,  # ceil(3/2) + ceil(5/2)
            1.0,  # 4 GB / (2 GB/s x 2 axes)
            "T_min * (ceil(3/2) + ceil(5/2)) = 1e-06 s * 5",
            "V / (W_bidi * k) = 4e+09 B / (2e+09 B/s * 2)",
        ),
        (
            ("reduce_scatter", 5e9, [5], [False], UNI),
            4,
            4.0,  # 4 x (5 GB / 5) / 1 GB/s, with no two-way W needed
            "T_min * (N-1) = 1e-06 s * 4",
            "(N-1) * (V/N) / W_unidir = 4 * (5e+09 B / 5) / 1e+09 B/s",
        ),
        (
            ("all_gather", 6e9, [3, 2], [False, False], UNI),
            3,  # two lines: 2 + 1 hops
            6e9 / 3.5e9,  # W_eff 1 x 3/2 + 1 x 2/1 = 3.5 GB/s
            "T_min * hops = 1e-06 s * 3",
            "V / sum(W_eff), W_eff = W_bidi on a ring, W_unidir*N/(N-1) on a line = 6e+09 B / 3.5e+09 B/s",
        ),
        (
            ("all_gather", 7e9, [4, 3], [True, False], HW),
            4,
            2.0,  # W_eff 2 + 1 x 3/2 = 3.5 GB/s
            "T_min * hops = 1e-06 s * 4",
            "V / sum(W_eff), W_eff = W_bidi on a ring, W_unidir*N/(N-1) on a line = 7e+09 B / 3.5e+09 B/s",
        ),
        (
            ("all_gather", 8e9, [4, 2], [True, False], HW, [None, 4e9]),
            3,  # a ring of 4 (2 hops) and a chip's 2 cores (1)
            0.8,  # W_eff 2 GB/s + 4 GB/s x 2/1 = 10 GB/s
            "T_min * hops = 1e-06 s * 3",
            "V / sum(W_eff), W_eff = W_bidi on a ring, W_unidir*N/(N-1) on a line "
            "(W_core between the cores of a chip) = 8e+09 B / 1e+10 B/s",
        ),
        (
            ("all_gather", 8e9, [2], [False], HW, [4e9]),
            1,
            1.0,
            "T_min * (N-1) = 1e-06 s * 1",
            "(N-1) * (V/N) / W_core = 1 * (8e+09 B / 2) / 4e+09 B/s",
        ),
        (
            ("all_to_all", 16e9, [4, 2], [True, True], HW),
            3,
            1.0,  # 16 GB x 4 / (4 x 8 x 2 GB/s)
            "T_min * (ceil(4/2) + ceil(2/2)) = 1e-06 s * 3",
            "V * max(N_i) / (4 * N * W_bidi) = 1.6e+10 B * 4 / (4 * 8 * 2e+09 B/s)",
        ),
        (
            ("all_to_all", 16e9, [4, 3], [True, False], HW),
            4,
            1.0,  # max(4 / 2 GB/s, 3 / 1 GB/s) = 3e-9 s/B: 16 GB x 3e-9 / (4 x 12)
            "T_min * hops = 1e-06 s * 4",
            "V * max(N_i / W_i) / (4 * N), W_i = W_bidi on a ring, W_unidir on a line "
            "= 1.6e+10 B * 3e-09 s/B / (4 * 12)",
        ),
    ],
)
def test_each_branch_prints_its_formula_with_its_numbers(args, hops, bw_s, lat_txt, bw_txt):
    got = ring_line_cost(*args)
    assert got[0] == hops and got[1] == pytest.approx(hops * 1e-6) and got[2] == pytest.approx(bw_s)
    assert got[3:] == (lat_txt, bw_txt)


def test_a_switch_prints_its_steps_and_its_names():
    assert switch_cost("all_gather", 4e9, 4, 1e-6, 1e9)[3:] == (
        "T_min * (N-1) steps = 1e-06 s * 3",
        "V * (N-1) / (N * W) = 4e+09 B * 3 / (4 * 1e+09 B/s)",
    )
    assert switch_cost("all_to_all", 4e9, 4, 1e-6, 1e9)[3:] == (
        "T_min * 1 step = 1e-06 s",
        "V * (N-1) / (N^2 * W) = 4e+09 B * 3 / (4^2 * 1e+09 B/s)",
    )
    assert switch_cost("reduce_scatter", 4e9, 4, 1e-6, 1e9, "T_ib", "W_ib")[3:] == (
        "T_ib * (N-1) steps = 1e-06 s * 3",
        "V * (N-1) / (N * W_ib) = 4e+09 B * 3 / (4 * 1e+09 B/s)",
    )


# one-way 1 GB/s a link, both ways 2 GB/s, 1 us a hop


def _cost(kind, V, sizes, rings, own_w=None):
    hops, lat, bw, _, _ = ring_line_cost(kind, V, sizes, rings, HW, own_w)
    return hops, pytest.approx(lat), pytest.approx(bw)


def test_rings_of_odd_sizes_over_two_axes():
    # hops ceil(3/2) + ceil(5/2) = 5; V / (W_bidi x k) = 4 GB / (2 GB/s x 2) = 1 s
    assert _cost("all_gather", 4e9, [3, 5], [True, True]) == (5, 5e-6, 1.0)


def test_a_line_moves_n_minus_1_nths_of_v_one_way():
    # (N-1) x (V/N) / W_unidir = 4 x 1 GB / 1 GB/s = 4 s, in N-1 = 4 hops
    assert _cost("reduce_scatter", 5e9, [5], [False]) == (4, 4e-6, 4.0)


def test_a_ring_and_a_line_add_their_effective_bandwidths():
    # W_eff = 2 GB/s (ring of 4) + 1 GB/s x 3/2 (line of 3) = 3.5 GB/s: 7 GB in 2 s; hops 2 + 2
    assert _cost("all_gather", 7e9, [4, 3], [True, False]) == (4, 4e-6, 2.0)


def test_all_to_all_takes_the_slowest_axis_and_a_quarter():
    # rings 4 and 2: V x max(4, 2) / (4 x 8 x W_bidi) = 16 GB x 4 / (32 x 2 GB/s) = 1 s
    assert _cost("all_to_all", 16e9, [4, 2], [True, True]) == (3, 3e-6, 1.0)
    # ring of 4 (4 / 2 GB/s) and line of 3 (3 / 1 GB/s, the slower): 16 GB x 3e-9 / (4 x 12) = 1 s
    assert _cost("all_to_all", 16e9, [4, 3], [True, False]) == (4, 4e-6, 1.0)


def test_a_chips_two_cores_are_a_line_at_their_own_bandwidth():
    # (2-1) x (8 GB / 2) / W_core 4 GB/s = 1 s (at the link's 1 GB/s it would be 4 s)
    assert _cost("all_gather", 8e9, [2], [False], own_w=[4e9]) == (1, 1e-6, 1.0)


def test_a_switch_takes_n_minus_1_steps_and_all_to_all_one():
    steps, lat, bw, lat_txt, bw_txt = switch_cost("all_gather", 4e9, 4, 1e-6, 1e9)
    # V (N-1) / (N W) = 4 GB x 3 / (4 x 1 GB/s) = 3 s
    assert (steps, lat, bw) == (3, pytest.approx(3e-6), pytest.approx(3.0))
    steps, lat, bw, _, _ = switch_cost("all_to_all", 4e9, 4, 1e-6, 1e9)
    # V (N-1) / (N^2 W) = 4 GB x 3 / (16 x 1 GB/s) = 0.75 s, one step
    assert (steps, lat, bw) == (1, pytest.approx(1e-6), pytest.approx(0.75))
