"""`evaledger demo`: load the shipped demo runs, then show scores, a what-if rescore and more."""

from __future__ import annotations

import argparse
from importlib import resources
from typing import Any
from uuid import UUID

from evaledger.api.bootstrap import Services
from evaledger.application.demo import judge_with_replay, load_demo_runs, send_demo_traces
from evaledger.application.runs import rescore_run
from evaledger.domain.bundle import RunBundle
from evaledger.domain.spec import JudgeErrorPolicy, RunConfig

REPLIES = "judge-replies.json"
BUNDLES = (
    "customer-service.baseline.json",
    "customer-service.candidate.json",
    "governance.json",
)


def demo_bundles() -> list[RunBundle]:
    """The demo run bundles shipped with the package."""
    root = resources.files(__name__)
    return [RunBundle.model_validate_json(root.joinpath(name).read_bytes()) for name in BUNDLES]


def what_if_config(bundle: RunBundle) -> RunConfig:
    """The demo's what-if policy: judge errors unscored and a stricter fallback threshold."""
    judge = bundle.run.config.judge.model_copy(update={"pass_threshold": 80.0})
    return bundle.run.config.model_copy(
        update={"judge": judge, "judge_errors": JudgeErrorPolicy.UNSCORED}
    )


def judge_demo(services: Services, run_id: UUID) -> dict[str, Any]:
    """Judge the run once with the offline `replay` judge (recorded replies, no network).

    Returns what was judged, with one case shown end to end: transcript → prompt → reply → score.
    A second demo finds the replay verdicts and writes nothing.
    """
    with resources.as_file(resources.files(__name__).joinpath(REPLIES)) as path:
        return judge_with_replay(services, run_id, path).model_dump(mode="json")


def run_demo(services: Services, args: argparse.Namespace) -> int:
    """Load the demo (idempotently) and print what it shows."""
    # lazy: the comparison engine (numpy), the grading rules and rich, for the demo only
    from evaledger.api.console import (
        emit_json,
        print_comparison,
        print_grade,
        print_rescore,
        print_table,
    )
    from evaledger.application.compare import compare_runs
    from evaledger.application.grades import grade_run, run_agreement
    from evaledger.application.reports import show_run

    bundles = demo_bundles()
    loaded = [r.model_dump(mode="json") for r in load_demo_runs(services, bundles)]
    baseline_id, candidate_id, governance_id = (UUID(item["run_id"]) for item in loaded)
    judged = judge_demo(services, baseline_id)
    online = send_demo_traces(services)
    services.sync()
    agreement = run_agreement(services, baseline_id)
    summaries = {
        item["run_key"]: show_run(services, UUID(item["run_id"])).aggregate for item in loaded[:2]
    }
    rescore = rescore_run(services, candidate_id, what_if_config(bundles[1])).to_json()
    comparison = compare_runs(services, baseline_id, candidate_id)
    scorecard = grade_run(services, governance_id)
    if getattr(args, "json", False):
        emit_json(
            {
                "loaded": loaded,
                "summaries": {k: v.model_dump(mode="json") for k, v in summaries.items()},
                "rescore": rescore,
                "comparison": comparison.model_dump(mode="json"),
                "scorecard": scorecard.model_dump(mode="json"),
                "judging": judged,
                "agreement": agreement.model_dump(mode="json"),
                "online": online.model_dump(mode="json"),
            }
        )
        return 0
    _print_loaded(services, loaded, summaries)
    _print_judging(loaded, judged)
    what = (
        f"{online.spans_recorded} spans and {online.cases_recorded} cases recorded, "
        f"{online.events} events written"
        if online.cases_recorded
        else "already recorded, nothing written"
    )
    print(
        f"production traces: {online.sent} conversations sent through the OpenTelemetry SDK "
        f"(OTLP) → online run {online.run_key}: {what} (docs/online.md)"
    )
    print(f"agreement (evaledger agreement {loaded[0]['run_key']}): {', '.join(agreement.judges)}")
    print_table(
        [
            (m.measure, m.items, m.krippendorff_alpha, m.cohen_kappa)
            for m in [*agreement.metrics, agreement.case_passed]
        ],
        ["measure", "items", "alpha (ordinal)", "kappa"],
    )
    print()
    print("what-if: the candidate under judge_errors=unscored and pass_threshold 80")
    print_rescore(rescore)
    print()
    print("comparison of the customer-service runs (evaledger compare BASELINE CANDIDATE):")
    print_comparison(comparison)
    print()
    print("governance scorecard (evaledger grade governance-audit-2026-11-01):")
    print_grade(scorecard)
    return 0


def _print_loaded(
    services: Services, loaded: list[dict[str, Any]], summaries: dict[str, Any]
) -> None:
    """What the demo loaded, and the two customer-service runs' summaries."""
    from evaledger.api.console import print_aggregate  # lazy: rich, for the demo only

    print(f"evaledger demo — store: {services.location.url}")
    for item in loaded:
        what = (
            f"imported {item['events']} events"
            if item["events"]
            else "already loaded, nothing written"
        )
        print(f"  run {item['run_key']} ({item['cases']} cases): {what}  id {item['run_id']}")
    for key, aggregate in summaries.items():
        print()
        print_aggregate(aggregate.model_dump(mode="json"), f"summary of {key}:")
    print()


def _print_judging(loaded: list[dict[str, Any]], judged: dict[str, Any]) -> None:
    """The replay judge's verdicts and one case traced from transcript to scores."""
    example = judged["example"]
    if judged["recorded"]:
        print(
            f"judging (evaledger judge {loaded[0]['run_key']} --judge replay:{REPLIES}): "
            f"recorded {judged['recorded']} verdicts from recorded replies, offline"
        )
    else:
        print("judging: the replay judge's verdicts are already recorded, nothing written")
    print(
        f"  one case, end to end (evaledger explain {example['case_id']}): transcript of "
        f"{example['transcript_turns']} turns → prompt of {len(example['prompt'])} characters "
        f"({example['template_id']}, {example['template_hash'][:12]}…) → reply of "
        f"{len(example['raw_output'])} characters → {example['parse_status']}: "
        + ", ".join(f"{k} {v}" for k, v in example["metric_scores"].items())
    )
