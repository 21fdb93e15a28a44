"""Issue 29: a YAML "billion laughs" and a zip member under the ratio limit but huge are refused.

Both bombs are made here (nothing big is committed). The server's memory is read from /proc
(VmHWM, the peak resident size) of a real `evaledger serve`; the CLI's from the kernel's account
of the finished child (`os.wait4`). Each process runs under an address-space cap, so code that
does expand a bomb fails on the cap instead of taking the shared machine's memory.
"""

from __future__ import annotations

import os
import random
import resource
import subprocess
import sys
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import orjson
import pytest

from evaledger.domain.input_limits import MAX_YAML_NODES, load_yaml
from evaledger.judging.rubric import load_rubrics
from tests.api.test_serve import launch

pytestmark = pytest.mark.reliability

EVALEDGER = Path(sys.executable).with_name("evaledger")
MEMORY_BUDGET = 200 * 1024 * 1024
ADDRESS_CAP = 3 * 1024**3
"""Address space of each process under test: a bomb that is expanded dies here, not the host."""


def _cap_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_CAP, ADDRESS_CAP))


def laughs(head: str = "evalId: laughs\nresults:\n  version: 3\n") -> str:
    """The audit's shape: nine levels of nine aliases each, 9^9 "lol"s from a few hundred bytes."""
    text = head + '  a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    prev = "a"
    for name in "bcdefghi":
        text += f"  {name}: &{name} [{','.join([f'*{prev}'] * 9)}]\n"
        prev = name
    return text


def wide_zip(path: Path, inflated: int) -> Path:
    """An Inspect-looking `.eval` whose sample member inflates to `inflated` bytes, at a ratio
    near 120 (under the ratio limit): like the audit's 4.4 MB file inflating to 524 MB."""
    rng = random.Random(29)
    block = 1024 * 1024
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        z.writestr("header.json", orjson.dumps({"version": 2, "status": "success"}))
        with z.open("samples/1_epoch_1.json", "w", force_zip64=True) as member:
            member.write(b'{"id": 1, "epoch": 1, "input": "')
            for _ in range(inflated // block):
                noise = rng.randbytes(4 * 1024).hex().encode()
                member.write(noise + b"a" * (block - len(noise)))
            member.write(b'"}')
    return path


def _post(base: str, body: bytes, content_type: str) -> tuple[int, dict[str, object]]:
    request = urllib.request.Request(
        base + "/imports", data=body, method="POST", headers={"content-type": content_type}
    )
    try:
        with urllib.request.urlopen(request, timeout=300) as response:
            return response.status, orjson.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, orjson.loads(e.read())


def _get(base: str, path: str) -> object:
    with urllib.request.urlopen(base + path, timeout=60) as response:
        return orjson.loads(response.read())


def _rss(pid: int) -> tuple[int, int]:
    """(current, peak) resident bytes of a running process."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return int(fields["VmRSS"].split()[0]) * 1024, int(fields["VmHWM"].split()[0]) * 1024


def _cli_import(path: Path, db: str, env: dict[str, str] | None = None) -> tuple[int, str, int]:
    """(exit code, stderr, peak resident bytes) of `evaledger import PATH`."""
    proc = subprocess.Popen(
        [str(EVALEDGER), "import", str(path), "--db", db],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=_cap_memory,
        env={**os.environ, **(env or {})},
    )
    assert proc.stderr is not None
    with proc.stderr:
        err = proc.stderr.read().decode()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, err, usage.ru_maxrss * 1024


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
def test_the_server_refuses_a_billion_laughs_and_a_wide_zip_member_in_bounded_memory(
    tmp_path: Path, store_url: str
) -> None:
    yaml_bomb = laughs().encode()
    assert len(yaml_bomb) < 700
    zip_bomb = wide_zip(tmp_path / "wide.eval", 300 * 1024 * 1024).read_bytes()
    assert 100 < 300 * 1024 * 1024 / len(zip_bomb) < 200  # under the ratio limit, like the audit's
    with launch(tmp_path, db=store_url, preexec_fn=_cap_memory) as server:
        # Warm the import path (imports, first allocations), then take the baseline.
        warm = _post(server.base, b"evalId: x\n", "application/octet-stream")
        assert warm[0] == 422, warm
        _, idle = _rss(server.proc.pid)
        for body, content_type, words in (
            (yaml_bomb, "application/octet-stream", "aliases are expanded"),
            (yaml_bomb, "application/yaml", "aliases are expanded"),
            (zip_bomb, "application/zip", "inflates past 67108864 bytes"),
        ):
            status, answer = _post(server.base, body, content_type)
            assert (status, answer["status"], answer["field"]) == (422, 422, "file"), answer
            assert words in str(answer["detail"]), answer
            assert "/tmp" not in str(answer["detail"]), answer  # the upload is named, not its path
            _, peak = _rss(server.proc.pid)
            assert peak - idle <= MEMORY_BUDGET, (content_type, (peak - idle) // 2**20)
        health = _get(server.base, "/health")
        assert isinstance(health, dict)
        assert health["log_position"] == 0  # nothing stored


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
def test_the_cli_refuses_both_bombs_with_exit_2_in_bounded_memory(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/store/"
    small = tmp_path / "small.yaml"
    small.write_text("evalId: x\n")
    code, _, idle = _cli_import(small, db)
    assert code == 2
    yaml_bomb = tmp_path / "laughs.yaml"
    yaml_bomb.write_text(laughs())
    zip_bomb = wide_zip(tmp_path / "wide.eval", 300 * 1024 * 1024)
    for path, words in (
        (yaml_bomb, f"laughs.yaml: YAML refused: more than {MAX_YAML_NODES} nodes"),
        (zip_bomb, "member samples/1_epoch_1.json: inflates past 67108864 bytes"),
    ):
        code, err, peak = _cli_import(path, db)
        assert code == 2, err
        assert words in err, err
        assert "Traceback" not in err
        assert peak - idle <= MEMORY_BUDGET, (path.name, (peak - idle) // 2**20)
    runs = subprocess.run(
        [str(EVALEDGER), "runs", "--db", db, "--json"], capture_output=True, check=True
    )
    assert orjson.loads(runs.stdout)["total"] == 0  # nothing stored


def test_the_zip_member_limit_is_configurable(tmp_path: Path) -> None:
    archive = tmp_path / "small.eval"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("header.json", orjson.dumps({"version": 2, "pad": "x" * 5000}))
    code, err, _ = _cli_import(
        archive, f"sqlite:///{tmp_path}/store/", {"EVALEDGER_MAX_ZIP_MEMBER_BYTES": "4096"}
    )
    assert code == 2, err
    assert "member header.json: inflates past 4096 bytes" in err


def test_rubric_yaml_goes_through_the_bounded_loader(tmp_path: Path) -> None:
    bomb = tmp_path / "rubric.yaml"
    bomb.write_text(laughs("format: evaledger.rubric/1\nrubrics:\n"))
    with pytest.raises(Exception, match=r"rubric: .*rubric.yaml: YAML refused: more than") as e:
        load_rubrics(bomb)
    assert getattr(e.value, "field", None) == "rubric"


def test_the_bounded_loader_keeps_yaml_1_2_booleans_for_rubrics_and_refuses_self_reference() -> (
    None
):
    assert load_yaml("a: yes\nb: on\nc: true\n", "x", yaml_1_2=True) == {
        "a": "yes",
        "b": "on",
        "c": True,
    }
    assert load_yaml("a: yes\n", "x") == {"a": True}  # promptfoo's files: YAML 1.1 as before
    shared = load_yaml("a: &x {k: v}\nb: *x\n", "x")
    assert shared == {"a": {"k": "v"}, "b": {"k": "v"}}
    with pytest.raises(Exception, match="the alias \\*x refers to itself"):
        load_yaml("a: &x [1, *x]\n", "x")
