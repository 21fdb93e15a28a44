"""Sealed payloads: personal text kept out of the log, under a key that erasure destroys.

A sealed event (a transcript's messages, a judge's or grader's prompt and reply) is stored with
its personal strings replaced by `SEALED_TEXT` and one extra state key, `PAYLOAD_KEY`:
`{"ref": REF, "subject": SUBJECT, "paths": [[field, index, ...], ...]}`. The strings themselves go,
with a 32-byte random salt, into one plaintext `P = {"salt": hex, "values": [...]}` whose SHA-256
is `REF`; the store keeps `P` encrypted (AES-256-GCM, associated data `REF` and the subject) under
the subject's key (`domain/store/payloads.py`). The event's hash, hence the chain and the Merkle
log, covers `REF`, never the plaintext or the ciphertext, so destroying the key and the ciphertext
(`evaledger erase`) leaves every link verifiable. The salt makes `REF` a hiding commitment: with
the salt gone, nobody can test a guess of the erased text against it.

Old events (stored before sealing) keep their text inline: their stored bytes and hashes are what
the chain covers, so they cannot be sealed afterwards (see `docs/decisions.md`, issue 34).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

PAYLOAD_KEY = "payload_ref"
"""The stored-state key of a sealed event's reference (absent from unsealed events)."""
SEALED_TEXT = "[sealed]"
"""What a sealed string reads as in the stored state (and wherever its payload is not read)."""
KEY_BYTES = 32
NONCE_BYTES = 12

Path = tuple[str | int, ...]


def _prompt_reply(state: dict[str, Any]) -> Iterator[Path]:
    for name in ("prompt", "raw_output"):
        if isinstance(state.get(name), str):
            yield (name,)


def _turn_contents(state: dict[str, Any]) -> Iterator[Path]:
    for i, turn in enumerate(state.get("turns") or ()):
        if isinstance(turn, dict) and isinstance(turn.get("content"), str):
            yield ("turns", i, "content")


CONTENT_ATTRIBUTES = frozenset(
    {
        "gen_ai.input.messages",
        "gen_ai.output.messages",
        "gen_ai.system_instructions",
        "gen_ai.prompt",
        "gen_ai.completion",
        "gen_ai.tool.call.arguments",
        "gen_ai.tool.call.result",
        "input.value",
        "output.value",
    }
)
"""Span attributes that carry a conversation's text (GenAI and OpenInference conventions)."""
CONTENT_PREFIXES = (
    "gen_ai.prompt.",
    "gen_ai.completion.",
    "llm.input_messages.",
    "llm.output_messages.",
)
CONTENT_LEAVES = frozenset({"content", "text", "arguments"})
"""Under `CONTENT_PREFIXES`, attributes whose last segment is one of these carry text."""
CONTENT_EVENT_ATTRIBUTES = ("content", "message")
"""Attributes of a `gen_ai.*` span event (`gen_ai.user.message`, `gen_ai.choice`) with text."""


def is_content_attribute(key: str) -> bool:
    """Whether a span attribute carries message text (the one rule of what a span seals)."""
    if key in CONTENT_ATTRIBUTES:
        return True
    return key.startswith(CONTENT_PREFIXES) and key.rsplit(".", 1)[-1] in CONTENT_LEAVES


def _span_contents(state: dict[str, Any]) -> Iterator[Path]:
    for i, span in enumerate(state.get("spans") or ()):
        if not isinstance(span, dict):
            continue
        for key, value in (span.get("attributes") or {}).items():
            if isinstance(value, str) and is_content_attribute(key):
                yield ("spans", i, "attributes", key)
        for j, event in enumerate(span.get("events") or ()):
            if not isinstance(event, dict) or not str(event.get("name", "")).startswith("gen_ai."):
                continue
            attrs = event.get("attributes") or {}
            for key in CONTENT_EVENT_ATTRIBUTES:
                if isinstance(attrs.get(key), str):
                    yield ("spans", i, "events", j, "attributes", key)


SEALED_FIELDS: dict[str, Callable[[dict[str, Any]], Iterator[Path]]] = {
    "evaledger.case.transcript_recorded": _turn_contents,
    "evaledger.case.judge_verdict_recorded": _prompt_reply,
    "evaledger.case.claims_verified": _prompt_reply,
    "evaledger.case.named_scores_recorded": _prompt_reply,
    "evaledger.trace.spans_received": _span_contents,
}
"""Topic name → the paths of the personal strings of its state (the one list of them)."""


@dataclass(frozen=True)
class Sealed:
    """One event's sealed payload: its reference, subject and plaintext (to encrypt on store)."""

    ref: str
    subject: str
    plaintext: bytes


class PayloadError(ValueError):
    """A ciphertext that does not open under its key, or a plaintext that is not its reference."""


def seal_state(topic_name: str, state: dict[str, Any], subject: str) -> Sealed | None:
    """Move `state`'s personal strings into a payload (in place); None when it has none."""
    paths_of = SEALED_FIELDS.get(topic_name)
    paths = list(paths_of(state)) if paths_of is not None else []
    if not paths:
        return None
    values = []
    for path in paths:
        parent = _parent(state, path)
        values.append(parent[path[-1]])
        parent[path[-1]] = SEALED_TEXT
    plaintext = orjson.dumps({"salt": os.urandom(32).hex(), "values": values})
    ref = hashlib.sha256(plaintext).hexdigest()
    state[PAYLOAD_KEY] = {"ref": ref, "subject": subject, "paths": [list(p) for p in paths]}
    return Sealed(ref, subject, plaintext)


def sealed_ref(state: dict[str, Any]) -> dict[str, Any] | None:
    """The `PAYLOAD_KEY` entry of a decoded stored state (None: an unsealed event)."""
    entry = state.get(PAYLOAD_KEY)
    return entry if isinstance(entry, dict) else None


def unseal_state(state: dict[str, Any], values: Sequence[str] | str) -> dict[str, Any]:
    """Put a payload's strings (or one text for all: erased, missing) back; the key removed."""
    entry = state.pop(PAYLOAD_KEY)
    for i, path in enumerate(entry["paths"]):
        text = values if isinstance(values, str) else values[i]
        _parent(state, tuple(path))[path[-1]] = text
    return state


def unsealed_copy(state: dict[str, Any], values: Sequence[str]) -> dict[str, Any]:
    """What `unseal_state` makes of a deep copy of `state`, copying only the sealed paths.

    `state` is left as it was (the other projections fold the same dict): the top dict and
    each list or dict on a sealed string's path are copied once, everything else is shared.
    """
    paths = [tuple(path) for path in state[PAYLOAD_KEY]["paths"]]
    out = {k: v for k, v in state.items() if k != PAYLOAD_KEY}
    own_along(out, paths)
    for i, path in enumerate(paths):
        _parent(out, path)[path[-1]] = values[i]
    return out


def own_along(state: dict[str, Any], paths: Iterable[tuple[str | int, ...]]) -> None:
    """Give `state` its own copy of every container on these paths (to change their ends).

    Everything off the paths stays shared with whatever `state` was copied from.
    """
    owned: set[int] = set()
    for path in paths:
        node: Any = state
        for step in path[:-1]:
            child = node[step]
            if id(child) not in owned:
                child = dict(child) if isinstance(child, dict) else list(child)
                node[step] = child
                owned.add(id(child))
            node = child


def _parent(state: dict[str, Any], path: Path) -> Any:
    node: Any = state
    for step in path[:-1]:
        node = node[step]
    return node


def subject_key(run_id: object, subject: str | None, case_id: object) -> str:
    """The vault's key name of a case's payloads: its data subject's in its run, else the case.

    One key per (run, subject): a run id is its project's (`run_id_for`), so two projects never
    share a key, and `erase --subject` destroys each run's key of the subject in scope.
    """
    return f"subject:{run_id}:{subject}" if subject else str(case_id)


def new_key() -> bytes:
    """A fresh subject key (AES-256)."""
    return AESGCM.generate_key(bit_length=KEY_BYTES * 8)


def _aad(ref: str, subject: str) -> bytes:
    return f"evaledger-payload\x1f{ref}\x1f{subject}".encode()


def encrypt(key: bytes, sealed: Sealed) -> tuple[bytes, bytes]:
    """(nonce, ciphertext) of a payload under its subject's key."""
    nonce = os.urandom(NONCE_BYTES)
    return nonce, AESGCM(key).encrypt(nonce, sealed.plaintext, _aad(sealed.ref, sealed.subject))


def decrypt(key: bytes, ref: str, subject: str, nonce: bytes, ciphertext: bytes) -> list[str]:
    """The strings of a payload; `PayloadError` when it does not open or is not `ref`."""
    try:
        plaintext = AESGCM(key).decrypt(nonce, ciphertext, _aad(ref, subject))
    except (InvalidTag, ValueError):
        raise PayloadError(
            f"payload {ref[:12]}: the ciphertext does not open under its key"
        ) from None
    if hashlib.sha256(plaintext).hexdigest() != ref:
        raise PayloadError(f"payload {ref[:12]}: the plaintext is not the one the event names")
    values = orjson.loads(plaintext)["values"]
    return [str(v) for v in values]


def erased_text(erased_at: str, actor: str, reason: str) -> str:
    """What an erased string reads as: "[erased on DATE by WHO (reason)]"."""
    return f"[erased on {erased_at[:10]} by {actor} ({reason})]"
