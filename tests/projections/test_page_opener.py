"""A catch-up opens a page's sealed events in one read of the vault (issue 32), as one by one.

`decode_rows` with `open_many` hands every `Decoded` of a page one `PageOpener`: the first
`opened()` opens every sealed state of the page through `Ledger.opened_many` (one transaction,
`PayloadVault.get_many`), and each answer must be what `Ledger.opened` gives that state alone:
the plaintext copy, None for an erased case, the state itself when nothing is sealed, the
stored state untouched. `unsealed_copy` (copy the sealed paths only) is held to `unseal_state`
of a deep copy on random states.
"""

from __future__ import annotations

import copy
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from evaledger.api.bootstrap import Services, Settings, build_services
from evaledger.application.erasure import erase_case
from evaledger.domain.ledger import Context, Ledger
from evaledger.domain.payloads import PAYLOAD_KEY, unseal_state, unsealed_copy
from evaledger.projections.decode import ManyOpener, PageOpener, decode_rows
from tests.application.test_search_sealed import WORD, _bundle
from tests.domain.test_erasure import _case_ids

TEXT = st.text(max_size=8)
LEAF = st.one_of(TEXT, st.integers(), st.none())


@st.composite
def sealed_states(draw: st.DrawFn) -> tuple[dict[str, Any], list[str]]:
    """A transcript-like state, some of its strings moved to a payload (as `seal_state` does)."""
    turns = draw(
        st.lists(
            st.fixed_dictionaries(
                {"role": TEXT, "content": TEXT, "meta": st.dictionaries(TEXT, LEAF, max_size=2)}
            ),
            min_size=1,
            max_size=4,
        )
    )
    state: dict[str, Any] = {"turns": turns, "reply": draw(TEXT), "n": draw(st.integers())}
    paths: list[list[Any]] = [
        ["turns", i, "content"] for i in range(len(turns)) if draw(st.booleans())
    ]
    if draw(st.booleans()):
        paths.append(["reply"])
    state[PAYLOAD_KEY] = {"ref": "r", "subject": "s", "paths": paths}
    values = [draw(TEXT) for _ in paths]
    return state, values


@settings(max_examples=60, deadline=None, database=None)
@given(sealed_states())
def test_an_unsealed_copy_is_unseal_state_of_a_deep_copy(
    drawn: tuple[dict[str, Any], list[str]],
) -> None:
    state, values = drawn
    before = copy.deepcopy(state)
    expected = unseal_state(copy.deepcopy(state), values)
    assert unsealed_copy(state, values) == expected
    assert state == before  # the other projections fold the same dict


def _counting(ledger: Ledger, calls: list[int]) -> ManyOpener:
    """`Ledger.opened_many`, noting how many states each call (one vault read) opens."""

    def many(states: list[dict[str, Any]]) -> list[dict[str, Any] | None]:
        calls.append(len(states))
        return ledger.opened_many(states)

    return many


def _page_of(services: Services) -> tuple[list[Any], list[int]]:
    """The whole log decoded as one page, counting the vault reads of `opened_many`."""
    ledger, calls = services.ledger, list[int]()
    rows = ledger.log_rows(1, 10_000)
    many = _counting(ledger, calls)
    return [d for _, d in decode_rows(rows, ledger.decode, None, ledger.opened, many)], calls


def test_a_page_opens_its_sealed_events_together_as_one_by_one(store_url: str) -> None:
    services = build_services(Settings(db=store_url))
    try:
        assert services.ledger.seal_payloads  # the default
        services.ledger.import_bundle(_bundle(), Context("alice"))
        services.sync()
        erase_case(services, _case_ids(services)["secret"], Context("dpo"), "request 32")
        page, calls = _page_of(services)
        stored = [orjson.loads(row[4]) for row in services.ledger.log_rows(1, 10_000)]
        sealed = [d for d in page if PAYLOAD_KEY in d.data]
        assert sealed and len(sealed) < len(page)  # both kinds on the page
        opened = [d.opened() for d in page]
        assert calls == [len(sealed)]  # one read of the vault for the page, on first use
        ledger = services.ledger
        alone = [ledger.opened(d.data) for d in page]
        assert opened == alone
        assert [d.data for d in page] == stored  # the decoded states are left as stored
        found = orjson.dumps(opened)
        assert None in opened  # the erased case's payloads do not open
        assert b"my card is" not in found and WORD.encode() not in found
        assert any(o is not None and o is not d.data for o, d in zip(opened, page, strict=True))
        # A state not of the page is opened alone.
        opener = PageOpener(_counting(ledger, calls))
        opener.add(sealed[0].data)
        outside = copy.deepcopy(sealed[-1].data)
        assert opener(outside) == ledger.opened(outside)
        assert opener(sealed[0].data) == ledger.opened(sealed[0].data)
        assert calls == [len(sealed), 1, 1]
    finally:
        services.close()
