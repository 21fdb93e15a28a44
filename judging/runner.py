"""The judge runner: plan a judging pass over a run, call the judges concurrently, record verdicts.

Planning checks everything that can be wrong with the request (run, judges, keys, pairing,
metrics, concurrency) before any call is made or anything is stored. Each judge call becomes one
`JudgeVerdictRecorded` through the ledger's `record` command, error verdicts included.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

from evaledger.domain.errors import ValidationError
from evaledger.domain.events import (
    CaseOpened,
    ClaimsVerified,
    JudgeIdentity,
    JudgeVerdictRecorded,
    ParseStatus,
    TranscriptRecorded,
    Usage,
    VerdictInvalidated,
)
from evaledger.domain.ledger import Context, Ledger
from evaledger.domain.metrics import MetricDefinition
from evaledger.judging.claims import MODES, answer_lines, parse_claims, render_claims
from evaledger.judging.prompt import CaseToJudge, RenderedPrompt, parse_reply, render
from evaledger.judging.providers import (
    JudgeRef,
    Provider,
    ProviderError,
    ProviderRefusedError,
    ReplayJudge,
    cost_usd,
    default_judges,
    load_prices,
    make_provider,
    vendor_of,
)

DEFAULT_TEMPERATURE = 0.2
DEFAULT_MAX_TOKENS = 4096

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class JudgeOptions:
    """What a judging pass is asked to do (CLI flags / HTTP body)."""

    judges: tuple[str, ...] = ()
    metrics: tuple[str, ...] = ()
    missing_only: bool = False
    concurrency: int = 4
    dry_run: bool = False
    allow_self_judge: bool = False
    temperature: float | None = None
    max_tokens: int = DEFAULT_MAX_TOKENS
    timeout_s: float = 60.0
    max_retries: int = 3
    claims: str | None = None
    """`grounding` or `attribution`: check claims (ClaimsVerified) instead of scoring metrics."""


@dataclass(frozen=True)
class PlannedCase:
    """One case to judge."""

    case_id: UUID
    key: str
    repetition: int
    subject: CaseToJudge


@dataclass
class Plan:
    """A validated judging pass, ready to run."""

    run_id: UUID
    judges: list[Provider]
    self_judged: bool
    metrics: tuple[MetricDefinition, ...]
    cases: list[PlannedCase]
    skipped: int
    params: dict[str, Any]
    prices: dict[str, tuple[float, float]]
    options: JudgeOptions

    @property
    def calls(self) -> int:
        """Judge calls the pass makes."""
        return len(self.cases) * len(self.judges)


@dataclass
class Failure:
    """One failed judge call (its error verdict is recorded)."""

    case_id: UUID
    test_case_key: str
    judge: str
    error: str


@dataclass
class JudgeReport:
    """What a judging pass did."""

    run_id: UUID
    judges: list[str]
    metrics: list[str]
    cases: int
    skipped: int
    calls: int
    dry_run: bool
    self_judged: bool
    claim_mode: str | None = None
    verdicts: int = 0
    parsed: int = 0
    errors: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    unpriced_calls: int = 0
    position: int = 0
    claims: int = 0
    failures: list[Failure] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        """The report as plain JSON values."""
        return {
            "run_id": str(self.run_id),
            "judges": self.judges,
            "metrics": self.metrics,
            "cases": self.cases,
            "skipped": self.skipped,
            "calls": self.calls,
            "dry_run": self.dry_run,
            "self_judged": self.self_judged,
            "verdicts": self.verdicts,
            "parsed": self.parsed,
            "errors": self.errors,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cost_usd": self.cost_usd,
            "unpriced_calls": self.unpriced_calls,
            "claims": self.claims,
            "claim_mode": self.claim_mode,
            "position": self.position,
            "failures": [
                {
                    "case_id": str(f.case_id),
                    "test_case_key": f.test_case_key,
                    "judge": f.judge,
                    "error": f.error,
                }
                for f in self.failures
            ],
        }


def _pair(
    options: JudgeOptions,
    agent_vendor: str | None,
    configured: JudgeRef | None,
    env: Mapping[str, str],
) -> list[JudgeRef]:
    """The judges to use (DESIGN §10 pairing: another vendor than the agent's by default)."""
    if options.judges:
        refs = [JudgeRef.parse(j, f"judge[{i}]") for i, j in enumerate(options.judges)]
    else:
        candidates = default_judges(env, configured)
        other = [r for r in candidates if vendor_of(r.provider, r.model) != agent_vendor]
        if other or agent_vendor is None:
            refs = (other or candidates)[:1]
        elif candidates and options.allow_self_judge:
            refs = candidates[:1]
        elif candidates:
            raise ValidationError(
                f"judge: every configured judge is of the agent's vendor ({agent_vendor}); "
                "set the key of another vendor, pass --judge, or --allow-self-judge",
                field="judge",
            )
        else:
            raise ValidationError(
                "judge: no judge provider has a key (OPENAI_API_KEY, ANTHROPIC_API_KEY); "
                "set one or pass --judge PROVIDER:MODEL",
                field="judge",
            )
    if len({r.label for r in refs}) != len(refs):
        raise ValidationError("judge: the same judge is given twice", field="judge")
    return refs


def plan(
    ledger: Ledger,
    run_id: UUID,
    options: JudgeOptions,
    env: Mapping[str, str],
) -> Plan:
    """Validate a judging pass; raises ValidationError / NotFoundError before anything happens."""
    if options.concurrency < 1:
        raise ValidationError(
            f"concurrency: must be at least 1, got {options.concurrency}", field="concurrency"
        )
    if options.claims is not None and options.claims not in MODES:
        raise ValidationError(
            f"claims: expected one of {', '.join(MODES)}, got {options.claims!r}", field="claims"
        )
    if options.claims is not None and len(options.judges) > 1:
        # Claims of several judges would be summed as hallucinations: one checker per pass.
        raise ValidationError("claims: a claim check takes one judge, not a panel", field="judge")
    if options.timeout_s <= 0:
        raise ValidationError("timeout: must be more than 0 seconds", field="timeout")
    if not 0 <= options.max_retries <= 10:
        raise ValidationError("max_retries: must be between 0 and 10", field="max_retries")
    if options.temperature is not None and not 0 <= options.temperature <= 2:
        raise ValidationError("temperature: must be between 0 and 2", field="temperature")
    run = ledger.get_run(run_id)
    created = run.created
    catalogue = ledger.catalogue(created.project)
    metric_ids = options.metrics or tuple(m.metric for m in created.spec.metrics)
    unknown = [m for m in metric_ids if m not in catalogue]
    if unknown:
        raise ValidationError(
            f"metric: unknown metric {unknown[0]!r} (known: {', '.join(sorted(catalogue))})",
            field="metric",
        )
    if len(set(metric_ids)) != len(metric_ids):
        raise ValidationError("metric: a metric is selected twice", field="metric")
    agent_vendor = vendor_of(created.agent.provider, created.agent.model)
    judge_cfg = created.config.judge
    configured = (
        JudgeRef(judge_cfg.provider, judge_cfg.model)
        if judge_cfg.provider in ("openai", "anthropic") and judge_cfg.model
        else None
    )
    refs = _pair(options, agent_vendor, configured, env)
    prices = load_prices(env)
    judges = [make_provider(r, env, options.timeout_s, options.max_retries) for r in refs]
    vendors = [j.vendor for j in judges]
    if len(judges) > 1 and len(set(vendors)) != len(vendors):
        raise ValidationError(
            "judge: a panel needs judges of distinct vendors, got "
            + ", ".join(f"{j.ref.label} ({j.vendor})" for j in judges),
            field="judge",
        )
    self_judged = agent_vendor is not None and agent_vendor in vendors
    if self_judged and not options.allow_self_judge:
        raise ValidationError(
            f"judge: {', '.join(j.ref.label for j in judges if j.vendor == agent_vendor)} is of "
            f"the agent's vendor ({agent_vendor}); self-judging needs --allow-self-judge",
            field="judge",
        )
    cases, skipped = _cases(ledger, run.case_ids, created.agent, options.missing_only)
    temperature = options.temperature
    if temperature is None:
        temperature = judge_cfg.temperature if judge_cfg.temperature is not None else 0.2
    return Plan(
        run_id=run_id,
        judges=judges,
        self_judged=self_judged,
        metrics=tuple(catalogue[m] for m in metric_ids),
        cases=cases,
        skipped=skipped,
        params={"temperature": temperature, "max_tokens": options.max_tokens},
        prices=prices,
        options=options,
    )


def _cases(
    ledger: Ledger, case_ids: Sequence[UUID], agent: Any, missing_only: bool
) -> tuple[list[PlannedCase], int]:
    planned: list[PlannedCase] = []
    skipped = 0
    for case_id in case_ids:
        events = ledger.events_of(case_id)
        opened = events[0]
        assert isinstance(opened, CaseOpened)
        transcript = next((e for e in events if isinstance(e, TranscriptRecorded)), None)
        invalidated = {e.verdict_id for e in events if isinstance(e, VerdictInvalidated)}
        has_verdict = any(
            isinstance(e, JudgeVerdictRecorded) and e.verdict_id not in invalidated for e in events
        )
        if transcript is None or not transcript.turns or (missing_only and has_verdict):
            skipped += 1
            continue
        planned.append(
            PlannedCase(
                case_id=case_id,
                key=opened.test_case.key,
                repetition=opened.repetition,
                subject=CaseToJudge(opened.test_case, agent, transcript.turns),
            )
        )
    return planned, skipped


def _identity(judge: Provider, params: Mapping[str, Any], version: str | None) -> JudgeIdentity:
    model = judge.ref.model
    extra: dict[str, Any] = {"max_tokens": params["max_tokens"]}
    if isinstance(judge, ReplayJudge):
        # The replies file is named, not its local path; the recorded judge is the version.
        model = Path(judge.ref.model).name
        extra["replayed_judge"] = judge.recorded_judge
    return JudgeIdentity(
        kind="llm",
        provider=judge.ref.provider,
        model=model,
        version=version,
        temperature=params["temperature"] if judge.sends_temperature else None,
        params=extra,
    )


async def _judge_one(
    judge: Provider,
    case: PlannedCase,
    prompt: RenderedPrompt,
    plan_: Plan,
    panel_id: UUID | None,
) -> dict[str, Any]:
    """One judge call → the fields of its JudgeVerdictRecorded (an error verdict on failure)."""
    params = {**plan_.params, "case_key": case.key, "repetition": case.repetition}
    fields: dict[str, Any] = {
        "verdict_id": uuid4(),
        "template_id": prompt.template_id,
        "template_hash": prompt.template_hash,
        "prompt": prompt.text,
        "panel_id": panel_id,
        "self_judged": plan_.self_judged and judge.vendor == _agent_vendor(case),
    }
    try:
        reply = await judge.complete(prompt, params)
    except ProviderError as e:
        return {
            **fields,
            "judge": _identity(judge, plan_.params, None),
            "parse_status": ParseStatus.PROVIDER_ERROR,
            "error": str(e),
        }
    parsed = parse_reply(reply.text, prompt, len(case.subject.turns))
    cost = _cost(judge, plan_, reply.prompt_tokens, reply.completion_tokens)
    return {
        **fields,
        "judge": _identity(judge, plan_.params, reply.model_version),
        "raw_output": reply.text,
        "parse_status": parsed.status,
        "metric_scores": parsed.metric_scores,
        "expected_outcomes": parsed.expected_outcomes,
        "latency_ms": reply.latency_ms,
        "usage": Usage(
            prompt_tokens=reply.prompt_tokens, completion_tokens=reply.completion_tokens
        ),
        "cost_usd": cost,
        "error": parsed.error,
    }


async def _check_claims(
    judge: Provider, case: PlannedCase, prompt: RenderedPrompt, plan_: Plan
) -> dict[str, Any]:
    """One claim check → the fields of its ClaimsVerified (an error on failure, no claims)."""
    fields: dict[str, Any] = {
        "claims": [],
        "mode": plan_.options.claims,
        "template_id": prompt.template_id,
        "template_hash": prompt.template_hash,
        "prompt": prompt.text,
        "judge": _identity(judge, plan_.params, None),
    }
    if not answer_lines(case.subject.turns):
        # Nothing was answered: no call, an error the scores can count as 0 (DESIGN §10).
        return {**fields, "error": "empty answer: the agent said nothing to check"}
    params = {**plan_.params, "case_key": case.key, "repetition": case.repetition}
    try:
        reply = await judge.complete(prompt, params)
    except ProviderError as e:
        return {**fields, "error": f"extraction error: {e}"}
    parsed = parse_claims(reply.text)
    return {
        **fields,
        "claims": parsed.claims,
        "judge": _identity(judge, plan_.params, reply.model_version),
        "raw_output": reply.text,
        "error": parsed.error,
        "latency_ms": reply.latency_ms,
        "usage": Usage(
            prompt_tokens=reply.prompt_tokens, completion_tokens=reply.completion_tokens
        ),
        "cost_usd": _cost(judge, plan_, reply.prompt_tokens, reply.completion_tokens),
    }


def _cost(judge: Provider, plan_: Plan, prompt_tokens: int, completion: int) -> float | None:
    if isinstance(judge, ReplayJudge):
        return None  # a replayed reply costs nothing now
    return cost_usd(plan_.prices, judge.ref.model, prompt_tokens, completion)


def _agent_vendor(case: PlannedCase) -> str | None:
    return vendor_of(case.subject.agent.provider, case.subject.agent.model)


async def _execute(
    ledger: Ledger, plan_: Plan, ctx: Context, progress: Progress | None
) -> JudgeReport:
    report = _empty_report(plan_)
    semaphore = asyncio.Semaphore(plan_.options.concurrency)
    refused = asyncio.Event()
    done = 0
    lock = asyncio.Lock()

    async def judge_case(case: PlannedCase) -> None:
        nonlocal done
        mode = plan_.options.claims
        prompt = render_claims(case.subject, mode) if mode else render(case.subject, plan_.metrics)
        panel_id = uuid4() if len(plan_.judges) > 1 else None

        async def vote(judge: Provider) -> None:
            async with semaphore:
                if refused.is_set():
                    return
                try:
                    if mode:
                        fields = await _check_claims(judge, case, prompt, plan_)
                    else:
                        fields = await _judge_one(judge, case, prompt, plan_, panel_id)
                except ProviderRefusedError:
                    # A refused request (bad key, unknown model) makes no verdict: stop the pass.
                    refused.set()
                    raise
            cls = ClaimsVerified if mode else JudgeVerdictRecorded
            written = await asyncio.to_thread(
                ledger.record, case.case_id, cls, ctx, fields, judgement=True
            )
            async with lock:
                _count(report, case, judge, fields, written.position)

        # A panel's judges run concurrently; every vote is recorded, errors included.
        await asyncio.gather(*(vote(j) for j in plan_.judges))
        async with lock:
            done += 1
            if progress is not None:
                progress(done, len(plan_.cases))

    try:
        await asyncio.gather(*(judge_case(c) for c in plan_.cases))
    finally:
        for judge in plan_.judges:
            await judge.close()
    report.failures.sort(key=lambda f: (f.test_case_key, f.judge))
    return report


def _empty_report(plan_: Plan) -> JudgeReport:
    return JudgeReport(
        run_id=plan_.run_id,
        judges=[j.ref.label for j in plan_.judges],
        metrics=[m.name for m in plan_.metrics],
        cases=len(plan_.cases),
        skipped=plan_.skipped,
        calls=plan_.calls,
        dry_run=plan_.options.dry_run,
        self_judged=plan_.self_judged,
        claim_mode=plan_.options.claims,
    )


def _count(
    report: JudgeReport, case: PlannedCase, judge: Provider, fields: Mapping[str, Any], pos: int
) -> None:
    report.verdicts += 1
    report.position = max(report.position, pos)
    report.claims += len(fields.get("claims", []))
    usage = fields.get("usage")
    if usage is not None:
        report.prompt_tokens += usage.prompt_tokens
        report.completion_tokens += usage.completion_tokens
        if fields.get("cost_usd") is None:
            report.unpriced_calls += 1
        else:
            report.cost_usd += fields["cost_usd"]
    if fields.get("error") is None:
        report.parsed += 1
    else:
        report.errors += 1
        report.failures.append(
            Failure(case.case_id, case.key, judge.ref.label, str(fields.get("error")))
        )


def run_plan(
    ledger: Ledger, plan_: Plan, ctx: Context, progress: Progress | None = None
) -> JudgeReport:
    """Run a validated plan (nothing is called or stored on a dry run)."""
    if plan_.options.dry_run:
        asyncio.run(_close_all(plan_.judges))
        return _empty_report(plan_)
    return asyncio.run(_execute(ledger, plan_, ctx, progress))


async def _close_all(judges: Sequence[Provider]) -> None:
    for judge in judges:
        await judge.close()


def dry_run_prompts(plan_: Plan) -> list[dict[str, Any]]:
    """The prompts a pass would send (dry run), one per case."""
    return [
        {
            "case_id": str(c.case_id),
            "test_case_key": c.key,
            "repetition": c.repetition,
            "prompt": (
                render_claims(c.subject, plan_.options.claims)
                if plan_.options.claims
                else render(c.subject, plan_.metrics)
            ).text,
        }
        for c in plan_.cases
    ]
