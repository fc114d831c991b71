"""What torch's CUDA caching allocator counts: a replay of a sequence of allocations and frees
under its block rules, giving the bytes `torch.cuda.memory_allocated()` reports (block sizes,
not requested sizes) and its peak.

The rules are those of c10/cuda/CUDACachingAllocator.cpp (torch 2.x, default settings: no
PYTORCH_CUDA_ALLOC_CONF, expandable segments off, one stream):

- a request is rounded up to a multiple of 512 bytes (at least 512; `round_size`);
- requests of up to 1 MiB come from the small pool, larger ones from the large pool;
- a request no free block fits gets a new segment (`get_allocation_size`): 2 MiB for the small
  pool, 20 MiB for 1-10 MiB requests, else the request rounded up to 2 MiB;
- the free block chosen is the smallest that fits, the lowest address among equal sizes (best fit);
- the block is split only if the remainder is at least 512 bytes (small pool) or more than
  1 MiB (large pool, `should_split`); otherwise the whole block is handed out, and the whole
  block counts in memory_allocated;
- a freed block merges with free neighbours of its segment; `empty_cache` releases every segment
  that is one free block.

Pure: no torch. The bench uses it to price the rounding of a model's persistent tensors.
"""

from __future__ import annotations

import bisect
from collections.abc import Hashable, Iterable
from dataclasses import dataclass

from ...errors import MlsysError

MIN_BLOCK = 512  # kMinBlockSize: all sizes are rounded to at least 512 bytes
SMALL_SIZE = 1 << 20  # kSmallSize: the largest "small" request, 1 MiB
SMALL_BUFFER = 2 << 20  # kSmallBuffer: small requests are packed in 2 MiB segments
MIN_LARGE_ALLOC = 10 << 20  # kMinLargeAlloc: 1-10 MiB requests share 20 MiB segments
LARGE_BUFFER = 20 << 20  # kLargeBuffer
ROUND_LARGE = 2 << 20  # kRoundLarge: larger requests get a segment rounded up to 2 MiB


@dataclass(frozen=True)
class Alloc:
    key: Hashable  # names the allocation for its Free
    size: int  # requested bytes


@dataclass(frozen=True)
class Free:
    key: Hashable


@dataclass(frozen=True)
class EmptyCache:
    """torch.cuda.empty_cache(): release the segments that hold no allocated block."""


Event = Alloc | Free | EmptyCache


@dataclass(frozen=True)
class AllocatorState:
    allocated_bytes: int  # torch.cuda.memory_allocated(): sizes of the allocated blocks
    requested_bytes: int  # memory_stats()["requested_bytes.all.current"]: what was asked for
    peak_allocated_bytes: int  # torch.cuda.max_memory_allocated() over the replay
    reserved_bytes: int  # torch.cuda.memory_reserved(): the segments held
    segments: int

    @property
    def rounding_bytes(self) -> int:
        """Bytes memory_allocated counts beyond the requests: 512-byte rounding and unsplit remainders."""
        return self.allocated_bytes - self.requested_bytes


def round_size(size: int) -> int:
    return MIN_BLOCK if size < MIN_BLOCK else MIN_BLOCK * -(-size // MIN_BLOCK)


def segment_size(rounded: int) -> int:
    if rounded <= SMALL_SIZE:
        return SMALL_BUFFER
    if rounded < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return ROUND_LARGE * -(-rounded // ROUND_LARGE)


def should_split(small: bool, remaining: int) -> bool:
    return remaining >= MIN_BLOCK if small else remaining > SMALL_SIZE


@dataclass
class _Block:
    addr: int
    size: int
    small: bool
    prev: _Block | None = None  # neighbours in the same segment, by address
    next: _Block | None = None
    requested: int = 0
    allocated: bool = False


class CachingAllocator:
    """The allocator's state; `simulate` is the pure entry point."""

    def __init__(self) -> None:
        self._free: dict[bool, list[tuple[int, int]]] = {True: [], False: []}  # pool -> sorted (size, addr)
        self._blocks: dict[int, _Block] = {}  # addr -> free or allocated block
        self._live: dict[Hashable, _Block | None] = {}  # key -> its block (None: a zero-byte request)
        self._next_addr = 0
        self.allocated = self.requested = self.peak = self.reserved = self.segments = 0

    def malloc(self, key: Hashable, size: int) -> None:
        if size < 0:  # plain ifs, not require(): its message would be formatted for each of ~10^5 events
            raise MlsysError(f"allocation {key!r} of negative size {size}")
        if key in self._live:
            raise MlsysError(f"allocation {key!r} is already live")
        if size == 0:  # torch hands out no block for an empty tensor
            self._live[key] = None
            return
        rounded = round_size(size)
        small = rounded <= SMALL_SIZE
        block = self._take_free(small, rounded) or self._new_segment(small, segment_size(rounded))
        if should_split(small, block.size - rounded):
            rest = _Block(block.addr + rounded, block.size - rounded, small, block, block.next)
            if block.next:
                block.next.prev = rest
            block.next, block.size = rest, rounded
            self._insert_free(rest)
        block.allocated, block.requested = True, size
        self._live[key] = block
        self.allocated += block.size
        self.requested += size
        self.peak = max(self.peak, self.allocated)

    def free(self, key: Hashable) -> None:
        if key not in self._live:
            raise MlsysError(f"free of {key!r}, which is not allocated")
        block = self._live.pop(key)
        if block is None:
            return
        self.allocated -= block.size
        self.requested -= block.requested
        block.allocated, block.requested = False, 0
        for other in (block.prev, block.next):
            if other is not None and not other.allocated:
                self._merge(block, other)
        self._insert_free(block)

    def empty_cache(self) -> None:
        for small in (True, False):
            for size, addr in list(self._free[small]):
                block = self._blocks[addr]
                if block.prev is None and block.next is None:
                    self._remove_free(block)
                    del self._blocks[addr]
                    self.reserved -= size
                    self.segments -= 1

    def state(self) -> AllocatorState:
        return AllocatorState(self.allocated, self.requested, self.peak, self.reserved, self.segments)

    def _new_segment(self, small: bool, size: int) -> _Block:
        block = _Block(self._next_addr, size, small)
        self._next_addr += size
        self._blocks[block.addr] = block
        self.reserved += size
        self.segments += 1
        return block

    def _take_free(self, small: bool, rounded: int) -> _Block | None:
        pool = self._free[small]
        i = bisect.bisect_left(pool, (rounded, -1))
        if i == len(pool):
            return None
        return self._blocks[pool.pop(i)[1]]

    def _insert_free(self, block: _Block) -> None:
        self._blocks[block.addr] = block
        bisect.insort(self._free[block.small], (block.size, block.addr))

    def _remove_free(self, block: _Block) -> None:
        pool = self._free[block.small]
        del pool[bisect.bisect_left(pool, (block.size, block.addr))]

    def _merge(self, block: _Block, other: _Block) -> None:
        """Absorb the free neighbour `other` into `block` (which is not in the free list)."""
        self._remove_free(other)
        del self._blocks[other.addr]
        if other is block.prev:
            del self._blocks[block.addr]
            block.addr, block.prev = other.addr, other.prev
            if block.prev:
                block.prev.next = block
            self._blocks[block.addr] = block
        else:
            block.next = other.next
            if block.next:
                block.next.prev = block
        block.size += other.size


def simulate(events: Iterable[Event]) -> AllocatorState:
    """Replay `events` on an empty allocator: what memory_allocated and its peak read afterwards."""
    alloc = CachingAllocator()
    for ev in events:
        if isinstance(ev, Alloc):
            alloc.malloc(ev.key, ev.size)
        elif isinstance(ev, Free):
            alloc.free(ev.key)
        else:
            alloc.empty_cache()
    return alloc.state()
