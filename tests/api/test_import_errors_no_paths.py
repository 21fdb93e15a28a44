"""Issue 29: an import's error names the uploaded file, never where the server spooled it."""

from __future__ import annotations

import tempfile
import zipfile
from io import BytesIO

from fastapi.testclient import TestClient

from evaledger.api.app import create_app
from evaledger.api.bootstrap import Services


def _damaged_eval() -> bytes:
    out = BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("header.json", b"[" * 100)  # nested past the limit
    return out.getvalue()


def test_import_errors_show_no_server_paths(store_services: Services) -> None:
    spool = tempfile.gettempdir()
    with TestClient(create_app(services=store_services)) as client:
        answers = [
            client.post(
                "/imports", content=b"[" * 1000, headers={"content-type": "application/json"}
            ),
            client.post(
                "/imports", content=_damaged_eval(), headers={"content-type": "application/zip"}
            ),
            client.post("/imports", files={"file": ("mine.json", b"[" * 1000, "application/json")}),
            client.post(
                "/imports", files={"file": ("log.eval", _damaged_eval(), "application/zip")}
            ),
        ]
        for got in answers:
            assert got.status_code == 422, got.text
            detail = got.json()["detail"]
            assert spool not in detail and "evaledger-import-" not in detail, detail
            assert "nested deeper than 64" in detail
        assert "mine.json" in answers[2].json()["detail"]
        assert "log.eval member header.json" in answers[3].json()["detail"]
        assert client.get("/runs").json()["total"] == 0
