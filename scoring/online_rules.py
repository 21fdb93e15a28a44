"""The rules of online evaluators: which traces a rule takes (`--where`) and samples (`--sample`).

- **Filter** (`parse_where`): `key=value` clauses joined by ` and `; keys `agent`, `version`,
  `model`, `service` and `attribute.NAME` (an attribute of the trace's root span or of its
  resource); a value is one word, or a double-quoted text without quotes. Equality only, exact
  and case-sensitive; an empty filter takes every trace.
- **Sampling** (`sampled`): deterministic per trace: the first 8 bytes of
  SHA-256(rule name, 0x1f, trace id in lowercase hex) read as a big-endian integer over 2**64 is
  the trace's draw in [0, 1); the rule takes the trace when the draw is below its rate. Anyone can
  recompute which traces a rule judged; a rule's sample of a trace never changes.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass

from evaledger.domain.errors import ValidationError

KEYS = ("agent", "version", "model", "service")
ATTRIBUTE = "attribute."
MAX_WHERE_CHARS = 1_000
MAX_CLAUSES = 16
MAX_RULE_NAME = 80

_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,79}")
_CLAUSE = re.compile(r'([a-z]+(?:\.[A-Za-z0-9_.\-]+)?)=("[^"]*"|[^\s"]+)')
_AND = re.compile(r"\s+and\s+")


@dataclass(frozen=True)
class Clause:
    """One `key=value` of a filter."""

    key: str
    value: str

    def text(self) -> str:
        """The clause as written in canonical form."""
        value = self.value if re.fullmatch(r'[^\s"]+', self.value) else f'"{self.value}"'
        return f"{self.key}={value}"


def check_rule_name(name: str) -> str:
    """A rule name: lowercase letters, digits, `.`, `_`, `-`, starting with a letter or digit."""
    if not _NAME.fullmatch(name):
        raise ValidationError(
            f"name: {name[:100]!r} is not a rule name (lowercase letters, digits, '.', '_', '-'; "
            f"at most {MAX_RULE_NAME} characters, starting with a letter or a digit)",
            field="name",
        )
    return name


def parse_where(text: str) -> tuple[Clause, ...]:
    """The clauses of a filter; ValidationError (field `where`) naming what is wrong."""
    if len(text) > MAX_WHERE_CHARS:
        raise ValidationError(
            f"where: at most {MAX_WHERE_CHARS} characters, got {len(text)}", field="where"
        )
    stripped = text.strip()
    if not stripped:
        return ()
    parts = _AND.split(stripped)
    if len(parts) > MAX_CLAUSES:
        raise ValidationError(
            f"where: at most {MAX_CLAUSES} clauses, got {len(parts)}", field="where"
        )
    clauses: list[Clause] = []
    for part in parts:
        match = _CLAUSE.fullmatch(part)
        if match is None:
            raise ValidationError(
                f"where: {part[:80]!r} is not key=value (keys: {', '.join(KEYS)}, "
                f"{ATTRIBUTE}NAME; clauses joined by 'and'; quote a value with spaces)",
                field="where",
            )
        key, value = match.group(1), match.group(2)
        if key not in KEYS and not (key.startswith(ATTRIBUTE) and len(key) > len(ATTRIBUTE)):
            raise ValidationError(
                f"where: unknown key {key!r} (keys: {', '.join(KEYS)}, {ATTRIBUTE}NAME)",
                field="where",
            )
        value = value[1:-1] if value.startswith('"') else value
        if not value:
            raise ValidationError(f"where: {key} has an empty value", field="where")
        if any(c.key == key for c in clauses):
            raise ValidationError(f"where: {key} is given twice", field="where")
        clauses.append(Clause(key, value))
    return tuple(clauses)


def canonical_where(text: str) -> str:
    """The filter as recorded: its clauses in canonical form, joined by ` and `."""
    return " and ".join(c.text() for c in parse_where(text))


def matches(clauses: tuple[Clause, ...], facts: Mapping[str, str]) -> bool:
    """Whether a trace's facts (`agent`, `version`, `model`, `service`, `attribute.X`) match."""
    return all(facts.get(c.key) == c.value for c in clauses)


def check_sample(rate: float) -> float:
    """A sampling rate: a finite number from 0 to 1."""
    if not 0.0 <= rate <= 1.0:
        raise ValidationError(f"sample: a rate from 0 to 1, got {rate}", field="sample")
    return rate


def draw(rule: str, trace_id: str) -> float:
    """The trace's draw for a rule, in [0, 1): the same for the same rule and trace, always."""
    digest = hashlib.sha256(f"{rule}\x1f{trace_id.lower()}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def sampled(rule: str, trace_id: str, rate: float) -> bool:
    """Whether the rule samples the trace (its draw is below the rate)."""
    return draw(rule, trace_id) < rate
