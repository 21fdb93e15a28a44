"""`evaledger review …`: review queues over a rule, a reviewer's next item, labels, gold export.

The reviewer of every act is `--actor` (the CLI is the store's owner); in a blind queue `review
item` shows that reviewer no verdict and no other label before they labelled the case, as the
API and the web pages do (`application/review.py`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evaledger.api.cli.inputs import Commands, positive_int, resolve_run
from evaledger.api.console import EXIT_OK, UsageError, emit_json

if TYPE_CHECKING:
    from evaledger.api.bootstrap import Services


def register(commands: Commands) -> None:
    """Add review (queue create|list|show, next, item, label, skip, adjudicate, assign, export)."""
    p = commands.subparsers.add_parser(
        "review", help="review queues: rules over cases, reviewers, blind labels, gold sets"
    )
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    common = commands.common

    def add(name: str, help_: str) -> argparse.ArgumentParser:
        a = actions.add_parser(name, parents=[common], help=help_, description=help_)
        a.add_argument("--json", action="store_true", help="machine-readable output")
        return a

    q = actions.add_parser("queue", help="create, list or show review queues")
    qa = q.add_subparsers(dest="queue_action", required=True, metavar="QUEUE_ACTION")
    c = qa.add_parser("create", parents=[common], help="create a queue over a rule's cases")
    c.add_argument("name", metavar="NAME", help="the queue's name (unique in the project)")
    c.add_argument(
        "--run", action="append", required=True, metavar="RUN",
        help="a run id or key (repeat for several runs of the project)",
    )  # fmt: skip
    c.add_argument(
        "--where", default="", metavar="RULE",
        help="which cases, e.g. 'status = failed and judge_score >= 4' (default: every case)",
    )  # fmt: skip
    c.add_argument(
        "--reviewers", required=True, metavar="A,B", help="reviewers: token names, comma-separated"
    )
    c.add_argument(
        "--per-item", type=positive_int, default=1, metavar="N",
        help="reviewers per case, given round-robin (default: 1)",
    )  # fmt: skip
    c.add_argument("--blind", action="store_true", help="hide verdicts until labelled")
    c.add_argument(
        "--adjudicators", default="", metavar="A,B",
        help="who may fix a case's label besides admins (default: none)",
    )  # fmt: skip
    c.add_argument("--json", action="store_true", help="machine-readable output")
    lst = qa.add_parser("list", parents=[common], help="list the review queues")
    lst.add_argument("--json", action="store_true", help="machine-readable output")
    show = qa.add_parser("show", parents=[common], help="a queue: items, progress, agreement")
    show.add_argument("name", metavar="NAME", help="the queue")
    show.add_argument("--json", action="store_true", help="machine-readable output")
    for sub in (c, lst, show):
        sub.set_defaults(func=cmd_queue, reads=True)

    a = add("next", "the next case for --actor in a queue")
    a.add_argument("queue", metavar="QUEUE", help="the queue's name")
    a = add("item", "one case of a queue as --actor may see it (blind: no verdict before a label)")
    _item_args(a)
    a = add("label", "label a case given to --actor")
    _item_args(a)
    _verdict_args(a)
    a.add_argument("--comment", metavar="TEXT", help="a comment (default: none)")
    a = add("skip", "pass on a case given to --actor")
    _item_args(a)
    a.add_argument("--reason", metavar="TEXT", help="why (default: none)")
    a = add("adjudicate", "fix a case's gold label (an adjudicator of the queue, or an admin)")
    _item_args(a)
    _verdict_args(a)
    a.add_argument("--reason", required=True, metavar="TEXT", help="why this label")
    a = add("assign", "give a case to reviewers explicitly")
    _item_args(a)
    a.add_argument("reviewers", metavar="A,B", help="reviewers, comma-separated")
    a = add("export", "write the settled items as a gold set (dataset item JSON lines)")
    a.add_argument("queue", metavar="QUEUE", help="the queue's name")
    a.add_argument("-o", "--output", required=True, metavar="FILE", help="the JSONL file")
    for name in ("next", "item", "label", "skip", "adjudicate", "assign", "export"):
        actions.choices[name].set_defaults(func=cmd_review, reads=True)


def _item_args(a: argparse.ArgumentParser) -> None:
    a.add_argument("queue", metavar="QUEUE", help="the queue's name")
    a.add_argument("case", metavar="CASE", help="a case id, or its test case key in the queue")


def _verdict_args(a: argparse.ArgumentParser) -> None:
    g = a.add_mutually_exclusive_group(required=True)
    g.add_argument("--pass", dest="passed", action="store_true", help="the case passes")
    g.add_argument("--fail", dest="failed", action="store_true", help="the case fails")
    a.add_argument("--score", type=_score, metavar="0-5", help="a 0-5 score (default: none)")


def _score(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value <= 5:
        raise argparse.ArgumentTypeError(f"0 to 5, got {text}")
    return value


def _use_cases() -> Any:
    # lazy: the review use cases (the event classes, the agreement code), only for `review`
    from evaledger.application import review

    return review


def cmd_queue(services: Services, args: argparse.Namespace) -> int:
    """Create, list or show review queues."""
    review = _use_cases()
    ctx = review.context_of(args.actor)
    if args.queue_action == "create":
        runs = [resolve_run(services, r, args.project) for r in args.run]
        made = review.create_review_queue(
            services, args.name, runs, ctx, where=args.where,
            reviewers=review.names_list(args.reviewers, "reviewers"), per_item=args.per_item,
            blind=args.blind, adjudicators=review.names_list(args.adjudicators, "adjudicators"),
        )  # fmt: skip
        if args.json:
            emit_json({"project": made.project, "name": made.name, "cases": made.cases})
        else:
            print(f"created review queue {made.name!r} in {made.project}: {made.cases} case(s)")
        return EXIT_OK
    if args.queue_action == "list":
        names = review.list_review_queues(services, ctx, args.project)
        if args.json:
            emit_json([{"project": p, "name": n} for p, n in names])
        for p, n in [] if args.json else names:
            print(f"{p}\t{n}")
        return EXIT_OK
    view = review.queue_view(services, args.name, ctx, args.project)
    if args.json:
        emit_json(review.as_json(view))
        return EXIT_OK
    _print_queue(view, review.agreement_line)
    return EXIT_OK


def _print_queue(view: Any, line: Any) -> None:
    blind = ", blind" if view.blind else ""
    print(f"review queue {view.name!r} ({view.project}{blind}), {view.per_item} per case")
    print(f"rule: {view.rule or '(every case)'}; created by {view.created_by}")
    print(f"cases: {len(view.items)}; settled (gold): {view.gold_items}")
    for p in view.progress:
        print(f"  {p.reviewer}: {p.labelled}/{p.assigned} labelled, {p.skipped} skipped")
    print("agreement between reviewers:")
    for measure in view.agreement:
        print(f"  {line(measure)}")
    print(f"  method: {view.agreement_method}")


def cmd_review(services: Services, args: argparse.Namespace) -> int:
    """next, item, label, skip, adjudicate, assign, export."""
    review = _use_cases()
    ctx, project, queue = review.context_of(args.actor), args.project, args.queue
    if args.action == "next":
        found = review.next_item(services, queue, ctx, project)
        if args.json:
            emit_json({"case_id": None if found is None else str(found)})
        else:
            print(found if found is not None else f"nothing left for {args.actor} in {queue!r}")
        return EXIT_OK
    if args.action == "export":
        lines = review.gold_items(services, queue, ctx, project)
        out = Path(args.output)
        try:
            out.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines))
        except OSError as e:
            raise UsageError(f"--output: cannot write {out}: {e.strerror}", field="--output") from e
        if args.json:
            emit_json({"items": len(lines), "output": str(out)})
        else:
            print(f"wrote {len(lines)} settled item(s) to {out}")
        return EXIT_OK
    case_id = review.case_in_queue(services, queue, args.case, ctx, project)
    if args.action == "item":
        item = review.review_item(services, queue, case_id, ctx, project)
        if args.json:
            emit_json(review.as_json(item))
        else:
            _print_item(item)
        return EXIT_OK
    passed = bool(getattr(args, "passed", False))
    if args.action == "label":
        written = review.label_item(
            services, queue, case_id, ctx, passed=passed, score=args.score,
            comment=args.comment, project=project,
        )  # fmt: skip
    elif args.action == "skip":
        written = review.skip_item(
            services, queue, case_id, ctx, reason=args.reason, project=project
        )
    elif args.action == "adjudicate":
        written = review.adjudicate_item(
            services, queue, case_id, ctx, passed=passed, score=args.score, reason=args.reason,
            project=project,
        )  # fmt: skip
    else:
        names = review.names_list(args.reviewers, "reviewers")
        written = review.assign_items(services, queue, {case_id: names}, ctx, project)
    if args.json:
        emit_json({"case_id": str(case_id), "events": written.events, "position": written.position})
    else:
        print(f"{args.action}: case {case_id} in {queue!r} ({written.events} event(s))")
    return EXIT_OK


def _print_item(item: Any) -> None:
    print(f"case {item.key} ({item.case_id}) of run {item.run_id}")
    for outcome in item.expected_outcomes:
        print(f"  expected: {outcome}")
    for turn in item.turns:
        print(f"  [{turn['role']}] {turn.get('content') or ''}")
    if item.hidden:
        print("blind: label this case to see the verdict and the other labels")
        return
    v = item.verdict
    if v is not None:
        print(f"verdict: {v.status} (score {v.overall_score}); {v.gate_reason}")
    for label in item.labels:
        print(f"label by {label.reviewer}: {'pass' if label.passed else 'fail'} {label.score}")
    if item.gold is not None:
        print(f"gold: {'pass' if item.gold.passed else 'fail'} by {', '.join(item.gold.by)}")
