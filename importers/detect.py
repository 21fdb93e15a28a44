"""`--from auto`: tell a file's format from its content (never from its name).

Only the start of a file is read: a ZIP's member names, or a JSON document's first keys (a
streaming parse stopped as soon as the keys decide), so detecting a 1 GB file costs nothing.
"""

from __future__ import annotations

import re
import zipfile
from pathlib import Path
from typing import Any

import ijson

from evaledger.domain.input_limits import MAX_YAML_BYTES, check_json_file, check_zip
from evaledger.importers.base import Format, fail
from evaledger.importers.promptfoo import is_yaml
from evaledger.importers.promptfoo_rows import is_promptfoo_csv
from evaledger.importers.tau2 import is_results_dir

_MAX_EVENTS = 20_000
"""Parse events read before giving up on deciding (the deciding keys come first in practice)."""


class MalformedJSONError(Exception):
    """The start of a file is not JSON (or is cut off before its format shows)."""


def _peek_json(path: Path) -> tuple[str, dict[str, Any]]:
    """('object' | 'array' | 'other', first-level keys → scalar value or a type marker).

    For an array, the keys are those of its first element.
    """
    keys: dict[str, Any] = {}
    kind = "other"
    key: str | None = None
    ended = False  # the first JSON value is complete (JSON lines go on with another)
    with path.open("rb") as f:
        try:
            for n, (prefix, event, value) in enumerate(ijson.parse(f, use_float=True)):
                if n == 0:
                    if event == "start_map":
                        kind = "object"
                    elif event == "start_array":
                        kind = "array"
                    else:
                        return "other", {}
                    continue
                level = "" if kind == "object" else "item"
                ended = ended or (prefix == "" and event in ("end_map", "end_array"))
                if kind == "array" and prefix == "" and event == "end_array":
                    break
                if prefix == level and event == "map_key":
                    key = value
                    keys[key] = None
                elif key is not None and prefix == (f"{level}.{key}" if level else key):
                    if event in ("start_map", "start_array"):
                        keys[key] = event
                    elif event not in ("end_map", "end_array"):
                        keys[key] = value
                if kind == "array" and prefix == "item" and event == "end_map":
                    break
                if _decide(kind, keys) is not None or n > _MAX_EVENTS:
                    break
        except ijson.common.JSONError as e:
            if _decide(kind, keys) is None and not ended:
                raise MalformedJSONError(str(e)) from None
        except UnicodeDecodeError:
            return "other", {}
    return kind, keys


def _decide(kind: str, keys: dict[str, Any]) -> Format | None:
    if kind == "object":
        fmt = keys.get("format")
        if isinstance(fmt, str) and fmt.startswith("evaledger.run-bundle"):
            return Format.BUNDLE
        if "evalId" in keys or {"testCase", "success"} <= keys.keys():
            # An eval's output, or one result row (the first line of `-o out.jsonl`).
            return Format.PROMPTFOO
        if {"version", "eval"} <= keys.keys():
            return Format.INSPECT
        if {"run", "results"} <= keys.keys():
            return Format.CONNEXITY
        if {"info", "tasks"} <= keys.keys():
            # τ²-bench results (`tau2 run`): one JSON, or the results.json of its folder.
            return Format.TAU2
        if {"results", "configs"} <= keys.keys() or {"doc_id", "filtered_resps"} <= keys.keys():
            # lm-eval's results JSON, or a line of its --log_samples JSONL.
            return Format.LM_EVAL
        if keys.keys() == {"spec"} and keys["spec"] == "start_map":
            # OpenAI evals' record (`oaieval --record_path`): its first line is the run's spec.
            return Format.OPENAI_EVALS
    if kind == "array" and {"task_id", "traj"} <= keys.keys():
        return Format.TAU_BENCH
    return None


def _describe(kind: str, keys: dict[str, Any]) -> str:
    """What a file we can't import looks like, so the error names it."""
    k = keys.keys()
    if kind == "object":
        if {"session_id", "role", "message"} <= k:
            return "a per-turn conversation log (JSON lines), not a result file"
        if "prompts" in k and k & {"providers", "targets", "tests"}:
            return PROMPTFOO_CONFIG
        if "openapi" in k:
            return "an OpenAPI document"
        if {"name", "first_message"} <= k or {"name", "persona_context"} <= k:
            return (
                "a Connexity test case (give it together with a Connexity run file, "
                "--from connexity)"
            )
        if {"name", "initial_message"} <= k or {"name", "persona"} <= k:
            return "a Connexity test case in the legacy schema (persona/initial_message)"
        if {"name", "config", "agent_id"} <= k:
            return "a Connexity eval config (it describes a run to make, not its results)"
        if {"data", "count"} <= k:
            return "a Connexity list response ({data, count}) without its run"
        if "messages" in k:
            return "a chat request/response (agent messages), not evaluation results"
        if "metrics" in k:
            return "a judge metric configuration, not evaluation results"
        if "format" in k:
            return f"a document of format {keys['format']!r}"
        if "results" in k:
            return "a JSON object with 'results' but no promptfoo 'evalId'"
    if kind == "array":
        return "a JSON list whose items are not tau-bench trajectories (task_id, traj)"
    shown = ", ".join(sorted(k)[:8])
    return f"a JSON {kind} with keys {shown}" if keys else f"a JSON {kind}"


_TOP_KEY = re.compile(rb"^([A-Za-z_]\w*):")


PROMPTFOO_CONFIG = (
    "a promptfoo config (promptfooconfig.yaml: prompts, providers, tests): it describes an "
    "eval to run, not its results; run `promptfoo eval -o results.json` and import that output"
)


def _yaml_top_keys(path: Path) -> set[bytes]:
    """The top-level keys of a YAML file, found without parsing.

    Every line up to the YAML loader's size limit is looked at: promptfoo dumps `evalId` first,
    but a tool that sorts keys (PyYAML's `safe_dump`, `yq -P 'sort_keys(..)'`) puts it after
    the whole `config`.
    """
    if not is_yaml(path):
        return set()
    keys: set[bytes] = set()
    read = 0
    with path.open("rb") as f:
        while read < MAX_YAML_BYTES and (line := f.readline(MAX_YAML_BYTES - read)):
            read += len(line)
            if m := _TOP_KEY.match(line):
                keys.add(m.group(1))
    return keys


def detect(path: Path) -> Format:
    """The format of a file, or an error naming what the file was detected to be."""
    if is_results_dir(path):
        return Format.TAU2
    if not path.is_file():
        raise fail(path, "no such file")
    with path.open("rb") as f:
        head = f.read(4)
    if head.startswith(b"PK"):
        try:
            with zipfile.ZipFile(path) as z:
                names = set(z.namelist())
            if "header.json" in names or "_journal/start.json" in names:
                check_zip(path)  # before Inspect's reader inflates anything
                return Format.INSPECT
        except (zipfile.BadZipFile, EOFError, OSError) as e:
            raise fail(path, f"detected a ZIP archive that is damaged or truncated ({e})") from None
        raise fail(path, "detected a ZIP archive that is not an Inspect log (no header.json)")
    check_json_file(path)  # nesting depth, before a parser spends memory on it
    try:
        kind, keys = _peek_json(path)
    except MalformedJSONError as e:
        top = _yaml_top_keys(path)
        if b"evalId" in top or is_promptfoo_csv(path):  # promptfoo's -o out.yaml, -o out.csv
            return Format.PROMPTFOO
        if b"prompts" in top and top & {b"providers", b"targets", b"tests"}:
            raise fail(path, f"detected {PROMPTFOO_CONFIG}") from None
        raise fail(
            path, f"malformed JSON (neither JSON nor an .eval archive, or cut off): {e}"
        ) from None
    found = _decide(kind, keys)
    if found is None:
        raise fail(path, f"detected {_describe(kind, keys)}; cannot import it")
    return found
