"""The access log's ``after`` is a sequence number: anything else is refused naming it, on every backend."""

from __future__ import annotations

from typing import Any

import pytest

import memlane
from memlane import ValidationError
from memlane.core.access import Access


@pytest.mark.parametrize("after", ["3", 1.5, None, -1, True, [1]])
def test_history_after_must_be_a_sequence_number(store_url: str, after: Any) -> None:
    with memlane.open(store_url, embedder=None) as mem:
        acc = Access(mem)
        acc.create_agent("kim")
        acc.create_room("eng")
        acc.add_member("eng", "kim")
        seqs = [c.seq for c in acc.history()]
        assert [c.seq for c in acc.history(after=seqs[0])] == seqs[1:]
        with pytest.raises(ValidationError) as e:
            acc.history(after=after)
        assert e.value.field == "after" and "log sequence number" in str(e.value)
