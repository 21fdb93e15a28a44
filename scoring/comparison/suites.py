"""Which runs may be compared (issue 30): runs of one suite, unless the caller says otherwise.

Two suites hold different tests, so a comparison of their runs matches few or no cases and its
"no regression" would mean nothing. `compare` at the command line refuses them (exit 2) unless
`--allow-different-suites` is given; the API and the web page keep comparing them with a
warning, which they show beside the verdict. Dataset versions (issue 35) are the second check:
runs that ran two versions of their dataset are compared over their common items only
(`common_items`), unless `--allow-different-datasets`: the test case keys both runs ran, less
the items that changed between the versions; each run is summarised again over those cases by
the one run-level rule (`scoring.run.summarize_run`). `Guard` carries the restriction and
what the answer says of it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from evaledger.domain.errors import ValidationError
from evaledger.domain.events import DatasetRef
from evaledger.scoring.comparison.models import Comparability, FieldChange

ALLOW_DIFFERENT_SUITES = "--allow-different-suites"


class DifferentSuitesError(ValidationError):
    """The two runs belong to different suites and the caller did not allow it."""

    code = "different_suites"


def require_same_suite(baseline: str, candidate: str) -> None:
    """Refuse runs of two suites (`DifferentSuitesError`, naming both and the way past it)."""
    if baseline != candidate:
        raise DifferentSuitesError(
            f"runs of different suites: {baseline!r} (baseline) vs {candidate!r} (candidate); "
            f"their test cases are not the same tests (use {ALLOW_DIFFERENT_SUITES} to compare "
            "them anyway)",
            field=ALLOW_DIFFERENT_SUITES,
        )


ALLOW_DIFFERENT_DATASETS = "--allow-different-datasets"
MAX_NAMED_ITEMS = 20
"""Differing items a refusal or a warning names (the rest are counted)."""


def dataset_difference(
    baseline: DatasetRef | None, candidate: DatasetRef | None, differing: Sequence[str] | None
) -> str | None:
    """Why two runs' datasets are not the same version (None: the same, or neither has one).

    `differing`: the keys of the items added, removed or changed between the two versions,
    when both are versions of one ledger dataset (None: not known).
    """
    if baseline is None and candidate is None:
        return None
    if baseline is not None and candidate is not None and baseline.hash == candidate.hash:
        return None
    text = (
        f"runs of different dataset versions: {_ref(baseline)} (baseline) vs "
        f"{_ref(candidate)} (candidate)"
    )
    if differing:
        named = ", ".join(differing[:MAX_NAMED_ITEMS])
        more = len(differing) - MAX_NAMED_ITEMS
        text += f"; items that differ: {named}" + (f" and {more} more" if more > 0 else "")
    return text


@dataclass(frozen=True)
class RunDatasets:
    """The dataset versions two runs ran, and why they are not the same (None: they are)."""

    baseline: DatasetRef | None
    candidate: DatasetRef | None
    differing: tuple[str, ...] | None
    """Keys of the items that differ, when both are versions of one ledger dataset."""
    difference: str | None


MAX_LISTED_ITEMS = 1000
"""Keys a comparability answer lists per kind (the rest are counted)."""


@dataclass(frozen=True)
class Guard:
    """What a comparison is restricted to (`keys`, None: every case) and what it says of it."""

    keys: frozenset[str] | None
    comparability: Comparability

    @property
    def digest(self) -> str:
        """What tells two guards apart in a comparison's cache key."""
        h = hashlib.sha256(self.comparability.model_dump_json().encode())
        for key in sorted(self.keys or ()):
            h.update(b"\x00" + key.encode())
        return h.hexdigest()


GRADER_FIELDS = ("judge model", "judge template hash", "rubric", "scorer version")
"""What identifies a run's graders (`grader_differences`), each a set of values per run."""


def grader_differences(
    baseline: Mapping[str, Collection[str]], candidate: Mapping[str, Collection[str]]
) -> list[FieldChange]:
    """The grader fields whose values differ between two runs (each side's values, sorted)."""
    found = []
    for name in GRADER_FIELDS:
        old, new = sorted(baseline.get(name, ())), sorted(candidate.get(name, ()))
        if old != new:
            found.append(FieldChange(field=name, old_value=old, new_value=new))
    return found


def _graders_sentence(graders: Sequence[FieldChange]) -> str:
    said = "; ".join(
        f"{g.field}: {', '.join(g.old_value) or 'none'} (baseline) vs "
        f"{', '.join(g.new_value) or 'none'} (candidate)"
        for g in graders
    )
    return f"the runs' graders differ: {said}; their scores may not be comparable"


def common_items(
    baseline: DatasetRef | None,
    candidate: DatasetRef | None,
    differing: Sequence[str] | None,
    baseline_keys: Collection[str],
    candidate_keys: Collection[str],
    *,
    restrict: bool,
    graders: Sequence[FieldChange] = (),
    cached: tuple[Collection[str], Collection[str]] = ((), ()),
    exclude_cached: bool = False,
) -> Guard | None:
    """The guard of two runs' comparison (None: same dataset version and graders).

    Common items: the keys both runs ran, less those whose item changed between the two
    versions (`differing`, when known). With `restrict`, only those are compared when the
    versions differ; without, everything is, with the same warning. Graders that differ
    (`grader_differences`) are a warning only. `cached`: each run's keys with a case served from
    a cache; with `exclude_cached` those keys are left out of both runs.
    """
    why = dataset_difference(baseline, candidate, differing)
    from_cache = set(cached[0]) | set(cached[1])
    if why is None and not graders and not from_cache:
        return None
    b, c, changed = set(baseline_keys), set(candidate_keys), set(differing or ())
    both = b & c
    common = frozenset(both - changed)
    b_only, c_only, both_changed = sorted(b - c), sorted(c - b), sorted(both & changed)
    restrict = restrict and why is not None
    said = (
        f"compared only the {len(common)} item(s) common to both runs"
        f" ({len(b_only)} only in the baseline, {len(c_only)} only in the candidate,"
        f" {len(both_changed)} changed between the versions left out)"
        if restrict
        else f"compared every case ({ALLOW_DIFFERENT_DATASETS})"
    )
    warnings = [] if why is None else [f"{why}: {said}"]
    if graders:
        warnings.append(_graders_sentence(graders))
    keys: frozenset[str] | None = common if restrict else None
    if from_cache:
        warnings.append(
            f"{len(from_cache)} test case(s) served from a cache: {len(cached[0])} in the "
            f"baseline, {len(cached[1])} in the candidate"
            + (" (left out of both runs: --exclude-cached)" if exclude_cached else "")
        )
        if exclude_cached:
            keys = frozenset((b | c) if keys is None else keys) - from_cache
    return Guard(
        keys,
        Comparability(
            baseline_dataset=None if baseline is None else _ref(baseline),
            candidate_dataset=None if candidate is None else _ref(candidate),
            restricted=restrict,
            common_items=len(common),
            baseline_only_items=b_only[:MAX_LISTED_ITEMS],
            baseline_only_count=len(b_only),
            candidate_only_items=c_only[:MAX_LISTED_ITEMS],
            candidate_only_count=len(c_only),
            changed_items=both_changed[:MAX_LISTED_ITEMS],
            changed_count=len(both_changed),
            grader_differences=list(graders),
            cached_items=sorted(from_cache)[:MAX_LISTED_ITEMS],
            baseline_cached=len(cached[0]),
            candidate_cached=len(cached[1]),
            excluded_cached=exclude_cached and bool(from_cache),
            warnings=warnings,
        ),
    )


def _ref(ref: DatasetRef | None) -> str:
    if ref is None:
        return "no dataset"
    version = "" if ref.version is None else f"@{ref.version}"
    return f"{ref.name}{version} (sha256 {(ref.hash or '?')[:12]})"
