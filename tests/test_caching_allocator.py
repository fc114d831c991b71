"""The caching-allocator replay (calc.memory.caching_allocator) on sequences worked out by hand from the rules
in torch's c10/cuda/CUDACachingAllocator.cpp: 512-byte rounding, the small pool's 2 MiB segments,
20 MiB segments for 1-10 MiB requests, 2 MiB rounding above, best fit, and splitting only when the
remainder is over 1 MiB (large pool) or at least 512 bytes (small pool)."""

from __future__ import annotations

import pytest

from mlsyscalc.calc.memory.caching_allocator import Alloc, EmptyCache, Free, simulate
from mlsyscalc.errors import MlsysError

MiB = 2**20


def test_a_1_125_mib_request_then_a_0_9_mib_one():
    """1.125 MiB = 1,179,648 B (a multiple of 512): large pool, a 20 MiB segment split after it.
    0.9 MiB = 943,718 B rounds up to 1,844 x 512 = 944,128 B: small pool, a 2 MiB segment."""
    s = simulate([Alloc("c_proj", 1_179_648), Alloc("small", 943_718)])
    assert s.requested_bytes == 1_179_648 + 943_718
    assert s.allocated_bytes == 1_179_648 + 944_128
    assert s.reserved_bytes == 20 * MiB + 2 * MiB
    assert s.segments == 2


def test_gpt2_embedding_takes_its_whole_segment():
    """gpt2's wte in bf16: 50,257 x 768 x 2 = 77,194,752 B, a segment of 37 x 2 MiB = 77,594,624 B;
    the 399,872 B left is not over 1 MiB, so the whole segment is the block memory_allocated counts."""
    s = simulate([Alloc("wte", 77_194_752)])
    assert s.allocated_bytes == s.reserved_bytes == 77_594_624
    assert s.rounding_bytes == 399_872


def test_the_last_slice_of_a_20_mib_segment_goes_whole():
    """Two 9.5 MiB requests share one 20 MiB segment: the first is split off (10.5 MiB left), the
    second would leave exactly 1 MiB, which is not over 1 MiB, so it gets the whole 10.5 MiB."""
    s = simulate([Alloc("a", 9 * MiB + MiB // 2), Alloc("b", 9 * MiB + MiB // 2)])
    assert s.segments == 1
    assert s.allocated_bytes == 20 * MiB
    assert s.rounding_bytes == MiB


def test_best_fit_picks_the_smallest_free_block():
    """One 20 MiB segment as a 3 | 2 | 5 | 2 | 8 MiB layout; freeing the 3 and the 5 leaves free blocks
    of 3, 5 and 8 MiB. 2.5 MiB takes the 3 MiB block whole (0.5 MiB left); 4.5 MiB the 5 MiB one."""
    layout = [Alloc("a", 3 * MiB), Alloc("s1", 2 * MiB), Alloc("c", 5 * MiB), Alloc("s2", 2 * MiB)]
    s = simulate(layout + [Free("a"), Free("c"), Alloc("x", 5 * MiB // 2), Alloc("y", 9 * MiB // 2)])
    assert s.segments == 1
    assert s.allocated_bytes == (2 + 2 + 3 + 5) * MiB
    assert s.requested_bytes == (2 + 2 + 2.5 + 4.5) * MiB


def test_freed_neighbours_merge_back_into_one_block():
    """Two 2 MiB blocks freed merge with the rest of their segment: a 19.5 MiB request then reuses the
    whole 20 MiB segment (0.5 MiB left is not split off) instead of a new one."""
    s = simulate([Alloc("a", 2 * MiB), Alloc("b", 2 * MiB), Free("a"), Free("b"), Alloc("big", 39 * MiB // 2)])
    assert s.segments == 1
    assert s.allocated_bytes == s.reserved_bytes == 20 * MiB


def test_small_pool_rounds_to_512_and_splits_down_to_512():
    """1 B and 4 B (an fp32 scalar) take 512 B each from one 2 MiB small segment."""
    s = simulate([Alloc("a", 1), Alloc("b", 4), Alloc("c", 1536)])
    assert s.allocated_bytes == 512 + 512 + 1536
    assert s.segments == 1 and s.reserved_bytes == 2 * MiB


def test_empty_cache_releases_only_wholly_free_segments():
    """A 20 MiB segment with a live block stays; a 24 MiB one (a 23 MiB request, rounded up to 2 MiB) that
    was freed is released. The peak keeps the high-water mark of both."""
    events = [Alloc("keep", 2 * MiB), Alloc("drop", 23 * MiB), Free("drop"), EmptyCache()]
    s = simulate(events)
    assert s.reserved_bytes == 20 * MiB and s.segments == 1
    assert s.allocated_bytes == 2 * MiB
    assert s.peak_allocated_bytes == 2 * MiB + 24 * MiB


def test_after_empty_cache_a_request_gets_a_fresh_segment():
    """Freed and released, the 23 MiB block is gone: a 22 MiB request makes a new 22 MiB segment."""
    s = simulate([Alloc("a", 23 * MiB), Free("a"), EmptyCache(), Alloc("b", 22 * MiB)])
    assert s.reserved_bytes == s.allocated_bytes == 22 * MiB


def test_zero_bytes_take_no_block():
    s = simulate([Alloc("empty", 0), Free("empty")])
    assert s.allocated_bytes == s.reserved_bytes == 0


@pytest.mark.parametrize("events, message", [
    ([Free("never")], "not allocated"),
    ([Alloc("a", 10), Alloc("a", 10)], "already live"),
    ([Alloc("a", -1)], "negative"),
])
def test_bad_sequences_are_clear_errors(events, message):
    with pytest.raises(MlsysError, match=message):
        simulate(events)
