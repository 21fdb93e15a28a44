"""FActScore: the share of a response's atomic claims that are supported (DESIGN §3.4).

Pure functions over the claim supports recorded by `ClaimsVerified`:

- ``score = supported ÷ claims``;
- optional length penalty (``gamma``; 0 switches it off): when a response makes fewer than gamma
  claims the score is multiplied by ``exp(1 - gamma/|claims|)``, so a short answer with one safe
  claim can't outscore a long, mostly supported one (Min et al. 2023, the reference code's
  ``penalty = 1.0 if len(facts) > gamma else exp(1 - gamma / len(facts))``; at ``|claims| = gamma``
  both forms give 1);
- a response with no claims has no score (``None``); it counts only in the *respond ratio*,
  the fraction of responses that made at least one claim.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import Field

from evaledger.domain.events import ClaimSupport
from evaledger.domain.model import StrictModel

DEFAULT_GAMMA = 10.0
"""FActScore's default length-penalty parameter."""


class ClaimScore(StrictModel):
    """FActScore of one response."""

    claims: int = Field(description="Number of atomic claims.")
    supported: int = Field(description="Claims supported by the source.")
    unsupported: int = Field(description="Claims the source does not support.")
    contradicted: int = Field(description="Claims the source contradicts.")
    gamma: float = Field(description="Length-penalty parameter used (0 = off).")
    raw_score: float | None = Field(description="supported ÷ claims; None without claims.")
    penalty: float = Field(description="Length-penalty factor applied (1.0 when none).")
    score: float | None = Field(description="raw_score x penalty; None without claims.")
    responded: float = Field(description="1.0 when the response made any claim, else 0.0.")

    @property
    def hallucinations(self) -> int:
        """Unsupported plus contradicted claims."""
        return self.unsupported + self.contradicted


class ClaimAggregate(StrictModel):
    """FActScore over several responses."""

    responses: int = Field(description="Responses considered.")
    responded: int = Field(description="Responses that made at least one claim.")
    respond_ratio: float | None = Field(description="responded ÷ responses; None if none.")
    score: float | None = Field(
        description="Mean score over the responses with claims; None if no response has any."
    )
    claims: int = Field(description="Claims over all responses.")
    supported: int = Field(description="Supported claims over all responses.")
    hallucinations: int = Field(description="Unsupported + contradicted claims, summed.")


def length_penalty(n_claims: int, gamma: float = DEFAULT_GAMMA) -> float:
    """FActScore length penalty: ``exp(1 - gamma/n)`` when ``0 < n < gamma``, else 1.0.

    Raises:
        ValueError: ``gamma`` is negative or not finite, or ``n_claims`` is negative.
    """
    if not math.isfinite(gamma) or gamma < 0:
        raise ValueError(f"gamma: must be a finite number >= 0, got {gamma!r}")
    if n_claims < 0:
        raise ValueError(f"n_claims: must be >= 0, got {n_claims}")
    if gamma == 0 or n_claims == 0 or n_claims >= gamma:
        return 1.0
    return math.exp(1.0 - gamma / n_claims)


def claim_score(claims: Sequence[ClaimSupport], gamma: float = DEFAULT_GAMMA) -> ClaimScore:
    """FActScore of one response from the support of each of its atomic claims.

    Args:
        claims: support of every atomic claim of the response.
        gamma: length-penalty parameter gamma; 0 switches the penalty off.

    Returns:
        The score (``None`` when there are no claims), its parts and the respond flag.
    """
    penalty = length_penalty(len(claims), gamma)
    supported = sum(1 for c in claims if c is ClaimSupport.SUPPORTED)
    unsupported = sum(1 for c in claims if c is ClaimSupport.UNSUPPORTED)
    contradicted = sum(1 for c in claims if c is ClaimSupport.CONTRADICTED)
    raw = supported / len(claims) if claims else None
    return ClaimScore(
        claims=len(claims),
        supported=supported,
        unsupported=unsupported,
        contradicted=contradicted,
        gamma=float(gamma),
        raw_score=raw,
        penalty=penalty,
        score=None if raw is None else raw * penalty,
        responded=1.0 if claims else 0.0,
    )


def aggregate_claim_scores(scores: Sequence[ClaimScore]) -> ClaimAggregate:
    """FActScore of a set of responses: mean score over responders, and the respond ratio.

    As in the reference implementation, responses without claims (abstentions) are left out of
    the mean score and lower only the respond ratio.
    """
    with_claims = [s.score for s in scores if s.score is not None]
    return ClaimAggregate(
        responses=len(scores),
        responded=len(with_claims),
        respond_ratio=len(with_claims) / len(scores) if scores else None,
        score=sum(with_claims) / len(with_claims) if with_claims else None,
        claims=sum(s.claims for s in scores),
        supported=sum(s.supported for s in scores),
        hallucinations=sum(s.hallucinations for s in scores),
    )
