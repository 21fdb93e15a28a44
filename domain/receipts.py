"""A run's receipt: what anyone checks offline with the receipt, the bundle and a public key.

A receipt is JSON with three parts:

- `statement`, signed: the run (id, key, project, status, seal, scoring spec id, judge template
  hashes, verdict summary), the SHA-256 of its exported bundle (canonical JSON), every event of
  the run and of its cases as the Merkle log's leaves spell them (position, aggregate, version,
  event hash, leaf index), the seal event's stored bytes, and the signed checkpoint the events
  are proven against;
- `proofs`: one RFC 6962 inclusion proof per event, against that checkpoint's root;
- `signature`: the Ed25519 signature of the canonical statement by the key that signed the
  checkpoint.

`verify_receipt` needs no store and no secret; each check names its part (`format`,
`checkpoint`, `signature`, `proof`, `seal`, `bundle`), so a changed byte says where it is.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

import orjson

from evaledger.domain.aggregates import seal_of
from evaledger.domain.events import RunCompleted, stored_hash
from evaledger.domain.merkle import ProofError, verify_inclusion
from evaledger.domain.signing import (
    PublicKey,
    SignatureError,
    SigningKey,
    open_checkpoint,
)
from evaledger.domain.transparency import event_leaf

RECEIPT_FORMAT = "evaledger.receipt/1"
MAX_RECEIPT_BYTES = 256 * 1024 * 1024
SIGNATURE_DOMAIN = b"evaledger receipt statement\n"


def canonical(value: Any) -> bytes:
    """Canonical JSON: sorted keys, no whitespace (what digests and signatures cover)."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def bundle_digest(bundle: Any) -> str:
    """SHA-256 of a bundle's canonical JSON (however the file was indented)."""
    return hashlib.sha256(canonical(bundle)).hexdigest()


def sign_statement(statement: Mapping[str, Any], key: SigningKey) -> dict[str, str]:
    """The receipt's `signature` part."""
    raw = key.sign(SIGNATURE_DOMAIN + canonical(statement))
    return {"key": key.public.key_id, "value": base64.b64encode(raw).decode()}


@dataclass(frozen=True)
class Check:
    """One check of a receipt: its part, whether it passed, what it found."""

    part: str
    ok: bool
    detail: str


@dataclass
class ReceiptReport:
    """Every check `receipt verify` made, in order; ok when all passed."""

    checks: list[Check] = field(default_factory=list)
    run: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Every check passed (and there were some)."""
        return bool(self.checks) and all(c.ok for c in self.checks)

    @property
    def failed(self) -> list[Check]:
        """The checks that failed."""
        return [c for c in self.checks if not c.ok]

    def add(self, part: str, ok: bool, detail: str) -> bool:
        """Record a check; whether it passed."""
        self.checks.append(Check(part, ok, detail))
        return ok

    def as_json(self) -> dict[str, Any]:
        """The report as `receipt verify --json` prints it."""
        return {
            "ok": self.ok,
            "run": self.run,
            "checks": [{"part": c.part, "ok": c.ok, "detail": c.detail} for c in self.checks],
        }


def parse_receipt(data: bytes) -> dict[str, Any]:
    """The receipt's JSON (SignatureError when it is not a receipt object)."""
    if len(data) > MAX_RECEIPT_BYTES:
        raise SignatureError("the receipt is larger than a receipt can be")
    try:
        receipt = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise SignatureError(f"the receipt is not JSON ({e})") from None
    if not isinstance(receipt, dict):
        raise SignatureError("the receipt is not a JSON object")
    return receipt


def verify_receipt(
    receipt: Mapping[str, Any], keys: Sequence[PublicKey], bundle: Any | None = None
) -> ReceiptReport:
    """Check a receipt offline: checkpoint, statement signature, inclusion proofs, seal, bundle."""
    report = ReceiptReport()
    statement = receipt.get("statement")
    if (
        not isinstance(statement, dict)
        or statement.get("format") != RECEIPT_FORMAT
        or not isinstance(receipt.get("proofs"), dict)
        or not isinstance(receipt.get("signature"), dict)
    ):
        report.add(
            "format", False, f"not an {RECEIPT_FORMAT} receipt (statement, proofs, signature)"
        )
        return report
    run = statement.get("run")
    report.run = run if isinstance(run, dict) else {}
    head = _check_checkpoint(report, statement, keys)
    _check_signature(report, statement, receipt["signature"], keys)
    if head is not None:
        _check_proofs(report, statement, receipt["proofs"], head)
    _check_seal(report, statement)
    if bundle is not None:
        _check_bundle(report, statement, bundle)
    return report


def _check_checkpoint(
    report: ReceiptReport, statement: Mapping[str, Any], keys: Sequence[PublicKey]
) -> tuple[int, bytes] | None:
    note = statement.get("checkpoint")
    if not isinstance(note, str):
        report.add("checkpoint", False, "the receipt carries no checkpoint")
        return None
    try:
        opened = open_checkpoint(note, keys)
    except SignatureError as e:
        report.add("checkpoint", False, str(e))
        return None
    report.add(
        "checkpoint",
        True,
        f"tree head of {opened.head.size} events of {opened.head.origin}, signed by "
        f"{opened.signer.key_id}",
    )
    return opened.head.size, opened.head.root


def _check_signature(
    report: ReceiptReport,
    statement: Mapping[str, Any],
    signature: Mapping[str, Any],
    keys: Sequence[PublicKey],
) -> None:
    by_id = {k.key_id: k for k in keys}
    key = by_id.get(str(signature.get("key")))
    if key is None:
        report.add(
            "signature",
            False,
            f"the statement is signed by {signature.get('key')!r}, not by a trusted key",
        )
        return
    try:
        raw = base64.b64decode(str(signature.get("value", "")).encode(), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raw = b""
    ok = key.verify(SIGNATURE_DOMAIN + canonical(statement), raw)
    report.add(
        "signature",
        ok,
        f"the statement's signature by {key.key_id} "
        + ("verifies" if ok else "does not verify (the statement was changed after signing)"),
    )


def _check_proofs(
    report: ReceiptReport,
    statement: Mapping[str, Any],
    proofs: Mapping[str, Any],
    head: tuple[int, bytes],
) -> None:
    size, root = head
    events = statement.get("events")
    if not isinstance(events, list) or not events:
        report.add("proof", False, "the receipt lists no events")
        return
    bad: list[str] = []
    for e in events:
        try:
            index = int(e["leaf_index"])
            leaf = event_leaf(int(e["position"]), str(e["aggregate"]), int(e["version"]), e["hash"])
            proof = [bytes.fromhex(h) for h in proofs[str(index)]]
            verify_inclusion(index, size, leaf, proof, root)
        except (ProofError, KeyError, TypeError, ValueError) as err:
            where = e.get("position") if isinstance(e, dict) else e
            bad.append(f"event at position {where}: {err}")
    if bad:
        report.add(
            "proof",
            False,
            f"{len(bad)} of {len(events)} events are not proven in the checkpoint's tree: "
            + "; ".join(bad[:3]),
        )
    else:
        report.add("proof", True, f"{len(events)} events proven in the checkpoint's tree")


def _check_seal(report: ReceiptReport, statement: Mapping[str, Any]) -> None:
    """The seal event's bytes hash to its listed event, and state the run's seal."""
    run = report.run
    sealed = statement.get("seal_event")
    if sealed is None:
        report.add("seal", run.get("seal") is None, "the run is not sealed (no RunCompleted)")
        return
    try:
        ehash = stored_hash(sealed["topic"], sealed["state"].encode())
        state = orjson.loads(sealed["state"])
        listed = [
            e
            for e in statement["events"]
            if e["position"] == sealed["position"] and e["hash"] == ehash
        ]
    except (KeyError, TypeError, AttributeError, orjson.JSONDecodeError) as e:
        report.add("seal", False, f"the seal event is malformed ({e})")
        return
    ok = (
        bool(listed)
        and sealed["topic"] == RunCompleted.topic()
        and isinstance(state, dict)
        and state.get("seal") == run.get("seal")
    )
    report.add(
        "seal",
        ok,
        f"the run's seal {str(run.get('seal'))[:12]}… "
        + ("is the one its RunCompleted event stores" if ok else "is not the one in the log"),
    )
    case_hashes = run.get("case_hashes")
    if ok and isinstance(case_hashes, dict):
        proven = {(str(e.get("aggregate")), e.get("hash")) for e in statement["events"]}
        try:
            covered = seal_of({UUID(c): h for c, h in case_hashes.items()}) == run.get("seal")
        except (ValueError, AttributeError):
            covered = False
        listed_all = all((c, h) in proven for c, h in case_hashes.items())
        report.add(
            "seal",
            covered and listed_all,
            f"the seal is the digest of its {len(case_hashes)} cases' last events, each listed"
            if covered and listed_all
            else "the seal is not the digest of the listed cases' last events",
        )


def _check_bundle(report: ReceiptReport, statement: Mapping[str, Any], bundle: Any) -> None:
    declared = statement.get("bundle")
    expected = declared.get("sha256") if isinstance(declared, dict) else None
    found = bundle_digest(bundle)
    report.add(
        "bundle",
        found == expected,
        f"the bundle's digest {found[:12]}… "
        + (
            "is the one the receipt names" if found == expected else f"is not {str(expected)[:12]}…"
        ),
    )
