"""`evaledger search`: the cases of a project whose text matches a query (issue 36)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from evaledger.api.cli.inputs import Commands
from evaledger.api.console import EXIT_OK, emit_json

if TYPE_CHECKING:
    from evaledger.api.bootstrap import Services

FIELD_CHOICES = ("transcript", "judge", "justification", "outcome", "key", "tag")
"""`--field` (the same names as `projections.search_syntax.FIELDS`, checked by the use case)."""


def register(commands: Commands) -> None:
    """Add search."""
    p = commands.add(
        "search",
        cmd_search,
        "find cases by their text: transcripts, judge replies, justifications, outcome "
        'statements, case keys and tags. QUERY: words (all must match), "a phrase", prefix*',
        reads=True,
    )
    p.add_argument("query", metavar="QUERY", help="what to find")
    p.add_argument("--run", help="only this run (id or key; default: every run of the project)")
    p.add_argument(
        "--field",
        choices=FIELD_CHOICES,
        help="only this kind of text (default: all of them)",
    )
    p.add_argument("--limit", type=int, default=20, help="hits at most, 1-200 (default: 20)")


def cmd_search(services: Services, args: argparse.Namespace) -> int:
    """Print the best hits, one per case and field, with the words found in brackets."""
    # lazy: the search use case (the index's queries), for search only
    from evaledger.application.search import marked, search_cases

    services.sync()
    results = search_cases(
        services, args.query, args.project, run=args.run, field=args.field, limit=args.limit
    )
    if args.json:
        emit_json(results.as_json())
        return EXIT_OK
    if not results.hits:
        print(f"no case of project {args.project} matches {args.query!r}")
        return EXIT_OK
    print(f"{len(results.hits)} hits for {args.query!r} in project {args.project}:")
    for h in results.hits:
        rep = f" rep {h.repetition}" if h.repetition else ""
        print(f"  {h.test_case_key}{rep} [{h.field}] case {h.case_id} run {h.run_id}")
        print(f"      {marked(h.snippet, h.marks, '[', ']')}")
    return EXIT_OK
