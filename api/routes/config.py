"""GET /config/available-metrics, POST /config/metrics, GET /health, GET /verify, GET /whoami."""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Query, Request, Response
from pydantic import Field

from evaledger.api.bootstrap import Services
from evaledger.api.deps import AUTH, ContextDep, PrincipalDep, ProjectDep, ServicesDep, SyncedDep
from evaledger.api.responses import created, replayed
from evaledger.api.schemas import (
    ErrorResponse,
    Health,
    MetricPage,
    VerifyResult,
    WhoAmI,
    Written,
)
from evaledger.api.security import cross_site, request_origins
from evaledger.application import projects, verification
from evaledger.domain.errors import PermissionDeniedError, ValidationError
from evaledger.domain.events import TokenScope
from evaledger.domain.metrics import MetricDefinition
from evaledger.domain.verify import Checkpoint
from evaledger.judging.rubric import JudgeRubric, check_rubric

router = APIRouter(tags=["config"])

UNAVAILABLE: dict[int | str, dict[str, Any]] = {
    503: {"model": ErrorResponse, "description": "The store is unreachable or not append-only"}
}


@router.get("/health", responses=UNAVAILABLE)
def get_health(request: Request, services: ServicesDep) -> Health:
    """The store, the log position, projection lag and failures, the last verification.

    503 when the store is unreachable (within a few seconds) or its append-only triggers are
    disabled. `degraded` when a projection is stopped on an event or verification failed.
    """
    health = verification.store_health(services)
    last = getattr(request.app.state, "verification", None)
    # Drift of the read models counts until a later `GET /verify?views=1` finds none.
    views = getattr(request.app.state, "views", None)
    degraded = (
        bool(health.failures)
        or (last is not None and not last["ok"])
        or (views is not None and not views["ok"])
    )
    return Health.model_validate(
        {
            "status": "degraded" if degraded else "ok",
            "store": health.kind,
            "log_position": health.log_position,
            "projections": health.projections,
            "projection_lag": health.projection_lag,
            "projection_failures": health.failures,
            "verify": None
            if last is None
            else {k: last[k] for k in ("ok", "verified_at", "checkpoint", "first_broken_position")}
            | {"views": views},
        }
    )


def record_verification(
    state: Any, services: Services, *, incremental: bool = False, views: bool = False
) -> dict[str, Any]:
    """Verify the log (and with `views` the read models); remember what `/health` reports.

    The one verification of a server: `GET /verify` and the periodic check of `serve
    --verify-every` both call it. `state` is the app's state: the last checkpoint verified (a
    later log that lost it fails), the last result and the last views report.
    """
    expect: Checkpoint | None = getattr(state, "verified_checkpoint", None)
    done = verification.verify_store(services, expect=expect, incremental=incremental, views=views)
    report = done.report
    if report.ok and report.checkpoint is not None:
        state.verified_checkpoint = report.checkpoint
    result = report.as_json() | {"verified_at": done.verified_at.isoformat()}
    if done.views is not None:
        found = done.views.as_json()
        state.views = found
        result["views"] = found
    state.verification = result
    return result


@router.get("/verify", responses=UNAVAILABLE, dependencies=AUTH)
def verify_log(
    request: Request,
    services: ServicesDep,
    principal: PrincipalDep,
    incremental: Annotated[
        bool,
        Query(
            description="With the checkpoint key: resume from the last verified checkpoint "
            "(only later events and what they depend on). By default every event is checked."
        ),
    ] = False,
    full: Annotated[
        bool, Query(description="Re-check every event: the default (kept for old callers).")
    ] = False,
    views: Annotated[
        bool, Query(description="Also rebuild the read models from the log and compare.")
    ] = False,
) -> VerifyResult:
    """Check hash chains, run seals and chain signatures; name the first break.

    Every event is checked; with the checkpoint key and `incremental=1` it resumes from the
    last signed checkpoint a verification recorded (`full=1` wins over it). The last
    checkpoint verified by this server is remembered: a later log that no longer contains it
    (rolled back, rewritten) fails. With `views=1` the read
    models are rebuilt in a scratch store and compared; `/health` reports drift it found.
    `views=1` is a full rebuild: it needs the admin scope, and a browser may ask for it only
    from this server's own pages (403 for a cross-site request).
    """
    if views:
        if not principal.scope.allows(TokenScope.ADMIN):
            raise PermissionDeniedError(
                "views=1 rebuilds the read models: it needs a token with the admin scope "
                f"(this one is {principal.scope.value})"
            )
        if cross_site(request.headers, request_origins(request)):
            raise PermissionDeniedError(
                "views=1 rebuilds the read models: a web page of another site may not ask for it"
            )
    result = record_verification(
        request.app.state, services, incremental=incremental and not full, views=views
    )
    return VerifyResult.model_validate(result)


@router.get("/whoami", dependencies=AUTH)
def get_whoami(principal: PrincipalDep) -> WhoAmI:
    """The request's token: its project (what a reader reads when it names none), scope, actor."""
    me = projects.who_am_i(principal)
    return WhoAmI(project=me.project, scope=me.scope, actor=me.actor)


@router.get("/config/available-metrics", dependencies=AUTH)
def list_available_metrics(
    services: SyncedDep,
    project: ProjectDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    offset: Annotated[int, Query(ge=0, le=2**31)] = 0,
) -> MetricPage:
    """Every registered metric (built-in, then the project's custom ones), for UI discovery."""
    every = projects.available_metrics(services, project or "default")
    page = every[offset : offset + limit]
    return MetricPage(data=page, count=len(page), total=len(every), limit=limit, offset=offset)


class MetricRegistration(MetricDefinition):
    """A custom metric, optionally with its judge rubric as data (criteria, scale, examples)."""

    rubric: str = Field(
        default="", description="The scoring rubric text; replaced by `judge_rubric` when given."
    )
    judge_rubric: JudgeRubric | None = Field(
        default=None,
        description="The rubric the judge uses for this metric (format evaledger.rubric/1). "
        "Stored as the metric's rubric text (canonical JSON); `metric` must be the metric's id.",
    )

    def definition(self) -> MetricDefinition:
        """The catalogue entry: the rubric, when given, becomes the rubric text."""
        fields = self.model_dump(exclude={"judge_rubric"})
        if self.judge_rubric is not None:
            if self.judge_rubric.metric != self.name:
                raise ValidationError(
                    f"judge_rubric.metric: {self.judge_rubric.metric!r} is not {self.name!r}",
                    field="judge_rubric.metric",
                )
            check_rubric(MetricDefinition(**fields), self.judge_rubric, "judge_rubric.scale")
            fields["rubric"] = self.judge_rubric.canonical()
        return MetricDefinition(**fields)


@router.post("/config/metrics", status_code=201, responses=replayed(Written), dependencies=AUTH)
def register_metric(
    registration: MetricRegistration,
    services: ServicesDep,
    ctx: ContextDep,
    response: Response,
    project: ProjectDep,
) -> Written:
    """Register a custom metric in a project's catalogue (as an event; admin scope)."""
    project = project or "default"
    definition = registration.definition()
    written = Written.of(projects.register_metric(services, definition, ctx, project))
    created(response, f"/config/available-metrics?project={quote(project)}", written.events)
    return written
