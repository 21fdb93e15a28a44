"""The judge runner: plan a judging pass over a run, call the judges concurrently, record verdicts.

Planning checks everything that can be wrong with the request (run, judges, keys, pairing,
metrics, concurrency) before any call is made or anything is stored. Each judge call becomes one
`JudgeVerdictRecorded` through the ledger's `record` command, error verdicts included.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple
from uuid import UUID, uuid4

from evaledger.domain.errors import ValidationError
from evaledger.domain.events import (
    ClaimsVerified,
    JudgeIdentity,
    JudgeVerdictRecorded,
    ParseStatus,
    Usage,
)
from evaledger.domain.ledger import Context, Ledger
from evaledger.domain.metrics import MetricDefinition
from evaledger.judging.budget import Budget, estimate_tokens
from evaledger.judging.claims import MODES, answer_lines, parse_claims, render_claims
from evaledger.judging.prompt import ParsedReply, RenderedPrompt, parse_reply, render
from evaledger.judging.providers import (
    Completion,
    JudgeRef,
    Provider,
    ProviderError,
    ProviderRefusedError,
    RateLimitedError,
    ReplayJudge,
    cost_usd,
    default_judges,
    load_prices,
    make_provider,
    vendor_of,
)
from evaledger.judging.report import Estimate, Failure, FailureKind, JudgeReport, PlannedPrompt
from evaledger.judging.rubric import (
    JudgeRubric,
    check_rubric,
    parse_rubric_reply,
    render_with_rubrics,
    rubric_of,
)
from evaledger.judging.selection import PlannedCase, Selection, pass_notes, select_cases

__all__ = [
    "JudgeOptions",
    "JudgeReport",
    "JudgingInterrupted",
    "Plan",
    "dry_run_prompts",
    "plan",
    "run_plan",
]

DEFAULT_TEMPERATURE = 0.2
DEFAULT_MAX_TOKENS = 4096
RATE_LIMIT_PATIENCE_S = 900.0
"""Longest total wait for one call's rate limits (429 with Retry-After) before it is an error."""
RATE_LIMIT_BACKOFF_S = 30.0
"""Longest wait between two asks when a 429 names no Retry-After (doubling from 1 s)."""

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class JudgeOptions:
    """What a judging pass is asked to do (CLI flags / HTTP body)."""

    judges: tuple[str, ...] = ()
    metrics: tuple[str, ...] = ()
    missing_only: bool = False
    panel: bool = False
    """Full mode: every keyed provider of a distinct vendor judges (at least two)."""
    concurrency: int = 4
    dry_run: bool = False
    allow_self_judge: bool = False
    temperature: float | None = None
    max_tokens: int = DEFAULT_MAX_TOKENS
    timeout_s: float = 60.0
    max_retries: int = 3
    claims: str | None = None
    """`grounding` or `attribution`: check claims (ClaimsVerified) instead of scoring metrics."""
    retry_errors: bool = False
    """Only cases whose counted verdict is an error (new verdicts are added, old ones kept)."""
    max_cost_usd: float | None = None
    """Stop before the pass's cost would exceed this (estimated per call, actual once made)."""
    rubrics: tuple[JudgeRubric, ...] = ()
    """Judge these metrics by these rubrics (a registered metric may carry its own)."""
    case_ids: tuple[UUID, ...] = ()
    """Only these cases of the run (an online rule judges one trace's case); empty: every case."""


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
    rubrics: dict[str, JudgeRubric] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    """What the new verdicts will not change, or will count as errors (judging/selection.py)."""

    @property
    def calls(self) -> int:
        """Judge calls the pass makes."""
        return len(self.cases) * len(self.judges)

    def prompt_of(self, case: PlannedCase) -> RenderedPrompt:
        """The prompt of one case: a claim check, the rubric template or Connexity's."""
        if self.options.claims:
            return render_claims(case.subject, self.options.claims)
        if self.rubrics:
            return render_with_rubrics(case.subject, self.metrics, self.rubrics)
        return render(case.subject, self.metrics)

    def parse(self, raw: str, prompt: RenderedPrompt, turn_count: int) -> ParsedReply:
        """Parse a metric reply under the template it answered."""
        if self.rubrics:
            return parse_rubric_reply(raw, prompt, self.rubrics, turn_count)
        return parse_reply(raw, prompt, turn_count)


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
        by_vendor: dict[str | None, JudgeRef] = {}
        for candidate in default_judges(env, configured):
            by_vendor.setdefault(vendor_of(candidate.provider, candidate.model), candidate)
        candidates = list(by_vendor.values())
        other = [r for r in candidates if vendor_of(r.provider, r.model) != agent_vendor]
        if options.panel:
            # Full mode: every keyed vendor (the agent's own only when asked for).
            refs = candidates if options.allow_self_judge else other
        elif other or agent_vendor is None:
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
    if options.panel and len(refs) < 2:
        raise ValidationError(
            f"judge: a panel needs at least two judges of distinct vendors, found {len(refs)} "
            f"({', '.join(r.label for r in refs) or 'none'}) besides the agent's vendor "
            f"({agent_vendor}); set another provider's key or pass --judge",
            field="judge",
        )
    return refs


def _check_options(options: JudgeOptions) -> None:
    """Refuse bad numbers and modes before anything is read or called."""
    if options.concurrency < 1:
        raise ValidationError(
            f"concurrency: must be at least 1, got {options.concurrency}", field="concurrency"
        )
    if options.claims is not None and options.claims not in MODES:
        raise ValidationError(
            f"claims: expected one of {', '.join(MODES)}, got {options.claims!r}", field="claims"
        )
    if options.timeout_s <= 0:
        raise ValidationError("timeout: must be more than 0 seconds", field="timeout")
    if not 0 <= options.max_retries <= 10:
        raise ValidationError("max_retries: must be between 0 and 10", field="max_retries")
    if options.temperature is not None and not 0 <= options.temperature <= 2:
        raise ValidationError("temperature: must be between 0 and 2", field="temperature")
    if options.max_cost_usd is not None and not options.max_cost_usd > 0:
        raise ValidationError("max_cost: must be more than 0 USD", field="max_cost")
    if options.claims is not None and options.rubrics:
        raise ValidationError("rubric: a claim check takes no metric rubric", field="rubric")


def _metrics(
    options: JudgeOptions, catalogue: Mapping[str, MetricDefinition], spec_metrics: Sequence[str]
) -> tuple[tuple[MetricDefinition, ...], dict[str, JudgeRubric]]:
    """The metrics to score and their rubrics: the given ones, else those their metric carries."""
    metric_ids = options.metrics or tuple(spec_metrics)
    unknown = [m for m in metric_ids if m not in catalogue]
    if unknown:
        raise ValidationError(
            f"metric: unknown metric {unknown[0]!r} (known: {', '.join(sorted(catalogue))})",
            field="metric",
        )
    if len(set(metric_ids)) != len(metric_ids):
        raise ValidationError("metric: a metric is selected twice", field="metric")
    metrics = tuple(catalogue[m] for m in metric_ids)
    rubrics: dict[str, JudgeRubric] = {}
    for m in metrics:
        carried = rubric_of(m)
        if carried is not None:
            rubrics[m.name] = carried
    for r in options.rubrics:
        if r.metric not in metric_ids:
            raise ValidationError(
                f"rubric: metric {r.metric!r} is not judged in this pass "
                f"(judged: {', '.join(metric_ids)})",
                field="rubric",
            )
        rubrics[r.metric] = r
    for m in metrics:
        if m.name in rubrics:
            check_rubric(m, rubrics[m.name])
    return metrics, rubrics


def _judges(
    options: JudgeOptions,
    refs: Sequence[JudgeRef],
    env: Mapping[str, str],
    agent_vendor: str | None,
) -> tuple[list[Provider], bool]:
    """The providers of the judges, checked for distinct vendors and self-judging."""
    if options.claims is not None and len(refs) > 1:
        # Claims of several judges would be summed as hallucinations: one checker per pass.
        raise ValidationError("claims: a claim check takes one judge, not a panel", field="judge")
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
    return judges, self_judged


def plan(
    ledger: Ledger,
    run_id: UUID,
    options: JudgeOptions,
    env: Mapping[str, str],
) -> Plan:
    """Validate a judging pass; raises ValidationError / NotFoundError before anything happens."""
    _check_options(options)
    run = ledger.get_run(run_id)
    created = run.created
    metrics, rubrics = _metrics(
        options, ledger.catalogue(created.project), [m.metric for m in created.spec.metrics]
    )
    agent_vendor = vendor_of(created.agent.provider, created.agent.model)
    judge_cfg = created.config.judge
    configured = (
        JudgeRef(judge_cfg.provider, judge_cfg.model)
        if judge_cfg.provider in ("openai", "anthropic") and judge_cfg.model
        else None
    )
    refs = _pair(options, agent_vendor, configured, env)
    prices = load_prices(env)
    if options.max_cost_usd is not None:
        unpriced = [
            r.label
            for r in refs
            if r.provider != "replay" and cost_usd(prices, r.model, 0, 0) is None
        ]
        if unpriced:
            raise ValidationError(
                f"max_cost: {', '.join(unpriced)} has no price, so no budget can be held; "
                "add it to the file named by EVALEDGER_JUDGE_PRICES",
                field="max_cost",
            )
    judges, self_judged = _judges(options, refs, env, agent_vendor)
    selection = Selection(
        missing_only=options.missing_only,
        retry_errors=options.retry_errors,
        done_by=ClaimsVerified if options.claims else JudgeVerdictRecorded,
        metrics=tuple((m.name, m.score_type) for m in metrics),
    )
    wanted = set(options.case_ids)
    case_ids = [c for c in run.case_ids if c in wanted] if wanted else run.case_ids
    selected = select_cases(ledger, case_ids, created.agent, selection, created.spec)
    notes = [] if options.claims else pass_notes(created.spec, [m.name for m in metrics], selected)
    # The flag, else the run config's judge temperature, else Connexity's 0.2.
    temperature = next(
        t
        for t in (options.temperature, judge_cfg.temperature, DEFAULT_TEMPERATURE)
        if t is not None
    )
    return Plan(
        run_id=run_id,
        judges=judges,
        self_judged=self_judged,
        metrics=metrics,
        cases=selected.cases,
        skipped=selected.skipped,
        params={"temperature": temperature, "max_tokens": options.max_tokens},
        prices=prices,
        options=options,
        rubrics=rubrics,
        notes=notes,
    )


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


class _Asked(NamedTuple):
    """A call's reply, or the error it ended in, and how many rate limits it waited out."""

    reply: Completion | None
    error: ProviderError | None
    waits: int
    waited_s: float = 0.0
    """Seconds spent waiting out 429s (their Retry-After, else the backoff)."""


async def _ask(judge: Provider, prompt: RenderedPrompt, params: Mapping[str, Any]) -> _Asked:
    """Ask a judge; a 429 is waited out (its Retry-After, else a doubling backoff), not failed."""
    waited, waits, backoff = 0.0, 0, 1.0
    while True:
        try:
            return _Asked(await judge.complete(prompt, params), None, waits, waited)
        except RateLimitedError as e:
            delay = e.retry_after_s if e.retry_after_s is not None else backoff
            backoff = min(backoff * 2, RATE_LIMIT_BACKOFF_S)
            if waited + delay > RATE_LIMIT_PATIENCE_S:
                return _Asked(None, e, waits, waited)
            waited += delay
            waits += 1
            await asyncio.sleep(delay)
        except ProviderError as e:
            return _Asked(None, e, waits, waited)


class Judged(NamedTuple):
    """One judge call: the fields of its event and what became of the call."""

    fields: dict[str, Any]
    failure: FailureKind | None
    """None when the reply parsed."""
    attempted: bool
    """A request was sent (a claim check of an empty answer sends none)."""
    reached: bool
    """The provider answered (any HTTP status)."""
    waits: int = 0
    waited_s: float = 0.0


_PARSE_FAILURES = {
    ParseStatus.UNPARSEABLE: FailureKind.UNPARSEABLE,
    ParseStatus.MISSING_METRICS: FailureKind.MISSING_METRICS,
}


def _provider_failure(error: ProviderError) -> FailureKind:
    return FailureKind.TIMEOUT if error.timed_out else FailureKind.PROVIDER_ERROR


def _usage(reply: Completion) -> Usage:
    return Usage(prompt_tokens=reply.prompt_tokens, completion_tokens=reply.completion_tokens)


async def _judge_one(
    judge: Provider,
    case: PlannedCase,
    prompt: RenderedPrompt,
    plan_: Plan,
    panel_id: UUID | None,
) -> Judged:
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
    asked = await _ask(judge, prompt, params)
    if asked.reply is None:
        assert asked.error is not None
        failed = {
            **fields,
            "judge": _identity(judge, plan_.params, None),
            "parse_status": ParseStatus.PROVIDER_ERROR,
            "error": str(asked.error),
        }
        kind = _provider_failure(asked.error)
        return Judged(failed, kind, True, asked.error.reached, asked.waits, asked.waited_s)
    reply = asked.reply
    parsed = plan_.parse(reply.text, prompt, len(case.subject.turns))
    judged = {
        **fields,
        "judge": _identity(judge, plan_.params, reply.model_version),
        "raw_output": reply.text,
        "parse_status": parsed.status,
        "metric_scores": parsed.metric_scores,
        "expected_outcomes": parsed.expected_outcomes,
        "latency_ms": reply.latency_ms,
        "usage": _usage(reply),
        "cost_usd": _cost(judge, plan_, reply.prompt_tokens, reply.completion_tokens),
        "error": parsed.error,
    }
    return Judged(
        judged, _PARSE_FAILURES.get(parsed.status), True, True, asked.waits, asked.waited_s
    )


async def _check_claims(
    judge: Provider, case: PlannedCase, prompt: RenderedPrompt, plan_: Plan
) -> Judged:
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
        empty = {**fields, "error": "empty answer: the agent said nothing to check"}
        return Judged(empty, FailureKind.EMPTY_ANSWER, False, False)
    params = {**plan_.params, "case_key": case.key, "repetition": case.repetition}
    asked = await _ask(judge, prompt, params)
    if asked.reply is None:
        assert asked.error is not None
        failed = {**fields, "error": f"extraction error: {asked.error}"}
        kind = _provider_failure(asked.error)
        return Judged(failed, kind, True, asked.error.reached, asked.waits, asked.waited_s)
    reply = asked.reply
    parsed = parse_claims(reply.text)
    checked = {
        **fields,
        "claims": parsed.claims,
        "judge": _identity(judge, plan_.params, reply.model_version),
        "raw_output": reply.text,
        "error": parsed.error,
        "latency_ms": reply.latency_ms,
        "usage": _usage(reply),
        "cost_usd": _cost(judge, plan_, reply.prompt_tokens, reply.completion_tokens),
    }
    unparsed = None if parsed.error is None else FailureKind.UNPARSEABLE
    return Judged(checked, unparsed, True, True, asked.waits, asked.waited_s)


def _cost(judge: Provider, plan_: Plan, prompt_tokens: int, completion: int) -> float | None:
    if isinstance(judge, ReplayJudge):
        return 0.0  # a replayed reply costs nothing now
    return cost_usd(plan_.prices, judge.ref.model, prompt_tokens, completion)


def _estimated_cost(plan_: Plan, judge: Provider, prompt: RenderedPrompt) -> float | None:
    tokens = estimate_tokens(prompt, plan_.options.max_tokens)
    return _cost(judge, plan_, tokens.prompt_tokens, tokens.completion_tokens)


def _agent_vendor(case: PlannedCase) -> str | None:
    return vendor_of(case.subject.agent.provider, case.subject.agent.model)


class _Pass:
    """One judging pass in flight: concurrency, the budget, the refusal stop, the report."""

    def __init__(
        self, ledger: Ledger, plan_: Plan, ctx: Context, progress: Progress | None
    ) -> None:
        self.ledger, self.plan, self.ctx, self.progress = ledger, plan_, ctx, progress
        self.report = _empty_report(plan_)
        self.semaphore = asyncio.Semaphore(plan_.options.concurrency)
        self.refused = asyncio.Event()
        self.lock = asyncio.Lock()
        self.counting = threading.Lock()
        """Guards the report: events are recorded and counted in worker threads."""
        limit = plan_.options.max_cost_usd
        self.budget = None if limit is None else Budget(limit)
        self.report.max_cost_usd = limit
        self.done = 0

    async def judge_case(self, case: PlannedCase) -> None:
        """Every judge's vote on one case, concurrently; each is recorded, errors included."""
        prompt = self.plan.prompt_of(case)
        panel_id = uuid4() if len(self.plan.judges) > 1 else None
        await asyncio.gather(*(self.vote(j, case, prompt, panel_id) for j in self.plan.judges))
        async with self.lock:
            self.done += 1
            if self.progress is not None:
                self.progress(self.done, len(self.plan.cases))

    async def vote(
        self, judge: Provider, case: PlannedCase, prompt: RenderedPrompt, panel_id: UUID | None
    ) -> None:
        """One call within the concurrency limit and the budget, then its event."""
        async with self.semaphore:
            if self.refused.is_set():
                return
            estimate = 0.0
            if self.budget is not None:
                estimate = _estimated_cost(self.plan, judge, prompt) or 0.0
                if not await self.budget.reserve(estimate):
                    with self.counting:
                        self.report.budget_stopped = True
                        self.report.calls_not_made += 1
                    return
            actual: float | None = 0.0
            try:
                if self.plan.options.claims:
                    judged = await _check_claims(judge, case, prompt, self.plan)
                else:
                    judged = await _judge_one(judge, case, prompt, self.plan, panel_id)
                actual = judged.fields.get("cost_usd")
            except ProviderRefusedError:
                # A refused request (bad key, unknown model) makes no verdict: stop the pass.
                self.refused.set()
                raise
            finally:
                if self.budget is not None:
                    await self.budget.settle(estimate, actual)
        await asyncio.to_thread(self.record, case, judge, judged)

    def record(self, case: PlannedCase, judge: Provider, judged: Judged) -> None:
        """Record a call's event and count it, in the worker thread.

        A Ctrl-C that cancels the pass while the event is written still finds it counted
        (asyncio.run waits for the thread).
        """
        if self.plan.options.claims:
            written = self.ledger.record_claims(
                case.case_id, self.ctx, judgement=True, **judged.fields
            )
        else:
            written = self.ledger.record_verdict(
                case.case_id, self.ctx, judgement=True, **judged.fields
            )
        with self.counting:
            _count(self.report, case, judge, judged, written.position)


async def _execute(running: _Pass) -> JudgeReport:
    try:
        await asyncio.gather(*(running.judge_case(c) for c in running.plan.cases))
    finally:
        for judge in running.plan.judges:
            await judge.close()
    return running.report


class JudgingInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped a pass; `report` counts what was recorded (it stays recorded)."""

    def __init__(self, report: JudgeReport) -> None:
        super().__init__("judging interrupted")
        self.report = report


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
        max_cost_usd=plan_.options.max_cost_usd,
        notes=list(plan_.notes),
    )


def _count(
    report: JudgeReport, case: PlannedCase, judge: Provider, judged: Judged, pos: int
) -> None:
    fields = judged.fields
    report.verdicts += 1
    report.position = max(report.position, pos)
    report.claims += len(fields.get("claims", []))
    report.attempted_calls += judged.attempted
    report.reached_calls += judged.reached
    report.rate_limit_waits += judged.waits
    report.rate_limit_wait_s += judged.waited_s
    usage = fields.get("usage")
    if usage is not None:
        report.prompt_tokens += usage.prompt_tokens
        report.completion_tokens += usage.completion_tokens
        if fields.get("cost_usd") is None:
            report.unpriced_calls += 1
        else:
            report.cost_usd += fields["cost_usd"]
    if judged.failure is None:
        report.parsed += 1
    else:
        report.errors += 1
        report.failures.append(
            Failure(
                case.case_id, case.key, judge.ref.label, str(fields.get("error")), judged.failure
            )
        )


def run_plan(
    ledger: Ledger, plan_: Plan, ctx: Context, progress: Progress | None = None
) -> JudgeReport:
    """Run a validated plan (nothing is called or stored on a dry run: an estimate instead)."""
    if plan_.options.dry_run:
        asyncio.run(_close_all(plan_.judges))
        report = _empty_report(plan_)
        report.estimate = estimate_plan(plan_)
        return report
    running = _Pass(ledger, plan_, ctx, progress)
    try:
        asyncio.run(_execute(running))
    except KeyboardInterrupt as e:
        running.report.interrupted = True
        raise JudgingInterrupted(_sorted(running.report)) from e
    return _sorted(running.report)


def _sorted(report: JudgeReport) -> JudgeReport:
    report.failures.sort(key=lambda f: (f.test_case_key, f.judge))
    return report


async def _close_all(judges: Sequence[Provider]) -> None:
    for judge in judges:
        await judge.close()


def _case_estimate(plan_: Plan, prompt: RenderedPrompt) -> Estimate:
    tokens = estimate_tokens(prompt, plan_.options.max_tokens)
    estimate = Estimate()
    for judge in plan_.judges:
        estimate.prompt_tokens += tokens.prompt_tokens
        estimate.completion_tokens += tokens.completion_tokens
        cost = _cost(judge, plan_, tokens.prompt_tokens, tokens.completion_tokens)
        if cost is None:
            estimate.unpriced_calls += 1
        else:
            estimate.cost_usd += cost
    return estimate


def estimate_plan(plan_: Plan) -> Estimate:
    """Estimated tokens and cost of every planned call (an estimate: see judging/budget.py)."""
    total = Estimate()
    for case in plan_.cases:
        one = _case_estimate(plan_, plan_.prompt_of(case))
        total.prompt_tokens += one.prompt_tokens
        total.completion_tokens += one.completion_tokens
        total.cost_usd += one.cost_usd
        total.unpriced_calls += one.unpriced_calls
    return total


def dry_run_prompts(plan_: Plan) -> list[PlannedPrompt]:
    """The prompts a pass would send (dry run), one per case, with their estimated cost."""
    planned = []
    for c in plan_.cases:
        prompt = plan_.prompt_of(c)
        planned.append(
            PlannedPrompt(
                case_id=c.case_id,
                test_case_key=c.key,
                repetition=c.repetition,
                prompt=prompt.text,
                template_id=prompt.template_id,
                estimate=_case_estimate(plan_, prompt),
            )
        )
    return planned
