"""Cost control: estimated tokens and cost of a judge call, and the `--max-cost` guard.

Input tokens are estimated from the rendered prompt and reply schema at ~4 characters a token;
output tokens from the reply's shape (a block per metric, a line per expected outcome), capped by
`max_tokens`. Both are estimates: tokenizers differ, judges write more or less.
"""

from __future__ import annotations

import asyncio
import math
from typing import NamedTuple

import orjson

from evaledger.judging.prompt import RenderedPrompt

CHARS_PER_TOKEN = 4
OUTPUT_TOKENS_PER_METRIC = 80
"""A metric block: the answer, one or two sentences of justification, a code, turn indices."""
OUTPUT_TOKENS_PER_OUTCOME = 50
OUTPUT_TOKENS_BASE = 20


class TokenEstimate(NamedTuple):
    """Estimated tokens of one call."""

    prompt_tokens: int
    completion_tokens: int


def estimate_tokens(prompt: RenderedPrompt, max_tokens: int) -> TokenEstimate:
    """Estimated input and output tokens of one call (a claim check: output as one metric)."""
    chars = len(prompt.system) + len(prompt.user) + len(orjson.dumps(prompt.schema))
    blocks = max(1, len(prompt.metrics))
    output = (
        OUTPUT_TOKENS_BASE
        + OUTPUT_TOKENS_PER_METRIC * blocks
        + OUTPUT_TOKENS_PER_OUTCOME * len(prompt.outcomes)
    )
    return TokenEstimate(math.ceil(chars / CHARS_PER_TOKEN), min(output, max_tokens))


class Budget:
    """Holds a pass under `limit` USD (`--max-cost`).

    A call starts only if what was spent, what calls in flight are expected to cost, and its own
    estimate stay within the limit.

    A call that does not fit waits for calls in flight to settle (their actual cost may be lower
    than estimated); when none is in flight and it still does not fit, the pass stops.
    """

    def __init__(self, limit: float) -> None:
        self.limit = limit
        self.spent = 0.0
        self.reserved = 0.0
        self.stopped = False
        self._changed = asyncio.Condition()

    async def reserve(self, estimate: float) -> bool:
        """Reserve a call's estimated cost; False when the budget does not allow it."""
        async with self._changed:
            while not self.stopped:
                if self.spent + self.reserved + estimate <= self.limit:
                    self.reserved += estimate
                    return True
                if self.reserved == 0:
                    self.stopped = True
                    break
                await self._changed.wait()
            return False

    async def settle(self, estimate: float, actual: float | None) -> None:
        """Replace a reservation by the call's actual cost (its estimate when it has none)."""
        async with self._changed:
            self.reserved = max(0.0, self.reserved - estimate)
            self.spent += estimate if actual is None else actual
            self._changed.notify_all()
