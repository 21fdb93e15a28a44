"""The online evaluators' rules: the `--where` grammar and deterministic sampling by trace id."""

from __future__ import annotations

import hashlib

import pytest

from evaledger.domain.errors import ValidationError
from evaledger.scoring.online_rules import (
    Clause,
    canonical_where,
    check_rule_name,
    check_sample,
    draw,
    matches,
    parse_where,
    sampled,
)


def test_a_filter_is_key_value_clauses_joined_by_and() -> None:
    clauses = parse_where('agent=support-bot and  model=gpt-4o-mini and attribute.tier="gold plus"')
    assert clauses == (
        Clause("agent", "support-bot"),
        Clause("model", "gpt-4o-mini"),
        Clause("attribute.tier", "gold plus"),
    )
    assert canonical_where(" agent=a   and version=1.0 ") == "agent=a and version=1.0"
    assert canonical_where('attribute.x="a b"') == 'attribute.x="a b"'
    assert parse_where("") == () and parse_where("   ") == ()
    facts = {"agent": "support-bot", "model": "gpt-4o-mini", "attribute.tier": "gold plus"}
    assert matches(clauses, facts)
    assert not matches(clauses, {**facts, "model": "gpt-4o"})
    assert not matches(parse_where("service=x"), facts)  # a fact the trace lacks never matches
    assert matches((), {})


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("agent", "not key=value"),
        ("agent=", "not key=value"),
        ("colour=red", "unknown key 'colour'"),
        ("attribute.=x", "not key=value"),
        ("agent=a or model=b", "not key=value"),
        ("agent=a and agent=b", "agent is given twice"),
        ('agent=""', "agent has an empty value"),
        ("agent=a and", "not key=value"),
        ("model!=x", "not key=value"),
        ("x" * 1001, "at most 1000 characters"),
        (" and ".join(f"attribute.a{i}=1" for i in range(17)), "at most 16 clauses"),
    ],
)
def test_a_bad_filter_is_refused_naming_the_field(text: str, named: str) -> None:
    with pytest.raises(ValidationError) as e:
        parse_where(text)
    assert e.value.field == "where"
    assert named in e.value.detail


@pytest.mark.parametrize("rate", [-0.1, 1.5, float("nan"), float("inf")])
def test_a_rate_is_from_0_to_1(rate: float) -> None:
    with pytest.raises(ValidationError) as e:
        check_sample(rate)
    assert e.value.field == "sample"


@pytest.mark.parametrize("name", ["", "Upper", "-lead", "a b", "x" * 81, "é"])
def test_a_rule_name_is_a_slug(name: str) -> None:
    with pytest.raises(ValidationError) as e:
        check_rule_name(name)
    assert e.value.field == "name"


def test_sampling_is_sha256_of_rule_and_trace_below_the_rate() -> None:
    trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    # Recomputed here from the documented definition, not with the product's function.
    expected = int.from_bytes(hashlib.sha256(f"helpful\x1f{trace}".encode()).digest()[:8]) / 2**64
    assert draw("helpful", trace) == expected
    assert draw("helpful", trace.upper()) == expected
    assert sampled("helpful", trace, expected + 1e-9) and not sampled("helpful", trace, expected)
    assert not sampled("helpful", trace, 0.0) and sampled("helpful", trace, 1.0)
    ids = [f"{i:032x}" for i in range(2000)]
    taken = sum(sampled("r", t, 0.25) for t in ids)
    assert 400 < taken < 600  # a fair share, the same on every run
    assert [sampled("r", t, 0.25) for t in ids] == [sampled("r", t, 0.25) for t in ids]
