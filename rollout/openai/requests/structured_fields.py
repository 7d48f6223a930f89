"""OpenAI/vLLM request fields -> StructuredOutputsParams.

Three spellings reach the same thing, as in vLLM's server: OpenAI's `response_format`
(`json_schema` with its `schema`, or `json_object`), vLLM's `structured_outputs` object, and its
older `guided_json` / `guided_regex` / `guided_choice` / `guided_grammar` keys. More than one of
them in one request is ambiguous and refused naming them.
"""

from __future__ import annotations

from typing import Any

from rollout.structured_outputs.structured_outputs import StructuredOutputsParams, structured_outputs_from

GUIDED = {
    "guided_json": "json",
    "guided_regex": "regex",
    "guided_choice": "choice",
    "guided_grammar": "grammar",
}


def structured_outputs_of(request: Any) -> StructuredOutputsParams | None:
    return next(iter(_sources(request).values()), None)


def in_request_terms(message: str, request: Any) -> str:
    """An error about `structured_outputs.<kind>` (a compile that failed or was cut) named by the field
    the request used: `response_format.json_schema`, `guided_regex`, ... (`structured_outputs` as is)."""
    if not message.startswith("structured_outputs") or ":" not in message:
        return message
    source = next(iter(_sources(request)), "structured_outputs")
    if source == "structured_outputs":
        return message
    json_schema = source == "response_format" and request.response_format.get("type") == "json_schema"
    field = "response_format.json_schema" if json_schema else source
    return field + message[message.index(":") :]


def _sources(request: Any) -> dict[str, StructuredOutputsParams]:
    sources: dict[str, StructuredOutputsParams] = {}
    if request.structured_outputs is not None:
        sources["structured_outputs"] = structured_outputs_from(request.structured_outputs)
    for name, kind in GUIDED.items():
        value = getattr(request, name)
        if value is not None:
            sources[name] = StructuredOutputsParams(**{kind: value})
    from_format = _response_format(request.response_format)
    if from_format is not None:
        sources["response_format"] = from_format
    if len(sources) > 1:
        raise ValueError(f"{' and '.join(sources)}: give one way of constraining the output, not several")
    return sources


def _response_format(response_format: dict[str, Any] | None) -> StructuredOutputsParams | None:
    if response_format is None:
        return None
    kind = response_format.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return StructuredOutputsParams(json_object=True)
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if not isinstance(schema, dict):
            raise ValueError("response_format.json_schema.schema: a JSON schema object is required")
        return StructuredOutputsParams(json=schema)
    raise ValueError(f"response_format.type: {kind!r} is not one of 'text', 'json_object', 'json_schema'")
