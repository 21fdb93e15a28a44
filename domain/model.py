"""The one strict base model: every record the ledger defines refuses unknown fields and NaN/inf."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """A record of the ledger: unknown fields and non-finite numbers are refused, never kept."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class FrozenModel(StrictModel):
    """A strict record that cannot change once built (events, specs, snapshots)."""

    model_config = ConfigDict(frozen=True)
