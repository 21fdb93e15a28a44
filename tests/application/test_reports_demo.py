"""The demo's use cases called directly: load its runs and judge one offline, idempotently."""

from __future__ import annotations

from importlib import resources
from uuid import UUID

from evaledger.api.bootstrap import Services
from evaledger.api.demo import REPLIES, demo_bundles
from evaledger.application.demo import judge_with_replay, load_demo_runs
from evaledger.application.reports import show_run


def test_the_demo_loads_and_judges_once(store_services: Services) -> None:
    loaded = load_demo_runs(store_services, demo_bundles())
    assert [r.run_key for r in loaded] == [b.run.key for b in demo_bundles()]
    assert all(r.events > 0 and r.cases > 0 for r in loaded)
    baseline = UUID(loaded[0].run_id)
    with resources.as_file(resources.files("evaledger.api.demo").joinpath(REPLIES)) as path:
        judged = judge_with_replay(store_services, baseline, path)
        assert judged.recorded > 0
        assert judged.example.transcript_turns > 0 and judged.example.metric_scores
        again = judge_with_replay(store_services, baseline, path)
    assert again.recorded == 0 and again.example == judged.example
    assert [r.events for r in load_demo_runs(store_services, demo_bundles())] == [0, 0, 0]
    store_services.sync()
    assert show_run(store_services, baseline).run.run_key == loaded[0].run_key
