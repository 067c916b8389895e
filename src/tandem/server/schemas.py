"""The HTTP API's typed requests and responses, generated from the registry's settings models.

A request's method settings are the method's own settings model cut to what a request may set: a field
marked ``per_request=False`` (:data:`tandem.settings.SERVER_ONLY`: it loads a model, an LLM or a file, or
picks a component) is left out, and numbers get the server's caps as upper bounds. ``/v1/ask`` takes one
body shape per method (``method`` picks it; without ``method`` the server's default method's settings),
so the OpenAPI schema at ``/docs`` documents every setting a client may send, with its type and bounds.
"""

from __future__ import annotations

import typing
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Discriminator, Field, Tag, create_model
from pydantic.fields import FieldInfo

from tandem.registry import Entry
from tandem.settings import Settings, per_request

MAX_INT_SETTING = 200       # k, topk, max_iter, ...
MAX_TOKENS_SETTING = 4096   # max_tokens, ground_tokens
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"
TEXT_PATTERN = r"\S"        # at least one character that is not white space


class Strict(BaseModel):
    """A request body: unknown fields are refused."""

    model_config = ConfigDict(extra="forbid")


# -- errors --------------------------------------------------------------------------------------------

class ErrorDetail(BaseModel):
    """What went wrong and its kind."""

    message: str = Field(description="What went wrong, naming the field or setting.")
    type: str = Field(description="The error's class, e.g. ConfigError, NotFound, Busy.")


class ErrorBody(BaseModel):
    """Every error response: ``{"error": {"message", "type"}}``."""

    error: ErrorDetail


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for the error statuses a route may answer."""
    meaning = {400: "The body is not JSON.", 401: "Missing or wrong API key.", 404: "Unknown index, job or model.",
               409: "An index of that name is being built.", 413: "The body is over the limit.", 422: "A field or setting is invalid.",
               429: "The work queue is full; retry after Retry-After seconds.", 499: "The client went away.",
               502: "The LLM failed."}
    return {code: {"model": ErrorBody, "description": meaning[code]} for code in codes}


# -- method settings per request -----------------------------------------------------------------------

def _not_bool(value: Any) -> Any:
    """A number setting refuses true / false (pydantic would read them as 1 / 0; the schema says number)."""
    if isinstance(value, bool):
        raise ValueError("Input should be a number, not true or false")
    return value


NUMBER = BeforeValidator(_not_bool)


def _capped(name: str, annotation: Any, info: FieldInfo) -> tuple[Any, FieldInfo]:
    """The setting's type with the server's cap as its upper bound (and 0 as its lower one) where it is a number
    without its own, true / false refused; dicts of numbers get per-value bounds."""
    cap = MAX_TOKENS_SETTING if name.endswith("tokens") else MAX_INT_SETTING
    args = typing.get_args(annotation)
    numeric = annotation in (int, float) or bool(args) and all(a in (int, float, type(None)) for a in args)
    bounds: dict[str, Any] = {}
    if numeric and not any(getattr(m, "le", None) is not None or getattr(m, "lt", None) is not None
                           for m in info.metadata):
        bounds["le"] = cap
    if numeric and not any(getattr(m, "ge", None) is not None or getattr(m, "gt", None) is not None
                           for m in info.metadata):
        bounds["ge"] = 0
    if typing.get_origin(annotation) is dict and args and args[1] is int:
        annotation = dict[args[0], Annotated[int, NUMBER, Field(ge=1, le=cap)]]  # type: ignore[valid-type]
    if numeric:  # the bounds first (on an optional number they bound the number), then true / false refused
        return (Annotated[annotation, Field(**bounds), NUMBER] if bounds else Annotated[annotation, NUMBER]), info
    return annotation, info


_REQUEST_MODELS: dict[tuple[str, int], type[Settings]] = {}


def request_settings_model(entry: Entry[Any]) -> type[Settings]:
    """``entry``'s settings as a request may send them: per-request fields only, numbers capped; the
    settings model's own validators still run when the method is built."""
    key = (entry.name, id(entry.settings))
    if key not in _REQUEST_MODELS:
        _REQUEST_MODELS[key] = _request_settings_model(entry)
    return _REQUEST_MODELS[key]


def _request_settings_model(entry: Entry[Any]) -> type[Settings]:
    fields: dict[str, Any] = {}
    for name, info in entry.settings.model_fields.items():
        if not per_request(info):
            continue
        fields[name] = _capped(name, info.annotation, info)
    title = "".join(part.title() for part in entry.name.split("_")) + "RequestSettings"
    return create_model(title, __base__=Settings, __doc__=f"{entry.name} settings a request may set "
                                                        f"(`tandem methods {entry.name}`).", **fields)


def _method_of(data: Any) -> str:
    value = data.get("method") if isinstance(data, dict) else getattr(data, "method", None)
    return value if isinstance(value, str) else "_default"


def ask_request_model(entries: Sequence[Entry[Any]], default: str, max_question: int) -> Any:
    """The ``/v1/ask`` body: one shape per servable method (``method`` names it), plus the shape without
    ``method`` whose settings are the server's default method's."""
    question = Annotated[str, Field(min_length=1, max_length=max_question, pattern=TEXT_PATTERN,
                                    description="The question.")]
    index = Annotated[str | None, Field(None, pattern=NAME_PATTERN, description="An index name (GET /v1/indexes); "
                                                                                "default: the server's first.")]
    variants: list[Any] = []
    settings_of = {e.name: request_settings_model(e) for e in entries}
    for entry in entries:
        model = create_model(f"Ask{settings_of[entry.name].__name__.removesuffix('RequestSettings')}", __base__=Strict,
                             question=(question, ...), method=(Literal[entry.name], Field(description="The method.")),
                             index=(index, None),
                             settings=(settings_of[entry.name], Field(default_factory=settings_of[entry.name])))
        variants.append(Annotated[model, Tag(entry.name)])
    default_model = create_model("AskDefaultMethod", __base__=Strict, question=(question, ...), index=(index, None),
                                 method=(None, Field(None, description="Absent or null: the server's method.")),
                                 settings=(settings_of[default], Field(default_factory=settings_of[default],
                                                                      description=f"Settings of {default}, "
                                                                                  "the server's method.")))
    variants.append(Annotated[default_model, Tag("_default")])
    return Annotated[typing.Union[tuple(variants)], Discriminator(_method_of)]  # noqa: UP007


# -- responses -----------------------------------------------------------------------------------------

class Health(BaseModel):
    """``GET /healthz``: the server is up, and its version."""

    status: Literal["ok"]
    version: str


class MethodInfo(BaseModel):
    """One method of ``GET /v1/methods``: what it does, needs and takes."""

    name: str
    doc: str = Field(description="What the method does.")
    needs: list[str] = Field(description="What it needs: 'index' when it retrieves, 'gold' when it reads a "
                                         "dataset's gold passages.")
    served: bool = Field(description="Whether this server answers with it (GET /v1/models lists those).")
    settings: dict[str, Any] = Field(description="Every setting with its default.")


class MethodsResponse(BaseModel):
    """``GET /v1/methods``: every registered method and the one asked for when none is named."""

    default: str
    methods: list[MethodInfo]


class IndexInfo(BaseModel):
    """One index the server holds: its name, kind, passage count and encoder."""

    name: str
    kind: str
    documents: int
    encoder: str | None


class IndexesResponse(BaseModel):
    """``GET /v1/indexes``: the indexes the server holds and the default one."""

    default: str | None
    indexes: list[IndexInfo]


class Passage(BaseModel):
    """A passage as stored: id, title, text and the user's metadata."""

    id: str
    title: str
    text: str
    metadata: dict[str, Any] | None = None


class RetrievedHit(Passage):
    """A passage found for a query, with its score, rank and the retriever that found it."""

    doc_id: str
    score: float
    rank: int
    source: str


class RetrieveResponse(BaseModel):
    """``POST /v1/retrieve``: the query and its hits, best first."""

    query: str
    hits: list[RetrievedHit]


class Cost(BaseModel):
    """What answering took: LLM calls, tokens and wall seconds."""

    llm_calls: int
    prompt_tokens: int
    completion_tokens: int
    reused_tokens: int = Field(0, description="Prompt tokens the LLM took from its prefix cache, not computed.")
    seconds: float


class TraceBody(BaseModel):
    """The method's steps, in order, and the passages it read."""

    steps: list[dict[str, Any]] = Field(description="Each step: name, queries, hits (with passages), LLM calls, notes.")
    docs_read: list[str]


class AskResponse(BaseModel):
    """``POST /v1/ask``: the answer, the passages it cites, its trace and its cost."""

    answer: str
    method: str
    cited: list[Passage] = Field(description="The passages shown to the LLM.")
    trace: TraceBody
    cost: Cost


class Job(BaseModel):
    """An upload's indexing job (``POST /v1/indexes``), polled at ``GET /v1/jobs/{id}`` until done or error."""

    id: str
    index: str
    kind: str
    state: Literal["queued", "reading", "indexing", "done", "error"]
    files: int
    passages: int | None
    error: str | None
    seconds: float | None


class ModelCard(BaseModel):
    """One entry of ``GET /v1/models``: a method, in OpenAI's shape."""

    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "tandem"


class ModelList(BaseModel):
    """``GET /v1/models``: the served methods, in OpenAI's shape."""

    object: Literal["list"] = "list"
    data: list[ModelCard]


class ChatMessage(Strict):
    """One message of a chat request; the last user message is the question."""

    role: Literal["system", "user", "assistant", "developer"]
    content: str = Field(min_length=1, max_length=1 << 16, pattern=TEXT_PATTERN)


class ChatChoiceMessage(BaseModel):
    """The assistant's reply: the answer."""

    role: Literal["assistant"]
    content: str


class ChatChoice(BaseModel):
    """The one choice of a chat completion."""

    index: int
    message: ChatChoiceMessage
    finish_reason: Literal["stop"]


class PromptTokensDetails(BaseModel):
    """Prompt tokens reused rather than computed (OpenAI's field)."""

    cached_tokens: int = Field(description="Prompt tokens taken from the LLM's prefix cache.")


class Usage(BaseModel):
    """Tokens the answer took, in OpenAI's shape."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails | None = None


class ChatCompletion(BaseModel):
    """``POST /v1/chat/completions``: OpenAI's response, with tandem's answer and trace beside it."""

    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage
    tandem: AskResponse = Field(description="tandem extension: the answer with its trace.")


SSE = {"text/event-stream": {"schema": {
    "type": "object", "description": "One Server-Sent Event (see the route's description).",
    "properties": {"event": {"type": "string"}, "data": {"type": "string", "description": "JSON"},
                   "id": {"type": "string"}, "retry": {"type": "integer"}}}}}


__all__ = ["MAX_INT_SETTING", "MAX_TOKENS_SETTING", "AskResponse", "ChatCompletion", "ChatMessage", "ErrorBody",
           "Health", "IndexesResponse", "Job", "MethodsResponse", "ModelCard", "ModelList", "RetrieveResponse",
           "ask_request_model", "error_responses", "request_settings_model"]
