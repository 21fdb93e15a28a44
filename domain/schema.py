"""Print the published JSON Schema of the run bundle (`python -m evaledger.domain.schema`)."""

from __future__ import annotations

import sys

import orjson

from evaledger.domain.bundle import bundle_json_schema


def render() -> bytes:
    """The schema file's exact bytes."""
    return (
        orjson.dumps(bundle_json_schema(), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS)
        + b"\n"
    )


if __name__ == "__main__":
    sys.stdout.buffer.write(render())
