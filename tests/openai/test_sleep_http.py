"""vLLM's sleep-mode routes on the OpenAI port (POST /sleep?level=N, POST /wake_up, GET /is_sleeping) on a real
loopback server: completions after a wake-up equal those before, the token guards the routes, a bad level or
tag is a 400 and a second sleep a 409, each changing nothing."""

from __future__ import annotations

import httpx

from tests.openai.openai_builders import openai_serving

PROMPT = {
    "model": "LlamaForCausalLM",
    "prompt": [5, 6, 7, 8],
    "max_tokens": 8,
    "temperature": 0,
    "logprobs": 1,
}


def completion(root: str, headers: dict | None = None) -> dict:
    reply = httpx.post(f"{root}/v1/completions", json=PROMPT, headers=headers, timeout=120)
    assert reply.status_code == 200, reply.text
    choice = reply.json()["choices"][0]
    return {"text": choice["text"], "logprobs": choice["logprobs"]["token_logprobs"]}


def test_sleep_and_wake_up_over_http_keep_the_completions_exact() -> None:
    with openai_serving() as (_, http):
        root = http.base_url.removesuffix("/v1")
        before = completion(root)
        slept = httpx.post(f"{root}/sleep", params={"level": 1}, timeout=120)
        assert slept.status_code == 200 and slept.json()["bytes_freed"] > 0
        assert httpx.get(f"{root}/is_sleeping").json() == {
            "is_sleeping": True,
            "level": 1,
            "sleeping_tags": ["weights", "kv_cache"],
            "awaiting_weights": False,
        }
        assert httpx.post(f"{root}/wake_up", params={"tags": ["weights"]}).status_code == 200
        assert httpx.get(f"{root}/is_sleeping").json()["sleeping_tags"] == ["kv_cache"]
        assert httpx.post(f"{root}/wake_up").status_code == 200
        assert httpx.get(f"{root}/is_sleeping").json()["is_sleeping"] is False
        assert completion(root) == before


def test_bad_levels_and_tags_are_400_and_a_second_sleep_409() -> None:
    with openai_serving() as (grpc_server, http):
        root = http.base_url.removesuffix("/v1")
        bad_level = httpx.post(f"{root}/sleep", params={"level": 3})
        bad_tag = httpx.post(f"{root}/wake_up", params={"tags": ["kv"]})
        assert (bad_level.status_code, bad_tag.status_code) == (400, 400)
        assert "level must be 1 or 2" in bad_level.json()["error"]["message"]
        assert not grpc_server.loop.engine.memory.is_sleeping()
        assert httpx.post(f"{root}/sleep", params={"level": 1}, timeout=120).status_code == 200
        again = httpx.post(f"{root}/sleep", params={"level": 2}, timeout=120)
        assert again.status_code == 409 and "already sleeping" in again.json()["error"]["message"]
        assert grpc_server.loop.engine.memory.level == 1


def test_the_token_guards_the_sleep_routes() -> None:
    with openai_serving(token="secret") as (grpc_server, http):
        root = http.base_url.removesuffix("/v1")
        assert httpx.post(f"{root}/sleep").status_code == 401
        assert httpx.post(f"{root}/wake_up").status_code == 401
        assert httpx.get(f"{root}/is_sleeping").status_code == 401
        assert not grpc_server.loop.engine.memory.is_sleeping()
        auth = {"Authorization": "Bearer secret"}
        assert httpx.post(f"{root}/sleep", headers=auth, timeout=120).status_code == 200
        assert httpx.get(f"{root}/is_sleeping", headers=auth).json()["is_sleeping"] is True
