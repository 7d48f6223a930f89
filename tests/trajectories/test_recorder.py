"""The trajectory recorder under the official `openai` client, against a real server: every turn's tokens,
logprobs and weight versions as the server returned them (streamed or not, chat or Responses), the prefix
check per turn, episodes kept apart, and the TRL export aligned token for token."""

from __future__ import annotations

import asyncio

import openai
import pytest

from rollout.trajectories import EPISODE_HEADER, TrajectoryError, TrajectoryRecorder, trl_batch
from tests.openai.openai_builders import openai_serving

MODEL = "LlamaForCausalLM"
SAMPLING = {"model": MODEL, "max_tokens": 12, "seed": 0, "extra_body": {"ignore_eos": True}}
USER = {"role": "user", "content": "weather?"}


def _turns(client: openai.OpenAI, token_in: bool, count: int = 3) -> list[object]:
    """An agent loop: each reply goes back with a tool result; token-in when asked."""
    messages, prefix, replies = [USER], None, []
    for turn in range(count):
        extra = {**SAMPLING["extra_body"], **({"prompt_token_ids": prefix} if prefix else {})}
        reply = client.chat.completions.create(messages=messages, **{**SAMPLING, "extra_body": extra})
        replies.append(reply)
        if token_in:
            prefix = reply.model_extra["prompt_token_ids"] + reply.choices[0].model_extra["token_ids"]
        messages = [*messages, reply.choices[0].message.model_dump(exclude_none=True)]
        messages.append({"role": "tool", "tool_call_id": f"c{turn}", "content": f"sunny {turn}"})
    return replies


def test_each_turn_is_recorded_as_the_server_sampled_it_with_logprobs_asked_for() -> None:
    recorder = TrajectoryRecorder()
    with openai_serving() as (_, http):
        client = recorder.wrap(openai.OpenAI(base_url=http.base_url, api_key="none"))
        with recorder.episode("e") as episode:
            replies = _turns(client, token_in=True)
    assert [t.prefix_stable for t in episode.turns] == [None, True, True]
    for turn, reply in zip(episode.turns, replies, strict=True):
        choice = reply.choices[0]
        assert turn.prompt_ids == reply.model_extra["prompt_token_ids"]
        assert turn.completion_ids == choice.model_extra["token_ids"]
        assert turn.logprobs == [e.logprob for e in choice.logprobs.content]  # asked by the recorder
        assert turn.weight_versions == [tuple(s) for s in choice.model_extra["weight_versions"]]


def test_the_trl_export_puts_each_models_token_and_logprob_where_it_was_sampled() -> None:
    recorder = TrajectoryRecorder()
    with openai_serving() as (_, http):
        client = recorder.wrap(openai.OpenAI(base_url=http.base_url, api_key="none"))
        with recorder.episode("e") as episode:
            _turns(client, token_in=True)
    batch = trl_batch([episode])
    first, last = episode.turns[0], episode.turns[-1]
    (prompt,), (completion,), (logprobs,), (mask,) = (
        batch[k] for k in ("prompt_ids", "completion_ids", "logprobs", "env_mask")
    )
    assert prompt + completion == last.prompt_ids + last.completion_ids and prompt == first.prompt_ids
    at = 0
    for turn in episode.turns:
        start = len(turn.prompt_ids) - len(prompt)
        assert mask[at:start] == [0] * (start - at) and logprobs[at:start] == [0.0] * (
            start - at
        )  # environment
        end = start + len(turn.completion_ids)
        assert completion[start:end] == turn.completion_ids and mask[start:end] == [1] * len(
            turn.completion_ids
        )
        assert logprobs[start:end] == turn.logprobs
        at = end
    assert at == len(completion)


def test_a_re_rendered_history_that_changed_is_a_prefix_break_and_is_refused_for_training() -> None:
    recorder = TrajectoryRecorder()
    with openai_serving() as (_, http):
        client = recorder.wrap(openai.OpenAI(base_url=http.base_url, api_key="none"))
        with recorder.episode("e") as episode:
            first = client.chat.completions.create(messages=[USER], **SAMPLING)
            edited = {"role": "assistant", "content": "it is " + (first.choices[0].message.content or "")}
            client.chat.completions.create(
                messages=[USER, edited, {"role": "user", "content": "ok"}], **SAMPLING
            )
    assert [t.prefix_stable for t in episode.turns] == [None, False]
    # the server's own check holds (the template wrote the content back as given): it cannot know what was
    # sampled; the recorder does
    assert episode.turns[1].server_prefix_stable is True
    with pytest.raises(TrajectoryError, match="turn 1's prompt does not start with"):
        trl_batch([episode])
    assert [s.turns for s in episode.samples()] == [[0], [1]]


def test_streamed_and_responses_replies_are_recorded_as_their_non_streamed_selves() -> None:
    recorder = TrajectoryRecorder()
    with openai_serving() as (_, http):
        plain = openai.OpenAI(base_url=http.base_url, api_key="none")
        client = recorder.wrap(plain)
        with recorder.episode("chat") as chat:
            list(client.chat.completions.create(messages=[USER], stream=True, **SAMPLING))
        with recorder.episode("responses") as responses:
            first = list(
                client.responses.create(
                    model=MODEL, input="weather?", max_output_tokens=12, stream=True, extra_body={"seed": 0}
                )
            )[-1].response
            client.responses.create(
                model=MODEL, input="more", previous_response_id=first.id, max_output_tokens=12
            )
        whole = plain.chat.completions.create(messages=[USER], logprobs=True, **SAMPLING)
    (turn,) = chat.turns
    assert turn.completion_ids == whole.choices[0].model_extra["token_ids"]
    assert turn.logprobs == pytest.approx([e.logprob for e in whole.choices[0].logprobs.content], abs=1e-5)
    assert [t.endpoint for t in responses.turns] == ["responses", "responses"]
    assert (
        responses.turns[1].prefix_stable
        and responses.turns[0].completion_ids == first.model_extra["token_ids"]
    )
    assert all(t.logprobs is not None and len(t.logprobs) == len(t.completion_ids) for t in responses.turns)


def test_concurrent_episodes_of_an_async_client_are_kept_apart() -> None:
    recorder = TrajectoryRecorder()

    async def run(client: openai.AsyncOpenAI, name: str, content: str) -> None:
        with recorder.episode(name):
            await client.chat.completions.create(messages=[{"role": "user", "content": content}], **SAMPLING)

    async def main(base_url: str) -> None:
        client = recorder.wrap(openai.AsyncOpenAI(base_url=base_url, api_key="none"))
        await asyncio.gather(*(run(client, f"e{i}", "x" * (i + 1)) for i in range(4)))
        headers = {EPISODE_HEADER: "by-header"}
        await client.chat.completions.create(messages=[USER], extra_headers=headers, **SAMPLING)

    with openai_serving() as (_, http):
        asyncio.run(main(http.base_url))
    assert all(len(recorder.episodes[f"e{i}"].turns) == 1 for i in range(4))
    lengths = [len(recorder.episodes[f"e{i}"].turns[0].prompt_ids) for i in range(4)]
    assert lengths == sorted(lengths) and len(set(lengths)) == 4  # each its own prompt
    assert len(recorder.episodes["by-header"].turns) == 1 and "default" not in recorder.episodes


def test_n_choices_branch_the_episode_into_one_sample_each() -> None:
    recorder = TrajectoryRecorder()
    with openai_serving() as (_, http):
        client = recorder.wrap(openai.OpenAI(base_url=http.base_url, api_key="none"))
        with recorder.episode("e") as episode:
            client.chat.completions.create(messages=[USER], n=2, **SAMPLING)
    assert len(episode.samples()) == 2
    with pytest.raises(TrajectoryError, match="branch into 2 paths"):
        trl_batch([episode])
