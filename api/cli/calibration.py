"""`evaledger calibrate` and `evaledger calibrations`: judges calibrated on gold sets (DESIGN §18).

`calibrate --judge PROVIDER:MODEL --gold NAME@V --from-run RUN` pairs the judge's stored
verdicts of a run whose cases are the gold items (by key) with their human labels and records
κ, TPR, TNR and accuracy with 95 % intervals at the template hash the verdicts carry.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evaledger.api.cli.inputs import RUN_HELP, Commands, resolve_run
from evaledger.api.console import EXIT_OK, Progress, UsageError, emit_json, print_table

if TYPE_CHECKING:
    from evaledger.api.bootstrap import Services
    from evaledger.application.calibration import Calibration
    from evaledger.domain.events import Estimate
    from evaledger.domain.ledger import Context


def register(commands: Commands) -> None:
    """Add calibrate and calibrations."""
    p = commands.add(
        "calibrate",
        cmd_calibrate,
        "calibrate a judge on a gold set (a dataset version with human labels)",
        reads=True,
    )
    p.add_argument("--judge", required=True, metavar="PROVIDER:MODEL", help="the judge")
    p.add_argument("--gold", required=True, metavar="NAME@V", help="the gold set's version")
    p.add_argument(
        "--from-run",
        metavar="RUN",
        help="re-read the judge's stored verdicts of this run's gold items (" + RUN_HELP + "); "
        "default: call the judge on the newest run of the gold version, on the cases it has "
        "not judged",
    )
    p.add_argument(
        "--rubric",
        metavar="FILE",
        help="the rubric file the judge runs (or ran) with (default: none)",
    )
    commands.add(
        "calibrations", cmd_calibrations, "list the project's judge calibrations", reads=True
    )


def _rubric_hash(path: str | None) -> str | None:
    if path is None:
        return None
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError as e:
        raise UsageError(f"rubric: {path}: {e.strerror}", field="rubric") from None


def cmd_calibrate(services: Services, args: argparse.Namespace) -> int:
    """Record a calibration of the judge on the gold set."""
    # lazy: the calibration use cases load the ledger, the projections and numpy
    from evaledger.application.calibration import calibrate_judge
    from evaledger.domain.ledger import Context  # lazy: with the line above

    rubric = _rubric_hash(args.rubric)
    ctx = Context(actor=args.actor)
    services.sync()
    if args.from_run is None:
        judged = _by_judging(services, args, rubric, ctx)
        if isinstance(judged, int):
            return judged
        c = judged
    else:
        run_id = resolve_run(services, args.from_run, args.project)
        c = calibrate_judge(services, args.project, args.judge, args.gold, run_id, rubric, ctx)
    if args.json:
        emit_json(_json(c))
        return EXIT_OK
    print(
        f"calibrated {c.judge} at template {c.template_hash[:12]} on "
        f"{c.gold.name}@{c.gold.version} (n={c.n})"
    )
    for name, e in (("kappa", c.kappa), ("TPR", c.tpr), ("TNR", c.tnr), ("accuracy", c.accuracy)):
        print(f"  {name}: {_shown(e)}")
    return EXIT_OK


def _by_judging(
    services: Services, args: argparse.Namespace, rubric: str | None, ctx: Context
) -> Calibration | int:
    """Call the judge on the gold items, then calibrate it (progress on a TTY).

    An incomplete pass records no calibration: its exit code (1 or 3) is returned.
    """
    # lazy: the judging use cases load the runner, jinja2 and the prompt templates
    from evaledger.application.calibration import calibrate_by_judging
    from evaledger.judging.rubric import load_rubrics  # lazy: jinja2, yaml, the rubrics

    rubrics = tuple(load_rubrics(Path(args.rubric)).values()) if args.rubric else ()
    progress = Progress("judging gold items")
    try:
        made = calibrate_by_judging(
            services, args.project, args.judge, args.gold, rubrics, rubric, ctx, progress
        )
    finally:
        progress.done()
    r = made.report
    print(
        f"judged {r.cases} case(s) of the gold run: {r.verdicts} verdict(s), {r.errors} error(s)",
        file=sys.stderr,
    )
    if made.calibration is None:
        print("the pass was not complete: no calibration recorded", file=sys.stderr)
        return r.exit_code()
    return made.calibration


def cmd_calibrations(services: Services, args: argparse.Namespace) -> int:
    """List the project's calibrations, oldest first."""
    # lazy: the calibration use cases load the ledger, the projections and numpy
    from evaledger.application.calibration import list_calibrations
    from evaledger.domain.ledger import Context  # lazy: with the line above

    rows = list_calibrations(services, args.project, Context(actor=args.actor))
    if args.json:
        emit_json([_json(c) for c in rows])
        return EXIT_OK
    print_table(
        [
            [
                c.judge,
                c.template_hash[:12],
                f"{c.gold.name}@{c.gold.version}",
                c.n,
                _shown(c.kappa),
                _shown(c.tpr),
                _shown(c.tnr),
                c.actor,
            ]
            for c in rows
        ],
        ["judge", "template", "gold", "n", "kappa", "TPR", "TNR", "by"],
    )
    return EXIT_OK


def _shown(e: Estimate) -> str:
    if e.value is None:
        return "undefined"
    if e.low is None or e.high is None:
        return f"{e.value:.3f}"
    return f"{e.value:.3f} [{e.low:.3f}, {e.high:.3f}]"


def _json(c: Calibration) -> dict[str, Any]:
    body = c.model_dump(mode="json", exclude={"originator_id", "originator_version"})
    return {"calibration_id": str(c.originator_id), **body}
