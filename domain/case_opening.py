"""A case's opening events are built by its aggregate now: `Case.open_from_bundle` (aggregates.py).

`verdict_fields` (the fields of a `JudgeVerdictRecorded` for a bundle verdict) lives beside
`BundleVerdict` in `bundle.py`; it is named here too for the tests that import it from here.
"""

from __future__ import annotations

from evaledger.domain.bundle import verdict_fields

__all__ = ["verdict_fields"]
