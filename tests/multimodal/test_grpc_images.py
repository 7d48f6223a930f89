"""Images over gRPC (a real server on loopback): the client takes PIL images, bytes and paths, in vLLM's
prompt dicts and in chat image parts; the server's samples equal the offline engine's. A text model
refuses images, and a corrupt image is INVALID_ARGUMENT naming it."""

from __future__ import annotations

import io
from pathlib import Path

import grpc
import pytest

from rollout import LLM, EngineConfig, SamplingParams
from rollout.engine.llm_engine import LLMEngine
from rollout.protocol.generated import rollout_pb2 as pb
from rollout.protocol.generated import rollout_pb2_grpc as pb_grpc
from tests.multimodal.vlm_builders import llava_processor, random_image, tiny_llava
from tests.server.server_builders import client_for, serving

PARAMS = SamplingParams(n=2, max_tokens=5, temperature=1.0, seed=4, logprobs=0, ignore_eos=True)


def png_bytes(image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def engine() -> LLMEngine:
    return LLMEngine(tiny_llava(), llava_processor(), EngineConfig(num_blocks=128))


def test_images_over_grpc_equal_the_offline_engine(tmp_path: Path) -> None:
    first, second = random_image(50), random_image(51)
    path = tmp_path / "second.png"
    second.save(path)
    offline = LLM(model=tiny_llava(), tokenizer=llava_processor(), config=EngineConfig(num_blocks=128))
    want = offline.generate(
        [{"prompt": "ab<image>c<image>", "multi_modal_data": {"image": [first, second]}}], PARAMS
    )
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "ab"}, {"type": "image", "image": first}]}
    ]
    want_chat = offline.chat(messages, PARAMS)
    with serving(engine()) as server, client_for(server) as client:
        got = client.generate(
            [{"prompt": "ab<image>c<image>", "multi_modal_data": {"image": [png_bytes(first), str(path)]}}],
            PARAMS,
        )
        got_chat = client.generate([messages], PARAMS)
    for out, expected in ((got, want), (got_chat, want_chat)):
        assert out[0].prompt_token_ids == expected[0].prompt_token_ids
        for a, b in zip(out[0].outputs, expected[0].outputs, strict=True):
            assert a.token_ids == b.token_ids
            assert max(abs(x - y) for x, y in zip(a.token_logprobs, b.token_logprobs, strict=True)) < 1e-5


def refusal(server, prompt: pb.Prompt) -> grpc.RpcError:
    with grpc.insecure_channel(server.address) as channel:
        call = pb_grpc.RolloutServiceStub(channel).Generate
        with pytest.raises(grpc.RpcError) as info:
            list(call(pb.GenerateRequest(prompts=[prompt], params=pb.SamplingParams(max_tokens=1))))
    return info.value


def test_bad_images_are_invalid_argument_naming_them() -> None:
    image = pb.Image(data=png_bytes(random_image(0)), mime_type="image/png")
    with serving(engine()) as server:
        error = refusal(server, pb.Prompt(text="ab<image>", images=[pb.Image(data=b"not an image")]))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "prompts[0]: images[0]: not a readable image" in error.details()
        error = refusal(server, pb.Prompt(text="ab<image>", images=[image] * 9))
        assert "prompts[0]: images: 9 images, more than the 8" in error.details()
    with serving() as server:  # a text model
        error = refusal(server, pb.Prompt(token_ids=pb.TokenIds(ids=[5, 6]), images=[image]))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "prompts[0]: images: this model takes no images" in error.details()
