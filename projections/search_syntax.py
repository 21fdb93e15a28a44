"""The search box's query language, and the highlighting of its hits (issue 36).

One definition for both stores: a query is parsed here into terms, and each engine's query is
written from the terms (`fts5_match` for SQLite's FTS5, `tsquery` for PostgreSQL's
`to_tsquery`). A term is a word, a "quoted phrase" or a prefix* ; terms are ANDed. A word is a
run of letters and digits (`WORD`, what FTS5's `unicode61` tokenizer and the PostgreSQL index
expression both split on), folded to lower case: whatever else the user typed (quotes, operators,
brackets, colons, `NEAR`, `&`, `!`) is a separator, never engine syntax, so no user query is a
syntax error or an injection. Highlighting (`highlight`, `snippet`) marks the same words in
Python, so both stores show the same marks.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass

from evaledger.domain.errors import ValidationError

WORD = re.compile(r"[^\W_]+")
"""A searchable word: letters and digits (underscore and punctuation separate words)."""
MAX_QUERY_CHARS = 500
MAX_TERMS = 16
MAX_WORD_CHARS = 100
FIELDS = ("transcript", "judge", "justification", "outcome", "key", "tag")
"""What a hit can be in (`--field`, `field=`): the indexed text of a case, by kind."""


@dataclass(frozen=True)
class Term:
    """One term of a query: its words (more than one: a phrase) and whether the last is a prefix."""

    words: tuple[str, ...]
    prefix: bool = False


@dataclass(frozen=True)
class SearchQuery:
    """A parsed query: every term must match (AND)."""

    text: str
    terms: tuple[Term, ...]

    def fts5_match(self) -> str:
        """The FTS5 MATCH expression: each term a quoted string (words only, no syntax)."""
        return " ".join(f'"{" ".join(t.words)}"' + (" *" if t.prefix else "") for t in self.terms)

    def tsquery(self) -> str:
        """The `to_tsquery('simple', …)` text: lexemes quoted, phrases with `<->`, prefix `:*`."""
        parts = []
        for t in self.terms:
            lexemes = [f"'{w}'" for w in t.words]
            if t.prefix:
                lexemes[-1] += ":*"
            parts.append("(" + " <-> ".join(lexemes) + ")")
        return " & ".join(parts)


def parse_query(text: str, field: str = "q") -> SearchQuery:
    """Parse the search box's text; a query with no word is refused (naming `field`)."""
    if len(text) > MAX_QUERY_CHARS:
        raise ValidationError(
            f"{field}: a search is at most {MAX_QUERY_CHARS} characters", field=field
        )
    terms: list[Term] = []
    # Even pieces are outside quotes, odd ones inside (an unclosed quote runs to the end).
    for i, piece in enumerate(text.split('"')):
        if i % 2:
            words = _words(piece)
            if words:
                terms.append(Term(words, prefix=piece.rstrip().endswith("*")))
            continue
        for chunk in piece.split():
            words = _words(chunk)
            if words:
                terms.append(Term(words, prefix=chunk.endswith("*")))
    if not terms:
        raise ValidationError(f"{field}: nothing to search for (give a word)", field=field)
    if len(terms) > MAX_TERMS:
        raise ValidationError(f"{field}: a search has at most {MAX_TERMS} terms", field=field)
    return SearchQuery(text, tuple(dict.fromkeys(terms)))


def _words(chunk: str) -> tuple[str, ...]:
    return tuple(w.lower()[:MAX_WORD_CHARS] for w in WORD.findall(chunk))


def marks(text: str, query: SearchQuery) -> list[tuple[int, int]]:
    """The spans of `text` that match a term of `query` (a phrase: each of its words in order)."""
    found = [(m.start(), m.end(), m.group().lower()) for m in WORD.finditer(text)]
    spans: list[tuple[int, int]] = []
    for t in query.terms:
        n = len(t.words)
        for i in range(len(found) - n + 1):
            window = found[i : i + n]
            if all(w == got for w, (_, _, got) in zip(t.words[:-1], window, strict=False)) and (
                window[-1][2].startswith(t.words[-1]) if t.prefix else window[-1][2] == t.words[-1]
            ):
                spans.extend((s, e) for s, e, _ in window)
    return sorted(set(spans))


def highlight(text: str, query: SearchQuery | None) -> str:
    """`text` as HTML: escaped, each hit inside `<mark>` (no query: escaped only)."""
    if query is None:
        return html.escape(text)
    out: list[str] = []
    at = 0
    for start, end in marks(text, query):
        out.append(html.escape(text[at:start]))
        out.append(f"<mark>{html.escape(text[start:end])}</mark>")
        at = end
    out.append(html.escape(text[at:]))
    return "".join(out)


SNIPPET_CHARS = 160


def snippet(text: str, query: SearchQuery) -> tuple[str, list[tuple[int, int]]]:
    """A window of `text` around its first hit, and the spans of the hits within it."""
    spans = marks(text, query)
    first = spans[0][0] if spans else 0
    start = max(0, first - SNIPPET_CHARS // 3)
    if start:
        space = text.find(" ", start, first)
        start = space + 1 if space >= 0 else start
    end = min(len(text), start + SNIPPET_CHARS)
    if end < len(text):
        space = text.rfind(" ", max(first + 1, start), end)
        end = space if space > first else end
    window = " ".join(text[start:end].split())
    lead = "…" if start else ""
    tail = "…" if end < len(text) else ""
    shown = lead + window + tail
    return shown, marks(shown, query)


def marked(text: str, spans: list[tuple[int, int]], before: str, after: str) -> str:
    """`text` with each span between `before` and `after` (no escaping: for a terminal)."""
    out: list[str] = []
    at = 0
    for start, end in spans:
        out.extend((text[at:start], before, text[start:end], after))
        at = end
    out.append(text[at:])
    return "".join(out)


def parse_optional(text: str | None) -> SearchQuery | None:
    """The query of a page's `q` (none, blank or without a word: no highlighting)."""
    if not text or not text.strip():
        return None
    try:
        return parse_query(text)
    except ValidationError:
        return None
