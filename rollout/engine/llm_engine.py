"""LLMEngine: requests in, finished samples out; `step()` is schedule -> execute -> update.

The engine owns the model, the KV cache, the scheduler and the sampler. It is not thread-safe:
one thread (the offline `LLM` or the server's engine loop) drives it.
"""

from __future__ import annotations

import itertools

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rollout.config import EngineConfig
from rollout.detokenize.finish_text import finish_text
from rollout.detokenize.sample_text import SampleText
from rollout.detokenize.tokenizer_lock import TOKENIZER_LOCK
from rollout.engine import kv_sizing, prompt_logprobs
from rollout.engine.block_manager import BlockManager
from rollout.engine.cuda_graphs import use_cuda_graphs
from rollout.engine.early_finish import truncate_outputs
from rollout.engine.host_to_device import to_device
from rollout.engine.hybrid.recurrent_layers import hybrid_state_pool
from rollout.engine.hybrid.state_budget import state_budget
from rollout.engine.hybrid.state_snapshots import state_snapshots
from rollout.engine.model import checked_update, model_guard, model_loader, self_check
from rollout.engine.model.model_loader import ModelInfo
from rollout.engine.model_runner import ModelRunner
from rollout.engine.request import Request, Sequence
from rollout.engine.request_validation import RequestLimits, check_request
from rollout.engine.runner import Runner, RunnerFactory, single_device
from rollout.engine.sample.bad_words import with_bad_words_tokenized
from rollout.engine.sample.empty_rows import log_no_token
from rollout.engine.sample.sampler import Sampler, SampleRow
from rollout.engine.sample.token_counts import TokenCounts, needs_token_counts
from rollout.engine.scheduler import Scheduler, SchedulerOutput
from rollout.engine.token_stream import TokenDelta, latest_token
from rollout.engine.versions.in_flight import InFlightPlan, InFlightPolicy, InFlightReport
from rollout.engine.versions.provenance import extend_spans, oldest_version
from rollout.engine.versions.resume import resume_into
from rollout.ops.backends import get_backend
from rollout.outputs import CompletionOutput, PartialSample, RequestOutput
from rollout.sampling_params import SamplingParams
from rollout.structured.grammar_state import GrammarState
from rollout.structured.request_grammars import RequestGrammars
from rollout.weights.adapter_store import AdapterPlan, AdapterStore
from rollout.weights.lora import LoraTargets
from rollout.weights.manifest import NamedTensors
from rollout.weights.updater import check_next_version


class LLMEngine:
    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase | None = None,
        config: EngineConfig | None = None,
        model_name: str | None = None,
        runner_factory: RunnerFactory = single_device,
    ) -> None:
        """`runner_factory` receives the local `ModelRunner` once it is built and self-checked, and returns
        the runner every step goes through (rollout/engine/runner.py); the engine never swaps it."""
        self.config = config or EngineConfig()
        self.model = model_loader.prepare_model(model, self.config)
        self.tokenizer = tokenizer
        self.detokenize = True  # the server turns it off: its RPC threads decode, never the loop thread
        # Without detokenize, the new tokens of samples with stop strings, for whoever checks them
        # (the server's detokenizer thread): (request id, sample index, token id), taken each step.
        self.collect_stop_tokens = False
        self._stop_tokens: list[tuple[str, int, int]] = []
        self._streamed: list[TokenDelta] = []  # new tokens of requests added with stream=True
        device = self.model.device
        self.max_model_len = kv_sizing.max_model_len(self.model, self.config)
        backend = get_backend(self.config.attention_backend, device)
        kv_spec = model_guard.check_model(self.model, backend)
        states = hybrid_state_pool(self.model, self.config.max_num_seqs)  # None unless recurrent layers
        self.state_budget = state_budget(self.model, states, self.config, device)  # the states' share first
        num_blocks = kv_sizing.num_blocks(
            self.config, self.max_model_len, kv_spec, self.state_budget.kv_bytes
        )
        self.is_hybrid = states is not None
        self.block_manager = BlockManager(
            num_blocks,
            self.config.block_size,
            self.config.enable_prefix_caching,
            states,
            state_snapshots(self.config, states, self.state_budget.num_snapshots),
        )
        self.scheduler = Scheduler(self.config, self.block_manager)
        # The local runner stays for the update self-check (single device only: TP refuses that option).
        self.local_runner = ModelRunner(
            self.model, kv_spec, num_blocks, self.config.block_size, backend, states
        )
        if self.config.self_check:
            self_check.run_self_check(
                self.model, kv_spec, backend, self.config.block_size, self.max_model_len
            )
        if (
            use_cuda_graphs(self.config, device, backend, self.model) and states is None
        ):  # hybrids: per-sequence calls
            self.local_runner.enable_decode_graphs(self.config.max_num_seqs, self.max_model_len, capture=True)
        self.runner: Runner = runner_factory(self.local_runner)
        self.vocab_size = self.model.get_input_embeddings().num_embeddings
        self.eos_token_ids = frozenset(model_loader.eos_token_ids(self.model, tokenizer))
        self.sampler = Sampler(self.config.seed, self.eos_token_ids)
        self.grammars = RequestGrammars(tokenizer, self.vocab_size, self.eos_token_ids)
        self.model_info = ModelInfo(
            name=model_name or getattr(self.model.config, "_name_or_path", "") or type(self.model).__name__,
            architecture=type(self.model).__name__,
            dtype=str(self.model.dtype).removeprefix("torch."),
            device=str(device),
            max_model_len=self.max_model_len,
            vocab_size=self.vocab_size,
            eos_token_ids=tuple(sorted(self.eos_token_ids)),
            block_size=self.config.block_size,
            num_blocks=num_blocks,
        )
        self.requests: dict[str, Request] = {}
        self.adapters = AdapterStore()  # LoRA adapters merged into their modules (weights/adapter_store.py)
        self._weight_version = 0
        self._arrivals = itertools.count()
        self._seq_ids = itertools.count()
        self._aborted: list[RequestOutput] = []
        self._num_generated_tokens = 0
        self._num_requests_finished = 0
        self.in_flight_totals = InFlightReport()
        self.last_in_flight = InFlightReport()

    # ---- requests ---------------------------------------------------------------------------

    def validate_request(
        self, prompt_token_ids: list[int], params: SamplingParams, resume: PartialSample | None = None
    ) -> None:
        """Raises ValueError naming the offending field; nothing is queued (request_validation.py)."""
        limits = RequestLimits(
            self.vocab_size, self.max_model_len, self.config.max_num_seqs, self.eos_token_ids
        )
        check_request(prompt_token_ids, params, resume, limits, self.tokenizer)
        self.grammars.compile(params)  # on the validating thread; the loop's call is a cache hit

    def add_request(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        prompt: str | None = None,
        resume: PartialSample | None = None,
        stream: bool = False,
    ) -> None:
        """Queues a request; with `resume`, it continues that partial sample (rollout/engine/versions/resume.py).

        `stream`: its samples' new tokens are kept for `take_streamed_tokens` after each step."""
        if request_id in self.requests:
            raise ValueError(f"request_id {request_id!r} is already in use")
        self.validate_request(prompt_token_ids, params, resume)
        params = with_bad_words_tokenized(params, self.tokenizer)  # the server's RPC threads did it already
        request = Request(
            request_id, list(prompt_token_ids), params, next(self._arrivals), self._weight_version, prompt
        )
        request.stream = stream
        if params.prompt_logprobs is not None:
            request.prompt_logprobs = [None]  # the first prompt token has no logprob (vLLM's shape)
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
        outputs = [self._completion(request, seq) for seq in aborted + unborn]
        self._aborted.append(
            RequestOutput(
                request_id,
                request.prompt_token_ids,
                outputs,
                True,
                request.prompt,
                prompt_logprobs.complete_prompt_logprobs(request),
            )
        )
        return True

    def finish_on_stop_string(
        self, request_id: str, sample_index: int, num_output_tokens: int, stop_string: str
    ) -> bool:
        """Finishes a sample whose text completed `stop_string` at output token `num_output_tokens - 1`
        (found off this thread); tokens sampled after it are dropped, its blocks freed, and it comes
        back from the next step() with finish_reason "stop". False if it already finished."""
        request = self.requests.get(request_id)
        seqs = request.sequences if request is not None else []
        seq = next((s for s in seqs if s.sample_index == sample_index and not s.is_finished), None)
        if seq is None or seq.num_output_tokens < num_output_tokens:
            return False
        truncate_outputs(seq, num_output_tokens)
        seq.stop_reason = stop_string
        finished: dict[str, RequestOutput] = {}
        self._finish(seq, "stop", finished)
        self._aborted.extend(finished.values())
        return True

    def take_stop_tokens(self) -> list[tuple[str, int, int]]:
        """The tokens `collect_stop_tokens` gathered since the last call."""
        tokens, self._stop_tokens = self._stop_tokens, []
        return tokens

    def take_streamed_tokens(self) -> list[TokenDelta]:
        """The tokens requests added with `stream=True` sampled since the last call, in sampling order;
        a sample's finishing token is left out (it comes with the finished sample)."""
        tokens, self._streamed = self._streamed, []
        return tokens

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
            logits = self._collect_prompt_logprobs(sched, logits)
        sampling: list[Sequence] = []
        for item in sched.scheduled:
            seq, samples = item.seq, item.samples
            start = seq.num_computed_tokens
            self.scheduler.stats.num_prompt_tokens_computed += max(
                0, min(seq.num_prompt_tokens - start, item.num_new_tokens)
            )
            if seq.kv_version is None:
                seq.kv_version = self._weight_version
            seq.num_computed_tokens += item.num_new_tokens
            if seq.kv_version == self._weight_version:  # KV kept across an update is never cached
                self.block_manager.cache_full_blocks(seq)
            if samples:
                sampling.append(seq)
        return self._sample_and_append(logits, self._expand_forks(sampling))

    def _collect_prompt_logprobs(self, sched: SchedulerOutput, logits: torch.Tensor) -> torch.Tensor:
        """Takes each item's prompt-logprob rows (they precede its sampling row); returns the sampling rows."""
        row, keep = 0, []
        for item in sched.scheduled:
            if item.prompt_rows:
                count = len(item.prompt_rows)
                prompt_logprobs.collect(item.seq.request, logits[row : row + count], item.prompt_rows)
                row += count
            if item.samples:
                keep.append(row)
                row += 1
        return logits.index_select(0, to_device(keep, torch.int64, logits.device))

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
        rows = [
            SampleRow(
                seq.request.params,
                seq.sample_index,
                seq.token_ids,
                seq.num_prompt_tokens,
                seq.grammar,
                seq.token_counts,
            )
            for seq in seqs
        ]
        out = self.sampler(logits, rows)
        finished: dict[str, RequestOutput] = {}
        empty = set(out.empty_rows)
        for i, seq in enumerate(seqs):
            if i in empty or (seq.grammar is not None and not seq.grammar.accept(out.token_ids[i])):
                log_no_token(seq, rows[i])  # its grammar and bans left no token: nothing was drawn
                self._finish(seq, "abort", finished)
                continue
            extend_spans(seq.weight_versions, seq.num_output_tokens, self._weight_version)
            extend_spans(seq.kv_versions, seq.num_output_tokens, seq.kv_version)
            seq.token_ids.append(out.token_ids[i])
            self._num_generated_tokens += 1
            if out.logprobs[i] is not None:
                seq.logprobs.append(out.logprobs[i])
                seq.kept_log_mass.append(out.kept_log_masses[i])
            if seq.request.params.return_kept_tokens:
                seq.kept_token_ids.append(out.kept_token_ids[i])
            if out.top_logprobs[i] is not None:
                seq.top_logprobs.append(out.top_logprobs[i])
            reason = self._finish_reason(seq)
            if seq.request.params.stop and reason != "stop":
                reason = self._check_stop_strings(seq, reason)
            if reason is not None:
                self._finish(seq, reason, finished)
            elif seq.request.stream:
                self._streamed.append(latest_token(seq))
        return list(finished.values())

    def _check_stop_strings(self, seq: Sequence, reason: str | None) -> str | None:
        """Offline, the stop strings are checked here (a stop string outranks "length", as in vLLM);
        in the server, the token goes to its detokenizer thread and the sample runs on meanwhile."""
        if not self.detokenize:
            if self.collect_stop_tokens:
                self._stop_tokens.append((seq.request.request_id, seq.sample_index, seq.token_ids[-1]))
            return reason
        if seq.text is None:
            seq.text = SampleText(self.tokenizer, seq.request.prompt_token_ids, seq.request.params)
        with TOKENIZER_LOCK:
            hit = seq.text.feed(seq.token_ids, seq.num_prompt_tokens)
        if hit is None:
            return reason
        seq.stop_reason = hit
        return "stop"

    def _finish_reason(self, seq: Sequence) -> str | None:
        params = seq.request.params
        token = seq.token_ids[-1]
        if token in self.eos_token_ids and not params.ignore_eos:
            return "stop"  # stop_reason stays None, as vLLM's for EOS
        if token in params.stop_token_ids:
            seq.stop_reason = token
            return "stop"
        if seq.grammar is not None and seq.grammar.finished:
            return "stop"  # the grammar took its stop token (with ignore_eos): nothing may follow
        if seq.num_output_tokens >= params.max_tokens or seq.num_tokens >= self.max_model_len:
            return "length"
        return None

    def _finish(self, seq: Sequence, reason: str, finished: dict[str, RequestOutput]) -> None:
        request = seq.request
        seq.finish_reason = reason
        self.scheduler.finish(seq)
        request.num_finished += 1
        out = finished.setdefault(
            request.request_id,
            RequestOutput(
                request.request_id,
                request.prompt_token_ids,
                prompt=request.prompt,
                prompt_logprobs=prompt_logprobs.complete_prompt_logprobs(request),
            ),
        )
        out.outputs.append(self._completion(request, seq))
        if request.is_finished:
            out.finished = True
            del self.requests[request.request_id]
            self._num_requests_finished += 1

    def _completion(self, request: Request, seq: Sequence) -> CompletionOutput:
        want = request.params.logprobs is not None
        completion = CompletionOutput(
            index=seq.sample_index,
            token_ids=seq.output_token_ids,
            logprobs=list(seq.logprobs) if want else None,
            top_logprobs=list(seq.top_logprobs) if want and request.params.logprobs else None,
            finish_reason=seq.finish_reason or "abort",
            weight_version=oldest_version(seq.weight_versions, default=request.weight_version),
            weight_versions=list(seq.weight_versions),
            kv_versions=list(seq.kv_versions),
            kept_log_mass=list(seq.kept_log_mass) if want else None,
            kept_token_ids=list(seq.kept_token_ids) if request.params.return_kept_tokens else None,
            stop_reason=seq.stop_reason,
            cumulative_logprob=sum(seq.logprobs) if want else None,
        )
        if not self.detokenize:  # the server: its RPC threads make the text (finish_text)
            return completion
        return finish_text(completion, self.tokenizer, request.prompt_token_ids, request.params, seq.text)

    def _new_sequence(self, request: Request, sample_index: int) -> Sequence:
        prompt = request.prompt_token_ids
        counts = TokenCounts() if needs_token_counts(request.params) else None  # counted at its first sample
        return Sequence(
            next(self._seq_ids), request, list(prompt), len(prompt), sample_index, token_counts=counts
        )

    # ---- weights and cache ------------------------------------------------------------------

    @property
    def weight_version(self) -> int:
        return self._weight_version

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
        check_next_version(self._weight_version, version)  # a bad version must refuse before any write
        plan = self._adapter_plan(named_tensors, lora)
        self.adapters.check_base(plan, base_version)
        if self.config.self_check_updates:  # rolled back unless the engine still matches the model
            checked_update.apply_checked(self.local_runner, plan.tensors, self.max_model_len)
        else:
            self.runner.write_weights(plan)
        version = self.commit_weight_version(version, replaces_base=False)
        self.adapters.commit(plan, version)
        self._apply_in_flight(policy.plan(list(self.requests.values()), version))
        return version

    def resolve_update(
        self, named_tensors: NamedTensors, lora: LoraTargets | None = None
    ) -> dict[str, torch.Tensor]:
        """The tensors an update would write (adapters merged), without writing them (retry checks)."""
        return dict(self._adapter_plan(named_tensors, lora).tensors)

    def _adapter_plan(self, named_tensors: NamedTensors, lora: LoraTargets | None) -> AdapterPlan:
        """Validated, adapters merged (under tensor parallelism: into rank 0's shards)."""
        return self.adapters.plan(self.model, named_tensors, lora)

    def _apply_in_flight(self, plan: InFlightPlan) -> None:
        for request_id in plan.abort:
            self.abort_request(request_id)
        self.scheduler.recompute(plan.recompute)
        self.last_in_flight = plan.report
        self.in_flight_totals.add(plan.report)

    def commit_weight_version(self, version: int | None = None, replaces_base: bool = True) -> int:
        """A new version; after writing into the model directly, a new base too (weights/weight_base.py)."""
        if version is None:
            version = self._weight_version + 1
        if version <= self._weight_version:
            raise ValueError(f"version must increase: current {self._weight_version}, got {version}")
        self._weight_version = version
        self.block_manager.set_weight_version(version)
        if replaces_base:
            self.adapters.base_version = version
        return version

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
            "weight_version": self._weight_version,
            **self.in_flight_totals.as_stats("in_flight_"),
            **self.last_in_flight.as_stats("last_update_"),
        }
