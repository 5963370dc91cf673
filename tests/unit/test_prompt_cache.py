"""The prompt cache's bookkeeping: best prefix, redundancy, LRU eviction under the budget."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from toolserve.engine.prompt_cache import PromptCache, common_prefix


def test_common_prefix() -> None:
    assert common_prefix([1, 2, 3], [1, 2, 4]) == 2
    assert common_prefix([], [1]) == 0
    assert common_prefix([1, 2], [1, 2, 3]) == 2


def test_best_entry_is_the_longest_usable_prefix() -> None:
    c = PromptCache(1000)
    c.put([1, 2, 3, 4], 4, "a", 10)
    c.put([1, 2, 9, 9, 9], 5, "b", 10)
    entry, n = c.best([1, 2, 9, 9, 5])
    assert entry is not None and entry.snapshot == "b" and n == 4
    entry, n = c.best([7])
    assert entry is None and n == 0


def test_reuse_stops_at_the_usable_length() -> None:
    c = PromptCache(1000)
    c.put([1, 2, 3, 4, 5, 6], 2, "generated tail", 10)  # only the first two were a whole chunk
    assert c.best([1, 2, 3, 4, 5, 6])[1] == 2


def test_longer_snapshot_of_same_conversation_replaces_shorter() -> None:
    c = PromptCache(1000)
    c.put([1, 2, 3], 3, "short", 10)
    c.put([1, 2, 3, 4, 5], 5, "long", 20)
    assert len(c) == 1
    assert c.covers([1, 2, 3], 3)
    assert not c.covers([1, 2, 4], 3)


def test_lru_eviction_keeps_budget() -> None:
    c = PromptCache(30)
    c.put([1], 1, "a", 10)
    c.put([2], 1, "b", 10)
    c.put([3], 1, "c", 10)
    c.touch(c.best([1])[0])  # type: ignore[arg-type]  # [1] is now the most recent
    c.put([4], 1, "d", 10)
    assert c.best([2])[0] is None  # the least recently used went
    assert c.best([1])[0] is not None
    assert c.nbytes == 30 and c.stats.evictions == 1


def test_a_save_never_evicts_the_entry_about_to_be_restored() -> None:
    """The engine saves the sequence it overwrites, then restores the snapshot it chose: the
    save must not evict that one (it did: touch raised KeyError, issue 31)."""
    c = PromptCache(25)
    c.put([1, 1], 2, "chosen", 10)
    c.put([2, 2], 2, "other", 10)
    chosen = c.best([1, 1, 5])[0]
    assert chosen is not None
    assert c.put([3, 3], 2, "saved", 10, keep=chosen)  # over budget: the other one goes, not the chosen
    c.touch(chosen)
    assert c.best([1, 1])[0] is chosen and c.best([2, 2])[0] is None and c.nbytes == 20
    assert not c.put([4, 4], 2, "too big beside it", 16, keep=chosen)  # cannot fit beside the chosen: not stored
    assert c.best([1, 1])[0] is chosen


def test_touch_of_an_entry_no_longer_held_is_harmless() -> None:
    c = PromptCache(10)
    c.put([1], 1, "a", 10)
    gone = c.best([1])[0]
    assert gone is not None
    c.put([2], 1, "b", 10)  # evicts [1]
    c.touch(gone)
    assert len(c) == 1 and c.best([2])[0] is not None


def test_snapshot_larger_than_budget_is_not_stored() -> None:
    c = PromptCache(5)
    assert not c.put([1, 2], 2, "big", 6)
    assert len(c) == 0


@given(st.lists(st.tuples(st.lists(st.integers(0, 3), min_size=1, max_size=6), st.integers(1, 40)), max_size=30))
def test_budget_never_exceeded(puts: list[tuple[list[int], int]]) -> None:
    c = PromptCache(64)
    for tokens, size in puts:
        c.put(tokens, len(tokens), None, size)
        assert c.nbytes <= c.budget
        assert c.stats.bytes == c.nbytes


def test_entries_serve_only_their_adapter_set() -> None:
    c = PromptCache(1000)
    c.put([1, 2, 3, 4], 4, "base", 10)
    c.put([1, 2, 3, 4], 4, "tuned", 10, adapter=1)  # the same tokens under an adapter: a second entry
    assert len(c) == 2
    for adapter, want in ((0, "base"), (1, "tuned")):
        entry, n = c.best([1, 2, 3, 4, 5], adapter)
        assert entry is not None and entry.snapshot == want and n == 4
    assert c.best([1, 2, 3, 4, 5], 2) == (None, 0)
    assert c.covers([1, 2, 3, 4], 4, 1) and not c.covers([1, 2, 3, 4], 4, 2)
    c.put([1, 2, 3, 4, 5, 6], 6, "tuned longer", 10, adapter=1)  # replaces only its own adapter's shorter entry
    assert sorted(e.snapshot for e in c._entries.values()) == ["base", "tuned longer"]
