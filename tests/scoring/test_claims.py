import math

import pytest

from evaledger.domain.events import ClaimSupport
from evaledger.scoring.claims import aggregate_claim_scores, claim_score, length_penalty

S, U, C = ClaimSupport.SUPPORTED, ClaimSupport.UNSUPPORTED, ClaimSupport.CONTRADICTED


def test_three_of_four_with_default_gamma_is_penalised():
    result = claim_score([S, S, S, U])
    assert result.claims == 4
    assert result.supported == 3
    assert result.raw_score == 0.75
    assert result.penalty == pytest.approx(math.exp(1 - 10 / 4))
    assert result.score == pytest.approx(0.75 * math.exp(1 - 10 / 4))
    assert result.score == pytest.approx(0.167348, abs=1e-6)
    assert result.responded == 1.0


def test_gamma_zero_switches_the_penalty_off():
    result = claim_score([S, S, S, U], gamma=0)
    assert result.penalty == 1.0
    assert result.score == 0.75


def test_no_penalty_at_or_above_gamma_claims():
    assert claim_score([S] * 10).score == 1.0
    assert claim_score([S] * 9 + [U] * 3).score == 0.75
    assert length_penalty(10, 10) == 1.0
    assert length_penalty(11, 10) == 1.0
    assert length_penalty(5, 10) == pytest.approx(math.exp(-1))
    assert length_penalty(0, 10) == 1.0


def test_no_claims_has_no_score_and_did_not_respond():
    result = claim_score([])
    assert result.score is None
    assert result.raw_score is None
    assert result.responded == 0.0


def test_unsupported_and_contradicted_are_hallucinations():
    result = claim_score([S, U, C, C], gamma=0)
    assert (result.supported, result.unsupported, result.contradicted) == (1, 1, 2)
    assert result.hallucinations == 3
    assert result.score == 0.25


def test_aggregate_mean_over_responders_and_respond_ratio():
    scores = [claim_score([S, S, S, U], gamma=0), claim_score([]), claim_score([S], gamma=0)]
    agg = aggregate_claim_scores(scores)
    assert agg.responses == 3
    assert agg.responded == 2
    assert agg.respond_ratio == pytest.approx(2 / 3)
    assert agg.score == 0.875
    assert agg.claims == 5
    assert agg.supported == 4
    assert agg.hallucinations == 1


def test_aggregate_of_nothing():
    agg = aggregate_claim_scores([])
    assert agg.score is None
    assert agg.respond_ratio is None


@pytest.mark.parametrize("gamma", [-1.0, math.inf, math.nan])
def test_bad_gamma_is_rejected(gamma):
    with pytest.raises(ValueError, match="gamma"):
        claim_score([S], gamma=gamma)
