"""OpenAI-shaped schemas for the published /v1 contract (docs/openapi.json).

The operations read the raw body themselves, so that every field, known here
or not, is forwarded unchanged; these models document the contract."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ledger.spend.services import MAX_MODEL_CHARS

# The body rules, stated once: ChatCompletionRequest documents them and
# passthru.doors.chat.parse_body checks them by hand (faster than validating the
# model; tests/passthru/test_body_rules.py holds the two to the same verdicts).
# The ledger keys spend and traces by model id: a longer one (MAX_MODEL_CHARS) could not be stored whole.
# Control characters (C0, DEL, C1) and line/paragraph separators, as a regular
# expression's class. The id is echoed in response headers, and Python's header
# encoding splits lines on U+2028/U+2029 and U+0085 as well as CR/LF: such an
# id once reached the upstream (and was billed) before the answer's headers
# broke the client's connection. parse_body also refuses lone surrogates
# (SURROGATES), which JSON text cannot carry as characters but Python's json
# makes of a `\ud800` escape, and which the ledger cannot store.
UNPRINTABLE = r"\x00-\x1f\x7f-\x9f\u2028\u2029"
SURROGATES = r"\ud800-\udfff"
# Not blank, and no character of UNPRINTABLE (the middle class: one that is neither that nor a space).
MODEL_PATTERN = rf"^[^{UNPRINTABLE}]*[^{UNPRINTABLE}\s][^{UNPRINTABLE}]*$"
# The most output tokens a request may ask for (max_tokens, max_completion_tokens,
# max_output_tokens), on every door: no model comes near it, and 10^29 once
# reached the cap's estimate and answered 500 instead of 400.
MAX_OUTPUT_TOKENS = 2**31 - 1
OUTPUT_LIMIT_FIELDS = ("max_tokens", "max_completion_tokens", "max_output_tokens")
# Optional fields checked for their JSON type: name -> (Python type, the words in the 400).
TYPED_FIELDS: dict[str, tuple[type, str]] = {
    "stream": (bool, "a boolean"),
    "n": (int, "an integer"),
    "tools": (list, "an array"),
    "stream_options": (dict, "an object"),
}


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: str
    content: Any = None


class ChatCompletionRequest(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str = Field(
        min_length=1,
        max_length=MAX_MODEL_CHARS,
        pattern=MODEL_PATTERN,
        description="`<provider>/<model id>`, an alias, or a formation id",
        examples=["openrouter/openai/gpt-5.2"],
    )
    messages: list[ChatMessage] = Field(min_length=1, examples=[[{"role": "user", "content": "Hello"}]])
    # The fields of TYPED_FIELDS:
    stream: bool | None = None
    n: int | None = None
    tools: list[dict[str, Any]] | None = None  # each an object
    stream_options: dict[str, Any] | None = None


_MODEL = Field(
    min_length=1,
    max_length=200,
    pattern=r"^[^\x00-\x1f\x7f]*\S[^\x00-\x1f\x7f]*$",
    description="`<provider>/<model id>` or an alias",
)


class ResponsesRequest(BaseModel):
    """POST /v1/responses: OpenAI's Responses API. Sent as it is to openai and
    openrouter; translated to a chat completion for other providers (function
    tools, text and image input; no previous_response_id or built-in tools there).
    Formation ids are refused (400): they run on /v1/chat/completions."""

    model_config = ConfigDict(extra="allow")
    model: str = _MODEL
    input: str | list[dict[str, Any]] = Field(examples=["Hello"])
    instructions: str | None = None
    stream: bool | None = None
    tools: list[dict[str, Any]] | None = None
    max_output_tokens: int | None = Field(default=None, le=MAX_OUTPUT_TOKENS)


class EmbeddingsRequest(BaseModel):
    """POST /v1/embeddings: passed through, metered from the reply's usage."""

    model_config = ConfigDict(extra="allow")
    model: str = _MODEL
    input: str | list[str] | list[int] | list[list[int]] = Field(examples=["The food was delicious."])


class MessagesRequest(BaseModel):
    """POST /v1/messages: Anthropic's Messages API, for anthropic/<model> and
    openrouter/anthropic/<model>; the key as x-api-key or Authorization: Bearer;
    cache_control kept. Errors in Anthropic's envelope."""

    model_config = ConfigDict(extra="allow")
    model: str = _MODEL
    max_tokens: int = Field(le=MAX_OUTPUT_TOKENS)
    messages: list[ChatMessage] = Field(min_length=1, examples=[[{"role": "user", "content": "Hello"}]])
    system: str | list[dict[str, Any]] | None = None
    stream: bool | None = None


def inline_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON schema with its `$defs` inlined.

    Pydantic points nested models at `#/$defs/...`, a path that only resolves
    inside the model's own schema document; pasted into an OpenAPI operation
    it dangles (clients and fuzzers cannot resolve it)."""
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref", "")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return resolve(defs[ref.removeprefix("#/$defs/")])
            return {k: resolve(v) for k, v in node.items()}
        if isinstance(node, list):
            return [resolve(v) for v in node]
        return node

    return resolve(schema)


class ErrorBody(BaseModel):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorEnvelope(BaseModel):
    error: ErrorBody


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str
    endpoints: list[str] = Field(
        default_factory=list,
        description="The /v1 doors a call with this id would be routed through: /v1/chat/completions and "
        "/v1/responses (chat models; formations and crews: chat only), /v1/embeddings (embedding models on a "
        "provider with an embeddings API), /v1/messages (Claude on anthropic or openrouter)",
    )


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class Health(BaseModel):
    status: str = Field(description="ok, or degraded: the spool cannot keep records (see `spool`)")
    engine: str
    spool: str = Field(description="ok, or why this worker's ledger spool cannot keep records")


class AnthropicErrorBody(BaseModel):
    type: str
    message: str


class AnthropicErrorEnvelope(BaseModel):
    """/v1/messages' errors, as Anthropic words them."""

    type: Literal["error"] = "error"
    error: AnthropicErrorBody
