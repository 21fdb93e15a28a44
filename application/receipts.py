"""Proof for outsiders: signed checkpoints, key rotation, run receipts and evidence packs.

The use cases of `evaledger key rotate`, `checkpoint sign|publish`, `receipt`, `evidence` and
`GET /runs/{id}/receipt`. The Merkle log and its checks are the domain's
(`domain/transparency.py`), the receipt's format and its offline check `domain/receipts.py`, the
keys and the checkpoint text `domain/signing.py`; these name them for the entry points over
the wired store. The entry point reads the signing configuration (`Signing`) from its
environment: the private key (file or variable), keys trusted besides it, and where this
machine remembers the latest verified head.
"""

from __future__ import annotations

import io
import os
import zipfile
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import orjson

from evaledger.application.ports import Services
from evaledger.domain.bundle import BUNDLE_FORMAT
from evaledger.domain.errors import InfrastructureError, ValidationError
from evaledger.domain.events import (
    GENESIS_HASH,
    CaseOpened,
    JudgeVerdictRecorded,
    RunCompleted,
    stored_hash,
)
from evaledger.domain.export import bundle_to_json, export_bundle
from evaledger.domain.input_limits import check_json_file
from evaledger.domain.ledger import Context
from evaledger.domain.receipts import (
    RECEIPT_FORMAT,
    ReceiptReport,
    bundle_digest,
    parse_receipt,
    sign_statement,
    verify_receipt,
)
from evaledger.domain.signing import (
    PublicKey,
    SignatureError,
    SigningKey,
    load_signing_key,
    open_checkpoint,
    trusted_keys,
)
from evaledger.domain.store.recorder import CheckpointRow, LogRow
from evaledger.domain.transparency import (
    HeadMemory,
    LogTree,
    aggregate_text,
    build_tree,
    check_heads,
    sign_head,
    stored_checkpoints,
)
from evaledger.domain.verify import Checkpoint, VerifyReport, verify
from evaledger.judging.rubric import default_rubric, rubric_of

SUMMARY_FIELDS = frozenset(
    {
        "unique_test_case_count",
        "total_executions",
        "passed_count",
        "failed_count",
        "error_count",
        "canceled_count",
        "skipped_count",
        "pass_rate",
    }
)
"""The run aggregate's figures a receipt states (its verdict summary)."""


@dataclass(frozen=True)
class Signing:
    """How this process signs and whom it trusts (read by the entry point from its settings)."""

    key: SigningKey | None = None
    public: tuple[PublicKey, ...] = ()
    """Keys trusted besides the signing key and those it replaced (`--public-key`)."""
    heads: HeadMemory | None = None
    """Where the latest verified head is remembered on this machine (outside the store)."""


def _require_key(signing: Signing, what: str) -> SigningKey:
    if signing.key is None:
        raise InfrastructureError(
            f"{what} needs the Ed25519 signing key: set EVALEDGER_SIGNING_KEY_FILE (a file "
            "`evaledger key init` wrote) or EVALEDGER_SIGNING_KEY"
        )
    return signing.key


def trusted(services: Services, signing: Signing) -> list[PublicKey]:
    """The signing key, every key it replaced through a recorded hand-over, and `public`."""
    keys: list[PublicKey] = []
    rotations = services.ledger.key_rotations()
    for key in ([signing.key.public] if signing.key else []) + list(signing.public):
        for k in trusted_keys(key, rotations):
            if k not in keys:
                keys.append(k)
    return keys


def sign_checkpoint(services: Services, signing: Signing) -> CheckpointRow | None:
    """Sign the log's current tree head (the last one when nothing is new); None: empty log."""
    key = _require_key(signing, "signing a checkpoint")
    row = sign_head(services.ledger, key, trusted(services, signing), datetime.now(UTC))
    if row is not None and signing.heads is not None:
        head = open_checkpoint(row.note, [key.public]).head
        signing.heads.remember(
            head.origin, row.note, head.size, _remembered_size(signing, head.origin)
        )
    return row


def _remembered_size(signing: Signing, origin: str) -> int | None:
    if signing.heads is None:
        return None
    text = signing.heads.recall(origin)
    if text is None:
        return None
    try:
        return open_checkpoint(text, _all_keys(signing)).head.size
    except ValueError:
        return None


def _all_keys(signing: Signing) -> list[PublicKey]:
    return ([signing.key.public] if signing.key else []) + list(signing.public)


def latest_checkpoint(services: Services, signing: Signing) -> str:
    """The latest signed tree head's text: signed now with the key, else the last stored."""
    if signing.key is not None:
        row = sign_checkpoint(services, signing)
    else:
        row = services.ledger.recorder.last_checkpoint()
    if row is None:
        raise InfrastructureError(
            "no signed checkpoint: the log is empty, or no checkpoint was signed yet (run "
            "`evaledger checkpoint sign` with the signing key)"
        )
    return row.note


def rotate_key(
    services: Services, ctx: Context, signing: Signing, new: SigningKey, reason: str | None
) -> int:
    """Record the hand-over to `new`, signed by the current key; the record's position.

    The current key signs the log's head first, so everything before the hand-over is under a
    checkpoint the old key signed.
    """
    old = _require_key(signing, "rotating the signing key")
    sign_checkpoint(services, signing)
    return services.ledger.rotate_signing_key(ctx, old, new.public, reason)


def verify_tree(
    services: Services,
    signing: Signing,
    *,
    expect: Checkpoint | None = None,
    against: str | None = None,
    progress: Any = None,
) -> VerifyReport:
    """A full verify that also rebuilds the Merkle tree and holds every signed head to it.

    The stored checkpoints, the head remembered on this machine and a published head
    (`against`) must each verify with a trusted key and be a prefix of the log (consistency
    proof). When all is well, the key (if held) signs the current head, and it is remembered.
    """
    ledger = services.ledger
    log = LogTree()
    report = verify(ledger, progress, expect=expect, tree=log)
    keys = trusted(services, signing)
    remembered = None
    if signing.heads is not None and log.origin is not None:
        remembered = signing.heads.recall(log.origin)
    if not keys:  # nothing to check a signature with: the tree only
        report.merkle = check_heads(log, [], keys).as_json() | {"trusted_keys": []}
        return report
    found = check_heads(log, list(stored_checkpoints(ledger)), keys, remembered, against)
    report.findings.extend(found.findings)
    report.merkle = found.as_json() | {"trusted_keys": [k.key_id for k in keys]}
    if not report.ok or log.origin is None:
        return report
    if signing.key is not None:
        sign_checkpoint(services, signing)
    elif signing.heads is not None and keys:
        last = ledger.recorder.last_checkpoint()
        if last is not None:
            size = open_checkpoint(last.note, keys).head.size
            signing.heads.remember(log.origin, last.note, size, found.remembered)
    return report


# -- receipts ----------------------------------------------------------------------------------


def issue_receipt(services: Services, run_id: UUID, signing: Signing) -> dict[str, Any]:
    """The run's receipt, against a checkpoint signed now (see `domain/receipts.py`)."""
    return _receipt(services, run_id, signing)[0]


def _receipt(
    services: Services, run_id: UUID, signing: Signing
) -> tuple[dict[str, Any], list[LogRow]]:
    key = _require_key(signing, "a receipt")
    ledger = services.ledger
    run = ledger.get_run(run_id)
    bundle = bundle_to_json(export_bundle(ledger, run_id))
    keys = trusted(services, signing)
    row = sign_checkpoint(services, signing)
    assert row is not None  # the run's events are in the log
    head = open_checkpoint(row.note, keys).head
    rows: list[LogRow] = []
    wanted = {aggregate_text(run_id), *(aggregate_text(c) for c in run.case_ids)}
    log = build_tree(ledger, wanted, rows.append)
    if log.size < head.size or log.tree.root(head.size) != head.root:
        raise InfrastructureError(
            "the log does not match its latest signed checkpoint (rolled back or rewritten): "
            "no receipt was issued. Run `evaledger verify`"
        )
    events, proofs, seal_event = _proven_events(log, rows, head.size, aggregate_text(run_id))
    created = run.created
    statement = {
        "format": RECEIPT_FORMAT,
        "issued_at": datetime.now(UTC).isoformat(),
        "run": {
            "id": str(run_id),
            "key": created.run_key,
            "project": created.project,
            "status": str(run.status.value),
            "seal": None if seal_event is None else orjson.loads(seal_event["state"])["seal"],
            "case_hashes": _case_hashes(rows, run.case_ids, seal_event),
            "spec_id": created.spec.spec_id,
            "judge_templates": _judge_templates(rows),
            "summary": _summary(services, run_id),
        },
        "bundle": {
            "format": BUNDLE_FORMAT,
            "sha256": bundle_digest(bundle),
            "cases": len(bundle.get("cases", [])),
        },
        "events": events,
        "seal_event": seal_event,
        "checkpoint": row.note,
        "public_key": str(key.public),
    }
    signature = sign_statement(statement, key)
    return {"statement": statement, "proofs": proofs, "signature": signature}, rows


def _proven_events(
    log: LogTree, rows: Sequence[LogRow], size: int, run: str
) -> tuple[list[dict[str, Any]], dict[str, list[str]], dict[str, Any] | None]:
    events: list[dict[str, Any]] = []
    proofs: dict[str, list[str]] = {}
    seal_event = None
    for position, aggregate, version, topic, state in rows:
        index = log.index_of(position)
        if index is None or index >= size:
            continue  # written after the checkpoint
        ehash = stored_hash(topic, bytes(state))
        events.append(
            {
                "position": position,
                "aggregate": aggregate,
                "version": version,
                "hash": ehash,
                "leaf_index": index,
            }
        )
        proofs[str(index)] = [p.hex() for p in log.tree.inclusion_proof(index, size)]
        if aggregate == run and topic == RunCompleted.topic():
            seal_event = {
                "position": position,
                "aggregate": aggregate,
                "version": version,
                "topic": topic,
                "state": bytes(state).decode(),
            }
    return events, proofs, seal_event


def _case_hashes(
    rows: Sequence[LogRow], case_ids: Iterable[UUID], seal_event: dict[str, Any] | None
) -> dict[str, str] | None:
    """Each case's last event hash when the run was sealed (what the seal covers)."""
    if seal_event is None:
        return None
    cases = {aggregate_text(c) for c in case_ids}
    last: dict[str, str] = dict.fromkeys(cases, GENESIS_HASH)
    for position, aggregate, _version, topic, state in rows:
        if aggregate in cases and position < seal_event["position"]:
            last[aggregate] = stored_hash(topic, bytes(state))
    return last


def _judge_templates(rows: Sequence[LogRow]) -> list[dict[str, Any]]:
    """The judge templates the run's verdicts were rendered from, with how many verdicts each."""
    counted: Counter[tuple[str | None, str | None]] = Counter()
    topic = JudgeVerdictRecorded.topic()
    for _position, _aggregate, _version, t, state in rows:
        if t == topic:
            found = orjson.loads(bytes(state))
            counted[(found.get("template_id"), found.get("template_hash"))] += 1
    return [
        {"template_id": tid, "template_hash": thash, "verdicts": n}
        for (tid, thash), n in sorted(counted.items(), key=lambda i: (str(i[0][0]), str(i[0][1])))
    ]


def _summary(services: Services, run_id: UUID) -> dict[str, Any]:
    services.sync()
    aggregate = services.reads.summary(run_id).aggregate
    return aggregate.model_dump(mode="json", include=set(SUMMARY_FIELDS))


# -- evidence pack -----------------------------------------------------------------------------


def evidence_pack(services: Services, run_id: UUID, signing: Signing) -> bytes:
    """A zip for an auditor, verifiable by `receipt verify` once unzipped.

    The bundle, the receipt, the public keys, the spec, the rubrics, the judge prompts and
    replies, the verification report and a Markdown summary.
    """
    receipt, rows = _receipt(services, run_id, signing)
    ledger = services.ledger
    run = ledger.get_run(run_id)
    bundle = bundle_to_json(export_bundle(ledger, run_id))
    if bundle_digest(bundle) != receipt["statement"]["bundle"]["sha256"]:
        raise InfrastructureError("the run changed while its evidence was packed; try again")
    report = verify_tree(services, signing)
    spec = run.created.spec
    catalogue = ledger.catalogue(run.created.project)
    rubrics = {}
    for m in spec.metrics:
        definition = catalogue.get(m.metric)
        if definition is not None:
            rubric = rubric_of(definition) or default_rubric(definition)
            rubrics[m.metric] = rubric.model_dump(mode="json")
    judged = _judge_calls(rows, ledger.unsealed)
    indent = orjson.OPT_INDENT_2
    files = {
        "run.json": orjson.dumps(bundle, option=indent) + b"\n",
        "receipt.json": orjson.dumps(receipt, option=indent) + b"\n",
        "public-key.txt": "".join(f"{k}\n" for k in trusted(services, signing)).encode(),
        "spec.json": orjson.dumps(spec.model_dump(mode="json"), option=indent) + b"\n",
        "rubrics.json": orjson.dumps(rubrics, option=indent | orjson.OPT_SORT_KEYS) + b"\n",
        "judge-calls.jsonl": b"".join(orjson.dumps(j) + b"\n" for j in judged),
        "verification.json": orjson.dumps(report.as_json(), option=indent) + b"\n",
    }
    files["README.md"] = _summary_markdown(run, receipt, report, len(judged)).encode()
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            z.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), data)
    return out.getvalue()


def _judge_calls(
    rows: Sequence[LogRow], unsealed: Callable[[dict[str, Any]], dict[str, Any]]
) -> list[dict[str, Any]]:
    """Every judge call of the run's cases: the prompt sent and the reply received, verbatim.

    A sealed verdict's prompt and reply are read from the vault (`unsealed`); an erased one's
    read as the erasure's wording.
    """
    keys: dict[str, str] = {}
    calls = []
    for _position, aggregate, _version, topic, state in rows:
        if topic == CaseOpened.topic():
            keys[aggregate] = orjson.loads(bytes(state))["test_case"]["key"]
        elif topic == JudgeVerdictRecorded.topic():
            v = unsealed(orjson.loads(bytes(state)))
            calls.append(
                {
                    "case_id": aggregate,
                    "test_case_key": keys.get(aggregate),
                    "verdict_id": v.get("verdict_id"),
                    "judge": v.get("judge"),
                    "template_id": v.get("template_id"),
                    "template_hash": v.get("template_hash"),
                    "prompt": v.get("prompt"),
                    "reply": v.get("raw_output"),
                    "parse_status": v.get("parse_status"),
                    "error": v.get("error"),
                }
            )
    return calls


def _summary_markdown(
    run: Any, receipt: dict[str, Any], report: VerifyReport, judge_calls: int
) -> str:
    """Who ran what, when, with which configuration, and how to check it."""
    created = run.created
    statement = receipt["statement"]
    s = statement["run"]["summary"]
    used = ", ".join(
        f"{t['template_id']} ({t['template_hash']})"
        for t in statement["run"]["judge_templates"]
        if t["template_id"]
    )
    used = used or "none recorded"
    lines = [
        f"# Evidence for run `{created.run_key}` (project `{created.project}`)",
        "",
        "| | |",
        "|---|---|",
        f"| run id | `{statement['run']['id']}` |",
        f"| agent | {created.agent.name} {created.agent.version or ''} |",
        f"| suite | {created.suite.name} {created.suite.version or ''} |",
        f"| created | {created.created_at.isoformat()} by `{created.actor}` |",
        f"| status | {statement['run']['status']} |",
        f"| scoring spec | `{statement['run']['spec_id']}` |",
        f"| judge templates | {used} |",
        f"| judge calls | {judge_calls} (prompts and replies in `judge-calls.jsonl`) |",
        f"| cases | {s.get('total_executions')}: {s.get('passed_count')} passed, "
        f"{s.get('failed_count')} failed, {s.get('error_count')} errored |",
        f"| pass rate | {s.get('pass_rate')} |",
        f"| seal | `{statement['run']['seal']}` |",
        f"| labels | {', '.join(f'{k}={v}' for k, v in sorted(created.labels.items())) or '-'} |",
        "",
        "## Check it yourself",
        "",
        "```",
        "evaledger receipt verify receipt.json --bundle run.json --public-key public-key.txt",
        "```",
        "",
        "It needs no store and no secret: the receipt's checkpoint is signed with the ledger's "
        "Ed25519 key, each of the run's events is proven in that checkpoint's Merkle tree, and "
        "the bundle's digest is the one the signed receipt names.",
        "",
        f"Store verification when packed: {'ok' if report.ok else 'BROKEN'} "
        f"({report.events} events, see `verification.json`).",
        "",
    ]
    return "\n".join(lines)


# -- configuration and offline checks, for the entry points -------------------------------------


def public_keys(texts: Iterable[str]) -> tuple[PublicKey, ...]:
    """Verifier keys, each given as the key or a file of keys (one a line, `#` comments).

    ValidationError naming `public_key` when one is neither.
    """
    found: list[PublicKey] = []
    for text in texts:
        path = Path(text)
        lines = [text]
        if "+" not in text or path.is_file():
            try:
                lines = path.read_text(encoding="utf-8").splitlines()
            except (OSError, UnicodeDecodeError) as e:
                raise ValidationError(
                    f"--public-key {text!r}: neither a key nor a readable file ({e})",
                    field="public_key",
                ) from None
        for line in lines:
            if line.strip() and not line.lstrip().startswith("#"):
                try:
                    found.append(PublicKey.parse(line))
                except SignatureError as e:
                    raise ValidationError(
                        f"--public-key {text!r}: {e}", field="public_key"
                    ) from None
    return tuple(found)


def signing_from(
    key_file: str | None,
    key_text: str | None,
    public: Iterable[str] = (),
    heads_dir: str | None = None,
) -> Signing:
    """The signing configuration.

    The private key (its text wins over its file), keys trusted besides it, and where heads
    are remembered (default: beside the key file).
    """
    key = None
    if key_text:
        key = SigningKey.parse(key_text, "EVALEDGER_SIGNING_KEY")
    elif key_file:
        key = load_signing_key(key_file)
    folder = heads_dir or (f"{key_file}.heads" if key_file else None)
    return Signing(key, public_keys(public), HeadMemory(folder) if folder else None)


def new_signing_key(name: str) -> SigningKey:
    """A fresh Ed25519 signing key."""
    return SigningKey.generate(name)


def write_key_file(path: str | Path, key: SigningKey, *, replace: bool = False) -> None:
    """Write a private key readable by its owner only; an existing file only when `replace`."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if replace else os.O_EXCL)
    try:
        fd = os.open(path, flags, 0o600)
    except FileExistsError:
        raise ValidationError(
            f"{path} exists: a key is never overwritten (`key rotate` replaces one, recorded)",
            field="key_file",
        ) from None
    except OSError as e:
        raise InfrastructureError(f"signing key file {str(path)!r}: {e.strerror}") from None
    with os.fdopen(fd, "w", encoding="ascii") as f:
        os.fchmod(f.fileno(), 0o600)
        f.write(key.to_text() + "\n")


def holds_key(path: str | Path, key: SigningKey) -> bool:
    """Whether the file at `path` holds exactly `key` (False when missing or another)."""
    try:
        return Path(path).read_text(encoding="ascii").strip() == key.to_text()
    except (OSError, UnicodeDecodeError):
        return False


def check_receipt(
    receipt: bytes, keys: Sequence[PublicKey], bundle: bytes | None = None
) -> ReceiptReport:
    """Verify a receipt offline (no store, no secret); a file that is no receipt fails `format`.

    A bundle that is not JSON fails `bundle`.
    """
    report = ReceiptReport()
    try:
        parsed = parse_receipt(receipt)
    except SignatureError as e:
        report.add("format", False, str(e))
        return report
    loaded = None
    if bundle is not None:
        try:
            loaded = orjson.loads(bundle)
        except orjson.JSONDecodeError as e:
            report = verify_receipt(parsed, keys)
            report.add("bundle", False, f"the bundle is not JSON ({e})")
            return report
    return verify_receipt(parsed, keys, loaded)


def receipt_bytes(receipt: dict[str, Any]) -> bytes:
    """A receipt as the file `receipt` writes (indented JSON; checks read it canonically)."""
    return orjson.dumps(receipt, option=orjson.OPT_INDENT_2) + b"\n"


MAX_RECEIPT_FILE_BYTES = 64 * 1024 * 1024
"""A receipt lists one proof per event of its run: 64 MiB is over 100,000 events."""
MAX_BUNDLE_FILE_BYTES = 2 * 1024 * 1024 * 1024


def read_checked(path: str | Path, field: str) -> bytes:
    """A receipt or bundle file's bytes, refused (naming `field`) when too large or too deep."""
    limit = MAX_RECEIPT_FILE_BYTES if field == "receipt_file" else MAX_BUNDLE_FILE_BYTES
    file = Path(path)
    try:
        size = file.stat().st_size
        if size > limit:
            raise ValidationError(
                f"{path}: {size} bytes, more than a {field.replace('_', ' ')} may hold ({limit})",
                field=field,
            )
        check_json_file(file)  # nesting depth, in constant memory, before any parser
        return file.read_bytes()
    except OSError as e:
        raise ValidationError(f"{path}: {e.strerror}", field=field) from None
