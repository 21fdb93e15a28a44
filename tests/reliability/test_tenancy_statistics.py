"""Issue 37's statistics routes: another project's runs are not found, in any role."""

from __future__ import annotations

from tests.reliability.test_tenancy import Tenants, tenants  # noqa: F401 - the fixture


def test_a_token_of_a_measures_no_noise_of_b(tenants: Tenants) -> None:  # noqa: F811
    t = tenants
    a, b = t.runs["a"], t.runs["b"]
    for path in (
        f"/statistics/noise?run_id={a}&run_id={b}",
        f"/statistics/noise?run_id={b}&run_id={a}",
        f"/statistics/significance?baseline_run_id={a}&candidate_run_id={a}&noise_run_id={b}",
        f"/statistics/plan?baseline=0.8&mde=0.05&run_id={a}&run_id={b}&icc_from_runs=true",
    ):
        r = t.call("a-admin", "GET", path)
        assert (r.status_code, r.json()["code"]) == (404, "not_found"), (path, r.text)
        assert "no run" in r.json()["detail"]
    own = t.call(
        "a-admin", "GET", f"/statistics/significance?baseline_run_id={a}&candidate_run_id={a}"
    )
    assert own.status_code == 200, own.text
