"""`evaledger demo`: load the shipped demo runs, then show scores, a what-if rescore and more."""

from __future__ import annotations

import argparse
from importlib import resources
from typing import Any
from uuid import UUID

from evaledger.api.bootstrap import Services
from evaledger.domain.bundle import RunBundle
from evaledger.domain.ledger import Context
from evaledger.domain.spec import JudgeErrorPolicy, RunConfig, resolve_spec

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


def run_demo(services: Services, args: argparse.Namespace) -> int:
    """Load the demo (idempotently) and print what it shows."""
    from evaledger.api.cli import (
        emit_json,
        print_aggregate,
        print_comparison,
        print_grade,
        print_rescore,
    )

    bundles = demo_bundles()
    loaded: list[dict[str, Any]] = []
    for bundle in bundles:
        r = services.ledger.import_bundle(bundle, Context(actor="demo"))
        loaded.append(
            {"run_id": str(r.run_id), "run_key": r.run_key, "cases": r.cases, "events": r.events}
        )
    services.sync()
    baseline_id, candidate_id, governance_id = (UUID(item["run_id"]) for item in loaded)
    summaries = {
        item["run_key"]: services.reads.summary(UUID(item["run_id"])).aggregate
        for item in loaded[:2]
    }
    rescore = services.reads.rescore(candidate_id, resolve_spec(what_if_config(bundles[1])))
    comparison = services.reports.compare(baseline_id, candidate_id)
    scorecard = services.reports.grade(
        governance_id, services.reports.grading_for(governance_id, None, None)
    )
    if getattr(args, "json", False):
        emit_json(
            {
                "loaded": loaded,
                "summaries": {k: v.model_dump(mode="json") for k, v in summaries.items()},
                "rescore": rescore,
                "comparison": comparison.model_dump(mode="json"),
                "scorecard": scorecard.model_dump(mode="json"),
            }
        )
        return 0
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
    print("what-if: the candidate under judge_errors=unscored and pass_threshold 80")
    print_rescore(rescore)
    print()
    print("comparison of the customer-service runs (evaledger compare BASELINE CANDIDATE):")
    print_comparison(comparison)
    print()
    print("governance scorecard (evaledger grade governance-audit-2026-11-01):")
    print_grade(scorecard)
    return 0
