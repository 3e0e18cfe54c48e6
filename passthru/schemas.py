"""OpenAI-shaped schemas for the published /v1 contract (docs/openapi.json).

The operations read the raw body themselves, so that every field, known here
or not, is forwarded unchanged; these models document the contract."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: str
    content: Any = None


class ChatCompletionRequest(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str = Field(min_length=1, description="`<provider>/<model id>`, an alias, or a formation id")
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool | None = None
    n: int | None = None
    tools: list[dict[str, Any]] | None = None
    stream_options: dict[str, Any] | None = None


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


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class Health(BaseModel):
    status: str
    engine: str
