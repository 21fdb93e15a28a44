"""`evaledger judge` and `evaledger agreement` (DESIGN §10): the ledger judges transcripts.

`judge` exits 0 only when every planned case got a parsed verdict, 1 when a verdict is an error or
the budget stopped the pass, 3 when no call reached the provider, 2 on bad input, 130 on Ctrl-C
(issue 22).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any
from uuid import UUID

from evaledger.api.cli.inputs import RUN_HELP, Commands, resolve_run
from evaledger.api.console import EXIT_OK, Progress, emit_json, print_table
from evaledger.domain.errors import ValidationError

if TYPE_CHECKING:
    from evaledger.api.bootstrap import Services
    from evaledger.application.judging import JudgeOptions, PlannedPrompt
    from evaledger.judging.report import JudgeReport
    from evaledger.scoring.agreement import MeasureAgreement


def options_from(args: argparse.Namespace) -> JudgeOptions:
    """The judging options of the command line (a --rubric file is read here)."""
    # lazy: the judging use cases load the runner, jinja2 and the prompt templates
    from evaledger.application.judging import JudgeOptions
    from evaledger.judging.rubric import load_rubrics  # lazy: jinja2, yaml, the rubrics

    rubrics = tuple(load_rubrics(Path(args.rubric)).values()) if args.rubric else ()
    return JudgeOptions(
        judges=tuple(args.judge),
        metrics=tuple(args.metric),
        missing_only=args.missing_only,
        panel=args.panel,
        concurrency=args.concurrency,
        dry_run=args.dry_run,
        allow_self_judge=args.allow_self_judge,
        temperature=args.temperature,
        timeout_s=args.timeout,
        max_retries=args.max_retries,
        claims=args.claims,
        retry_errors=args.retry_errors,
        max_cost_usd=args.max_cost,
        rubrics=rubrics,
    )


def cmd_judge(services: Services, args: argparse.Namespace) -> int:
    """Judge every case with a transcript (or only those without a verdict)."""
    # lazy: the judging use cases load the runner, jinja2 and the prompt templates
    from evaledger.application.judging import (
        JudgingInterrupted,
        JudgingNotStarted,
        judge_run,
        plan_judging,
    )
    from evaledger.domain.ledger import Context  # lazy: eventsourcing and the domain's events
    from evaledger.judging.report import EXIT_INTERRUPTED  # lazy: the judging package

    run_id = resolve_run(services, args.run, args.project)
    if args.rescore:
        return rescore(services, run_id, args)
    try:
        if args.dry_run:
            preview = plan_judging(services, run_id, options_from(args))
            if args.json:
                emit_json(preview.as_json())
            else:
                print_report(preview.report)
                print_planned_calls(preview.prompts, len(preview.report.judges))
            return EXIT_OK
        progress = Progress("judging cases")
        try:
            report = judge_run(
                services, run_id, options_from(args), Context(actor=args.actor), progress
            )
        except JudgingInterrupted as e:
            report = e.report  # Ctrl-C: what was recorded stays recorded; say what and exit 130
        finally:
            progress.done()
    except JudgingNotStarted:
        print("interrupted before any judge call: nothing recorded", file=sys.stderr)
        return EXIT_INTERRUPTED
    if args.json:
        emit_json(report.as_json())
    else:
        print_report(report)
    return report.exit_code()


def rescore(services: Services, run_id: UUID, args: argparse.Namespace) -> int:
    """`judge RUN --rubric FILE --rescore`: stored rubric replies read under other rubrics."""
    # lazy: the judging use cases load the runner, jinja2 and the prompt templates
    from evaledger.application.judging import rescore_judge_replies

    if not args.rubric:
        raise ValidationError(
            "rubric: --rescore reads the replies under a --rubric FILE", field="rubric"
        )
    calling = {
        "judge": args.judge,
        "panel": args.panel,
        "missing_only": args.missing_only,
        "retry_errors": args.retry_errors,
        "max_cost": args.max_cost is not None,
        "dry_run": args.dry_run,
        "claims": args.claims,
    }
    given = [name for name, value in calling.items() if value]
    if given:
        flag = "--" + given[0].replace("_", "-")
        raise ValidationError(
            f"{given[0]}: {flag} selects or calls judges; --rescore calls none (drop one)",
            field=given[0],
        )
    rescored = rescore_judge_replies(services, run_id, options_from(args).rubrics)
    if args.json:
        emit_json(rescored.as_json())
        return EXIT_OK
    rows = rescored.rows
    print(
        f"rescored {len(rows)} metric scores of run {run_id} from the stored replies "
        f"(no judge call, nothing stored): {rescored.changed} differ"
    )
    print_table(
        [
            (r.test_case_key, r.repetition, r.judge, r.metric, r.recorded, r.error or r.rescored)
            for r in rows
        ],
        ["test_case_key", "rep", "judge", "metric", "recorded", "rescored"],
    )
    return EXIT_OK


def print_planned_calls(prompts: list[PlannedPrompt], judges: int = 1) -> None:
    """One line per planned case of a dry run: its estimated tokens and cost (all its calls)."""
    calls = f" ({judges} calls)" if judges > 1 else ""
    for p in prompts[:50]:
        e = p.estimate.as_json()
        print(
            f"  would judge {p.test_case_key}#{p.repetition}{calls}: ~{e['prompt_tokens']} "
            f"in / ~{e['completion_tokens']} out tokens, ~${e['cost_usd']:.4f} (estimate)"
        )
    if len(prompts) > 50:
        print(f"  … and {len(prompts) - 50} more")


def print_report(report: JudgeReport) -> None:
    """Calls, tokens, cost and failures of a judging pass."""
    if report.dry_run:
        made = f"would make {report.calls} calls"
    elif report.not_judged:
        made = f"made {report.attempted_calls} of {report.calls} planned calls"
    else:
        made = f"made {report.calls} calls"
    print(
        f"judge {', '.join(report.judges)} on run {report.run_id}: {report.cases} cases "
        f"({report.skipped} skipped), {made}" + (" [self-judged]" if report.self_judged else "")
    )
    for note in report.notes:
        print(f"note: {note}")
    if report.dry_run:
        if report.estimate is not None:
            e = report.estimate
            unpriced = f" (+{e.unpriced_calls} calls without a price)" if e.unpriced_calls else ""
            print(
                f"estimate: ~{e.prompt_tokens} input / ~{e.completion_tokens} output tokens, "
                f"~${e.cost_usd:.4f}{unpriced} — an estimate, not a measurement"
            )
        return
    cost = f"${report.cost_usd:.4f}"
    if report.unpriced_calls and not report.cost_usd:
        cost = f"— ({report.unpriced_calls} calls without a price)"  # unknown, not $0
    elif report.unpriced_calls:
        cost += f" (+{report.unpriced_calls} calls without a price)"
    what = (
        f"claim checks ({report.claim_mode}, {report.claims} claims)"
        if report.claim_mode
        else "verdicts"
    )
    print(
        f"{what} {report.verdicts}: {report.parsed} parsed, {report.errors} errors; "
        f"tokens {report.prompt_tokens} in / {report.completion_tokens} out; cost {cost}"
    )
    _print_failures(report)
    _print_outcome(report)


def _print_failures(report: JudgeReport) -> None:
    if report.errors:
        kinds = ", ".join(
            f"{n} {kind.replace('_', ' ')}" for kind, n in report.error_counts().items() if n
        )
        print(f"errors by kind: {kinds}")
    for f in report.failures[:20]:
        print(f"  failed: {f.test_case_key} ({f.judge}): {f.error}")
    if len(report.failures) > 20:
        print(f"  … and {len(report.failures) - 20} more")
    if report.rate_limit_waits:
        print(
            f"rate limited {report.rate_limit_waits} times: waited out "
            f"{report.rate_limit_wait_s:.1f} s (Retry-After)"
        )


def _print_outcome(report: JudgeReport) -> None:
    """Why the pass stopped short, its exit code, and the flag that judges what is left."""
    left = report.not_judged
    if report.budget_stopped:
        print(
            f"stopped at the budget (--max-cost ${report.max_cost_usd:.4f}, spent "
            f"${report.cost_usd:.4f}): {left} of {report.calls} planned calls not made; what was "
            "judged stays judged"
        )
    if report.max_cost_usd is not None and report.cost_usd > report.max_cost_usd:
        # The guard reserves each call's estimate; a judge that wrote more than estimated can
        # take the pass past the budget. Say so rather than let the figure pass unremarked.
        print(
            f"warning: spent ${report.cost_usd:.4f}, over --max-cost ${report.max_cost_usd:.4f}: "
            "the calls cost more than their estimates"
        )
    if report.interrupted:
        print(
            f"interrupted (Ctrl-C): {report.verdicts} verdicts recorded stay recorded; {left} of "
            f"{report.calls} planned calls made no verdict (calls in flight were dropped)"
        )
    code = report.exit_code()
    # --missing-only judges cases without a valid verdict (none yet, or only errors);
    # --retry-errors only those whose counted verdict is an error.
    again = (
        "judge the rest with --missing-only"
        if left
        else "judge the errored cases again with --retry-errors"
    )
    if code == 3:
        print(f"no call reached the provider ({report.attempted_calls} attempted): exit 3")
    elif code == 1:
        print(f"not every planned case got a parsed verdict: exit 1 ({again})")
    elif report.interrupted:
        print(f"exit {code} ({again})")


def cmd_agreement(services: Services, args: argparse.Namespace) -> int:
    """Judge agreement of a run: κ, α and judge vs human, per metric and case pass/fail."""
    # lazy: the agreement measures and the votes projection (start-up, issue 19)
    from evaledger.api.agreement import agreement_notes, agreement_of, human_notes
    from evaledger.scoring.agreement import shown  # lazy: the agreement measures (scoring.stats)

    run_id = resolve_run(services, args.run, args.project)
    report = agreement_of(services, run_id)
    if args.json:
        emit_json(report.model_dump(mode="json"))
        return EXIT_OK
    print(f"agreement of run {run_id}: judges {', '.join(report.judges) or '(none)'}")
    if report.self_judged:
        print(f"self-judged (the agent's own vendor): {', '.join(report.self_judged)}")

    def row(m: MeasureAgreement) -> tuple[Any, ...]:
        return (
            m.measure,
            len(m.raters),
            m.items,
            shown(m.krippendorff_alpha, m.reliability, m.alpha_interval),
            shown(m.cohen_kappa, m.reliability, m.kappa_interval) if len(m.raters) == 2 else None,
        )

    measures = [*report.metrics, report.case_passed]
    print_table(
        [row(m) for m in measures],
        ["measure", "judges", "n", "alpha (ordinal) [95% CI]", "kappa [95% CI]"],
    )
    for note in agreement_notes(measures):
        print(note)
    if report.human:
        print("judge vs human (overrides and reviewers' labels):")
        print_table(
            [
                (
                    h.judge,
                    h.measure,
                    h.items,
                    h.percent_agreement,
                    shown(h.cohen_kappa, h.reliability, h.kappa_interval),
                )
                for h in report.human
            ],
            ["judge", "measure", "items", "agreement", "kappa [95% CI]"],
        )
        for note in human_notes(report.human):
            print(note)
    return EXIT_OK


def register(commands: Commands) -> None:
    """Add judge and agreement."""
    sub, common = commands.subparsers, commands.common
    _register_judge(sub, common)
    p = sub.add_parser(
        "agreement",
        parents=[common],
        help="judge agreement of a run: Cohen's kappa, Krippendorff's alpha, judge vs human",
        description="Per metric and for case pass/fail: Cohen's kappa for two judges, "
        "Krippendorff's alpha (ordinal) for any number, judge vs human where overridden or "
        "labelled; bootstrap 95% intervals and n; under 10 items: insufficient data.",
    )
    p.add_argument("run", metavar="RUN", help=RUN_HELP)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_agreement)


def _register_judge(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "judge",
        parents=[common],
        help="judge a run's transcripts with LLM judges (verdicts are added, never replaced)",
        description="Judge every case with a transcript; each judge call is recorded as a "
        "verdict with its prompt and raw reply. Keys come from OPENAI_API_KEY / "
        "ANTHROPIC_API_KEY (base URLs from OPENAI_BASE_URL / ANTHROPIC_BASE_URL). Exit 0: every "
        "planned case got a parsed verdict; 1: an error verdict or the budget stopped it; 3: no "
        "call reached the provider; 130: Ctrl-C (what was recorded stays; --missing-only judges "
        "the rest).",
    )
    _judge_selection_args(p)
    _judge_rubric_args(p)
    _judge_call_args(p)
    p.add_argument(
        "--claims",
        metavar="MODE",
        help="grounding|attribution: decompose answers into atomic claims and check each "
        "(FActScore) instead of scoring metrics",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_judge)


def _judge_selection_args(p: argparse.ArgumentParser) -> None:
    """`judge`: which run, judges, metrics and cases."""
    p.add_argument("run", metavar="RUN", help=RUN_HELP)
    p.add_argument(
        "--judge",
        action="append",
        default=[],
        metavar="PROVIDER:MODEL",
        help="openai:MODEL, anthropic:MODEL or replay:FILE; repeat for a panel of distinct "
        "vendors (default: the first keyed provider of another vendor than the agent's)",
    )
    p.add_argument(
        "--metric",
        action="append",
        default=[],
        metavar="ID",
        help="metrics to score (repeatable; default: the run's spec)",
    )
    p.add_argument(
        "--panel",
        action="store_true",
        help="full mode: every keyed provider of a distinct vendor judges (at least two)",
    )
    p.add_argument(
        "--missing-only",
        action="store_true",
        help="only cases without a valid verdict yet (none, or only error verdicts)",
    )
    p.add_argument(
        "--retry-errors",
        action="store_true",
        help="only cases whose counted verdict is an error (new verdicts added, old ones kept)",
    )


def _judge_rubric_args(p: argparse.ArgumentParser) -> None:
    """`judge`: rubrics as data, and rescoring stored replies under them."""
    p.add_argument(
        "--rubric",
        metavar="FILE",
        help="judge rubrics as data (JSON or YAML, format evaledger.rubric/1): criteria, steps, "
        "scale (binary, 0-5, 1-5, 0-10, categorical with a mapping), examples, reply format",
    )
    p.add_argument(
        "--rescore",
        action="store_true",
        help="with --rubric: read the run's stored rubric replies under these rubrics (another "
        "mapping) and print recorded vs rescored scores; no judge call, nothing stored",
    )


def _judge_call_args(p: argparse.ArgumentParser) -> None:
    """`judge`: cost, concurrency and provider-call settings."""
    p.add_argument(
        "--max-cost",
        type=float,
        metavar="USD",
        help="stop before the pass's cost would exceed USD (what was judged stays; exit 1)",
    )
    p.add_argument("--concurrency", type=int, default=4, help="calls in flight (default 4)")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="plan and render with estimated tokens and cost; call nothing",
    )
    p.add_argument(
        "--allow-self-judge",
        action="store_true",
        help="allow a judge of the agent's own vendor (verdicts are flagged self-judged)",
    )
    p.add_argument("--temperature", type=float, help="sampling temperature (default 0.2)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per call (default 60)")
    p.add_argument(
        "--max-retries", type=int, default=3, help="retries on 429/5xx/timeouts (default 3)"
    )
