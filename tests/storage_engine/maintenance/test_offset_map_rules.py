"""The key map's limits and its table at its edges (Kafka's ``SkimpyOffsetMap`` and the ``require`` in the cleaner's
constructor), run with the compiled table kernels and with their Python twins (the package's conftest).

Kafka's map fills ``floor(slots * log.cleaner.io.buffer.load.factor)`` entries (load factor 0.9), the cleaner requires
``slots * loadFactor > 1``, and ``SkimpyOffsetMap.put`` of a new key into a map holding ``slots`` entries is an
IllegalArgumentException. The engine stores ``offset + 1`` in a slot (0 = empty), so an offset must be in
``[0, Long.MAX)``. The Robin Hood layout is the engine's own (module docstring of ``offset_map``): the hashes below are
chosen so that each key's home slot is known (home = ``(unsigned high * slots) >> 64``), and the tests pin the slot
every entry ends in and that every key is found again, the chains wrapping past the last slot."""
from __future__ import annotations

import numpy as np
import pytest

from storage_engine.maintenance.offset_map import InProcessOffsetMap, SortedHashOffsetMap

pytestmark = pytest.mark.unit

SLOTS = 8
LONG_MAX = 2**63 - 1


def at_home(home: int, lo: int) -> tuple[int, int]:
    """A (high, low) hash, as signed int64, whose home slot in an 8-slot table is ``home``."""
    hi = home << 61                      # (hi * 8) >> 64 == home
    return (hi - 2**64 if hi >= 2**63 else hi), lo


def full_table_map() -> InProcessOffsetMap:
    m = InProcessOffsetMap(24 * SLOTS, load_factor=1.0)
    assert (m.slots, m.max_entries) == (SLOTS, SLOTS)
    return m


def layout(m: InProcessOffsetMap) -> list[tuple[int, int, int] | None]:
    """Each slot as (home, low hash, offset), or None when empty."""
    t = m.table
    return [None if t[3 * i + 2] == 0 else (((t[3 * i] % 2**64) * SLOTS) >> 64, t[3 * i + 1], t[3 * i + 2] - 1)
            for i in range(m.slots)]


def test_a_key_that_finds_its_chain_occupied_displaces_only_residents_closer_to_home():
    """Robin Hood insertion: a new key moves on past residents at least as far from their home as it is from its
    own, takes the first slot whose resident is closer to home, and that resident moves on by the same rule (a
    resident as far from home as the moving one stays; the moving one goes further)."""
    m = full_table_map()
    for home, lo, offset in ((2, 21, 100), (2, 22, 101), (0, 1, 102), (0, 2, 103)):
        m.put_hash(*at_home(home, lo), offset)
    assert layout(m) == [(0, 1, 102), (0, 2, 103), (2, 21, 100), (2, 22, 101), None, None, None, None]
    m.put_hash(*at_home(0, 3), 104)      # passes slots 0 and 1, takes slot 2 from a key at home there
    assert layout(m) == [(0, 1, 102), (0, 2, 103), (0, 3, 104), (2, 22, 101), (2, 21, 100), None, None, None]
    assert (m.size, m.latest_offset) == (5, 104)
    m.put_hash(*at_home(0, 2), 200)      # an update stays where the key is, the size unchanged
    assert layout(m)[1] == (0, 2, 200) and m.size == 5
    assert [m.get_hash(*at_home(h, lo)) for h, lo in ((0, 1), (0, 2), (0, 3), (2, 21), (2, 22))] == \
        [102, 200, 104, 100, 101]
    assert [m.get_hash(*at_home(h, lo)) for h, lo in ((0, 4), (2, 23), (7, 1))] == [-1, -1, -1]


def test_a_key_behind_a_chain_that_wrapped_past_the_last_slot_is_found():
    """Seven keys whose home is slot 6 fill slots 6, 7 and then 0 to 4 (wrapping); a key whose home is slot 0 then
    lands in slot 5, five slots from home. A lookup walks past the wrapped residents, which are further from their
    home (slot 6) than it is from its own, and finds it; in the full table an absent key is -1."""
    m = full_table_map()
    for lo in range(1, 8):
        m.put_hash(*at_home(6, lo), 10 + lo)
    m.put_hash(*at_home(0, 50), 99)
    assert layout(m) == [(6, 3, 13), (6, 4, 14), (6, 5, 15), (6, 6, 16), (6, 7, 17), (0, 50, 99), (6, 1, 11),
                         (6, 2, 12)]
    assert m.get_hash(*at_home(0, 50)) == 99
    assert [m.get_hash(*at_home(6, lo)) for lo in range(1, 8)] == [11, 12, 13, 14, 15, 16, 17]
    assert [m.get_hash(*at_home(h, 77)) for h in range(SLOTS)] == [-1] * SLOTS


def test_put_into_a_full_map_is_refused_with_kafkas_message():
    """SkimpyOffsetMap.put: a new key when entries == slots is an IllegalArgumentException ("Attempted to add a new
    entry to a full offset map."); the map is unchanged, and an existing key can still be updated."""
    m = InProcessOffsetMap(24 * 2, load_factor=1.0)
    m.put(b"a", 1)
    m.put(b"b", 2)
    before = m.table.tobytes()
    with pytest.raises(ValueError) as err:
        m.put(b"c", 3)
    assert str(err.value) == "attempted to add a new entry to a full offset map"
    assert (m.table.tobytes(), m.size, m.latest_offset, m.get(b"c")) == (before, 2, 2, -1)
    m.put(b"a", 4)
    assert (m.get(b"a"), m.size, m.latest_offset) == (4, 2, 4)


@pytest.mark.parametrize("offset", [-1, -5, LONG_MAX])
def test_an_offset_outside_0_to_long_max_cannot_be_stored(offset):
    """A slot holds offset + 1 (0 marks it empty): offsets below 0 and Long.MAX itself are refused, the map left
    as it was; Long.MAX - 1 is the largest offset stored."""
    m = InProcessOffsetMap(24 * 16)
    m.put(b"k", 7)
    before = m.table.tobytes()
    with pytest.raises(ValueError) as err:
        m.put(b"x", offset)
    assert str(err.value) == f"offset {offset} cannot be stored in a key map"
    assert (m.table.tobytes(), m.size, m.latest_offset, m.get(b"x")) == (before, 1, 7, -1)
    m.put(b"x", LONG_MAX - 1)
    assert (m.get(b"x"), m.size, m.latest_offset) == (LONG_MAX - 1, 2, LONG_MAX - 1)


def test_the_default_load_factor_is_kafkas():
    """log.cleaner.io.buffer.load.factor defaults to 0.9: a map of 100 slots fills 90 entries."""
    m = InProcessOffsetMap(24 * 100)
    assert (m.slots, m.max_entries) == (100, 90)


@pytest.mark.parametrize("memory, load_factor", [(24, 1.0), (48, 0.5), (47, 0.9), (23, 1.0)])
def test_a_map_that_holds_no_entry_is_refused(memory, load_factor):
    """Kafka's Cleaner requires offsetMap.slots * dupBufferLoadFactor > 1: exactly 1 is refused too."""
    with pytest.raises(ValueError) as err:
        InProcessOffsetMap(memory, load_factor)
    assert str(err.value) == f"offset map of {memory} bytes with load factor {load_factor} holds no entry"


def test_a_prebuilt_map_moves_its_latest_offset_when_told():
    """OffsetMap.updateLatestOffset: the latest offset is the last one set, for a map built elsewhere as for the
    in-process one (records beyond it are kept by the filter)."""
    empty = np.array([], dtype=np.int64)
    m = SortedHashOffsetMap(empty, empty.copy(), empty.copy(), 10, 20)
    assert m.latest_offset == 19
    m.update_latest_offset(14)
    assert m.latest_offset == 14
