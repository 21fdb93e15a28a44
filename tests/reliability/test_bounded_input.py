"""Issue 23 item 5: nested JSON and zip bombs are refused before a parser or inflater spends memory.

The memory test runs a real `evaledger serve` and reads its peak resident size (VmHWM) from
/proc: a hostile request within the body limit may not grow it by more than 200 MB.
"""

from __future__ import annotations

import subprocess
import sys
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import orjson
import pytest

from evaledger.domain.errors import ValidationError
from evaledger.domain.input_limits import MAX_JSON_DEPTH, DepthScanner
from tests.api.test_serve import Server

pytestmark = pytest.mark.reliability

EVALEDGER = Path(sys.executable).with_name("evaledger")
NESTED = b"[" * 100_000  # the audit's 200 KB-class body (100 KB of brackets)
MEMORY_BUDGET = 200 * 1024 * 1024


def zip_bomb(path: Path, inflated: int = 1024**3) -> Path:
    """An Inspect-looking `.eval` whose sample member inflates to `inflated` bytes of zeros."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        z.writestr("header.json", orjson.dumps({"version": 2, "status": "success"}))
        with z.open("samples/1_epoch_1.json", "w", force_zip64=True) as member:
            zeros = b"0" * (1024 * 1024)
            for _ in range(inflated // len(zeros)):
                member.write(zeros)
    return path


def test_depth_is_counted_outside_strings_and_across_chunks() -> None:
    scanner = DepthScanner("x")
    text = b'{"a": "[[[[\\"[[[{{{", "b": [[1, "\\\\"], {"c": "]]]"}]}'
    for i in range(len(text)):  # every byte as its own chunk: escapes cross chunk boundaries
        scanner.feed(text[i : i + 1])
    assert (scanner.depth, scanner.in_string) == (0, False)
    deep = DepthScanner("body", "body")
    deep.feed(b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH)
    with pytest.raises(ValidationError, match="body: JSON nested deeper than 64 levels") as e:
        deep.feed(b"[" * (MAX_JSON_DEPTH + 1))
    assert e.value.field == "body"


def test_the_cli_refuses_nested_json_and_a_zip_bomb_with_exit_2(tmp_path: Path) -> None:
    nested = tmp_path / "nested.json"
    nested.write_bytes(NESTED)
    bomb = zip_bomb(tmp_path / "bomb.eval")
    assert bomb.stat().st_size < 2 * 1024 * 1024
    # Under the 64 MiB member limit (issue 29), so the ratio rule is what refuses it.
    dense = zip_bomb(tmp_path / "dense.eval", 60 * 1024 * 1024)
    db = f"sqlite:///{tmp_path}/store/"
    for path, message in (
        (nested, "JSON nested deeper than 64 levels"),
        (bomb, "inflates past 67108864 bytes (a zip bomb?"),
        (dense, "inflates more than 200 times its compressed size (a zip bomb?)"),
    ):
        done = subprocess.run(
            [str(EVALEDGER), "import", str(path), "--db", db],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 2, done.stderr
        assert message in done.stderr
        assert "Traceback" not in done.stderr


def test_nested_json_on_standard_input_is_refused_with_exit_2(tmp_path: Path) -> None:
    done = subprocess.run(
        [str(EVALEDGER), "import", "-", "--db", f"sqlite:///{tmp_path}/store/"],
        input=NESTED,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert b"-: JSON nested deeper than 64 levels" in done.stderr


def _peak_rss(pid: int) -> tuple[int, int]:
    """(current, peak) resident bytes of a process."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return (int(fields["VmRSS"].split()[0]) * 1024, int(fields["VmHWM"].split()[0]) * 1024)


def _post(base: str, path: str, body: bytes, content_type: str) -> tuple[int, dict[str, object]]:
    request = urllib.request.Request(
        base + path, data=body, method="POST", headers={"content-type": content_type}
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, orjson.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, orjson.loads(e.read())


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
def test_hostile_requests_keep_the_servers_memory_bounded(server: Server, tmp_path: Path) -> None:
    # Warm up the import path once (imports, first-use allocations), then take the baseline.
    ok = _post(server.base, "/runs", b"{}", "application/json")
    assert ok[0] == 422
    idle, _ = _peak_rss(server.proc.pid)
    bomb = zip_bomb(tmp_path / "bomb.eval").read_bytes()
    for path, body, content_type in (
        ("/imports", NESTED, "application/json"),
        ("/imports", NESTED, "application/octet-stream"),
        ("/runs", NESTED, "application/json"),
        ("/imports", bomb, "application/zip"),
    ):
        status, answer = _post(server.base, path, body, content_type)
        assert (status, answer["status"]) == (422, 422), (path, content_type, answer)
        assert "nested deeper than 64" in str(answer["detail"]) or "zip bomb" in str(
            answer["detail"]
        ), answer
        _, peak = _peak_rss(server.proc.pid)
        assert peak - idle <= MEMORY_BUDGET, (path, content_type, (peak - idle) // 2**20)
