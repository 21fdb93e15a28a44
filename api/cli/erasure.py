"""`evaledger erase --case ID --reason TEXT`: a case's personal payloads destroyed, on record."""

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
    p.add_argument("--case", required=True, metavar="ID", help="the case id")
    p.add_argument("--reason", required=True, help="why (e.g. the deletion request's reference)")


def cmd_erase(services: Services, args: argparse.Namespace) -> int:
    """Erase one case's payloads and say what was done."""
    # lazy: the use case (and the ledger behind it), for erase only
    from evaledger.application.erasure import erase_case, erasure_json
    from evaledger.domain.writes import Context

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
