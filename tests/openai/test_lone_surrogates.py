"""A lone surrogate (JSON's `"\\ud800"` escape) is no text: 400 naming the field wherever it is, before any
tokenizer sees it (a prompt's was a 500 from the tokenizer); the server keeps serving.

Raw HTTP: the `openai` client cannot send one (its JSON encoder writes UTF-8, which has no surrogates).
"""

from __future__ import annotations

import json

import httpx

from tests.openai.openai_builders import openai_serving

LONE = "a\ud800b"
CHAT = {"model": "LlamaForCausalLM", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
COMPLETION = {"model": "LlamaForCausalLM", "prompt": "hi", "max_tokens": 1}
# (endpoint, body, the field the 400 names)
REFUSED = [
    ("completions", {**COMPLETION, "prompt": LONE}, "prompt"),
    ("completions", {**COMPLETION, "prompt": ["ok", LONE]}, "prompt[1]"),
    ("completions", {**COMPLETION, "bad_words": [LONE]}, "bad_words[0]"),
    ("completions", {**COMPLETION, "stop": ["x", LONE]}, "stop[1]"),
    ("chat/completions", {**CHAT, "messages": [{"role": "user", "content": LONE}]}, "messages[0].content"),
    (
        "chat/completions",
        {**CHAT, "messages": [{"role": "user", "content": [{"type": "text", "text": LONE}]}]},
        "messages[0].content[0].text",
    ),
    (
        "chat/completions",
        {**CHAT, "tools": [{"type": "function", "function": {"name": "f", "description": LONE}}]},
        "tools[0].function.description",
    ),
    ("chat/completions", {**CHAT, "guided_choice": ["yes", LONE]}, "guided_choice[1]"),
]


def post(base_url: str, endpoint: str, body: dict) -> httpx.Response:
    # json.dumps escapes the surrogate as \ud800, as any JSON encoder with ASCII output does
    data = json.dumps(body).encode()
    return httpx.post(f"{base_url}/{endpoint}", content=data, headers={"content-type": "application/json"})


def test_a_lone_surrogate_anywhere_is_400_naming_its_field() -> None:
    with openai_serving() as (_, http):
        replies = [post(http.base_url, endpoint, body) for endpoint, body, _ in REFUSED]
        after = post(http.base_url, "chat/completions", CHAT)
    assert [(r.status_code, r.json()["error"]["param"]) for r in replies] == [(400, p) for *_, p in REFUSED]
    assert all("lone surrogate (U+D800 at character 1)" in r.json()["error"]["message"] for r in replies)
    assert after.status_code == 200
