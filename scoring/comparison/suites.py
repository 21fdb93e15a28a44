"""Which runs may be compared (issue 30): runs of one suite, unless the caller says otherwise.

Two suites hold different tests, so a comparison of their runs matches few or no cases and its
"no regression" would mean nothing. `compare` at the command line refuses them (exit 2) unless
`--allow-different-suites` is given; the API and the web page keep comparing them with a
warning, which they show beside the verdict. Dataset versions (issue 35) are the second check:
runs that ran two versions of their dataset are refused the same way unless
`--allow-different-datasets`, the refusal naming both versions and the items that differ.
"""

from __future__ import annotations

from collections.abc import Sequence

from evaledger.domain.errors import ValidationError
from evaledger.domain.events import DatasetRef

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


class DifferentDatasetsError(ValidationError):
    """The two runs ran different dataset versions and the caller did not allow it."""

    code = "different_datasets"


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


def require_same_dataset(
    baseline: DatasetRef | None, candidate: DatasetRef | None, differing: Sequence[str] | None
) -> None:
    """Refuse runs of two dataset versions (`DifferentDatasetsError`, naming both)."""
    why = dataset_difference(baseline, candidate, differing)
    if why is not None:
        raise DifferentDatasetsError(
            f"{why} (use {ALLOW_DIFFERENT_DATASETS} to compare them anyway)",
            field=ALLOW_DIFFERENT_DATASETS,
        )


def _ref(ref: DatasetRef | None) -> str:
    if ref is None:
        return "no dataset"
    version = "" if ref.version is None else f"@{ref.version}"
    return f"{ref.name}{version} (sha256 {(ref.hash or '?')[:12]})"
