"""LLMEngine: requests in, finished samples out; `step()` is schedule -> execute -> update.

The engine owns the model, the KV cache, the scheduler and the sampler. It is not thread-safe:
one thread (the offline `LLM` or the server's engine loop) drives it.
"""

from __future__ import annotations

import itertools

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rollout.config import EngineConfig
from rollout.engine.block_manager import BlockManager
from rollout.engine.engine_weights import EngineWeights
from rollout.engine.kv import kv_sizing
from rollout.engine.model import model_loader
from rollout.engine.model.model_loader import ModelInfo
from rollout.engine.model_runner import build_runner
from rollout.engine.output import prompt_logprobs
from rollout.engine.output.completion import completion_output, request_output
from rollout.engine.output.stop_checks import StopStrings, cut_at_stop_string, finish_reason
from rollout.engine.output.token_record import append_sampled
from rollout.engine.output.token_stream import StreamedTokens
from rollout.engine.requests.admitted_params import admitted_params
from rollout.engine.requests.request import Request, Sequence
from rollout.engine.requests.validation import RequestLimits, check_request
from rollout.engine.runner import Runner, RunnerFactory, single_device
from rollout.engine.sample.empty_rows import log_no_token
from rollout.engine.sample.sampler import Sampler, SampleRow
from rollout.engine.sample.token_counts import TokenCounts, needs_token_counts
from rollout.engine.scheduler import Scheduler, SchedulerOutput
from rollout.engine.sleep.engine_memory import EngineMemory
from rollout.engine.versions.in_flight import InFlightPlan, InFlightPolicy, InFlightReport
from rollout.engine.versions.resume import resume_into
from rollout.engine.vision.vision_model import check_multi_modal, split_processor
from rollout.multimodal.mm_inputs import MultiModalInputs
from rollout.ops.host_to_device import to_device
from rollout.outputs import PartialSample, RequestOutput
from rollout.sampling_params import SamplingParams
from rollout.structured_outputs.grammar_state import GrammarState
from rollout.structured_outputs.request_grammars import RequestGrammars
from rollout.weights.adapter_store import AdapterStore
from rollout.weights.lora import LoraTargets
from rollout.weights.manifest import NamedTensors


class LLMEngine:
    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase | None = None,
        config: EngineConfig | None = None,
        model_name: str | None = None,
        runner_factory: RunnerFactory = single_device,
    ) -> None:
        """`tokenizer`: or a processor (with images); `runner_factory` wraps the built, self-checked local
        `ModelRunner` into the runner every step goes through (engine/runner.py); it is never swapped."""
        self.config = config or EngineConfig()
        self.model = model_loader.prepare_model(model, self.config)
        self.tokenizer, self.images = split_processor(self.model, tokenizer)  # images: vision/vision_model.py
        self.detokenize = True  # the server turns it off: its RPC threads decode, never the loop thread
        self.stop_strings = StopStrings(self.tokenizer)  # checked here, or collected for a checking thread
        self.streamed = StreamedTokens()  # new tokens of requests added with stream=True
        self.max_model_len = kv_sizing.max_model_len(self.model, self.config)
        # The local runner stays for the update self-check (single device only: TP refuses that option).
        self.local_runner, self.state_budget = build_runner(self.model, self.config, self.max_model_len)
        states, num_blocks = self.local_runner.states, self.local_runner.num_blocks
        self.is_hybrid = states is not None
        self.block_manager = BlockManager.of(self.config, num_blocks, states, self.state_budget)
        self.scheduler = Scheduler(self.config, self.block_manager)
        self.runner: Runner = runner_factory(self.local_runner)
        # The weight version, the adapters and how updates are written (engine_weights.py).
        self.weights = EngineWeights(
            self.config, self.local_runner, self.runner, self.block_manager, self.max_model_len
        )
        self.adapters: AdapterStore = self.weights.adapters
        self.vocab_size = self.model.get_input_embeddings().num_embeddings
        self.eos_token_ids = frozenset(model_loader.eos_token_ids(self.model, self.tokenizer))
        self.sampler = Sampler(self.config.seed, self.eos_token_ids)
        self.grammars = RequestGrammars(self.tokenizer, self.vocab_size, self.eos_token_ids)
        self.limits = RequestLimits(
            self.vocab_size, self.max_model_len, self.config.max_num_seqs, self.eos_token_ids
        )
        self.model_info = ModelInfo.of(
            self.model, model_name, self.limits, self.config.block_size, num_blocks
        )
        self.memory = EngineMemory(self)  # sleep mode: what memory it holds, given back (sleep/)
        self.requests: dict[str, Request] = {}
        self._arrivals = itertools.count()
        self._seq_ids = itertools.count()
        self._aborted: list[RequestOutput] = []
        self._num_generated_tokens = self._num_requests_finished = 0
        self.in_flight_totals = InFlightReport()
        self.last_in_flight = InFlightReport()

    def validate_request(
        self,
        prompt_token_ids: list[int],
        params: SamplingParams,
        resume: PartialSample | None = None,
        multi_modal: MultiModalInputs | None = None,
    ) -> None:
        """Raises ValueError naming the offending field; nothing is queued (requests/validation.py)."""
        check_request(prompt_token_ids, params, resume, self.limits, self.tokenizer)
        check_multi_modal(self.images, multi_modal, list(prompt_token_ids))  # vision/vision_model.py
        self.grammars.compile(params)  # on the validating thread; the loop's call is a cache hit

    def add_request(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        prompt: str | None = None,
        resume: PartialSample | None = None,
        stream: bool = False,
        multi_modal: MultiModalInputs | None = None,
    ) -> None:
        """Queues a request; with `resume`, it continues that partial sample (engine/versions/resume.py);
        `stream`: new tokens kept for `engine.streamed.take()`; `multi_modal`: its images (engine/vision/)."""
        if request_id in self.requests:
            raise ValueError(f"request_id {request_id!r} is already in use")
        self.memory.check_can_generate()  # never queued into a sleeping engine (sleep/engine_memory.py)
        self.validate_request(prompt_token_ids, params, resume, multi_modal)
        params = admitted_params(params, self.tokenizer, self.config.logprobs_mode)
        arrival, version = next(self._arrivals), self.weights.version
        request = Request(request_id, list(prompt_token_ids), params, arrival, version, prompt, stream=stream)
        request.multi_modal = multi_modal
        request.sequences.append(self._new_sequence(request, resume.index if resume else 0))
        if resume is not None:
            resume_into(request.sequences[0], resume)
            request.forked = True  # one sample, already past its first token
        request.grammar = self.grammars.compile(params)
        if request.grammar is not None:
            request.sequences[0].grammar = GrammarState(request.grammar)
            request.sequences[0].grammar.accept_all(resume.token_ids if resume else [])
        self.requests[request_id] = request
        self.scheduler.add(request.sequences[0])

    def abort_request(self, request_id: str) -> bool:
        request = self.requests.pop(request_id, None)
        if request is None:
            return False
        aborted = [seq for seq in request.sequences if not seq.is_finished]
        for seq in aborted:
            seq.finish_reason = "abort"
            self.scheduler.finish(seq)
        # samples that were never forked come back too, each empty
        unborn = [self._new_sequence(request, i) for i in range(len(request.sequences), request.n)]
        for seq in unborn:
            seq.finish_reason = "abort"
        request.num_finished = request.n
        self._num_requests_finished += 1
        out = request_output(request, finished=True)
        out.outputs.extend(
            completion_output(request, seq, self.detokenize, self.tokenizer) for seq in aborted + unborn
        )
        self._aborted.append(out)
        return True

    def finish_on_stop_string(
        self, request_id: str, sample_index: int, num_output_tokens: int, stop_string: str
    ) -> bool:
        """Finishes a sample whose text completed `stop_string` at output token `num_output_tokens - 1`
        (found off this thread); tokens sampled after it are dropped, its blocks freed, and it comes
        back from the next step() with finish_reason "stop". False if it already finished."""
        seq = cut_at_stop_string(self.requests.get(request_id), sample_index, num_output_tokens, stop_string)
        if seq is None:
            return False
        finished: dict[str, RequestOutput] = {}
        self._finish(seq, "stop", finished)
        self._aborted.extend(finished.values())
        return True

    def has_unfinished_requests(self) -> bool:
        return bool(self.requests) or bool(self._aborted)

    @property
    def num_unfinished_requests(self) -> int:
        return len(self.requests)

    # ---- the loop ---------------------------------------------------------------------------

    def step(self) -> list[RequestOutput]:
        outputs, self._aborted = self._aborted, []
        sched = self.scheduler.schedule()
        if sched.is_empty:
            return outputs
        logits = self.runner.execute(sched)
        return outputs + self._update(sched, logits)

    def _update(self, sched: SchedulerOutput, logits: torch.Tensor) -> list[RequestOutput]:
        if any(item.prompt_rows for item in sched.scheduled):
            items = [(item.seq.request, item.prompt_rows, item.samples) for item in sched.scheduled]
            logits = prompt_logprobs.take_rows(logits, items)
        sampling: list[Sequence] = []
        version = self.weights.version
        for item in sched.scheduled:
            seq, samples = item.seq, item.samples
            start = seq.num_computed_tokens
            self.scheduler.stats.num_prompt_tokens_computed += max(
                0, min(seq.num_prompt_tokens - start, item.num_new_tokens)
            )
            if seq.kv_version is None:
                seq.kv_version = version
            seq.num_computed_tokens += item.num_new_tokens
            if seq.kv_version == version:  # KV kept across an update is never cached
                self.block_manager.cache_full_blocks(seq)
            if samples:
                sampling.append(seq)
        return self._sample_and_append(logits, self._expand_forks(sampling))

    def _expand_forks(self, sampling: list[Sequence]) -> list[list[Sequence]]:
        """Each sampling row feeds one sequence, or all n samples of a prompt that just finished prefill."""
        groups = []
        for seq in sampling:
            request = seq.request
            if request.forked or seq.num_output_tokens > 0:
                groups.append([seq])
                continue
            children = [self._new_sequence(request, i) for i in range(1, request.n)]
            for child in children:
                self.block_manager.fork(seq, child)
                child.grammar = seq.grammar.fork() if seq.grammar is not None else None
                child.num_computed_tokens = seq.num_computed_tokens
                self.scheduler.add_running(child)
            request.sequences.extend(children)
            request.forked = True
            groups.append([seq, *children])
        return groups

    def _sample_and_append(self, logits: torch.Tensor, groups: list[list[Sequence]]) -> list[RequestOutput]:
        """One sampler call for the whole step; a prompt's n forks all draw from its one logits row."""
        assert logits.shape[0] == len(groups), "one logits row per sampling sequence"
        seqs = [seq for group in groups for seq in group]
        if len(seqs) != len(groups):
            parents = [r for r, group in enumerate(groups) for _ in group]
            logits = logits.index_select(0, to_device(parents, torch.int64, logits.device))
        rows = [SampleRow.of(seq) for seq in seqs]
        out = self.sampler(logits, rows)
        finished: dict[str, RequestOutput] = {}
        empty = set(out.empty_rows)
        for i, seq in enumerate(seqs):
            if i in empty or (seq.grammar is not None and not seq.grammar.accept(out.token_ids[i])):
                log_no_token(seq, rows[i])  # its grammar and bans left no token: nothing was drawn
                self._finish(seq, "abort", finished)
                continue
            append_sampled(seq, out, i, self.weights.version)
            self._num_generated_tokens += 1
            reason = finish_reason(seq, self.eos_token_ids, self.max_model_len)
            if seq.request.params.stop and reason != "stop":
                reason = self.stop_strings.check(seq, reason, self.detokenize)
            if reason is not None:
                self._finish(seq, reason, finished)
            elif seq.request.stream:
                self.streamed.add(seq)
        return list(finished.values())

    def _finish(self, seq: Sequence, reason: str, finished: dict[str, RequestOutput]) -> None:
        request = seq.request
        seq.finish_reason = reason
        self.scheduler.finish(seq)
        request.num_finished += 1
        out = finished.get(request.request_id)
        if out is None:
            out = finished[request.request_id] = request_output(request)
        out.outputs.append(completion_output(request, seq, self.detokenize, self.tokenizer))
        if request.is_finished:
            out.finished = True
            del self.requests[request.request_id]
            self._num_requests_finished += 1

    def _new_sequence(self, request: Request, sample_index: int) -> Sequence:
        prompt = request.prompt_token_ids
        counts = TokenCounts() if needs_token_counts(request.params) else None  # counted at its first sample
        return Sequence(
            next(self._seq_ids), request, list(prompt), len(prompt), sample_index, token_counts=counts
        )

    # ---- weights and cache ------------------------------------------------------------------

    @property
    def weight_version(self) -> int:
        return self.weights.version

    def update_weights(
        self,
        named_tensors: NamedTensors,
        version: int | None = None,
        in_flight: str = "wait",
        lora: LoraTargets | None = None,
        base_version: int | None = None,
    ) -> int:
        """Writes the tensors in place, atomically (all validated first), then commits a new version.

        Call it between two `step()`s. `in_flight` says what happens to unfinished requests
        (rollout/engine/versions/in_flight.py); "wait" refuses while there are any. `lora` names the
        modules whose LoRA factors (`<module>.lora_A.weight`, `.lora_B.weight`) the update carries;
        each serves base + adapter, merged into the held base `base_version` names (weights/weight_base.py).
        """
        policy = InFlightPolicy(in_flight, self.config.max_staleness)
        policy.check_idle(self.has_unfinished_requests())
        self.memory.check_can_update()
        version = self.weights.update(named_tensors, version, lora, base_version)
        self._apply_in_flight(policy.plan(list(self.requests.values()), version))
        return version

    def commit_weight_version(self, version: int | None = None, replaces_base: bool = True) -> int:
        """A new version; after writing into the model directly, a new base too (weights/weight_base.py)."""
        return self.weights.commit(version, replaces_base)

    def _apply_in_flight(self, plan: InFlightPlan) -> None:
        for request_id in plan.abort:
            self.abort_request(request_id)
        self.scheduler.recompute(plan.recompute)
        self.last_in_flight = plan.report
        self.in_flight_totals.add(plan.report)

    def shutdown(self) -> None:
        """Stops what the engine runs beside this process (tensor-parallel workers); no step after it."""
        self.runner.shutdown()

    def reset_prefix_cache(self) -> None:
        self.block_manager.reset_prefix_cache()

    def stats(self) -> dict[str, int | float]:
        bm, sched = self.block_manager, self.scheduler
        return {
            "num_blocks_total": bm.num_blocks,
            "num_blocks_free": bm.num_free_blocks,
            "num_blocks_cached": bm.num_cached_blocks,
            "num_prompt_tokens_computed": sched.stats.num_prompt_tokens_computed,
            "num_prefix_hit_tokens": sched.stats.num_prefix_hit_tokens,
            "num_generated_tokens": self._num_generated_tokens,
            "num_requests_finished": self._num_requests_finished,
            "num_running_seqs": len(sched.running),
            "num_waiting_seqs": len(sched.waiting),
            "num_preemptions": sched.stats.num_preemptions,
            "prefix_caching": int(bm.enable_prefix_caching),
            "num_state_slots": len(bm.states) if bm.states is not None else 0,  # hybrid models: held states
            "num_state_snapshots": len(bm.snapshots) if bm.snapshots is not None else 0,
            "max_state_snapshots": bm.snapshots.capacity if bm.snapshots is not None else 0,
            "state_bytes_per_seq": self.state_budget.bytes_per_seq,  # one slot or snapshot; 0 without
            "state_bytes_reserved": self.state_budget.state_bytes,  # running slots + snapshot cap
            "weight_version": self.weights.version,
            **self.in_flight_totals.as_stats("in_flight_"),
            **self.last_in_flight.as_stats("last_update_"),
        }
