"""Judge rubrics as data (issue 22): criteria, steps, a scale with its mapping, examples, reply.

A rubric names the metric it judges. Its scale is binary, 0-5, 1-5, 0-10 or categorical; every
point of it maps to the ledger's 0-5 metric score (DESIGN §3.1), so case and run scoring are
unchanged. The judge answers on the rubric's own scale; the raw reply stays on the verdict, so the
same reply can be read again under another mapping (`rescore_reply`).

Rubrics come from a JSON/YAML file (`evaledger judge RUN --rubric FILE`) or from a registered
metric whose `rubric` text is a rubric document (`POST /config/metrics` with `judge_rubric`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

import orjson
from jinja2 import Environment, StrictUndefined
from pydantic import Field, model_validator
from pydantic import ValidationError as PydanticValidationError

from evaledger.domain.errors import ValidationError
from evaledger.domain.events import MetricScore, ParseStatus
from evaledger.domain.input_limits import load_yaml
from evaledger.domain.metrics import MetricDefinition, ScoreType
from evaledger.domain.model import FrozenModel
from evaledger.judging.prompt import (
    MAX_SCORE,
    BlockError,
    CaseToJudge,
    ParsedReply,
    RenderedPrompt,
    block_fields,
    guarded,
    load_reply,
    parse_outcomes,
    parse_score,
    render_user,
)
from evaledger.judging.prompt import output_schema as connexity_schema

RUBRIC_FORMAT: Literal["evaledger.rubric/1"] = "evaledger.rubric/1"
RUBRIC_TEMPLATE_ID = "evaledger-rubric/v1"


class ScaleKind(StrEnum):
    """The scale a judge answers on."""

    BINARY = "binary"
    ZERO_TO_FIVE = "0-5"
    ONE_TO_FIVE = "1-5"
    ZERO_TO_TEN = "0-10"
    CATEGORICAL = "categorical"


_RANGES: dict[ScaleKind, tuple[int, int]] = {
    ScaleKind.ZERO_TO_FIVE: (0, 5),
    ScaleKind.ONE_TO_FIVE: (1, 5),
    ScaleKind.ZERO_TO_TEN: (0, 10),
}


def _default_mapping(kind: ScaleKind) -> dict[str, int]:
    # 0-5 and 1-5 are read as they are; 0-10 is halved and truncated like any judge score (§3.1).
    if kind is ScaleKind.ZERO_TO_TEN:
        return {str(v): v // 2 for v in range(11)}
    if kind in _RANGES:
        low, high = _RANGES[kind]
        return {str(v): v for v in range(low, high + 1)}
    return {}


class Scale(FrozenModel):
    """What the judge answers and how each answer maps to the ledger's 0-5 score."""

    kind: ScaleKind = Field(description="binary, 0-5, 1-5, 0-10 or categorical.")
    mapping: dict[str, int] = Field(
        default_factory=dict,
        description="Answer → ledger score 0-5. Required for categorical (label → score); for a "
        "numeric scale it overrides the default (0-5, 1-5: as is; 0-10: halved, truncated).",
    )
    meanings: dict[str, str] = Field(
        default_factory=dict, description="What each answer means, shown to the judge."
    )

    @model_validator(mode="after")
    def _mapping_fits(self) -> Scale:
        if any(not 0 <= v <= MAX_SCORE for v in self.mapping.values()):
            raise ValueError(f"mapping: scores are on the ledger's 0-{MAX_SCORE} scale")
        if self.kind is ScaleKind.CATEGORICAL and len(self.mapping) < 2:
            raise ValueError("mapping: a categorical scale needs at least two labels")
        if self.kind in _RANGES:
            low, high = _RANGES[self.kind]
            allowed = {str(v) for v in range(low, high + 1)}
            if not set(self.mapping) <= allowed:
                raise ValueError(f"mapping: a {self.kind.value} scale maps the points {low}-{high}")
        if self.kind is ScaleKind.BINARY and self.mapping:
            raise ValueError("mapping: a binary scale is pass/fail (5/0); it takes no mapping")
        return self

    def score_of(self, answer: int | str) -> int:
        """The ledger score of an answer on this scale (numeric answers already clamped)."""
        mapping = {**_default_mapping(self.kind), **self.mapping}
        return mapping[str(answer)]

    def describe(self) -> str:
        """The scale as the judge reads it."""
        if self.kind is ScaleKind.BINARY:
            head = "Binary: `passed` true or false."
        elif self.kind is ScaleKind.CATEGORICAL:
            head = "Categorical: `label` one of " + ", ".join(f"`{k}`" for k in self.mapping) + "."
        else:
            low, high = _RANGES[self.kind]
            head = f"Integer `score` from {low} to {high}."
        lines = [f"- {k}: {v}" for k, v in self.meanings.items()]
        return "\n".join([head, *lines])


class RubricExample(FrozenModel):
    """A worked example shown to the judge (few-shot)."""

    transcript: str = Field(description="An excerpt, as the judge would read it.")
    answer: bool | int | str = Field(description="The answer on the rubric's scale.")
    justification: str = Field(description="Why that answer.")


class JudgeRubric(FrozenModel):
    """One metric's judge rubric: criteria, evaluation steps, scale, examples, reply format."""

    format: Literal["evaledger.rubric/1"] = RUBRIC_FORMAT
    metric: str = Field(pattern=r"^[a-z][a-z0-9_]{0,63}$", description="The metric it judges.")
    criteria: str = Field(min_length=1, description="What is judged (G-Eval: the criteria).")
    steps: list[str] = Field(
        default_factory=list, description="Evaluation steps the judge follows (G-Eval)."
    )
    scale: Scale
    examples: list[RubricExample] = Field(default_factory=list)
    reply_format: str | None = Field(
        default=None, description="How to write the justification (e.g. reason first, then score)."
    )

    @property
    def answer_key(self) -> str:
        """The reply field holding the answer: passed, score or label."""
        if self.scale.kind is ScaleKind.BINARY:
            return "passed"
        return "label" if self.scale.kind is ScaleKind.CATEGORICAL else "score"

    def canonical(self) -> str:
        """The rubric as canonical JSON (stored as a registered metric's rubric text, hashed).

        Fields in the model's order; a scale's labels and meanings in the author's order, which
        the prompt shows (an ordinal scale reads best to worst), so it is kept: two rubrics that
        differ only in that order render different prompts and get different hashes.
        """
        return orjson.dumps(self.model_dump(mode="json")).decode()


class RubricFile(FrozenModel):
    """A rubric file: one or more rubrics."""

    format: Literal["evaledger.rubric/1"] = RUBRIC_FORMAT
    rubrics: list[JudgeRubric] = Field(min_length=1)


def load_rubrics(path: Path) -> dict[str, JudgeRubric]:
    """Read a rubric file (JSON, or YAML by its suffix): metric id → rubric."""
    try:
        if path.suffix.lower() in (".yaml", ".yml"):
            # YAML as a rubric author means it: `yes`, `no`, `on`, `off` are labels, not
            # booleans (YAML 1.2), so a scale `{yes: 5, no: 0}` keeps its string labels.
            data = load_yaml(path, f"rubric: {path}", field="rubric", yaml_1_2=True)
        else:
            # utf-8-sig: a byte order mark (editors on Windows write one) is not part of the text.
            data = orjson.loads(path.read_text(encoding="utf-8-sig"))
    except ValidationError:
        raise
    except (OSError, ValueError) as e:
        raise ValidationError(f"rubric: cannot read {path}: {e}", field="rubric") from None
    if not isinstance(data, dict):
        raise ValidationError(
            f"rubric: {path}: expected a mapping with `format: {RUBRIC_FORMAT}` and `rubrics`, "
            f"got {'an empty file' if data is None else type(data).__name__}",
            field="rubric",
        )
    if "rubrics" not in data:
        data = {"rubrics": [data]}  # a file holding one rubric
    try:
        found = RubricFile.model_validate(data)
    except PydanticValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ValidationError(f"rubric: {path}: {where}: {first['msg']}", field="rubric") from None
    rubrics = {r.metric: r for r in found.rubrics}
    if len(rubrics) != len(found.rubrics):
        raise ValidationError(f"rubric: {path}: a metric has two rubrics", field="rubric")
    return rubrics


def rubric_of(definition: MetricDefinition) -> JudgeRubric | None:
    """The rubric a registered metric carries in its rubric text, if that text is one."""
    text = definition.rubric.lstrip()
    if not text.startswith("{") or RUBRIC_FORMAT not in text:
        return None
    try:
        return JudgeRubric.model_validate_json(text)
    except PydanticValidationError:
        return None


def default_rubric(definition: MetricDefinition) -> JudgeRubric:
    """A metric's own rubric text as a rubric (for metrics judged beside custom ones)."""
    kind = ScaleKind.BINARY if definition.score_type is ScoreType.BINARY else ScaleKind.ZERO_TO_FIVE
    return JudgeRubric(
        metric=definition.name,
        criteria=f"{definition.description}\n{definition.rubric}",
        scale=Scale(kind=kind),
    )


def check_rubric(definition: MetricDefinition, rubric: JudgeRubric, field: str = "rubric") -> None:
    """A binary metric needs a binary scale, a scored one any other (refused before any call).

    `field` names the input that carries the scale (`judge_rubric.scale` in an HTTP body).
    """
    binary_scale = rubric.scale.kind is ScaleKind.BINARY
    if binary_scale != (definition.score_type is ScoreType.BINARY):
        raise ValidationError(
            f"{field}: metric {definition.name} is {definition.score_type.value} but its "
            f"rubric's scale is {rubric.scale.kind.value}",
            field=field,
        )


# ---------------------------------------------------------------------------------------------
# Rendering

SYSTEM_TEMPLATE = """\
You are an expert evaluator of conversations between a user and an AI agent (chat or voice). \
You judge one completed transcript against the criteria below and return one JSON object.

## Metrics
{% for r in rubrics %}

### {{ r.display_name }} (`{{ r.metric }}`)
Criteria: {{ r.criteria }}
{% if r.steps %}
Evaluation steps:
{% for step in r.steps %}
{{ loop.index }}. {{ step }}
{% endfor %}
{% endif %}
Scale: {{ r.scale }}
{% for ex in r.examples %}
Example {{ loop.index }}:
{{ ex.transcript }}
→ {{ ex.answer }} ({{ ex.justification }})
{% endfor %}
{% if r.reply_format %}
Reply: {{ r.reply_format }}
{% endif %}
{% endfor %}

## Output format
Return only a JSON object, no prose around it, with one key per metric id above\
{% if outcomes %} and the key `expected_outcomes`{% endif %}. Each metric is an object with its \
answer (`passed`, `score` or `label` as its scale says), `justification` (the evidence, with \
turn indices), `failure_code` (a snake_case failure mode, or null) and `turns` (the turn indices \
of the issue):
{{ example }}
"""

_ENV = Environment(
    undefined=StrictUndefined,
    keep_trailing_newline=True,
    trim_blocks=True,
    autoescape=False,  # noqa: S701 (plain text for a model, not HTML)
)
_SYSTEM = _ENV.from_string(SYSTEM_TEMPLATE)


def template_hash(rubrics: Sequence[JudgeRubric]) -> str:
    """Hash of the template text and the rubrics it was filled with: any edit changes it."""
    text = "\n".join([RUBRIC_TEMPLATE_ID, SYSTEM_TEMPLATE, *(r.canonical() for r in rubrics)])
    return hashlib.sha256(text.encode()).hexdigest()


def _answer_schema(rubric: JudgeRubric) -> dict[str, Any]:
    if rubric.scale.kind is ScaleKind.BINARY:
        return {"type": "boolean"}
    if rubric.scale.kind is ScaleKind.CATEGORICAL:
        return {"type": "string", "enum": list(rubric.scale.mapping)}
    return {"type": "integer"}


def output_schema(rubrics: Sequence[JudgeRubric], with_outcomes: bool) -> dict[str, Any]:
    """The strict reply schema: one object per metric with its scale's answer field."""
    properties: dict[str, Any] = {}
    for r in rubrics:
        properties[r.metric] = {
            "type": "object",
            "properties": {
                r.answer_key: _answer_schema(r),
                "justification": {"type": "string"},
                "failure_code": {"type": ["string", "null"]},
                "turns": {"type": "array", "items": {"type": "integer"}},
            },
            "required": [r.answer_key, "justification", "failure_code", "turns"],
            "additionalProperties": False,
        }
    if with_outcomes:
        properties["expected_outcomes"] = connexity_schema([], True)["properties"][
            "expected_outcomes"
        ]
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


def _example_answer(rubric: JudgeRubric) -> bool | int | str:
    if rubric.scale.kind is ScaleKind.BINARY:
        return True
    if rubric.scale.kind is ScaleKind.CATEGORICAL:
        return next(iter(rubric.scale.mapping))
    return _RANGES[rubric.scale.kind][1]


def render_with_rubrics(
    case: CaseToJudge, metrics: Sequence[MetricDefinition], rubrics: Mapping[str, JudgeRubric]
) -> RenderedPrompt:
    """The prompt of a case judged by rubrics (metrics without one use their own rubric text)."""
    used = [rubrics.get(m.name) or default_rubric(m) for m in metrics]
    outcomes = tuple(o.statement for o in case.test_case.expected_outcomes)
    example: dict[str, Any] = {
        r.metric: {
            r.answer_key: _example_answer(r),
            "justification": "…",
            "failure_code": None,
            "turns": [],
        }
        for r in used
    }
    if outcomes:
        example["expected_outcomes"] = [{"statement": "…", "passed": True, "justification": "…"}]
    system = _SYSTEM.render(
        rubrics=[
            {
                "metric": r.metric,
                "display_name": m.display_name,
                "criteria": r.criteria,
                "steps": r.steps,
                "scale": r.scale.describe(),
                "examples": r.examples,
                "reply_format": r.reply_format,
            }
            for m, r in zip(metrics, used, strict=True)
        ],
        outcomes=bool(outcomes),
        example=orjson.dumps(example, option=orjson.OPT_INDENT_2).decode(),
    )
    return RenderedPrompt(
        system=system,
        user=render_user(case, metrics),
        schema=output_schema(used, bool(outcomes)),
        metrics=tuple(metrics),
        outcomes=outcomes,
        template_id=RUBRIC_TEMPLATE_ID,
        template_hash=template_hash(used),
    )


# ---------------------------------------------------------------------------------------------
# Parsing and rescoring


def _answer(block: Mapping[str, Any], rubric: JudgeRubric) -> dict[str, Any]:
    """The block's answer as MetricScore fields: passed, or the mapped 0-5 score."""
    value = block.get(rubric.answer_key)
    kind = rubric.scale.kind
    if kind is ScaleKind.BINARY:
        if not isinstance(value, bool):
            raise BlockError(f"metric {rubric.metric}: passed {value!r} is not true or false")
        return {"passed": value}
    if kind is ScaleKind.CATEGORICAL:
        if not isinstance(value, str) or value not in rubric.scale.mapping:
            raise BlockError(
                f"metric {rubric.metric}: label {value!r} is not one of "
                + ", ".join(rubric.scale.mapping)
            )
        return {"score": rubric.scale.score_of(value)}
    low, high = _RANGES[kind]
    return {"score": rubric.scale.score_of(parse_score(value, rubric.metric, low, high))}


def parse_rubric_reply(
    raw: str,
    prompt: RenderedPrompt,
    rubrics: Mapping[str, JudgeRubric],
    turn_count: int,
) -> ParsedReply:
    """Parse a reply to a rubric prompt: each answer read on its scale and mapped to 0-5."""
    data = load_reply(raw)
    if isinstance(data, ParsedReply):
        return data

    def read() -> ParsedReply:
        scores = []
        for m in prompt.metrics:
            rubric = rubrics.get(m.name) or default_rubric(m)
            block = data.get(m.name)
            if not isinstance(block, Mapping):
                raise BlockError(f"missing metric block {m.name}")
            scores.append(
                MetricScore(**block_fields(block, m.name, turn_count), **_answer(block, rubric))
            )
        outcomes = (
            parse_outcomes(data.get("expected_outcomes"), prompt.outcomes)
            if prompt.outcomes
            else []
        )
        return ParsedReply(ParseStatus.PARSED, metric_scores=scores, expected_outcomes=outcomes)

    return guarded(read)


def rescore_reply(
    raw: str,
    metrics: Sequence[MetricDefinition],
    rubrics: Mapping[str, JudgeRubric],
    outcomes: Sequence[str] = (),
    turn_count: int = 0,
) -> ParsedReply:
    """Read a stored raw reply again under (possibly other) rubrics: a new mapping, new scores.

    The verdict's reply is kept verbatim, so a changed mapping needs no new judge call.
    """
    prompt = RenderedPrompt(
        system="",
        user="",
        schema={},
        metrics=tuple(metrics),
        outcomes=tuple(outcomes),
        template_id=RUBRIC_TEMPLATE_ID,
        template_hash="",
    )
    return parse_rubric_reply(raw, prompt, rubrics, turn_count)
