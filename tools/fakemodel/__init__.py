"""A local fake of Anthropic's and OpenAI's model APIs, for tests and benchmarks.

Speaks Anthropic Messages (streaming and not, count_tokens), OpenAI Responses and
Chat Completions (streaming and not) well enough for the official SDKs pointed at
it, with scripted or rule-based replies, injected latency and failures, a model of
Anthropic's prompt cache beside a perfect prefix cache, and a record of every
request. Tokens are counted as ceil(UTF-8 bytes / 4) per block.

    with FakeModelServer() as server:
        server.script(Reply(Thinking("hm"), Text("hello")), RateLimited(retry_after=1))
        client = anthropic.Anthropic(base_url=server.base_url, api_key="test-key", max_retries=0)
        gpt = openai.OpenAI(base_url=server.openai_base_url, api_key="test-key", max_retries=0)
        ...
        server.wait_idle()                      # every outcome recorded
        server.model_calls[0].cache.cache_read  # per-request accounting
        server.cache_stats().of_perfect         # actual reads / perfect prefix reads
        anthropic_blocks(body)                  # a request's prompt blocks, as the cache sees them

Keys: ``x-api-key`` or ``Authorization: Bearer`` (the anthropic SDK sends the
latter), checked against `api_keys`; recorded headers never hold them.
Run by hand: ``python -m everchat.tools.fakemodel --port 8765``.
"""

from ._cache import CacheUsage, ManualClock
from ._record import CacheStats, Exchange
from ._replies import (
    DropStream,
    Fault,
    Gate,
    GarbageEvent,
    Latency,
    ModelNotFound,
    ModelRequest,
    Overloaded,
    QuotaExceeded,
    RateLimited,
    Reply,
    ServerError,
    StreamError,
    Text,
    Thinking,
    ToolCall,
    UsageLimit,
)
from ._server import FakeModelServer
from ._state import echo_rule
from ._tokens import BYTES_PER_TOKEN, PromptBlock, anthropic_blocks, count_tokens

__all__ = [
    "BYTES_PER_TOKEN",
    "CacheStats",
    "CacheUsage",
    "DropStream",
    "Exchange",
    "FakeModelServer",
    "Fault",
    "Gate",
    "GarbageEvent",
    "Latency",
    "ManualClock",
    "ModelNotFound",
    "ModelRequest",
    "Overloaded",
    "PromptBlock",
    "QuotaExceeded",
    "RateLimited",
    "Reply",
    "ServerError",
    "StreamError",
    "Text",
    "Thinking",
    "ToolCall",
    "UsageLimit",
    "anthropic_blocks",
    "count_tokens",
    "echo_rule",
]
