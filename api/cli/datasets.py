"""`evaledger dataset create|add|list|show|diff`: versioned datasets (DESIGN §18).

A version is immutable and named by its content hash; `add` of content identical to the latest
version adds none. `show NAME@V` prints one version's items, `diff NAME@V1 NAME@V2` the keys of
the items added, removed and changed.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evaledger.api.cli.inputs import Commands
from evaledger.api.console import EXIT_OK, emit_json, print_table

if TYPE_CHECKING:
    from evaledger.api.bootstrap import Services
    from evaledger.projections.datasets import VersionRow


def register(commands: Commands) -> None:
    """Add dataset (create, add, list, show, diff)."""
    p = commands.subparsers.add_parser(
        "dataset", help="versioned datasets: create, add a version from a file, list, show, diff"
    )
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")

    def action(name: str, help_: str, *, reads: bool) -> argparse.ArgumentParser:
        a = actions.add_parser(name, parents=[commands.common], help=help_, description=help_)
        a.add_argument("--json", action="store_true", help="machine-readable output")
        a.set_defaults(func=cmd_dataset, reads=reads)
        return a

    a = action("create", "create an empty named dataset in --project", reads=False)
    a.add_argument("name", metavar="NAME", help="the dataset's name (no '@' or '/')")
    a.add_argument("--description", help="what the dataset is for (default: none)")
    a = action(
        "add",
        "add a version from a file (JSONL, JSON, CSV, YAML): none when identical to the latest",
        reads=False,
    )
    a.add_argument("name", metavar="NAME", help="the dataset's name")
    a.add_argument("file", type=Path, metavar="FILE", help="the items: .jsonl .json .csv .yaml")
    action("list", "the project's datasets with their latest version", reads=True)
    a = action("show", "one version's items (NAME@V; NAME alone: the latest)", reads=True)
    a.add_argument("ref", metavar="NAME[@V]", help="a dataset version")
    a = action("diff", "the items added, removed and changed between two versions", reads=True)
    a.add_argument("old", metavar="NAME@V1", help="the older version")
    a.add_argument("new", metavar="NAME@V2", help="the newer version")


def cmd_dataset(services: Services, args: argparse.Namespace) -> int:
    """Run one dataset action."""
    # lazy: the ledger and the dataset use cases, only for dataset commands
    from evaledger.application import datasets
    from evaledger.domain.ledger import Context  # lazy: with the line above

    ctx = Context(actor=args.actor)
    project: str = args.project
    if args.action == "create":
        made = datasets.create_dataset(services, project, args.name, args.description, ctx)
        text = f"{'created' if made.created else 'already there:'} dataset {made.name}"
        _say(args, {"project": project, "name": made.name, "created": made.created}, text)
    elif args.action == "add":
        w = datasets.add_dataset_file(services, project, args.name, args.file, ctx)
        ref = f"{args.name}@{w.version}"
        text = (
            f"added {ref}: {w.items} item(s), sha256 {w.content_hash}"
            if w.created
            else f"unchanged: {ref} has the same content (sha256 {w.content_hash})"
        )
        body = {"name": args.name, "version": w.version, "hash": w.content_hash}
        _say(args, {**body, "items": w.items, "created": w.created}, text)
    elif args.action == "list":
        services.sync()
        rows = datasets.list_datasets(services, project, ctx)
        if args.json:
            emit_json([_row(r) for r in rows])
        else:
            print_table(
                [
                    [r.name, r.latest_version, r.item_count, r.latest_hash or "", r.created_by]
                    for r in rows
                ],
                ["name", "version", "items", "sha256", "created by"],
            )
    elif args.action == "show":
        services.sync()
        _show(datasets.show_dataset(services, project, args.ref, ctx), as_json=args.json)
    else:
        services.sync()
        d = datasets.diff_datasets(services, project, args.old, args.new, ctx)
        body = {
            "old": {"name": d.old.name, "version": d.old.version, "hash": d.old.content_hash},
            "new": {"name": d.new.name, "version": d.new.version, "hash": d.new.content_hash},
            "added": list(d.items.added),
            "removed": list(d.items.removed),
            "changed": list(d.items.changed),
            "unchanged": d.items.unchanged,
        }
        if args.json:
            emit_json(body)
        else:
            print(f"{d.old.name}@{d.old.version} -> {d.new.name}@{d.new.version}")
            for mark, keys in (
                ("+", d.items.added),
                ("-", d.items.removed),
                ("~", d.items.changed),
            ):
                for key in keys:
                    print(f"{mark} {key}")
            print(
                f"{len(d.items.added)} added, {len(d.items.removed)} removed, "
                f"{len(d.items.changed)} changed, {d.items.unchanged} unchanged"
            )
    return EXIT_OK


def _say(args: argparse.Namespace, body: dict[str, Any], text: str) -> None:
    if args.json:
        emit_json(body)
    else:
        print(text)


def _row(r: Any) -> dict[str, Any]:
    return {
        "name": r.name,
        "description": r.description,
        "latest_version": r.latest_version,
        "hash": r.latest_hash,
        "items": r.item_count,
        "created_at": r.created_at,
        "created_by": r.created_by,
    }


def _show(v: VersionRow, *, as_json: bool) -> None:
    if as_json:
        emit_json(
            {
                "name": v.name,
                "version": v.version,
                "hash": v.content_hash,
                "source": v.source,
                "added_at": v.added_at,
                "added_by": v.added_by,
                "items": [i.model_dump(mode="json") for i in v.items],
            }
        )
        return
    print(f"{v.name}@{v.version}  sha256 {v.content_hash}  {len(v.items)} item(s)")
    print_table(
        [
            [
                i.key,
                "; ".join(i.expected_outcomes),
                "; ".join(i.tags),
                "" if i.label is None else ("pass" if i.label.passed else "fail"),
            ]
            for i in v.items
        ],
        ["key", "expected outcomes", "tags", "label"],
    )
