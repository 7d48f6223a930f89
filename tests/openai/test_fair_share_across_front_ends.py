"""HTTP and gRPC callers share one admission queue: a large batch on one front end does not stall a
small request on the other (server/fair_share.py; the gRPC-only case is tests/server/test_fair_share.py)."""

from __future__ import annotations

import threading

import openai

from rollout import SamplingParams
from tests.builders import random_prompts
from tests.openai.openai_builders import chat_engine, openai_serving
from tests.server.server_builders import client_for, finished_at_arrival, slow_steps, wait_for

MODEL = "LlamaForCausalLM"
BIG = SamplingParams(temperature=0, max_tokens=30, ignore_eos=True)
PROMPTS = random_prompts(40, 5, 12, seed=3)  # 40 x 30 tokens on 4 slots: over 300 steps, 1.5 s at least
# FIFO would run ~36 of the 40 first; in turn the small request waits for one slot of the 4 to free.
# Counted from the small request's arrival at the engine loop, not from the client's call: on a busy
# machine the client's own start-up can take as long as several of the batch's requests.
MOST_FINISHED_BEFORE_SMALL = 12
SMALL_PROMPT = [5, 6, 7]


def small_http_request(base_url: str) -> list[int]:
    reply = openai.OpenAI(base_url=base_url, api_key="none").completions.create(
        model=MODEL, prompt=SMALL_PROMPT, max_tokens=2, temperature=0, extra_body={"ignore_eos": True}
    )
    return reply.choices[0].model_extra["token_ids"]


def big_http_batch(base_url: str) -> list:
    """40 prompts in one /v1/completions request: one caller."""
    client = openai.OpenAI(base_url=base_url, api_key="none", timeout=120, max_retries=0)
    reply = client.completions.create(
        model=MODEL, prompt=PROMPTS, max_tokens=30, temperature=0, extra_body={"ignore_eos": True}
    )
    return reply.choices


def test_a_grpc_callers_large_batch_does_not_stall_a_later_http_request() -> None:
    engine = chat_engine(max_num_seqs=4)
    slow_steps(engine, delay=0.005)
    with openai_serving(engine) as (grpc_server, http), client_for(grpc_server) as big:
        arrival = finished_at_arrival(grpc_server.loop, SMALL_PROMPT)
        outputs: list = []
        batch = threading.Thread(target=lambda: outputs.extend(big.generate(PROMPTS, BIG, timeout=120)))
        batch.start()
        wait_for(lambda: grpc_server.loop.stats()["num_generated_tokens"] > 0, what="the batch running")
        small = small_http_request(http.base_url)
        finished_when_small_done = grpc_server.loop.counters["finished"]
        batch.join(120)
    assert len(small) == 2 and len(outputs) == 40
    finished_while_small_waited = finished_when_small_done - arrival["finished"]
    assert finished_while_small_waited <= MOST_FINISHED_BEFORE_SMALL, finished_while_small_waited


def test_an_http_callers_large_batch_does_not_stall_a_later_grpc_request() -> None:
    engine = chat_engine(max_num_seqs=4)
    slow_steps(engine, delay=0.005)
    with openai_serving(engine) as (grpc_server, http), client_for(grpc_server) as small:
        arrival = finished_at_arrival(grpc_server.loop, SMALL_PROMPT)
        choices: list = []
        batch = threading.Thread(target=lambda: choices.extend(big_http_batch(http.base_url)))
        batch.start()
        wait_for(lambda: grpc_server.loop.stats()["num_generated_tokens"] > 0, what="the batch running")
        small_out = small.generate([SMALL_PROMPT], SamplingParams(max_tokens=2, ignore_eos=True), timeout=120)
        finished_when_small_done = grpc_server.loop.counters["finished"]
        batch.join(120)
    assert len(small_out[0].outputs[0].token_ids) == 2 and len(choices) == 40
    finished_while_small_waited = finished_when_small_done - arrival["finished"]
    assert finished_while_small_waited <= MOST_FINISHED_BEFORE_SMALL, finished_while_small_waited
