"""Issue 18 in a real headless Chromium: an imported Inspect run's page leads with the source's
accuracy, and its case page shows each scorer's value, the answer, the target and the grader's
reply (all read back with Inspect's own log reader), against a real `evaledger serve`."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.error
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from evaledger.scoring.scorer_metrics import figure_text
from tests.api.test_serve import EVALEDGER, STARTUP_LIMIT_S, call, free_port
from tests.api.test_web_browser import ARTIFACTS, CHROMIUM, WAIT_LIMIT_MS, _require_chromium
from tests.conftest import FIXTURES

pytestmark = [pytest.mark.browser, pytest.mark.slow]

GRADED = FIXTURES / "scorers" / "inspect-graded_qa.eval"


def _cli(db: str, root: Path, *args: str) -> Any:
    env = {k: v for k, v in os.environ.items() if k != "EVALEDGER_DB"}
    done = subprocess.run(
        [str(EVALEDGER), *args, "--db", db, "--json"],
        cwd=root,
        env=env,
        capture_output=True,
        check=True,
    )
    return orjson.loads(done.stdout)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, Any]]]:
    _require_chromium()
    root = tmp_path_factory.mktemp("web-source")
    db = f"sqlite:///{root}/store/"
    (row,) = _cli(db, root, "import", str(GRADED))["imported"]
    shown = _cli(db, root, "show", row["run_id"])
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "EVALEDGER_DB"}
    with (root / "serve.log").open("wb") as out:
        proc = subprocess.Popen(
            [str(EVALEDGER), "serve", "--port", str(port), "--db", db],
            cwd=root,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_LIMIT_S
        while True:
            assert proc.poll() is None, (root / "serve.log").read_text()
            try:
                if call(base, "GET", "/health")[0] == 200:
                    break
            except (urllib.error.URLError, ConnectionError):
                pass
            assert time.monotonic() < deadline, (root / "serve.log").read_text()
            time.sleep(0.1)
        yield base, shown
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def test_an_imported_inspect_run_and_case_read_in_the_sources_terms(
    served: tuple[str, dict[str, Any]],
) -> None:
    from inspect_ai.log import read_eval_log
    from playwright.sync_api import sync_playwright

    base, shown = served
    log = read_eval_log(str(GRADED))
    assert log.results is not None
    accuracy = log.results.scores[0].metrics["accuracy"].value
    sample = next(s for s in log.samples or [] if s.id == "q3")
    graded = (sample.scores or {})["model_graded_qa"]
    case_id = next(c["case_id"] for c in shown["cases"] if c["test_case_key"] == "q3")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        try:
            page = browser.new_page()
            page.set_default_timeout(WAIT_LIMIT_MS)
            page.goto(f"{base}/ui/runs/{shown['run']['run_id']}")
            headline = page.locator("#headline [data-field=headline]")
            assert headline.inner_text() == figure_text(accuracy)
            # The card's label as written (CSS shows it in capitals).
            label = page.locator("#headline .card .k").first.text_content()
            assert label == "model_graded_qa/accuracy"
            row = page.locator("#scorer-metrics tr[data-metric='model_graded_qa/accuracy']")
            assert row.locator("td").nth(1).inner_text() == figure_text(accuracy)
            page.goto(f"{base}/ui/cases/{case_id}")
            scorer = page.locator("#source-scores [data-scorer=model_graded_qa]")
            assert scorer.locator("[data-field=value]").inner_text() == graded.value
            assert scorer.locator("[data-field=answer]").inner_text() == graded.answer
            assert scorer.locator("[data-field=target]").inner_text() == sample.target
            assert scorer.locator("[data-field=grader_reply]").inner_text() == graded.explanation
            assert page.locator("#weights").count() == 0  # no empty rubric table
            assert "No judge verdict recorded" not in page.content()
        finally:
            browser.close()


def test_an_inspect_runs_charts_are_its_scorers_with_no_empty_rubric_chart(
    served: tuple[str, dict[str, Any]],
) -> None:
    """Issue 30, in Chromium: the charts are drawn from the run's own scorers; every bar drawn
    has a width on screen (none of the rubric's eight empty tracks); a screenshot is kept."""
    from playwright.sync_api import sync_playwright

    base, shown = served
    aggregate = shown["aggregate"]["scorer_metrics"]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(WAIT_LIMIT_MS)
            page.goto(f"{base}/ui/runs/{shown['run']['run_id']}")
            charts = page.locator("section[aria-labelledby=charts-h]")
            charts.screenshot(path=str(shot_path("inspect-run-charts")))
            captions = charts.locator("figcaption").all_inner_texts()
            assert "Per-metric means" not in captions
            assert captions[0] == "Source metrics"
            bars = charts.locator("svg.bars").first
            labels = bars.locator("text.lbl").all_text_contents()
            # Levels in the source's order, the headline first; spreads (stderr) are no bars.
            assert labels == ["model_graded_qa/accuracy", "overlap/mean", "has_answer/accuracy"]
            widths = bars.locator("rect.bar").evaluate_all(
                "rects => rects.map(r => r.getBoundingClientRect().width)"
            )
            track = bars.locator("rect.track").first.evaluate(
                "r => r.getBoundingClientRect().width"
            )
            # Each bar drawn to scale on its track: the figure's share of the track's width.
            assert len(widths) == len(labels)
            for label, width in zip(labels, widths, strict=True):
                assert width == pytest.approx(aggregate[label] * track, abs=1.0), label
            # The per-case histogram of the headline scorer has bars too.
            assert charts.locator("svg.hist rect.bar").count() > 0
        finally:
            browser.close()


def shot_path(name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS / f"{name}.png"
