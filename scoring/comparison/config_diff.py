"""What changed between two runs' configuration: agent, prompt, tools, judge, suite, config."""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Any

from evaledger.domain.events import ToolSpec
from evaledger.scoring.comparison.models import (
    ComparedRun,
    FieldChange,
    PromptDiff,
    RunConfigDiff,
    ToolDiff,
)


def _change(name: str, old: Any, new: Any) -> FieldChange | None:
    return None if old == new else FieldChange(field=name, old_value=old, new_value=new)


def _flatten(value: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts → dotted paths; lists, scalars and empty dicts are leaves."""
    out: dict[str, Any] = {}
    for key, item in value.items():
        path = f"{prefix}{key}"
        if isinstance(item, Mapping) and item:
            out.update(_flatten(item, f"{path}."))
        else:
            out[path] = item
    return out


def _settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """A run's config without the figures its source reported (each scorer's `reported`).

    Those are what one eval measured, not how it was configured: two evals of one promptfoo
    or Inspect config differ there and nowhere else.
    """
    scorers = config.get("scorers")
    if not isinstance(scorers, list):
        return dict(config)
    unreported = [
        {k: v for k, v in s.items() if k != "reported"} if isinstance(s, Mapping) else s
        for s in scorers
    ]
    return {**config, "scorers": unreported}


def prompt_diff(baseline: str | None, candidate: str | None) -> PromptDiff | None:
    """Unified diff of two system prompts ("baseline" → "candidate"); None when identical."""
    old, new = baseline or "", candidate or ""
    if old == new:
        return None
    lines = list(
        difflib.unified_diff(
            old.splitlines(), new.splitlines(), fromfile="baseline", tofile="candidate", lineterm=""
        )
    )
    body = lines[2:]
    added = sum(1 for line in body if line.startswith("+"))
    removed = sum(1 for line in body if line.startswith("-"))
    ratio = difflib.SequenceMatcher(None, old, new, autojunk=False).ratio()
    return PromptDiff(
        unified_diff="\n".join(lines) + "\n",
        change_ratio=round(1 - ratio, 4),
        added_line_count=added,
        removed_line_count=removed,
    )


def tool_diff(baseline: Sequence[ToolSpec], candidate: Sequence[ToolSpec]) -> ToolDiff | None:
    """Tools added, removed and changed (description or parameters) by name; None if equal."""
    old = {t.name: t for t in baseline}
    new = {t.name: t for t in candidate}
    diff = ToolDiff(added=sorted(new.keys() - old.keys()), removed=sorted(old.keys() - new.keys()))
    for name in sorted(old.keys() & new.keys()):
        before, after = old[name], new[name]
        changes = [
            _change(f"{name}.description", before.description, after.description),
            _change(f"{name}.parameters", before.parameters, after.parameters),
        ]
        found = [c for c in changes if c is not None]
        if found:
            diff.changed.append(name)
            diff.modified.extend(found)
    if not (diff.added or diff.removed or diff.changed):
        return None
    return diff


def config_diff(baseline: ComparedRun, candidate: ComparedRun) -> RunConfigDiff:
    """Structured diff of agent, prompt, tools, judge, suite and run config of two runs."""
    ba, ca = baseline.agent, candidate.agent
    bj, cj = baseline.judge, candidate.judge
    bflat, cflat = _flatten(_settings(baseline.config)), _flatten(_settings(candidate.config))
    config_changes = [
        FieldChange(field=path, old_value=bflat.get(path), new_value=cflat.get(path))
        for path in sorted(bflat.keys() | cflat.keys())
        if (path in bflat) != (path in cflat) or bflat.get(path) != cflat.get(path)
    ]
    return RunConfigDiff(
        baseline_agent_version=ba.version,
        candidate_agent_version=ca.version,
        agent_name_changed=_change("agent.name", ba.name, ca.name),
        agent_version_changed=_change("agent.version", ba.version, ca.version),
        prompt_diff=prompt_diff(ba.system_prompt, ca.system_prompt),
        tool_diff=tool_diff(ba.tools, ca.tools),
        model_changed=_change("agent.model", ba.model, ca.model),
        provider_changed=_change("agent.provider", ba.provider, ca.provider),
        judge_provider_changed=_change("judge.provider", bj.get("provider"), cj.get("provider")),
        judge_model_changed=_change("judge.model", bj.get("model"), cj.get("model")),
        judge_pass_threshold_changed=_change(
            "judge.pass_threshold", bj.get("pass_threshold"), cj.get("pass_threshold")
        ),
        judge_metrics_changed=_change("judge.metrics", bj.get("metrics"), cj.get("metrics")),
        suite_changed=_change("suite.name", baseline.suite_name, candidate.suite_name),
        suite_version_changed=_change(
            "suite.version", baseline.suite_version, candidate.suite_version
        ),
        config_changes=config_changes,
    )
