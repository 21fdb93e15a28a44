"""Open files as imports (`--from`, auto-detection) and write them through the ledger."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import orjson

from evaledger.domain.bundle import BUNDLE_FORMAT, RunBundle
from evaledger.domain.importing import IMPORT_CHUNK, ImportResult
from evaledger.domain.ledger import Context, Ledger
from evaledger.importers.base import Format, ImportFormatError, PeerImport, fail
from evaledger.importers.bundle import open_bundle
from evaledger.importers.connexity import is_test_case, open_connexity
from evaledger.importers.detect import detect
from evaledger.importers.lm_eval import group_files, open_lm_eval
from evaledger.importers.openai_evals import open_openai_evals
from evaledger.importers.promptfoo import is_rows_jsonl, open_promptfoo
from evaledger.importers.promptfoo_rows import is_promptfoo_csv, open_csv, open_jsonl
from evaledger.importers.tau2 import open_tau2
from evaledger.importers.tau_bench import open_tau_bench

Progress = Callable[[int, int], None]
FORMATS = ("auto", *(f.value for f in Format))
ONE_TRANSACTION = 2 * IMPORT_CHUNK
"""Bundles of at most this many cases import in one transaction (atomic: a kill stores nothing;
held whole, they peak under 200 MB); larger ones are streamed in chunks and resume."""


def _open_inspect(path: Path) -> PeerImport:
    # lazy: inspect_ai takes seconds to import; only an Inspect log needs it.
    from evaledger.importers.inspect import open_inspect

    return open_inspect(path)


def open_promptfoo_file(path: Path) -> PeerImport:
    """The run of one promptfoo output file: CSV, JSONL or JSON / YAML (`-o out.json`)."""
    if is_promptfoo_csv(path):
        return open_csv(path)
    if is_rows_jsonl(path):
        return open_jsonl(path)
    return open_promptfoo(path)


_OPENERS: dict[Format, Callable[[Path], PeerImport]] = {
    Format.BUNDLE: open_bundle,
    Format.INSPECT: _open_inspect,
    Format.PROMPTFOO: open_promptfoo_file,
    Format.TAU_BENCH: open_tau_bench,
    Format.TAU2: open_tau2,
    Format.LM_EVAL: open_lm_eval,
    Format.OPENAI_EVALS: open_openai_evals,
}


def _connexity_test_case(path: Path) -> bool:
    try:
        return is_test_case(orjson.loads(path.read_bytes()))
    except (OSError, orjson.JSONDecodeError):
        return False


def open_imports(
    paths: Sequence[str | Path],
    fmt: str = "auto",
    *,
    run_key: str | None = None,
    project: str | None = None,
) -> list[PeerImport]:
    """One import per run file (Connexity test-case files join their run file's import).

    Every file is opened (its header read and checked) before anything is imported, so a bad
    file among several stores nothing.
    """
    if fmt not in FORMATS:
        raise fail("--from", f"unknown format {fmt!r} (one of {', '.join(FORMATS)})", "from")
    imports: list[PeerImport] = []
    connexity_runs: list[Path] = []
    lm_eval_files: list[Path] = []
    test_cases: list[Path] = []
    for path in (Path(p) for p in paths):
        try:
            found = Format.BUNDLE if str(path) == "-" else detect(path)
        except ImportFormatError:
            # A test case is not a run: it joins the Connexity run file given with it.
            if not _connexity_test_case(path):
                raise
            found = Format.CONNEXITY
            test_cases.append(path)
        if fmt != "auto" and found.value != fmt:
            raise fail(
                path, f"detected {found.value} output, not {fmt} (use --from {found.value})", "from"
            )
        if path in test_cases:
            continue
        if found is Format.CONNEXITY:
            connexity_runs.append(path)
        elif found is Format.LM_EVAL:
            lm_eval_files.append(path)
        else:
            imports.append(_OPENERS[found](path))
    if test_cases and len(connexity_runs) != 1:
        raise fail(
            test_cases[0],
            "Connexity test-case files name the cases of a run: give exactly one Connexity "
            f"run file with them (got {len(connexity_runs)})",
        )
    for path in connexity_runs:
        imports.append(open_connexity(path, test_cases))
    # A results JSON and its samples files are one run, opened once, by its results.
    for results, samples in group_files(lm_eval_files):
        imports.append(open_lm_eval(results, samples))
    if run_key is not None:
        if len(imports) != 1:
            raise fail(
                "--run-key", f"names one run, but {len(imports)} runs are imported", "run_key"
            )
        imports = [imports[0].with_run(key=run_key)]
    if project is not None:
        imports = [i.with_run(project=project) for i in imports]
    return imports


@dataclass(frozen=True)
class Imported:
    """One import's outcome."""

    source: PeerImport
    result: ImportResult


def import_all(
    ledger: Ledger,
    imports: Sequence[PeerImport],
    ctx: Context,
    progress: Progress | None = None,
) -> list[Imported]:
    """Write each import streamed: chunked transactions inside one run lifecycle, sealed last.

    A bundle of at most `ONE_TRANSACTION` cases is imported in one transaction (atomic, as
    `POST /bundles` does): its cases fit in memory, and the whole run commits at once or not at
    all. A larger one is chunked: an interrupted import leaves an open run that the same import
    run again completes.
    """
    done = []
    for i in imports:
        if i.format is Format.BUNDLE and i.count is not None and i.count <= ONE_TRANSACTION:
            bundle = RunBundle(format=BUNDLE_FORMAT, run=i.run, cases=list(i.cases()))
            done.append(Imported(i, ledger.import_bundle(bundle, ctx)))
            if progress is not None:
                progress(len(bundle.cases), len(bundle.cases))
        else:
            done.append(Imported(i, ledger.import_stream(i.run, i.cases, ctx, progress=progress)))
    return done
