"""Builders for the OpenAI front end's tests: a tool-capable chat tokenizer and in-process servers."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from tokenizers import decoders
from transformers import PreTrainedTokenizerFast

from rollout.engine.llm_engine import LLMEngine
from rollout.openai.server import OpenAIServer
from rollout.server.app import RolloutServer
from rollout.server.engine_loop import EngineLoop
from rollout.server.weights_servicer import SERVICE_NAME, weight_sync_hook
from tests.builders import tool_chat_tokenizer
from tests.server.server_builders import make_engine

# Hermes/Qwen's tool-call spelling: the template writes calls as <tool_call>{json}</tool_call>.
HERMES_TEMPLATE = (
    "{{ bos_token }}{% if tools %}<tools>{{ tools | tojson }}</tools>{% endif %}"
    "{% for m in messages %}<{{ m.role }}>"
    "{% if m.content is string %}{{ m.content }}{% endif %}"
    '{% for call in m.tool_calls or [] %}<tool_call>{"name": {{ call.function.name | tojson }}, '
    '"arguments": {{ call.function.arguments | tojson }}}</tool_call>{% endfor %}'
    "</{{ m.role }}>{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"
)


def hermes_tokenizer() -> PreTrainedTokenizerFast:
    """tests.builders' character tokenizer with the Hermes template; decodes without separators."""
    tokenizer = tool_chat_tokenizer()
    tokenizer.chat_template = HERMES_TEMPLATE
    tokenizer.backend_tokenizer.decoder = decoders.Fuse()
    return tokenizer


def chat_engine(**config: object) -> LLMEngine:
    return make_engine(tokenizer=hermes_tokenizer(), **config)


@contextmanager
def openai_serving(
    engine: LLMEngine | None = None,
    token: str | None = None,
    weight_sync: bool = False,
    **openai_kwargs: object,
) -> Iterator[tuple[RolloutServer, OpenAIServer]]:
    """A gRPC server (with WeightSyncService if `weight_sync`) and the OpenAI front end on its engine
    loop, both on loopback free ports."""
    hooks = {"extra_servicers": [weight_sync_hook(30.0)], "extra_service_names": [SERVICE_NAME]}
    loop = EngineLoop(engine or chat_engine())
    grpc_server = RolloutServer(loop, token=token, **(hooks if weight_sync else {})).start()
    http = OpenAIServer(grpc_server.loop, grpc_server.metrics, token=token, **openai_kwargs).start()
    try:
        yield grpc_server, http
    finally:
        grpc_server.stop(grace=0.0)
        http.stop()
