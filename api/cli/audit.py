"""`evaledger history`, `explain` and `verify`: how a verdict came to be; the log is whole."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evaledger.api.cli.inputs import Commands, add_case_ref, load_spec, resolve_case
from evaledger.api.cli.proofs import add_signing_options, signing_of
from evaledger.api.console import (
    EXIT_FAIL,
    EXIT_OK,
    Progress,
    UsageError,
    emit_json,
    fmt,
    print_table,
)

if TYPE_CHECKING:
    from evaledger.api.bootstrap import Services
    from evaledger.domain.verify import VerifyReport
    from evaledger.projections.drift import ViewsReport

# Start-up (issue 19): what a command runs is imported inside it, so that parsing any command
# line loads none of it (the parser imports every family).


def register(commands: Commands) -> None:
    """Add history, verify and explain."""
    p = commands.add(
        "history", cmd_history, "every event of a case, and its state as of a version", reads=True
    )
    add_case_ref(p)
    p.add_argument("--version", type=int, help="the state as of this event version")
    p = commands.add(
        "verify",
        cmd_verify,
        "recompute every hash chain, run seal and chain signature",
        reads=True,
    )
    p.add_argument(
        "--expect",
        metavar="POSITION:LINK",
        help="a checkpoint printed by an earlier verify; fail if the log no longer contains it",
    )
    how = p.add_mutually_exclusive_group()
    how.add_argument(
        "--incremental",
        action="store_true",
        help="with the checkpoint key: resume from the last verified checkpoint, checking only "
        "later events and what they depend on (an older edit waits for a full verify)",
    )
    how.add_argument(
        "--full", action="store_true", help="re-check every event (the default; kept for scripts)"
    )
    p.add_argument(
        "--views",
        action="store_true",
        help="also rebuild every read model from the log in a scratch store and compare them",
    )
    p.add_argument(
        "--against",
        metavar="HEAD_FILE",
        help="a published signed tree head (`checkpoint publish`): fail unless the log extends it",
    )
    add_signing_options(p)
    p = commands.subparsers.add_parser("chain", help="the ledger chain: adopt an unchained store")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    p = actions.add_parser(
        "adopt",
        parents=[commands.common],
        help="chain, once and on the record, the events of a store written before the chain",
    )
    p.add_argument("--reason", required=True, help="why the unchained events are trusted")
    p.add_argument(
        "--unsigned",
        action="store_true",
        help="adopt without the checkpoint key (only for a store never verified with a key: "
        "a keyed verify refuses an unsigned adoption)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_chain_adopt, reads=True)
    p = commands.add(
        "explain",
        cmd_explain,
        "how a case's verdict became its pass/fail and run aggregate",
        reads=True,
    )
    add_case_ref(p)
    p.add_argument("--spec", metavar="FILE", help="explain under another scoring spec")


def cmd_history(services: Services, args: argparse.Namespace) -> int:
    """Every event of a case."""
    # lazy: the audit reads build the HTTP schema models (and replay the case)
    from evaledger.api.audit import case_history

    payload = case_history(services, resolve_case(services, args), args.version)
    if args.json:
        emit_json(payload)
        return EXIT_OK
    print(
        f"case {payload['case_id']} (run {payload['run_id']}), {payload['latest_version']} events"
    )
    for e in payload["events"]:
        print(
            f"  v{e['version']:<3} {e['timestamp']}  {e['type']:<24} "
            f"by {e['actor']}  {e['hash'][:12]}"
        )
    score = payload["state"]["score"]
    print(
        f"state as of v{payload['version']}: {score['status']}, "
        f"overall {fmt(score['overall_score'])}, passed {fmt(score['passed'])} "
        f"({score['gate_reason']})"
    )
    return EXIT_OK


def cmd_verify(services: Services, args: argparse.Namespace) -> int:
    """Recompute every hash chain and seal (from the last signed checkpoint with --incremental)."""
    progress = Progress("verifying events")
    # lazy: the verification walk, the projections and every projector, only for verify
    from evaledger.application import verification
    from evaledger.domain.verify import Checkpoint  # lazy: the verification walk

    expect = Checkpoint.parse(args.expect) if args.expect else None
    signing = signing_of(args)
    against = _read_head(args.against) if args.against else None
    if against is not None or (
        not args.incremental and (signing.key or signing.public or signing.heads)
    ):
        if args.incremental:
            raise UsageError("--against checks the whole tree: not with --incremental")
        if against is not None and not (signing.key or signing.public):
            raise UsageError(
                "--against needs a key to check the head's signature: --public-key KEY or "
                "the signing key",
                field="public_key",
            )
        # lazy: the Merkle log's use cases and cryptography, only with a key or a head
        from evaledger.application import receipts

        report = receipts.verify_tree(
            services, signing, expect=expect, against=against, progress=progress
        )
    else:
        report = verification.verify_log(
            services, expect=expect, incremental=args.incremental, progress=progress
        )
    progress.done()
    views: ViewsReport | None = None
    if args.views:
        # The read models are brought up to the log, then compared with a rebuild from it.
        rebuilding = Progress("rebuilding read models")
        try:
            views = verification.check_views(services, rebuilding)
        finally:
            rebuilding.done()
    if args.json:
        emit_json(report.as_json() | ({} if views is None else {"views": views.as_json()}))
        return EXIT_OK if report.ok and (views is None or views.ok) else EXIT_FAIL
    if report.ok:
        print(_ok_line(report))
        if report.checkpoint is not None:
            print(f"checkpoint: {report.checkpoint}")
        _print_merkle(report)
    else:
        print(f"BROKEN at position {report.first_broken_position}: {report.broken[0]}")
        for line in report.broken[1:10]:
            print(f"  also: {line}")
    _print_adoption(report)
    if views is not None:
        _print_views(views)
    return EXIT_OK if report.ok and (views is None or views.ok) else EXIT_FAIL


def _read_head(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"--against {path}: {e}", field="against") from None


def _ok_line(report: VerifyReport) -> str:
    """What an ok verify checked: every event, or those after the checkpoint it resumed from."""
    signed = (
        ", signatures checked"
        if report.keyed
        else " (unsigned: no checkpoint key, so every event checked, none resumed)"
    )
    counts = (
        f"in {report.aggregates} aggregates, {report.runs_sealed} sealed runs, "
        f"{report.commits} commits chained{signed}"
    )
    if report.resumed_from is None:
        return f"ok: {report.events} events {counts}"
    return (
        f"ok: {report.events} new events since the verified checkpoint {report.resumed_from} "
        f"{counts} (incremental: a plain `verify` re-checks every event)"
    )


def _print_merkle(report: VerifyReport) -> None:
    m = report.merkle
    if m is None:
        return
    held = [f"{m['checkpoints']} stored signed heads"]
    if m.get("remembered") is not None:
        held.append(f"the head remembered here ({m['remembered']} events)")
    if m.get("against") is not None:
        held.append(f"the published head ({m['against']} events)")
    print(
        f"merkle: {m['size']} leaves, root {str(m['root'])[:16]}…; consistent with "
        + ", ".join(held)
    )


def _print_views(views: ViewsReport) -> None:
    if views.behind:
        print(
            f"views: not comparable: {', '.join(views.behind)} stopped before position "
            f"{views.position} (see `evaledger status`/health)"
        )
    elif views.drift is not None:
        print(f"views: DRIFT at position {views.position}: {views.drift}")
    else:
        print(
            f"views: ok: {views.tables} tables, {views.rows} rows match a rebuild from the log "
            f"at position {views.position}"
        )


def _print_adoption(report: VerifyReport) -> None:
    """Say in plain words which events were chained when adopted, not when written."""
    a = report.adoption
    if a is not None:
        print(
            f"adopted: positions {a['first_position']}–{a['last_position']} ({a['events']} "
            f"events) were chained by `chain adopt` (by {a['actor']} at {a['timestamp']}: "
            f"{a['reason']!r}), not when they were written"
        )


def cmd_chain_adopt(services: Services, args: argparse.Namespace) -> int:
    """Adopt the events of a store written before the chain: once, recorded as an event."""
    # lazy: the ledger and the verification walk, only for chain adopt
    from evaledger.application import verification
    from evaledger.domain.ledger import Context  # lazy: the ledger

    adoption = verification.adopt_chain(
        services, Context(actor=args.actor), args.reason, unsigned=args.unsigned
    )
    if args.json:
        emit_json(
            {
                "first_position": adoption.first_position,
                "last_position": adoption.last_position,
                "events": adoption.events,
                "position": adoption.position,
            }
        )
    else:
        print(
            f"adopted positions {adoption.first_position}–{adoption.last_position} "
            f"({adoption.events} events) into the chain; recorded at position "
            f"{adoption.position}"
        )
    return EXIT_OK


def cmd_explain(services: Services, args: argparse.Namespace) -> int:
    """How a case's verdict became its pass/fail and entered its run's aggregate."""
    # lazy: the audit reads build the HTTP schema models (and replay the case)
    from evaledger.api.audit import explain
    from evaledger.application.audit import case_project  # lazy: the read models

    case_id = resolve_case(services, args)
    spec = None
    if args.spec:
        spec = load_spec(services, args.spec, case_project(services, case_id))
    payload = explain(services, case_id, spec)
    if args.json:
        emit_json(payload)
    else:
        print_explanation(payload)
    return EXIT_OK


def print_source_score(found: dict[str, Any]) -> None:
    """One source scorer's verdict: values, answer, target, explanation, grader conversation."""
    values = ", ".join(f"{k} = {v}" for k, v in found["values"].items())
    print(f"scorer {found['scorer']}: {values}")
    for label, key in (
        ("answer", "answer"),
        ("target", "target"),
        ("explanation", "explanation"),
        ("grader prompt", "grader_prompt"),
        ("grader reply", "grader_reply"),
    ):
        if found.get(key):
            print(f"  {label}: {found[key][:400]!r}")


def print_explanation(payload: dict[str, Any]) -> None:
    """Verdicts, weights, the overall score, the gate and the run aggregate, in that order."""
    print(
        f"case {payload['case_id']} ({payload['test_case_key']} rep {payload['repetition']}) "
        f"under {payload['spec_id']} ({payload['spec_source']} spec)"
    )
    for v in payload["verdicts"]:
        judge = v["judge"]
        print(
            f"verdict {v['verdict_id']} by {fmt(judge.get('provider'))}/{fmt(judge.get('model'))} "
            f"[{v['parse_status']}] {'counted' if v['counted'] else 'not counted'}"
        )
        print(f"  prompt: {(v['prompt'] or '')[:160]!r}")
        print(f"  raw reply: {(v['raw_output'] or '')[:160]!r}")
        if v["error"]:
            print(f"  error: {v['error']}")
        for c in v["corrections"]:
            print(f"  {c['type']} by {c['actor']} at {c['timestamp']}: {c['reason']}")
    for found in payload.get("source_scores", []):
        print_source_score(found)
    # No rubric table of dashes for a case the rubric never scored (an imported one).
    rubric = any(w["score"] is not None for w in payload["weights"])
    if rubric or not payload.get("source_scores"):
        print_table(
            [
                (w["metric"], w["score"], w["label"], w["normalised_weight"], w["contribution"])
                for w in payload["weights"]
            ],
            ["metric", "score", "label", "weight", "contribution"],
        )
    o, g, r = payload["overall_score"], payload["gate"], payload["run_aggregate"]
    if rubric or not payload.get("source_scores"):
        print(f"overall_score {fmt(o['value'])} = {o['formula']}")
    print(f"gate ({g['policy']}): {g['rule']} → {g['status']}: {g['reason']}")
    if not rubric and payload.get("source_scores"):
        return
    print(
        f"run aggregate: counts in metric mean: {fmt(r['counts_in_metric_mean'])}; "
        f"counts as {r['counts_as']}; run weighted_metrics_score_pct "
        f"{fmt(r['weighted_metrics_score_pct'])}, cases_pass_rate_pct "
        f"{fmt(r['cases_pass_rate_pct'])}"
    )
