"""`pytest --evaledger URL_OR_DB`: one run per session, one case per test.

A passed test is a completed case whose outcome "the test passes" held; a failed one carries the
assertion message as that outcome's justification; an error in set-up or tear-down makes the case
errored. A skipped, xfailed or (non-strict) xpassed test is not an execution, as pytest counts
it: its case is `skipped` (ExecutionSkipped), shown apart and outside `total_executions`; a strict
xpass is pytest's failure and fails. The test's duration is the latency of the case's one
assistant turn. The fixture `evaledger_case` adds scores, outcomes and turns to the test's case.
The cases are sent in batches of `BATCH_SIZE` (one request and one transaction each; the last
ones when the session, or an xdist worker, finishes).

With pytest-xdist the controller creates the run and completes it; each worker records the cases
of the tests it runs into that run (its header travels in `workerinput`). Without `--evaledger`
the plugin registers nothing but its options and a fixture that records nowhere.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from evaledger.client.recorder import CaseRecorder, RunRecorder
    from evaledger.domain.events import SkipOutcome

WORKER_KEY = "evaledger_run"
"""The run header (JSON) the controller hands to each xdist worker."""
PASSES = "the test passes"
INFRASTRUCTURE = 3
"""The exit code when the store or server cannot be reached (the CLI's, and pytest's own 3)."""
OPTION_OF = {
    "agent": "--evaledger-agent",
    "suite": "--evaledger-suite",
    "dataset": "--evaledger-dataset",
}
"""The option behind a refused field of the run's header."""
KEY_LIMIT = 200
BATCH_SIZE = 100
"""Tests whose cases are sent in one request (and one transaction); the rest at the end."""


def pytest_addoption(parser: pytest.Parser) -> None:
    """The plugin's options."""
    group = parser.getgroup("evaledger", "record the session into an evaledger store")
    group.addoption(
        "--evaledger",
        metavar="URL_OR_DB",
        help="record a run: a server URL (http://…, token in EVALEDGER_TOKEN) or a store URL",
    )
    group.addoption("--evaledger-suite", metavar="NAME", help="suite name (default: rootdir name)")
    group.addoption(
        "--evaledger-agent",
        metavar="NAME@VERSION",
        help="the agent under test (default: pytest)",
    )
    group.addoption(
        "--evaledger-dataset",
        metavar="NAME@VERSION",
        help="the dataset version the tests run (its items' keys are the tests' ids; "
        "default: none)",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Start recording when --evaledger is given; otherwise stay inert."""
    target = config.getoption("evaledger")
    if not target:
        return
    # lazy: the ledger's errors, only with --evaledger (the plugin loads in every pytest run)
    from evaledger.domain.errors import EvaledgerError, ValidationError

    try:
        session = SessionRecorder(config, target)
    except ValidationError as e:
        # A bad option is pytest's usage error (exit 4), named by the option, no traceback.
        option = OPTION_OF.get((e.field or "").split(".")[0], "--evaledger")
        raise pytest.UsageError(f"{option}: {str(e).removeprefix(f'{e.field}: ')}") from None
    except EvaledgerError as e:
        pytest.exit(f"evaledger: {e}", returncode=INFRASTRUCTURE)
    config.pluginmanager.register(session, "evaledger-session")
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(XdistBridge(session), "evaledger-xdist")


class SessionRecorder:
    """The run of one pytest session, and the case of each test as it finishes."""

    def __init__(self, config: pytest.Config, target: str) -> None:
        # The plugin loads in every pytest run: the client loads only with --evaledger.
        from evaledger.client.backends import connect  # lazy: the client and its store
        from evaledger.client.recorder import RunRecorder, run_header  # lazy: as above
        from evaledger.domain.bundle import BundleRun  # lazy: the bundle's event values

        self.config = config
        workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
        self.is_worker = workerinput is not None
        if workerinput is not None:
            header = BundleRun.model_validate_json(workerinput[WORKER_KEY])
        else:
            agent, _, version = (config.getoption("evaledger_agent") or "pytest").partition("@")
            suite = config.getoption("evaledger_suite") or Path(str(config.rootpath)).name
            dataset = config.getoption("evaledger_dataset") or None
            header = run_header(suite, agent=agent, agent_version=version or None, dataset=dataset)
        # Connected once the options are checked: a refused option leaves no store behind.
        remote = target.startswith(("http://", "https://"))
        backend = connect(url=target) if remote else connect(db=target)
        # Cases go in batches: one request and one transaction per BATCH_SIZE tests.
        self.run: RunRecorder = RunRecorder(
            backend, header, owns_backend=True, batch_size=BATCH_SIZE
        )
        self.cases: dict[str, CaseRecorder] = {}
        self.phase_reports: dict[str, list[pytest.TestReport]] = {}

    @property
    def records_cases(self) -> bool:
        """Whether this process records cases (not an xdist controller with workers)."""
        return self.is_worker or not self.config.pluginmanager.hasplugin("dsession")

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """The controller (or a lone process) creates the run; a worker joins it."""
        from evaledger.domain.errors import EvaledgerError  # lazy: only with --evaledger

        if self.is_worker:
            self.run.join()
            return
        try:
            self.run.start()
        except EvaledgerError as e:
            pytest.exit(f"evaledger: {e}", returncode=INFRASTRUCTURE)

    def case_of(self, item: pytest.Item) -> CaseRecorder:
        """The test's case, created on first use."""
        case = self.cases.get(item.nodeid)
        if case is None:
            name = getattr(item, "originalname", None) or item.name
            case = self.run.case(case_key(item.nodeid), name=name)
            self.cases[item.nodeid] = case
        return case

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        """Open the test's case before its fixtures run (its start time)."""
        if self.records_cases:
            self.case_of(item).__enter__()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Keep each phase's report until the test finishes."""
        if self.records_cases:
            self.phase_reports.setdefault(report.nodeid, []).append(report)

    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        """Write the finished test's case."""
        if not self.records_cases:
            return
        case = self.cases.pop(nodeid, None)
        reports = self.phase_reports.pop(nodeid, [])
        if case is None or not reports:
            return
        record_reports(case, reports)

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """The controller completes the run (cancels it when the session was interrupted)."""
        if self.is_worker or not self.run.started:
            try:
                refused = self.run.flushed()  # a worker's last cases (the controller completes)
                if refused is not None:
                    sys.stderr.write(f"evaledger: {refused}\n")
                    session.exitstatus = INFRASTRUCTURE
            finally:
                self.run.backend.close()
            return
        interrupted = exitstatus == pytest.ExitCode.INTERRUPTED
        self.run.end(KeyboardInterrupt("the test session was interrupted") if interrupted else None)


class XdistBridge:
    """Hands the run's header to each xdist worker."""

    def __init__(self, session: SessionRecorder) -> None:
        self.session = session

    def pytest_configure_node(self, node: Any) -> None:
        """Xdist's hook: called on the controller for each worker before it starts."""
        node.workerinput[WORKER_KEY] = self.session.run.header.model_dump_json()


class TestFailed(AssertionError):
    """How a failed or errored test reads in its case: pytest's own message."""

    __test__ = False


def record_reports(case: CaseRecorder, reports: list[pytest.TestReport]) -> None:
    """Map pytest's phase reports onto the case and write it."""
    duration_ms = sum(r.duration for r in reports) * 1000
    if not any(t.role == "assistant" and t.latency_ms is not None for t in case.turns):
        case.turn("assistant", None, latency_ms=duration_ms)
    failed_phase = next((r for r in reports if r.failed), None)
    if failed_phase is None:
        skip = not_an_execution(reports)
        if skip is not None:
            case.skip(*skip)
            return
    if failed_phase is not None and failed_phase.when != "call":
        case.record(TestFailed(message_of(failed_phase)))  # errored
        return
    message = message_of(failed_phase) if failed_phase is not None else None
    case.outcome(PASSES, passed=failed_phase is None, justification=message)
    case.record()


def not_an_execution(reports: list[pytest.TestReport]) -> tuple[SkipOutcome, str | None] | None:
    """The outcome of a test pytest counts neither passed nor failed, with its reason.

    A skip, an xfail, and a non-strict xpass (pytest's summary shows each apart from passed and
    failed); a strict xpass is pytest's failure and reaches here as a failed report. None for a
    test pytest counts as passed.
    """
    for r in reports:
        expected: str | None = getattr(r, "wasxfail", None)
        if expected is not None:
            return ("xfailed" if r.skipped else "xpassed"), expected or None
        if r.skipped:
            reason = r.longrepr[2] if isinstance(r.longrepr, tuple) else None
            return "skipped", (reason.removeprefix("Skipped: ") or None) if reason else None
    return None


def message_of(report: pytest.TestReport) -> str:
    """The failure's message: the assertion's text, else pytest's whole report."""
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None and crash.message:
        return str(crash.message)
    return str(report.longreprtext or report.outcome)


def case_key(nodeid: str) -> str:
    """The node id (parametrize ids included), shortened with a digest when too long."""
    if len(nodeid) <= KEY_LIMIT:
        return nodeid
    digest = hashlib.sha256(nodeid.encode()).hexdigest()[:16]
    return f"{nodeid[: KEY_LIMIT - 17]}~{digest}"


@pytest.fixture
def evaledger_case(request: pytest.FixtureRequest) -> Iterator[CaseRecorder]:
    """The running test's case: add scores, outcomes, turns (a scratch case without --evaledger)."""
    session = request.config.pluginmanager.get_plugin("evaledger-session")
    if isinstance(session, SessionRecorder) and session.records_cases:
        yield session.case_of(request.node)
        return
    # A scratch case without --evaledger: the client loads only for a test that asks for it.
    from evaledger.client.recorder import CaseRecorder  # lazy: the client
    from evaledger.domain.events.values import TestCaseSnapshot  # lazy: the case's value

    def nowhere(_: Any) -> Any:
        return None

    yield CaseRecorder(TestCaseSnapshot(key=case_key(request.node.nodeid)), 0, None, nowhere)
