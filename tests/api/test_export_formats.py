"""`evaledger export --format`, `GET /runs/{id}/export?format=` and the run page's download links.

The same export through each entry point: the CLI writes it (stdout or -o), the API answers it as
an attachment, the web run page links to it; each read back with the format's own reader has
`show`'s counts. The run bundle stays the default, byte for byte.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterator
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fastapi.testclient import TestClient
from junitparser import JUnitXml

from evaledger.api.app import create_app
from evaledger.api.bootstrap import Services
from tests.api.test_cli import RUN_KEY, Cli
from tests.conftest import EXAMPLE_BUNDLE
from tests.helpers import bundle

PROMPTFOO = Path(__file__).resolve().parents[1] / "fixtures" / "promptfoo" / "baseline.json"


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], store_url: str) -> Cli:
    c = Cli(capsys, store_url)
    c.json("import", str(EXAMPLE_BUNDLE))
    c.json("import", str(PROMPTFOO))
    return c


def show(cli: Cli, run: str) -> dict[str, int]:
    payload = cli.json("show", run)
    a = payload["aggregate"]
    return {
        "cases": len(payload["cases"]),
        "failed": a["failed_count"],
        "errored": a["error_count"],
        "passed": a["passed_count"],
    }


def promptfoo_key(cli: Cli) -> str:
    runs = cli.json("runs")["data"]
    return str(next(r["run_key"] for r in runs if r["run_key"].startswith("promptfoo-")))


def test_the_bundle_stays_the_default_byte_for_byte(cli: Cli, tmp_path: Path) -> None:
    code, default, _ = cli("export", RUN_KEY)
    assert code == 0
    code, explicit, _ = cli("export", RUN_KEY, "--format", "bundle")
    assert (code, explicit) == (0, default)
    assert orjson.loads(default)["format"] == "evaledger.run-bundle/1"
    assert default.endswith("}\n") and default.startswith('{\n  "')  # indented, as before


@pytest.mark.parametrize("run", ["example", "promptfoo"])
def test_cli_exports_read_back_with_the_counts_of_show(cli: Cli, tmp_path: Path, run: str) -> None:
    key = RUN_KEY if run == "example" else promptfoo_key(cli)
    counts = show(cli, key)
    code, out, err = cli("export", key, "--format", "csv")
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(out, newline="")))
    assert len(rows) == counts["cases"]
    assert sum(r["status"] == "failed" for r in rows) == counts["failed"]
    assert sum(r["status"] == "errored" for r in rows) == counts["errored"]

    target = tmp_path / "run.parquet"
    written = cli.json("export", key, "--format", "parquet", "-o", str(target))["exported"]
    assert written["format"] == "parquet" and written["cases"] == counts["cases"]
    assert written["bytes"] == target.stat().st_size
    table = pq.read_table(target)
    assert table.num_rows == counts["cases"]
    assert table.column("passed").to_pylist().count(True) == counts["passed"]

    code, _, err = cli("export", key, "--format", "junit", "-o", str(tmp_path / "run.xml"))
    assert code == 0 and f"{counts['cases']} cases" in err
    (suite,) = list(JUnitXml.fromfile(str(tmp_path / "run.xml")))
    assert (suite.tests, suite.failures, suite.errors) == (
        counts["cases"],
        counts["failed"],
        counts["errored"],
    )

    code, out, _ = cli("export", key, "--format", "jsonl")
    records = [orjson.loads(line) for line in out.splitlines()]
    assert records[0]["record"] == "run" and len(records) == counts["cases"] + 1


def test_cli_refuses_a_parquet_to_stdout_and_an_unknown_format(cli: Cli) -> None:
    code, out, err = cli("export", RUN_KEY, "--format", "parquet")
    assert (code, out) == (2, "") and "-o FILE" in err and "Traceback" not in err
    code, out, err = cli("export", RUN_KEY, "--format", "xlsx")
    assert (code, out) == (2, "") and "--format" in err and "xlsx" in err


# -- the API and the web page -----------------------------------------------------------------


@pytest.fixture
def client(services: Services) -> Iterator[TestClient]:
    with TestClient(create_app(services=services)) as c:
        yield c


def test_api_export_is_an_attachment_in_each_format(client: TestClient) -> None:
    run_id = client.post("/bundles", json=bundle()).json()["run_id"]
    counts = client.get(f"/runs/{run_id}").json()["aggregate"]
    r = client.get(f"/runs/{run_id}/export", params={"format": "junit"})
    assert r.status_code == 200 and r.headers["content-type"] == "application/xml"
    assert r.headers["content-disposition"] == f'attachment; filename="{RUN_KEY}.junit.xml"'
    (suite,) = list(JUnitXml.fromstring(r.text))
    assert (suite.failures, suite.errors) == (counts["failed_count"], counts["error_count"])
    r = client.get(f"/runs/{run_id}/export", params={"format": "parquet"})
    assert pq.read_table(pa.BufferReader(r.content)).num_rows == 3
    # The default is the run bundle, the same run as GET /runs/{id}/bundle.
    default = client.get(f"/runs/{run_id}/export")
    assert orjson.loads(default.content) == client.get(f"/runs/{run_id}/bundle").json()


def test_api_refuses_an_unknown_format_naming_the_field(client: TestClient) -> None:
    run_id = client.post("/bundles", json=bundle()).json()["run_id"]
    r = client.get(f"/runs/{run_id}/export", params={"format": "xlsx"})
    assert r.status_code == 422, r.text
    assert "format" in r.text
    missing = client.get("/runs/00000000-0000-0000-0000-000000000000/export?format=csv")
    assert missing.status_code == 404


def test_the_run_page_links_each_download(client: TestClient) -> None:
    run_id = client.post("/bundles", json=bundle()).json()["run_id"]
    page = client.get(f"/ui/runs/{run_id}").text
    links = re.findall(rf'href="(/runs/{run_id}/export\?format=(\w+))" download', page)
    assert {fmt for _, fmt in links} == {"csv", "parquet", "junit", "jsonl"}
    for href, fmt in links:
        r = client.get(href)
        assert r.status_code == 200, (fmt, r.text)
        assert "attachment" in r.headers["content-disposition"]
    csv_rows = list(csv.DictReader(io.StringIO(client.get(links[0][0]).text, newline="")))
    assert len(csv_rows) == 3
