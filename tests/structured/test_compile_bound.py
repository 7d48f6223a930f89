"""A server's grammar compiles are bounded in time and number (rollout/structured_outputs/compile_pool.py): a spec
that compiles too slowly is refused naming its field, caches nothing, and other requests go on.

Before: a 20,000-property JSON schema got no answer in 120 s (it compiles in ~50 s here, with a
128-token vocabulary; far longer with a real one)."""

from __future__ import annotations

import threading
import time

import grpc
import httpx
import pytest

from rollout import SamplingParams
from rollout.structured_outputs import StructuredOutputsParams
from rollout.structured_outputs.compile_pool import CompileLimits, CompilePool, CompilersBusyError
from tests.openai.openai_builders import openai_serving
from tests.server.server_builders import client_for, make_engine, serving
from tests.structured.builders import SCHEMA, follows_schema, json_tokenizer

pytest.importorskip("xgrammar")

HUGE = {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(20_000)}}
HUGE_REGEX = "(" + "|".join(f"a{i}b" for i in range(80_000)) + ")"  # 650 KB: a 229 KB one took 2.4 s here
BOUND = CompileLimits(timeout_s=1.0, workers=1)
PARAMS = SamplingParams(
    max_tokens=60,
    temperature=0,
    structured_outputs=StructuredOutputsParams(json=SCHEMA, disable_any_whitespace=True),
)


@pytest.mark.parametrize(
    "spec",
    [StructuredOutputsParams(json=HUGE), StructuredOutputsParams(regex=HUGE_REGEX)],
    ids=["json", "regex"],
)
def test_a_spec_past_the_bound_is_invalid_argument_naming_it_and_nothing_is_cached(
    spec: StructuredOutputsParams,
) -> None:
    engine = make_engine(tokenizer=json_tokenizer())
    with (
        serving(engine, loop_kwargs={"grammar_limits": BOUND}) as server,
        client_for(server, max_retries=0, timeout=120) as client,
    ):
        client.generate([[5, 6]], PARAMS)  # starts the compile helper (its start is not bounded)
        compiled = engine.grammars.compiler.num_compiled
        huge = SamplingParams(max_tokens=4, structured_outputs=spec)
        started = time.monotonic()
        with pytest.raises(grpc.RpcError) as info:
            client.generate([[5, 6]], huge)
        waited = time.monotonic() - started
        assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        expected = f"prompts[0]: structured_outputs.{spec.kind}: did not compile within 1 s"
        assert info.value.details().startswith(expected)
        assert engine.grammars.compiler.num_compiled == compiled  # nothing half-cached
        (out,) = client.generate([[5, 7]], PARAMS)  # the server goes on, structured outputs included
    assert waited < 30  # a hang guard: the bound is 1 s, the schema alone compiles in ~50 s
    assert follows_schema(out.outputs[0].text)


def test_over_http_the_refusal_is_400_naming_response_format_or_the_guided_field() -> None:
    engine = make_engine(tokenizer=json_tokenizer())
    with openai_serving(engine) as (grpc_server, http):
        grpc_server.loop.engine.grammars.bound(BOUND)
        body = {"model": "LlamaForCausalLM", "prompt": "a", "max_tokens": 4}
        schema = {"type": "json_schema", "json_schema": {"name": "huge", "schema": HUGE}}
        by_format = httpx.post(
            f"{http.base_url}/completions", json={**body, "response_format": schema}, timeout=120
        )
        by_guided = httpx.post(
            f"{http.base_url}/completions", json={**body, "guided_json": HUGE}, timeout=120
        )
        plain = httpx.post(f"{http.base_url}/completions", json=body, timeout=120)
    assert by_format.status_code == 400 and by_guided.status_code == 400
    assert by_format.json()["error"]["param"] == "response_format.json_schema"
    assert "did not compile within 1 s" in by_format.json()["error"]["message"]
    assert by_guided.json()["error"]["message"].startswith("guided_json: did not compile within 1 s")
    assert plain.status_code == 200


def test_compiles_past_the_number_bound_wait_their_turn_then_are_told_to_retry() -> None:
    """A turn is held through the in-process compile too: here one that blocks until released."""
    pool = CompilePool(_tokenizer_info(), CompileLimits(timeout_s=0.5, workers=1))
    holding, release = threading.Event(), threading.Event()
    in_process = lambda: holding.set() or release.wait(60)  # noqa: E731
    holder = threading.Thread(target=pool.compile, args=(StructuredOutputsParams(regex="[a-z]+"), in_process))
    holder.start()
    try:
        assert holding.wait(120)  # the holder has the one turn, in its in-process compile
        with pytest.raises(CompilersBusyError, match="1 grammar compiles are running"):
            pool.compile(StructuredOutputsParams(regex="[0-9]+"), lambda: "compiled")
    finally:
        release.set()
        holder.join(60)
    assert pool.compile(StructuredOutputsParams(regex="[0-9]+"), lambda: "compiled") == "compiled"


def test_a_spec_that_does_not_compile_is_refused_with_the_compilers_own_message() -> None:
    pool = CompilePool(_tokenizer_info(), CompileLimits(timeout_s=30, workers=1))
    with pytest.raises(ValueError, match=r"structured_outputs.regex: does not compile: .*parenthesis"):
        pool.compile(StructuredOutputsParams(regex="(a"), lambda: pytest.fail("compiled in process"))


def _tokenizer_info():
    import xgrammar

    return xgrammar.TokenizerInfo.from_huggingface(json_tokenizer(), vocab_size=128, stop_token_ids=[2])
