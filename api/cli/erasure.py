"""`evaledger erase --case ID | --subject S --reason TEXT`: personal payloads destroyed."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from evaledger.api.cli.inputs import Commands, parse_uuid
from evaledger.api.console import EXIT_OK, emit_json

if TYPE_CHECKING:
    from evaledger.api.bootstrap import Services


def register(commands: Commands) -> None:
    """Add erase."""
    p = commands.add(
        "erase",
        cmd_erase,
        "destroy a case's sealed messages, prompts and replies (its key and ciphertexts); "
        "the log, its scores and verify stay intact",
        reads=False,
    )
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--case", metavar="ID", help="the case id")
    which.add_argument(
        "--subject",
        metavar="S",
        help="a data subject (a bundle case's `subject`): every case of it in the store",
    )
    p.add_argument("--reason", required=True, help="why (e.g. the deletion request's reference)")


def cmd_erase(services: Services, args: argparse.Namespace) -> int:
    """Erase one case's payloads and say what was done."""
    # lazy: the use case (and the ledger behind it), for erase only
    from evaledger.application.erasure import erase_case, erasure_json
    from evaledger.domain.writes import Context

    if args.subject is not None:
        return _erase_subject(services, args)
    case_id = parse_uuid(args.case, "case")
    erasure = erase_case(services, case_id, Context(actor=args.actor), args.reason)
    if args.json:
        emit_json(erasure_json(erasure))
    else:
        done = "erased" if erasure.written is not None else "was already erased; finished"
        print(
            f"case {case_id} {done}: {len(erasure.refs)} payloads, on {erasure.erased_at[:10]} "
            f"by {erasure.erased_by} ({erasure.reason}). The log keeps their references: "
            "`evaledger verify` still passes."
        )
    return EXIT_OK


def _erase_subject(services: Services, args: argparse.Namespace) -> int:
    # lazy: the use case (and the ledger behind it), for erase only
    from evaledger.application.erasure import erase_subject, subject_erasure_json
    from evaledger.domain.writes import Context

    erasures = erase_subject(services, args.subject, Context(actor=args.actor), args.reason)
    if args.json:
        emit_json(subject_erasure_json(args.subject, erasures))
        return EXIT_OK
    for e in erasures:
        done = "erased" if e.written is not None else "was already erased; finished"
        print(f"case {e.case_id} {done}: {len(e.refs)} payloads")
    first = erasures[0]
    print(
        f"data subject {args.subject!r}: {len(erasures)} cases, on {first.erased_at[:10]} by "
        f"{first.erased_by} ({first.reason}). The log keeps their references: "
        "`evaledger verify` still passes."
    )
    return EXIT_OK
