"""`evaledger transcript`: a case's conversation, message by message, as it was recorded."""

from __future__ import annotations

import argparse
import shutil
import textwrap
from typing import TYPE_CHECKING, Any

import orjson

from evaledger.api.cli.inputs import Commands, add_case_ref, resolve_case
from evaledger.api.console import EXIT_OK, emit_json

if TYPE_CHECKING:
    from evaledger.api.bootstrap import Services

INDENT = "    "
MAX_WIDTH = 100
"""Text is wrapped to the terminal, but never wider than this (long lines read badly)."""


def register(commands: Commands) -> None:
    """Add transcript."""
    p = commands.add(
        "transcript",
        cmd_transcript,
        "a case's messages in order: role, text, tool calls and the calls they answer",
        reads=True,
    )
    add_case_ref(p)


def transcript_payload(services: Services, case_id: Any) -> dict[str, Any]:
    """The case, its run, and the turns of its last recorded transcript (the one that counts)."""
    # lazy: the event classes (the use case reads the log), for transcript only
    from evaledger.application.transcripts import case_transcript

    return case_transcript(services, case_id).model_dump(mode="json")


def cmd_transcript(services: Services, args: argparse.Namespace) -> int:
    """Print a case's transcript (or its JSON)."""
    payload = transcript_payload(services, resolve_case(services, args))
    if args.json:
        emit_json(payload)
    else:
        width = min(MAX_WIDTH, shutil.get_terminal_size((80, 24)).columns)
        print("\n".join(render(payload, width)))
    return EXIT_OK


def render(payload: dict[str, Any], width: int) -> list[str]:
    """The transcript as lines no wider than `width` (a word longer than it is cut)."""
    variant = f", variant {payload['variant']}" if payload["variant"] else ""
    turns = payload["turns"]
    lines = _wrapped(
        f"case {payload['test_case_key']} rep {payload['repetition']}{variant} "
        f"of run {payload['run_key']}: {len(turns)} messages",
        width,
        "",
    )
    if not turns:
        lines.append("no transcript recorded")
    for n, turn in enumerate(turns, 1):
        answers = f" (answers call {turn['tool_call_id']})" if turn.get("tool_call_id") else ""
        lines.append("")
        lines.extend(_wrapped(f"[{n}] {turn['role']}{answers}", width, ""))
        for paragraph in (turn.get("content") or "").splitlines():
            lines.extend(_wrapped(paragraph, width, INDENT) if paragraph.strip() else [""])
        for call in turn.get("tool_calls") or []:
            args = orjson.dumps(call.get("arguments") or {}).decode()
            ident = f" [call {call['id']}]" if call.get("id") else ""
            lines.extend(_wrapped(f"→ {call['name']}({args}){ident}", width, INDENT))
    for error in payload["errors"]:
        lines.append("")
        lines.extend(_wrapped(f"error: {error}", width, ""))
    return lines


def _wrapped(text: str, width: int, indent: str) -> list[str]:
    return textwrap.wrap(
        text,
        width=max(width, len(indent) + 20),
        initial_indent=indent,
        subsequent_indent=indent + ("  " if not indent else ""),
        break_on_hyphens=False,
        replace_whitespace=False,
        drop_whitespace=True,
    ) or [indent.rstrip()]
