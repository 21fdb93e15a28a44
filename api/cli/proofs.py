"""`evaledger key`, `checkpoint`, `receipt` and `evidence`: proof for people outside the team.

The signing key is an Ed25519 private key in a 0600 file (`EVALEDGER_SIGNING_KEY_FILE`,
`--key-file`) or in `EVALEDGER_SIGNING_KEY`; its public key is what an auditor is handed. The
latest verified head of each log is remembered outside the store (`EVALEDGER_HEADS_DIR`, by
default beside the key file), so `verify` catches a store restored from an older backup.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from evaledger.api.cli.inputs import Commands, resolve_run
from evaledger.api.console import EXIT_FAIL, EXIT_OK, UsageError, emit_json

if TYPE_CHECKING:
    from evaledger.api.bootstrap import Services
    from evaledger.application.receipts import Signing

# Start-up (issue 19): what a command runs is imported inside it (the parser imports every
# family): the use cases, the ledger and `cryptography` load only for these commands.

KEY_FILE_ENV = "EVALEDGER_SIGNING_KEY_FILE"
KEY_ENV = "EVALEDGER_SIGNING_KEY"
HEADS_ENV = "EVALEDGER_HEADS_DIR"


def register(commands: Commands) -> None:
    """Add key, checkpoint, receipt and evidence."""
    _register_key(commands)
    p = commands.subparsers.add_parser(
        "checkpoint", help="sign or publish the ledger's Merkle tree head"
    )
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    for name, func, help_ in (
        ("sign", cmd_checkpoint_sign, "sign the log's current tree head and store it"),
        (
            "publish",
            cmd_checkpoint_publish,
            "print (or write with -o) the latest signed tree head in its stable text format",
        ),
    ):
        sp = actions.add_parser(name, parents=[commands.common], help=help_, description=help_)
        add_signing_options(sp)
        sp.add_argument("-o", "--output", metavar="FILE", help="write it to FILE")
        sp.add_argument("--json", action="store_true", help="machine-readable output")
        sp.set_defaults(func=func, reads=True)
    p = commands.add(
        "receipt",
        cmd_receipt,
        "a run's signed receipt (RUN -o receipt.json), or check one offline (verify FILE)",
        reads=True,
    )
    p.add_argument("run", metavar="RUN|verify", help="the run (id or key), or `verify`")
    p.add_argument("receipt_file", nargs="?", metavar="FILE", help="with verify: the receipt")
    p.add_argument("-o", "--output", metavar="FILE", help="write the receipt to FILE")
    p.add_argument("--bundle", metavar="FILE", help="with verify: the run's exported bundle")
    add_signing_options(p)
    p.set_defaults(without_store=receipt_verify_without_store)
    p = commands.add(
        "evidence",
        cmd_evidence,
        "an evidence pack for an auditor: bundle, receipt, public key, spec, rubrics, judge "
        "prompts and replies, verification report, summary (zip)",
        reads=True,
    )
    p.add_argument("run", help="the run (id or key)")
    p.add_argument("-o", "--output", metavar="FILE", required=True, help="the zip to write")
    add_signing_options(p)


def _register_key(commands: Commands) -> None:
    p = commands.subparsers.add_parser("key", help="the Ed25519 key that signs checkpoints")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    for name, func, help_ in (
        ("init", cmd_key_init, "create a signing key (a 0600 file) and print its public key"),
        ("show", cmd_key_show, "print the public key to hand to auditors"),
        (
            "rotate",
            cmd_key_rotate,
            "replace the signing key; the hand-over is recorded, signed by the old key",
        ),
    ):
        sp = actions.add_parser(name, parents=[commands.common], help=help_, description=help_)
        sp.add_argument(
            "--key-file",
            metavar="FILE",
            help=f"the private key's file (default: {KEY_FILE_ENV})",
        )
        sp.add_argument("--json", action="store_true", help="machine-readable output")
        sp.set_defaults(func=func, reads=True)
        if name == "init":
            sp.add_argument(
                "--name", default="evaledger", help="the key's name (default: evaledger)"
            )
        if name == "rotate":
            sp.add_argument("--reason", help="why the key is replaced")
        if name != "rotate":
            sp.set_defaults(without_store=func)


def add_signing_options(p: argparse.ArgumentParser) -> None:
    """--key-file, --public-key, --heads."""
    p.add_argument(
        "--key-file", metavar="FILE", help=f"the private signing key (default: {KEY_FILE_ENV})"
    )
    p.add_argument(
        "--public-key",
        action="append",
        default=[],
        metavar="KEY",
        help="a trusted public key (the key, or a file of keys); repeatable",
    )
    p.add_argument(
        "--heads",
        metavar="DIR",
        help=f"where verified heads are remembered (default: {HEADS_ENV}, or beside the key file)",
    )


def signing_of(args: argparse.Namespace, *, key: bool = True) -> Signing:
    """The signing configuration from the options and the environment."""
    from evaledger.application import receipts  # lazy: the use cases and cryptography

    key_file = getattr(args, "key_file", None) or os.environ.get(KEY_FILE_ENV)
    key_text = os.environ.get(KEY_ENV) if key and not getattr(args, "key_file", None) else None
    return receipts.signing_from(
        key_file if key else None,
        key_text,
        getattr(args, "public_key", []),
        getattr(args, "heads", None) or os.environ.get(HEADS_ENV),
    )


def _key_file(args: argparse.Namespace) -> str:
    path = args.key_file or os.environ.get(KEY_FILE_ENV)
    if not path:
        raise UsageError(f"--key-file FILE (or {KEY_FILE_ENV}) is required", field="key_file")
    return str(path)


def cmd_key_init(args: argparse.Namespace) -> int:
    """Create a signing key file (never over an existing one)."""
    from evaledger.application import receipts  # lazy: the use cases and cryptography

    path = _key_file(args)
    key = receipts.new_signing_key(args.name)
    receipts.write_key_file(path, key)
    if args.json:
        emit_json({"key_file": path, "public_key": str(key.public), "key_id": key.public.key_id})
    else:
        sys.stderr.write(f"wrote the signing key to {path} (mode 0600); its public key:\n")
        print(key.public)
    return EXIT_OK


def cmd_key_show(args: argparse.Namespace) -> int:
    """Print the public key of the signing key."""
    signing = signing_of(args)
    if signing.key is None:
        raise UsageError(
            f"no signing key: --key-file FILE, {KEY_FILE_ENV} or {KEY_ENV}", field="key_file"
        )
    public = signing.key.public
    if args.json:
        emit_json({"public_key": str(public), "key_id": public.key_id})
    else:
        print(public)
    return EXIT_OK


def cmd_key_rotate(services: Services, args: argparse.Namespace) -> int:
    """Replace the key: recorded (signed by the old one), the old file kept beside the new."""
    from evaledger.application import receipts  # lazy: the use cases and cryptography
    from evaledger.domain.ledger import Context  # lazy: the ledger

    path = _key_file(args)
    signing = signing_of(args)
    old = signing.key
    assert old is not None  # the key file was required
    new = receipts.new_signing_key(old.name)
    retired = f"{path}.retired-{old.public.hash.hex()}"
    if not receipts.holds_key(retired, old):  # kept by an earlier attempt that failed after it
        receipts.write_key_file(retired, old)
    position = receipts.rotate_key(services, Context(actor=args.actor), signing, new, args.reason)
    receipts.write_key_file(path, new, replace=True)
    if args.json:
        emit_json(
            {
                "public_key": str(new.public),
                "retired_key": str(old.public),
                "retired_key_file": retired,
                "position": position,
            }
        )
    else:
        sys.stderr.write(
            f"rotated: the hand-over is recorded at position {position}, signed by "
            f"{old.public.key_id}; the old key is kept in {retired}. The new public key:\n"
        )
        print(new.public)
    return EXIT_OK


def cmd_checkpoint_sign(services: Services, args: argparse.Namespace) -> int:
    """Sign the current tree head."""
    from evaledger.application import receipts  # lazy: the use cases and cryptography

    row = receipts.sign_checkpoint(services, signing_of(args))
    note = "" if row is None else row.note
    return _emit_note(args, note, None if row is None else row.tree_size)


def cmd_checkpoint_publish(services: Services, args: argparse.Namespace) -> int:
    """The latest signed tree head, as text anyone can keep."""
    from evaledger.application import receipts  # lazy: the use cases and cryptography

    note = receipts.latest_checkpoint(services, signing_of(args))
    return _emit_note(args, note, int(note.split("\n")[1]))


def _emit_note(args: argparse.Namespace, note: str, size: int | None) -> int:
    if args.output:
        Path(args.output).write_text(note, encoding="utf-8")
    if args.json:
        emit_json({"checkpoint": note, "tree_size": size, "path": args.output})
    elif not args.output:
        sys.stdout.write(note or "the log is empty: nothing to sign\n")
    else:
        sys.stderr.write(f"wrote the signed tree head of {size} events to {args.output}\n")
    return EXIT_OK


def receipt_verify_without_store(args: argparse.Namespace) -> int | None:
    """`receipt verify FILE`: offline, with no store and no secret (else None: a run's receipt)."""
    if args.run != "verify":
        return None
    from evaledger.application import receipts  # lazy: the use cases and cryptography

    if not args.receipt_file:
        raise UsageError("receipt verify FILE: the receipt to check", field="receipt_file")
    keys = receipts.public_keys(args.public_key)
    if not keys:
        raise UsageError(
            "receipt verify needs --public-key KEY (the key the team published)",
            field="public_key",
        )
    data = receipts.read_checked(args.receipt_file, "receipt_file")
    bundle = None if args.bundle is None else receipts.read_checked(args.bundle, "bundle")
    report = receipts.check_receipt(data, keys, bundle)
    if args.json:
        emit_json(report.as_json())
    else:
        for c in report.checks:
            print(f"{'ok  ' if c.ok else 'FAIL'} {c.part}: {c.detail}")
        run = report.run
        verdict = "verified" if report.ok else "NOT verified"
        print(f"receipt of run {run.get('key')} ({run.get('id')}): {verdict}")
    return EXIT_OK if report.ok else EXIT_FAIL


def cmd_receipt(services: Services, args: argparse.Namespace) -> int:
    """A run's receipt (to -o FILE, or stdout)."""
    from evaledger.application import receipts  # lazy: the use cases and cryptography

    if args.receipt_file:
        raise UsageError(f"receipt RUN takes no FILE (did you mean -o {args.receipt_file}?)")
    run_id = resolve_run(services, args.run, args.project)
    receipt = receipts.issue_receipt(services, run_id, signing_of(args))
    data = receipts.receipt_bytes(receipt)
    if not args.output:
        sys.stdout.write(data.decode())
        return EXIT_OK
    Path(args.output).write_bytes(data)
    statement = receipt["statement"]
    if args.json:
        emit_json({"path": args.output, "run_id": str(run_id), "events": len(statement["events"])})
    else:
        sys.stderr.write(
            f"wrote the receipt of run {statement['run']['key']} to {args.output}: "
            f"{len(statement['events'])} events proven in the signed tree head\n"
        )
    return EXIT_OK


def cmd_evidence(services: Services, args: argparse.Namespace) -> int:
    """An evidence pack (zip) for a run."""
    from evaledger.application import receipts  # lazy: the use cases and cryptography

    run_id = resolve_run(services, args.run, args.project)
    data = receipts.evidence_pack(services, run_id, signing_of(args))
    Path(args.output).write_bytes(data)
    if args.json:
        emit_json({"path": args.output, "run_id": str(run_id), "bytes": len(data)})
    else:
        sys.stderr.write(
            f"wrote the evidence pack of run {args.run} to {args.output} ({len(data)} bytes); "
            "unzip it and run `evaledger receipt verify receipt.json --bundle run.json "
            "--public-key public-key.txt`\n"
        )
    return EXIT_OK
