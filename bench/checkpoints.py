"""Benchmark: the Merkle log's costs (issue 34) on SQLite: verify, signing a head, a receipt.

One store holding a generated run (`--cases`, default 2,000), then a small second run. Each
figure is the median of `--repeat` runs, beside the physical baseline measured in the same run:
reading every stored event with plain `sqlite3` and hashing its bytes with SHA-256 (what any
check of every event pays at least). Figures:

- `verify` without a key (the chain and seals only), and `verify` building the Merkle tree and
  holding the signed heads to it (`receipts.verify_tree`): the difference is the tree's cost;
- signing a head after the small second run, extending the stored frontier (what the key's
  holder pays per checkpoint), beside rebuilding the whole tree from the log (what signing
  would cost without the frontier);
- issuing the first run's receipt (a tree over the log, one inclusion proof per event), also
  beside the run's export, which a receipt includes.
"""

from __future__ import annotations

import hashlib
import sqlite3
import sys
import tempfile
from contextlib import closing
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import (
    base_parser,
    generate_bundle,
    machine_note,
    median_seconds,
    num,
    print_table,
    progress,
)
from evaledger.api.bootstrap import Settings, build_services
from evaledger.application import receipts, verification
from evaledger.application.receipts import Signing
from evaledger.domain.bundle import RunBundle
from evaledger.domain.export import export_bundle
from evaledger.domain.ledger import Context
from evaledger.domain.signing import SigningKey
from evaledger.domain.transparency import build_tree


def raw_hash_all(events: Path) -> int:
    """Read every stored event with sqlite3 and SHA-256 its topic and state: the floor."""
    with closing(sqlite3.connect(events)) as conn:
        n = 0
        for topic, state in conn.execute("SELECT topic, state FROM stored_events ORDER BY rowid"):
            hashlib.sha256(topic.encode() + b"\n" + state).digest()
            n += 1
    return n


def main() -> None:
    p = base_parser(__doc__ or "")
    p.add_argument("--cases", type=int, default=2_000, help="cases in the first run")
    p.add_argument("--repeat", type=int, default=5, help="runs per figure (median)")
    args = p.parse_args()
    size = 100 if args.quick else args.cases
    repeat = 2 if args.quick else args.repeat
    tmp = Path(args.tmp or tempfile.mkdtemp(prefix="evaledger-bench-checkpoints-"))
    services = build_services(Settings(db=f"sqlite:///{tmp}/store/"))
    signing = Signing(SigningKey.generate("bench"))
    ctx = Context(actor="bench")
    try:
        progress(f"generating and importing a {size:,}-case run")
        bundle = RunBundle.model_validate(generate_bundle(size, seed=args.seed))
        run_id = services.ledger.import_bundle(bundle, ctx).run_id
        events_file = Path(services.location.events_env["SQLITE_DBNAME"])
        events = services.ledger.position()
        progress("measuring")
        raw_s, _ = median_seconds(lambda: raw_hash_all(events_file), repeat)
        plain_s, _ = median_seconds(lambda: verification.verify_log(services), repeat)
        receipts.sign_checkpoint(services, signing)
        tree_s, _ = median_seconds(lambda: receipts.verify_tree(services, signing), repeat)
        small = RunBundle.model_validate(generate_bundle(10, seed=args.seed + 1, run_key="small"))
        services.ledger.import_bundle(small, ctx)
        added = services.ledger.position() - events
        # The first measured signing extends the frontier by the small run; later ones find
        # nothing new (the median is then a no-op): time exactly one extension.
        _, (extend_s,) = median_seconds(lambda: receipts.sign_checkpoint(services, signing), 1)
        rebuild_s, _ = median_seconds(lambda: build_tree(services.ledger), repeat)
        receipt_s, _ = median_seconds(
            lambda: receipts.issue_receipt(services, run_id, signing), repeat
        )
        export_s, _ = median_seconds(lambda: export_bundle(services.ledger, run_id), repeat)
        total = services.ledger.position()
        rows = [
            ["verify, no key (chain + seals)", num(plain_s * 1000, 1), num(plain_s / raw_s, 2)],
            ["verify + Merkle tree + signed heads", num(tree_s * 1000, 1), num(tree_s / raw_s, 2)],
            [
                f"sign a head after {added} new events (frontier)",
                num(extend_s * 1000, 1),
                num(extend_s / raw_s, 3),
            ],
            [
                "rebuild the whole tree from the log",
                num(rebuild_s * 1000, 1),
                num(rebuild_s / raw_s, 2),
            ],
            [
                f"receipt of the {size:,}-case run",
                num(receipt_s * 1000, 1),
                num(receipt_s / raw_s, 2),
            ],
        ]
        print_table(
            f"Merkle log, {total:,} events (SQLite), median of {repeat}",
            ["figure", "ms", "÷ raw sqlite3 read + SHA-256 of every event"],
            rows,
        )
        print(
            f"the receipt takes {num(receipt_s / export_s, 2)}× the run's export "
            f"({num(export_s * 1000, 1)} ms), which it includes"
        )
        print(
            f"baseline: raw read + SHA-256 of {events:,} events {num(raw_s * 1000, 1)} ms; "
            f"the tree adds {num((tree_s - plain_s) * 1000, 1)} ms to a full verify "
            f"({num(tree_s / plain_s, 2)}× the verify without it)"
        )
        print(machine_note())
    finally:
        services.close()


if __name__ == "__main__":
    main()
