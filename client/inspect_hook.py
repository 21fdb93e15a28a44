"""The live Inspect hook: each sample is recorded as it ends, the run completes with the task.

Registered through the `inspect_ai` entry point and enabled when EVALEDGER_DB or EVALEDGER_URL is
set. The run and its cases are what `evaledger import` makes of the task's log (the same key,
scorers, ids and request digests, built by `evaledger.importers.inspect` itself), so importing
the log afterwards adds no case: only what the log alone has (its status, Inspect's figures).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from inspect_ai.hooks import Hooks, RunEnd, SampleEnd, TaskEnd, TaskStart, hooks

from evaledger.client.backends import DB_ENV, URL_ENV, connect
from evaledger.client.recorder import RunRecorder, error_text
from evaledger.domain.bundle import BundleRun, BundleRunStatus

if TYPE_CHECKING:
    from inspect_ai.log import EvalLog


def enabled() -> bool:
    """Whether a store or a server is named in the environment."""
    return bool(os.environ.get(DB_ENV) or os.environ.get(URL_ENV))


def run_header(start: TaskStart) -> BundleRun:
    """The run `evaledger import` makes of this task's log, as far as its start knows it.

    The importer's own mapping (`inspect_run`) from the task's `EvalSpec`: the same key,
    scorers, reducers and score gate; what only the log has (Inspect's figures, its status)
    is not part of the run's identity.
    """
    from evaledger.importers.base import parse_time  # lazy: the importers, once a task starts
    from evaledger.importers.inspect import inspect_run  # lazy: Inspect's log models

    created_at = parse_time(start.spec.created)
    if created_at is None:
        raise ValueError("the task's EvalSpec has no created time")
    return inspect_run(start.spec, created_at)


@hooks(name="evaledger", description="Records each sample into an evaledger ledger as it ends.")
class EvaledgerHooks(Hooks):
    """One run per task (keyed by its eval id), one case per sample and epoch.

    Inspect calls `on_task_end` only for a task that finished (well or not); a task that raised
    (a sample's error under `fail_on_error`) or was interrupted (Ctrl-C) reaches only
    `on_run_end`, which closes whatever runs of that Inspect run are still open.
    """

    def __init__(self) -> None:
        self.runs: dict[str, RunRecorder] = {}
        self.inspect_runs: dict[str, str] = {}
        """Each open task's eval id → the Inspect run it belongs to."""

    def enabled(self) -> bool:
        """On when EVALEDGER_DB or EVALEDGER_URL is set."""
        return enabled()

    async def on_task_start(self, data: TaskStart) -> None:
        """Create the run (writes are quick and kept in order, so they run on the loop)."""
        recorder = RunRecorder(connect(), run_header(data), owns_backend=True)
        self.runs[data.eval_id] = recorder.start()
        self.inspect_runs[data.eval_id] = data.run_id

    async def on_sample_end(self, data: SampleEnd) -> None:
        """Record the sample's case: transcript, scores, usage, or its error."""
        recorder = self.runs.get(data.eval_id)
        if recorder is not None:
            recorder.write(sample_case(data.sample, recorder.header))

    async def on_task_end(self, data: TaskEnd) -> None:
        """Close the run as the task's log ended."""
        recorder = self.runs.pop(data.eval_id, None)
        self.inspect_runs.pop(data.eval_id, None)
        if recorder is not None:
            finish(recorder, data.log)

    async def on_run_end(self, data: RunEnd) -> None:
        """Close the runs of tasks that never reached `on_task_end` (raised or interrupted)."""
        logs = {log.eval.eval_id: log for log in data.logs}
        for eval_id in [e for e, run_id in self.inspect_runs.items() if run_id == data.run_id]:
            del self.inspect_runs[eval_id]
            recorder = self.runs.pop(eval_id, None)
            if recorder is None:
                continue
            log = logs.get(eval_id)
            if log is not None and log.status != "started":
                finish(recorder, log)
            elif isinstance(data.exception, Exception):
                recorder.fail(f"the Inspect run failed: {error_text(data.exception)}")
            else:
                # Interrupted (Ctrl-C): Inspect ends the run with no log and writes the task's
                # log as cancelled, which is how the importer will read it.
                # lazy: the Inspect importer, only when a run is interrupted
                from evaledger.importers.inspect import CANCELED_REASON

                recorder.cancel(CANCELED_REASON)


def finish(recorder: RunRecorder, log: EvalLog) -> None:
    """Close the run as `evaledger import` reads the task's log: completed, canceled or failed."""
    # lazy: the Inspect importer (Inspect's log models), only when a task ends
    from evaledger.importers.inspect import CANCELED_REASON, inspect_run

    run = inspect_run(log.eval, recorder.header.created_at, log)
    if run.status is BundleRunStatus.COMPLETED:
        recorder.end()
    elif run.status is BundleRunStatus.CANCELED:
        recorder.cancel(run.reason or CANCELED_REASON)
    elif run.status is BundleRunStatus.FAILED:
        recorder.fail(run.reason or "the eval errored")


def sample_case(sample: Any, run: BundleRun) -> Any:
    """The importer's case of a sample of `run`, its attachments resolved as in a read log."""
    from inspect_ai.log import resolve_sample_attachments  # lazy: Inspect's log reader

    from evaledger.importers.inspect import group_keys  # lazy: the Inspect importer
    from evaledger.importers.inspect import sample_case as importer_case  # lazy: as above

    copy = sample.model_copy(update={"events": []})
    return importer_case(resolve_sample_attachments(copy, "full"), group_keys(run.config.scorers))
