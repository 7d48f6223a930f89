"""SamplingParams.structured_outputs on the wire (field 60, message StructuredOutputs)."""

from __future__ import annotations

from rollout.protocol.generated import rollout_pb2 as pb
from rollout.structured_outputs import StructuredOutputsParams


def structured_to_proto(spec: StructuredOutputsParams | None, message: pb.SamplingParams) -> None:
    if spec is None:
        return
    out = message.structured_outputs
    kind = spec.kind
    if kind == "choice":
        out.choice.values.extend(spec.choice)
    else:
        setattr(out, kind, getattr(spec, kind))
    out.disable_any_whitespace = spec.disable_any_whitespace


def structured_from_proto(message: pb.SamplingParams) -> dict[str, object]:
    """The structured_outputs keyword argument when the field is set (an empty one is refused by name)."""
    if not message.HasField("structured_outputs"):
        return {}
    wire = message.structured_outputs
    kind = wire.WhichOneof("kind")
    kwargs: dict[str, object] = {"disable_any_whitespace": wire.disable_any_whitespace}
    if kind == "choice":
        kwargs["choice"] = tuple(wire.choice.values)
    elif kind is not None:
        kwargs[kind] = getattr(wire, kind)
    return {"structured_outputs": StructuredOutputsParams(**kwargs)}
