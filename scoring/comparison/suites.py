"""Which runs may be compared (issue 30): runs of one suite, unless the caller says otherwise.

Two suites hold different tests, so a comparison of their runs matches few or no cases and its
"no regression" would mean nothing. `compare` at the command line refuses them (exit 2) unless
`--allow-different-suites` is given; the API and the web page keep comparing them with a
warning, which they show beside the verdict. A later round adds dataset versions beside suites
(`--allow-different-datasets`): each is one more check here.
"""

from __future__ import annotations

from evaledger.domain.errors import ValidationError

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
