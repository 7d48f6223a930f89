"""A small request from another caller is not stuck behind one caller's large batch (fair admission)."""

import threading

from rollout import SamplingParams
from rollout.server.fair_share import FairShare
from tests.builders import random_prompts, tiny_llm
from tests.server.server_builders import (
    client_for,
    finished_at_arrival,
    make_engine,
    serving,
    slow_steps,
    wait_for,
)

BIG = SamplingParams(temperature=0, max_tokens=30, ignore_eos=True)
SMALL = SamplingParams(temperature=0, max_tokens=2, ignore_eos=True)


def test_a_small_request_finishes_while_another_callers_large_batch_has_most_of_its_work_left() -> None:
    prompts = random_prompts(40, 5, 12, seed=3)
    engine = make_engine(max_num_seqs=4)
    slow_steps(engine, delay=0.005)  # 40 prompts x 30 tokens / 4 slots: over 300 steps, 1.5 s at least
    with serving(engine) as server, client_for(server) as big, client_for(server) as small:
        arrival = finished_at_arrival(server.loop, [5, 6, 7])
        outputs: list = []
        batch = threading.Thread(target=lambda: outputs.extend(big.generate(prompts, BIG, timeout=120)))
        batch.start()
        wait_for(lambda: server.loop.stats()["num_generated_tokens"] > 0, what="the batch running")
        small_out = small.generate([[5, 6, 7]], SMALL, timeout=120)
        finished_when_small_done = server.loop.counters["finished"]
        batch.join(120)
    assert len(small_out[0].outputs[0].token_ids) == 2
    # FIFO would have run ~36 of the 40 first; in turn it waits for one slot of the 4 to free
    finished_while_small_waited = finished_when_small_done - arrival["finished"]
    assert finished_while_small_waited <= 12, finished_while_small_waited
    reference = tiny_llm(num_blocks=256).generate(prompts, BIG)
    assert [o.outputs[0].token_ids for o in outputs] == [o.outputs[0].token_ids for o in reference]


class Item:
    def __init__(self, caller: str, num_samples: int, name: str) -> None:
        self.caller, self.num_samples, self.name = caller, num_samples, name


def test_callers_take_turns_and_a_request_that_does_not_fit_waits_at_the_head() -> None:
    queue: FairShare[Item] = FairShare()
    for i in range(3):
        queue.append(Item("a", 1, f"a{i}"))
    queue.append(Item("b", 2, "b0"))
    queue.append(Item("c", 1, "c0"))
    assert [item.name for item in queue.take(3)] == ["a0", "b0"]  # c0 fits but a1's turn...
    assert [item.name for item in queue.take(1)] == ["c0"]
    assert [item.name for item in queue.take(10)] == ["a1", "a2"]
    assert not queue and len(queue) == 0
