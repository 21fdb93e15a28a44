"""Build ``api/demo/judge-replies.json``: recorded replies the demo's ``replay`` judge answers with.

One reply per case of the baseline demo run (keyed ``test_case_key#repetition``), in the JSON
shape the Connexity judge prompt asks for. The replies are **synthetic**, like every verdict of
the demo (see ``api/demo/LICENSES.md``): each starts from the baseline's own synthetic verdict
and lowers one metric in five by one point, so the demo's agreement figures are not trivially
perfect. Deterministic (no randomness, no clock, no network). Run from the repository root::

    .venv/bin/python scripts/build_demo_replies.py
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from evaledger.judging.providers import REPLAY_FORMAT

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "api" / "demo"
RECORDED_JUDGE = "demo:synthetic-judge"


def reply_for(case_index: int, verdict: dict[str, Any]) -> dict[str, Any]:
    """The reply of one case: the baseline verdict, one metric in five a point lower."""
    reply: dict[str, Any] = {}
    for metric_index, m in enumerate(verdict["metric_scores"]):
        block: dict[str, Any] = {
            "justification": m.get("justification") or "",
            "failure_code": m.get("failure_code"),
            "turns": m.get("turns", []),
        }
        if m.get("passed") is not None:
            block["passed"] = m["passed"]
        else:
            lower = (case_index + metric_index) % 5 == 0
            block["score"] = max(0, m["score"] - 1) if lower else m["score"]
        reply[m["metric"]] = block
    outcomes = verdict.get("expected_outcomes") or []
    if outcomes:
        reply["expected_outcomes"] = [
            {
                "statement": o["statement"],
                "passed": o["passed"],
                "justification": o.get("justification") or "",
            }
            for o in outcomes
        ]
    return reply


def main() -> None:
    """Write the replies file."""
    bundle = orjson.loads((DEMO / "customer-service.baseline.json").read_bytes())
    replies: dict[str, Any] = {}
    for i, case in enumerate(bundle["cases"]):
        if not case.get("verdicts"):
            continue
        verdict = case["verdicts"][0]
        usage = verdict.get("usage") or {}
        key = f"{case['test_case']['key']}#{case.get('repetition', 0)}"
        replies[key] = {
            "text": orjson.dumps(reply_for(i, verdict), option=orjson.OPT_INDENT_2).decode(),
            "usage": {
                "prompt_tokens": usage.get("prompt_tokens", 0),
                "completion_tokens": usage.get("completion_tokens", 0),
            },
        }
    out = {
        "format": REPLAY_FORMAT,
        "judge": RECORDED_JUDGE,
        "note": "Synthetic replies for the offline demo (scripts/build_demo_replies.py).",
        "replies": replies,
    }
    (DEMO / "judge-replies.json").write_bytes(orjson.dumps(out, option=orjson.OPT_INDENT_2) + b"\n")


if __name__ == "__main__":
    main()
