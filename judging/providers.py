"""Judge providers: OpenAI-compatible chat completions, Anthropic messages, and replay.

The two network providers go through the official SDKs (`openai`, `anthropic`) with their own
timeout and retry machinery (exponential backoff on 408/409/429/5xx and connection errors,
`retry-after` honoured). The SDKs are imported when a provider is made: they take seconds to
import, and every CLI command would pay for it otherwise. Keys and base URLs come from the
environment and are never stored.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any, Protocol

import orjson

from evaledger.domain.errors import EvaledgerError, ValidationError
from evaledger.judging.prompt import RenderedPrompt

PROVIDERS = ("openai", "anthropic", "replay")
VENDOR_ALIASES = {"azure": "openai", "azure_openai": "openai", "gemini": "google"}
DEFAULT_MODELS = {"openai": "gpt-4.1", "anthropic": "claude-sonnet-4-6"}
KEY_VARS = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
BASE_URL_VARS = {"openai": "OPENAI_BASE_URL", "anthropic": "ANTHROPIC_BASE_URL"}
REPLAY_FORMAT = "evaledger.judge-replies/1"

# USD per million tokens (input, output), list prices when written; override with a JSON file
# named by EVALEDGER_JUDGE_PRICES ({"model": [input, output], ...}). A model matches its own
# entry or the longest entry it starts with (dated snapshots); unknown models cost null.
DEFAULT_PRICES: dict[str, tuple[float, float]] = {
    "gpt-4.1": (2.0, 8.0),
    "gpt-4.1-mini": (0.4, 1.6),
    "gpt-4.1-nano": (0.1, 0.4),
    "gpt-4o": (2.5, 10.0),
    "gpt-4o-mini": (0.15, 0.6),
    "claude-sonnet-4-5": (3.0, 15.0),
    "claude-sonnet-4-6": (3.0, 15.0),
    "claude-haiku-4-5": (1.0, 5.0),
    "claude-opus-4-1": (15.0, 75.0),
}


@dataclass(frozen=True)
class JudgeRef:
    """`PROVIDER:MODEL` as given on the command line."""

    provider: str
    model: str

    @property
    def label(self) -> str:
        """`provider:model`."""
        return f"{self.provider}:{self.model}"

    @classmethod
    def parse(cls, text: str, where: str = "judge") -> JudgeRef:
        """Parse `PROVIDER:MODEL`; an unknown provider is an input error naming the field."""
        provider, sep, model = text.partition(":")
        if provider not in PROVIDERS:
            raise ValidationError(
                f"{where}: unknown provider {provider!r} in {text!r} "
                f"(expected one of {', '.join(PROVIDERS)}, as PROVIDER:MODEL)",
                field=where,
            )
        if not sep or not model.strip():
            raise ValidationError(f"{where}: {text!r} names no model (PROVIDER:MODEL)", field=where)
        return cls(provider, model.strip())


def vendor_of(provider: str | None, model: str | None) -> str | None:
    """Who made the model: an aggregator's slug prefix (`anthropic/claude…`), else the provider.

    Aliases: azure → openai, gemini → google (DESIGN §10).
    """
    if model and "/" in model:
        prefix = model.split("/", 1)[0].lower()
        return VENDOR_ALIASES.get(prefix, prefix)
    if not provider:
        return None
    p = provider.lower()
    return VENDOR_ALIASES.get(p, p)


@dataclass(frozen=True)
class Completion:
    """One judge reply: the text verbatim, usage, and the model version that answered."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    model_version: str | None
    latency_ms: float


class ProviderError(Exception):
    """The call failed after the SDK's retries (timeout, 429, 5xx, connection): an error verdict.

    `timed_out`: no answer within the timeout; `reached`: the provider answered over HTTP (a
    5xx did, a refused connection or a timeout did not).
    """

    def __init__(self, message: str, *, reached: bool = True, timed_out: bool = False) -> None:
        super().__init__(message)
        self.reached = reached
        self.timed_out = timed_out


class RateLimitedError(ProviderError):
    """HTTP 429 after the SDK's own retries: the runner waits `retry_after_s` and asks again."""

    def __init__(self, message: str, retry_after_s: float | None) -> None:
        super().__init__(message, reached=True)
        self.retry_after_s = retry_after_s


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds a 429 asks to wait: `retry-after-ms`, else `retry-after` (seconds or HTTP date)."""
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass

    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _status_error(status: int, message: str, headers: Mapping[str, str]) -> ProviderError:
    if status == 429:
        return RateLimitedError(f"HTTP 429: {_message(message)}", retry_after(headers))
    return ProviderError(f"HTTP {status}: {_message(message)}")


class ProviderRefusedError(EvaledgerError):
    """The provider refused the request itself (bad key, unknown model, bad request): stop.

    A configuration problem of the judging pass (exit 2), not a verdict about a transcript.
    """

    code = "judge_refused"


class Provider(Protocol):
    """What the runner needs of a judge."""

    ref: JudgeRef
    vendor: str | None
    sends_temperature: bool

    async def complete(self, prompt: RenderedPrompt, params: Mapping[str, Any]) -> Completion:
        """Ask the judge; raise ProviderError on a failed call."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...


def _key(provider: str, env: Mapping[str, str]) -> str:
    key = env.get(KEY_VARS[provider], "")
    if not key:
        raise ValidationError(
            f"judge: {KEY_VARS[provider]} is not set, so {provider} cannot judge",
            field="judge",
        )
    return key


def _message(message: str) -> str:
    # The SDKs prefix "Error code: 401 - " to the server's message; the status is given apart.
    return re.sub(r"^Error code: \d+ - ", "", message)


def _refused(ref: JudgeRef, status: int, message: str) -> ProviderRefusedError:
    return ProviderRefusedError(
        f"judge {ref.label} refused the request: {status} {_message(message)}"
    )


@contextmanager
def _sdk_errors(sdk: Any, ref: JudgeRef) -> Iterator[None]:
    """The provider SDKs' errors (OpenAI's and Anthropic's share one hierarchy) as ours."""
    try:
        yield
    except sdk.APIStatusError as e:
        if e.status_code in (400, 401, 403, 404, 422):
            raise _refused(ref, e.status_code, e.message) from None
        raise _status_error(e.status_code, e.message, e.response.headers) from None
    except sdk.APITimeoutError:
        raise ProviderError("timed out", reached=False, timed_out=True) from None
    except sdk.APIConnectionError as e:
        # "Connection error." alone does not say where: name the URL and the socket's reason.
        url = getattr(getattr(e, "request", None), "url", None)
        cause = f": {e.__cause__}" if e.__cause__ is not None and str(e.__cause__) else ""
        where = f" ({url}{cause})" if url is not None else ""
        raise ProviderError(f"{e.message}{where}", reached=False) from None
    except sdk.APIError as e:
        raise ProviderError(e.message) from None


class OpenAIJudge:
    """OpenAI-compatible chat completions with strict JSON-schema structured output."""

    sends_temperature = True

    def __init__(
        self, ref: JudgeRef, env: Mapping[str, str], timeout: float, max_retries: int
    ) -> None:
        import openai  # lazy: the OpenAI SDK (httpx, its models), only when a judge calls it

        self.ref = ref
        self.vendor = vendor_of(ref.provider, ref.model)
        self.client = openai.AsyncOpenAI(
            api_key=_key("openai", env),
            base_url=env.get(BASE_URL_VARS["openai"]) or None,
            timeout=timeout,
            max_retries=max_retries,
        )

    async def complete(self, prompt: RenderedPrompt, params: Mapping[str, Any]) -> Completion:
        """One chat completion."""
        import openai  # lazy: the OpenAI SDK (httpx, its models), only when a judge calls it

        started = time.perf_counter()
        with _sdk_errors(openai, self.ref):
            response = await self.client.chat.completions.create(
                model=self.ref.model,
                messages=[
                    {"role": "system", "content": prompt.system},
                    {"role": "user", "content": prompt.user},
                ],
                temperature=params["temperature"],
                max_completion_tokens=params["max_tokens"],
                response_format={
                    "type": "json_schema",
                    "json_schema": {
                        "name": "judge_verdict",
                        "schema": prompt.schema,
                        "strict": True,
                    },
                },
            )
        message = response.choices[0].message if response.choices else None
        text = (message.content or message.refusal or "") if message is not None else ""
        usage = response.usage
        return Completion(
            text=text,
            prompt_tokens=usage.prompt_tokens if usage else 0,
            completion_tokens=usage.completion_tokens if usage else 0,
            model_version=response.model,
            latency_ms=(time.perf_counter() - started) * 1000,
        )

    async def close(self) -> None:
        """Release connections."""
        await self.client.close()


class AnthropicJudge:
    """Anthropic messages with native structured output (`output_config.format` JSON schema).

    The reply is the JSON text of the message's text blocks; a forced tool call would work too,
    but structured output keeps one parsing path for both providers (docs/decisions.md). The
    Messages API of this SDK generation takes no sampling temperature, so none is sent.
    """

    sends_temperature = False

    def __init__(
        self, ref: JudgeRef, env: Mapping[str, str], timeout: float, max_retries: int
    ) -> None:
        import anthropic  # lazy: the Anthropic SDK (httpx, its models), only when it calls

        self.ref = ref
        self.vendor = vendor_of(ref.provider, ref.model)
        self.client = anthropic.AsyncAnthropic(
            api_key=_key("anthropic", env),
            base_url=env.get(BASE_URL_VARS["anthropic"]) or None,
            timeout=timeout,
            max_retries=max_retries,
        )

    async def complete(self, prompt: RenderedPrompt, params: Mapping[str, Any]) -> Completion:
        """One message."""
        import anthropic  # lazy: the Anthropic SDK (httpx, its models), only when it calls

        started = time.perf_counter()
        with _sdk_errors(anthropic, self.ref):
            response = await self.client.messages.create(
                model=self.ref.model,
                max_tokens=params["max_tokens"],
                system=prompt.system,
                messages=[{"role": "user", "content": prompt.user}],
                output_config={"format": {"type": "json_schema", "schema": prompt.schema}},
            )
        text = "".join(getattr(block, "text", "") for block in response.content)
        return Completion(
            text=text,
            prompt_tokens=response.usage.input_tokens,
            completion_tokens=response.usage.output_tokens,
            model_version=response.model,
            latency_ms=(time.perf_counter() - started) * 1000,
        )

    async def close(self) -> None:
        """Release connections."""
        await self.client.close()


@dataclass
class ReplayJudge:
    """Answers from recorded replies (offline demo and tests).

    Replies are keyed `test_case_key#repetition`, or `test_case_key` for every repetition.

    The file (`evaledger.judge-replies/1`) names the judge that gave the replies; a case without a
    recorded reply gets a provider error verdict, like a judge that did not answer.
    """

    ref: JudgeRef
    replies: dict[str, dict[str, Any]]
    recorded_judge: str
    vendor: str | None = None
    sends_temperature = False

    @classmethod
    def load(cls, ref: JudgeRef) -> ReplayJudge:
        """Read the replies file named by the model part of `replay:PATH`."""
        path = Path(ref.model)
        try:
            data = orjson.loads(path.read_bytes())
        except (OSError, orjson.JSONDecodeError) as e:
            raise ValidationError(
                f"judge: cannot read replies file {path}: {e}", field="judge"
            ) from None
        if not isinstance(data, dict) or data.get("format") != REPLAY_FORMAT:
            raise ValidationError(
                f"judge: {path} is not a replies file (format {REPLAY_FORMAT!r})", field="judge"
            )
        recorded = str(data.get("judge", "replay:unknown"))
        provider, _, model = recorded.partition(":")
        return cls(
            ref=ref,
            replies=dict(data.get("replies", {})),
            recorded_judge=recorded,
            vendor=vendor_of(provider, model),
        )

    async def complete(self, prompt: RenderedPrompt, params: Mapping[str, Any]) -> Completion:
        """The recorded reply of the case being judged."""
        key = params.get("case_key", "")
        reply = self.replies.get(f"{key}#{params.get('repetition', 0)}") or self.replies.get(key)
        if reply is None:
            raise ProviderError(f"no recorded reply for test case {key!r}")
        usage = reply.get("usage", {})
        return Completion(
            text=str(reply["text"]),
            prompt_tokens=int(usage.get("prompt_tokens", 0)),
            completion_tokens=int(usage.get("completion_tokens", 0)),
            model_version=self.recorded_judge,
            latency_ms=0.0,
        )

    async def close(self) -> None:
        """Nothing to release."""


def make_provider(
    ref: JudgeRef, env: Mapping[str, str], timeout: float, max_retries: int
) -> Provider:
    """The provider for a judge reference (keys checked here, before any call)."""
    if ref.provider == "openai":
        return OpenAIJudge(ref, env, timeout, max_retries)
    if ref.provider == "anthropic":
        return AnthropicJudge(ref, env, timeout, max_retries)
    return ReplayJudge.load(ref)


def default_judges(env: Mapping[str, str], configured: JudgeRef | None) -> list[JudgeRef]:
    """Candidate judges in pairing order: the run config's judge, then each keyed provider."""
    found: list[JudgeRef] = []
    if configured is not None and env.get(KEY_VARS.get(configured.provider, ""), ""):
        found.append(configured)
    for provider, var in KEY_VARS.items():
        if env.get(var):
            model = env.get(f"EVALEDGER_{provider.upper()}_JUDGE_MODEL") or DEFAULT_MODELS[provider]
            found.append(JudgeRef(provider, model))
    return found


# ---------------------------------------------------------------------------------------------
# Prices


def load_prices(env: Mapping[str, str]) -> dict[str, tuple[float, float]]:
    """The price table: defaults, overridden by the JSON file named by EVALEDGER_JUDGE_PRICES."""
    prices = dict(DEFAULT_PRICES)
    path = env.get("EVALEDGER_JUDGE_PRICES")
    if not path:
        return prices
    try:
        data = orjson.loads(Path(path).read_bytes())
        for model, pair in data.items():
            inp, out = pair
            prices[str(model)] = (float(inp), float(out))
    except (OSError, orjson.JSONDecodeError, TypeError, ValueError, AttributeError) as e:
        raise ValidationError(
            f"EVALEDGER_JUDGE_PRICES: {path}: expected {{model: [input, output]}} USD per "
            f"million tokens ({e})",
            field="EVALEDGER_JUDGE_PRICES",
        ) from None
    return prices


def cost_usd(
    prices: Mapping[str, tuple[float, float]], model: str, prompt_tokens: int, completion: int
) -> float | None:
    """Cost of one call from its usage; None when the model has no price."""
    bare = model.split("/", 1)[-1]
    match = prices.get(bare) or next(
        (prices[k] for k in sorted(prices, key=len, reverse=True) if bare.startswith(k)), None
    )
    if match is None:
        return None
    return (prompt_tokens * match[0] + completion * match[1]) / 1_000_000


def environment() -> dict[str, str]:
    """The process environment (keys are read from here and never stored)."""
    return dict(os.environ)
