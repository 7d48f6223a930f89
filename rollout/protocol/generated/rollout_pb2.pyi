from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class FinishReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FINISH_REASON_UNSPECIFIED: _ClassVar[FinishReason]
    FINISH_REASON_STOP: _ClassVar[FinishReason]
    FINISH_REASON_LENGTH: _ClassVar[FinishReason]
    FINISH_REASON_ABORT: _ClassVar[FinishReason]

class LogprobsMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LOGPROBS_MODE_UNSPECIFIED: _ClassVar[LogprobsMode]
    LOGPROBS_MODE_PROCESSED: _ClassVar[LogprobsMode]
    LOGPROBS_MODE_RAW: _ClassVar[LogprobsMode]
    LOGPROBS_MODE_RAW_LOGITS: _ClassVar[LogprobsMode]
    LOGPROBS_MODE_PROCESSED_LOGITS: _ClassVar[LogprobsMode]
FINISH_REASON_UNSPECIFIED: FinishReason
FINISH_REASON_STOP: FinishReason
FINISH_REASON_LENGTH: FinishReason
FINISH_REASON_ABORT: FinishReason
LOGPROBS_MODE_UNSPECIFIED: LogprobsMode
LOGPROBS_MODE_PROCESSED: LogprobsMode
LOGPROBS_MODE_RAW: LogprobsMode
LOGPROBS_MODE_RAW_LOGITS: LogprobsMode
LOGPROBS_MODE_PROCESSED_LOGITS: LogprobsMode

class SamplingParams(_message.Message):
    __slots__ = ("n", "max_tokens", "temperature", "top_p", "top_k", "min_p", "repetition_penalty", "seed", "stop_token_ids", "ignore_eos", "logprobs", "logprobs_mode", "max_staleness", "return_kept_tokens", "stop", "include_stop_str_in_output", "skip_special_tokens", "spaces_between_special_tokens", "detokenize", "min_tokens", "presence_penalty", "frequency_penalty", "logit_bias", "allowed_token_ids", "bad_words", "bad_words_token_ids", "prompt_logprobs", "structured_outputs")
    class LogitBiasEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: float
        def __init__(self, key: _Optional[int] = ..., value: _Optional[float] = ...) -> None: ...
    N_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    MIN_P_FIELD_NUMBER: _ClassVar[int]
    REPETITION_PENALTY_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    STOP_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    IGNORE_EOS_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_MODE_FIELD_NUMBER: _ClassVar[int]
    MAX_STALENESS_FIELD_NUMBER: _ClassVar[int]
    RETURN_KEPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_STOP_STR_IN_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    SKIP_SPECIAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SPACES_BETWEEN_SPECIAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    DETOKENIZE_FIELD_NUMBER: _ClassVar[int]
    MIN_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PRESENCE_PENALTY_FIELD_NUMBER: _ClassVar[int]
    FREQUENCY_PENALTY_FIELD_NUMBER: _ClassVar[int]
    LOGIT_BIAS_FIELD_NUMBER: _ClassVar[int]
    ALLOWED_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    BAD_WORDS_FIELD_NUMBER: _ClassVar[int]
    BAD_WORDS_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    STRUCTURED_OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    n: int
    max_tokens: int
    temperature: float
    top_p: float
    top_k: int
    min_p: float
    repetition_penalty: float
    seed: int
    stop_token_ids: _containers.RepeatedScalarFieldContainer[int]
    ignore_eos: bool
    logprobs: int
    logprobs_mode: LogprobsMode
    max_staleness: int
    return_kept_tokens: bool
    stop: _containers.RepeatedScalarFieldContainer[str]
    include_stop_str_in_output: bool
    skip_special_tokens: bool
    spaces_between_special_tokens: bool
    detokenize: bool
    min_tokens: int
    presence_penalty: float
    frequency_penalty: float
    logit_bias: _containers.ScalarMap[int, float]
    allowed_token_ids: TokenIds
    bad_words: _containers.RepeatedScalarFieldContainer[str]
    bad_words_token_ids: _containers.RepeatedCompositeFieldContainer[TokenIds]
    prompt_logprobs: int
    structured_outputs: StructuredOutputs
    def __init__(self, n: _Optional[int] = ..., max_tokens: _Optional[int] = ..., temperature: _Optional[float] = ..., top_p: _Optional[float] = ..., top_k: _Optional[int] = ..., min_p: _Optional[float] = ..., repetition_penalty: _Optional[float] = ..., seed: _Optional[int] = ..., stop_token_ids: _Optional[_Iterable[int]] = ..., ignore_eos: _Optional[bool] = ..., logprobs: _Optional[int] = ..., logprobs_mode: _Optional[_Union[LogprobsMode, str]] = ..., max_staleness: _Optional[int] = ..., return_kept_tokens: _Optional[bool] = ..., stop: _Optional[_Iterable[str]] = ..., include_stop_str_in_output: _Optional[bool] = ..., skip_special_tokens: _Optional[bool] = ..., spaces_between_special_tokens: _Optional[bool] = ..., detokenize: _Optional[bool] = ..., min_tokens: _Optional[int] = ..., presence_penalty: _Optional[float] = ..., frequency_penalty: _Optional[float] = ..., logit_bias: _Optional[_Mapping[int, float]] = ..., allowed_token_ids: _Optional[_Union[TokenIds, _Mapping]] = ..., bad_words: _Optional[_Iterable[str]] = ..., bad_words_token_ids: _Optional[_Iterable[_Union[TokenIds, _Mapping]]] = ..., prompt_logprobs: _Optional[int] = ..., structured_outputs: _Optional[_Union[StructuredOutputs, _Mapping]] = ...) -> None: ...

class StructuredOutputs(_message.Message):
    __slots__ = ("json", "regex", "choice", "grammar", "json_object", "structural_tag", "disable_any_whitespace")
    JSON_FIELD_NUMBER: _ClassVar[int]
    REGEX_FIELD_NUMBER: _ClassVar[int]
    CHOICE_FIELD_NUMBER: _ClassVar[int]
    GRAMMAR_FIELD_NUMBER: _ClassVar[int]
    JSON_OBJECT_FIELD_NUMBER: _ClassVar[int]
    STRUCTURAL_TAG_FIELD_NUMBER: _ClassVar[int]
    DISABLE_ANY_WHITESPACE_FIELD_NUMBER: _ClassVar[int]
    json: str
    regex: str
    choice: StringList
    grammar: str
    json_object: bool
    structural_tag: str
    disable_any_whitespace: bool
    def __init__(self, json: _Optional[str] = ..., regex: _Optional[str] = ..., choice: _Optional[_Union[StringList, _Mapping]] = ..., grammar: _Optional[str] = ..., json_object: _Optional[bool] = ..., structural_tag: _Optional[str] = ..., disable_any_whitespace: _Optional[bool] = ...) -> None: ...

class StringList(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, values: _Optional[_Iterable[str]] = ...) -> None: ...

class TokenIds(_message.Message):
    __slots__ = ("ids",)
    IDS_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, ids: _Optional[_Iterable[int]] = ...) -> None: ...

class ChatMessage(_message.Message):
    __slots__ = ("role", "content", "message_json")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_JSON_FIELD_NUMBER: _ClassVar[int]
    role: str
    content: str
    message_json: str
    def __init__(self, role: _Optional[str] = ..., content: _Optional[str] = ..., message_json: _Optional[str] = ...) -> None: ...

class ChatMessages(_message.Message):
    __slots__ = ("messages", "tools_json")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    TOOLS_JSON_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[ChatMessage]
    tools_json: str
    def __init__(self, messages: _Optional[_Iterable[_Union[ChatMessage, _Mapping]]] = ..., tools_json: _Optional[str] = ...) -> None: ...

class Prompt(_message.Message):
    __slots__ = ("token_ids", "text", "chat", "request_id", "resume", "images")
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    CHAT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RESUME_FIELD_NUMBER: _ClassVar[int]
    IMAGES_FIELD_NUMBER: _ClassVar[int]
    token_ids: TokenIds
    text: str
    chat: ChatMessages
    request_id: str
    resume: PartialSample
    images: _containers.RepeatedCompositeFieldContainer[Image]
    def __init__(self, token_ids: _Optional[_Union[TokenIds, _Mapping]] = ..., text: _Optional[str] = ..., chat: _Optional[_Union[ChatMessages, _Mapping]] = ..., request_id: _Optional[str] = ..., resume: _Optional[_Union[PartialSample, _Mapping]] = ..., images: _Optional[_Iterable[_Union[Image, _Mapping]]] = ...) -> None: ...

class Image(_message.Message):
    __slots__ = ("data", "mime_type")
    DATA_FIELD_NUMBER: _ClassVar[int]
    MIME_TYPE_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    mime_type: str
    def __init__(self, data: _Optional[bytes] = ..., mime_type: _Optional[str] = ...) -> None: ...

class VersionSpan(_message.Message):
    __slots__ = ("first_token_index", "version")
    FIRST_TOKEN_INDEX_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    first_token_index: int
    version: int
    def __init__(self, first_token_index: _Optional[int] = ..., version: _Optional[int] = ...) -> None: ...

class PartialSample(_message.Message):
    __slots__ = ("index", "token_ids", "logprobs", "top_logprobs", "weight_versions", "kv_versions", "kept_log_mass", "kept_token_ids", "logprob_ranks")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    TOP_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    KV_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    KEPT_LOG_MASS_FIELD_NUMBER: _ClassVar[int]
    KEPT_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    LOGPROB_RANKS_FIELD_NUMBER: _ClassVar[int]
    index: int
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    logprobs: _containers.RepeatedScalarFieldContainer[float]
    top_logprobs: _containers.RepeatedCompositeFieldContainer[TopLogprobs]
    weight_versions: _containers.RepeatedCompositeFieldContainer[VersionSpan]
    kv_versions: _containers.RepeatedCompositeFieldContainer[VersionSpan]
    kept_log_mass: _containers.RepeatedScalarFieldContainer[float]
    kept_token_ids: _containers.RepeatedCompositeFieldContainer[TokenIds]
    logprob_ranks: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, index: _Optional[int] = ..., token_ids: _Optional[_Iterable[int]] = ..., logprobs: _Optional[_Iterable[float]] = ..., top_logprobs: _Optional[_Iterable[_Union[TopLogprobs, _Mapping]]] = ..., weight_versions: _Optional[_Iterable[_Union[VersionSpan, _Mapping]]] = ..., kv_versions: _Optional[_Iterable[_Union[VersionSpan, _Mapping]]] = ..., kept_log_mass: _Optional[_Iterable[float]] = ..., kept_token_ids: _Optional[_Iterable[_Union[TokenIds, _Mapping]]] = ..., logprob_ranks: _Optional[_Iterable[int]] = ...) -> None: ...

class GenerateRequest(_message.Message):
    __slots__ = ("request_id", "prompts", "params")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PROMPTS_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    prompts: _containers.RepeatedCompositeFieldContainer[Prompt]
    params: SamplingParams
    def __init__(self, request_id: _Optional[str] = ..., prompts: _Optional[_Iterable[_Union[Prompt, _Mapping]]] = ..., params: _Optional[_Union[SamplingParams, _Mapping]] = ...) -> None: ...

class TopLogprob(_message.Message):
    __slots__ = ("token_id", "logprob", "rank")
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    LOGPROB_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    token_id: int
    logprob: float
    rank: int
    def __init__(self, token_id: _Optional[int] = ..., logprob: _Optional[float] = ..., rank: _Optional[int] = ...) -> None: ...

class TopLogprobs(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[TopLogprob]
    def __init__(self, entries: _Optional[_Iterable[_Union[TopLogprob, _Mapping]]] = ...) -> None: ...

class Sample(_message.Message):
    __slots__ = ("index", "token_ids", "logprobs", "top_logprobs", "finish_reason", "weight_version", "text", "weight_versions", "kv_versions", "kept_log_mass", "kept_token_ids", "stop_string", "stop_token_id", "cumulative_logprob", "logprobs_mode", "logprob_ranks")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    TOP_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_VERSION_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    KV_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    KEPT_LOG_MASS_FIELD_NUMBER: _ClassVar[int]
    KEPT_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    STOP_STRING_FIELD_NUMBER: _ClassVar[int]
    STOP_TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    CUMULATIVE_LOGPROB_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_MODE_FIELD_NUMBER: _ClassVar[int]
    LOGPROB_RANKS_FIELD_NUMBER: _ClassVar[int]
    index: int
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    logprobs: _containers.RepeatedScalarFieldContainer[float]
    top_logprobs: _containers.RepeatedCompositeFieldContainer[TopLogprobs]
    finish_reason: FinishReason
    weight_version: int
    text: str
    weight_versions: _containers.RepeatedCompositeFieldContainer[VersionSpan]
    kv_versions: _containers.RepeatedCompositeFieldContainer[VersionSpan]
    kept_log_mass: _containers.RepeatedScalarFieldContainer[float]
    kept_token_ids: _containers.RepeatedCompositeFieldContainer[TokenIds]
    stop_string: str
    stop_token_id: int
    cumulative_logprob: float
    logprobs_mode: LogprobsMode
    logprob_ranks: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, index: _Optional[int] = ..., token_ids: _Optional[_Iterable[int]] = ..., logprobs: _Optional[_Iterable[float]] = ..., top_logprobs: _Optional[_Iterable[_Union[TopLogprobs, _Mapping]]] = ..., finish_reason: _Optional[_Union[FinishReason, str]] = ..., weight_version: _Optional[int] = ..., text: _Optional[str] = ..., weight_versions: _Optional[_Iterable[_Union[VersionSpan, _Mapping]]] = ..., kv_versions: _Optional[_Iterable[_Union[VersionSpan, _Mapping]]] = ..., kept_log_mass: _Optional[_Iterable[float]] = ..., kept_token_ids: _Optional[_Iterable[_Union[TokenIds, _Mapping]]] = ..., stop_string: _Optional[str] = ..., stop_token_id: _Optional[int] = ..., cumulative_logprob: _Optional[float] = ..., logprobs_mode: _Optional[_Union[LogprobsMode, str]] = ..., logprob_ranks: _Optional[_Iterable[int]] = ...) -> None: ...

class GenerateResponse(_message.Message):
    __slots__ = ("request_id", "prompt_index", "sample", "prompt_token_ids", "num_samples", "prompt_logprobs", "num_cached_tokens")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PROMPT_INDEX_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    NUM_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    PROMPT_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    NUM_CACHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    prompt_index: int
    sample: Sample
    prompt_token_ids: _containers.RepeatedScalarFieldContainer[int]
    num_samples: int
    prompt_logprobs: _containers.RepeatedCompositeFieldContainer[TopLogprobs]
    num_cached_tokens: int
    def __init__(self, request_id: _Optional[str] = ..., prompt_index: _Optional[int] = ..., sample: _Optional[_Union[Sample, _Mapping]] = ..., prompt_token_ids: _Optional[_Iterable[int]] = ..., num_samples: _Optional[int] = ..., prompt_logprobs: _Optional[_Iterable[_Union[TopLogprobs, _Mapping]]] = ..., num_cached_tokens: _Optional[int] = ...) -> None: ...

class GenerateBatchRequest(_message.Message):
    __slots__ = ("request_id", "prompts", "params")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PROMPTS_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    prompts: _containers.RepeatedCompositeFieldContainer[Prompt]
    params: SamplingParams
    def __init__(self, request_id: _Optional[str] = ..., prompts: _Optional[_Iterable[_Union[Prompt, _Mapping]]] = ..., params: _Optional[_Union[SamplingParams, _Mapping]] = ...) -> None: ...

class PromptResult(_message.Message):
    __slots__ = ("request_id", "prompt_token_ids", "samples", "prompt_logprobs", "num_cached_tokens")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    PROMPT_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    NUM_CACHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    prompt_token_ids: _containers.RepeatedScalarFieldContainer[int]
    samples: _containers.RepeatedCompositeFieldContainer[Sample]
    prompt_logprobs: _containers.RepeatedCompositeFieldContainer[TopLogprobs]
    num_cached_tokens: int
    def __init__(self, request_id: _Optional[str] = ..., prompt_token_ids: _Optional[_Iterable[int]] = ..., samples: _Optional[_Iterable[_Union[Sample, _Mapping]]] = ..., prompt_logprobs: _Optional[_Iterable[_Union[TopLogprobs, _Mapping]]] = ..., num_cached_tokens: _Optional[int] = ...) -> None: ...

class GenerateBatchResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[PromptResult]
    def __init__(self, results: _Optional[_Iterable[_Union[PromptResult, _Mapping]]] = ...) -> None: ...

class GetServerInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetServerInfoResponse(_message.Message):
    __slots__ = ("model", "architecture", "dtype", "device", "max_model_len", "vocab_size", "eos_token_ids", "weight_version", "logprobs_modes", "block_size", "num_blocks_total", "num_blocks_free", "num_blocks_cached", "max_num_seqs", "has_tokenizer", "version", "model_config", "boot_id", "prefix_caching", "state_bytes_per_seq", "max_state_snapshots", "default_logprobs_mode", "weight_group_ranks")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    ARCHITECTURE_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    MAX_MODEL_LEN_FIELD_NUMBER: _ClassVar[int]
    VOCAB_SIZE_FIELD_NUMBER: _ClassVar[int]
    EOS_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_VERSION_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_MODES_FIELD_NUMBER: _ClassVar[int]
    BLOCK_SIZE_FIELD_NUMBER: _ClassVar[int]
    NUM_BLOCKS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    NUM_BLOCKS_FREE_FIELD_NUMBER: _ClassVar[int]
    NUM_BLOCKS_CACHED_FIELD_NUMBER: _ClassVar[int]
    MAX_NUM_SEQS_FIELD_NUMBER: _ClassVar[int]
    HAS_TOKENIZER_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    MODEL_CONFIG_FIELD_NUMBER: _ClassVar[int]
    BOOT_ID_FIELD_NUMBER: _ClassVar[int]
    PREFIX_CACHING_FIELD_NUMBER: _ClassVar[int]
    STATE_BYTES_PER_SEQ_FIELD_NUMBER: _ClassVar[int]
    MAX_STATE_SNAPSHOTS_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_LOGPROBS_MODE_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_GROUP_RANKS_FIELD_NUMBER: _ClassVar[int]
    model: str
    architecture: str
    dtype: str
    device: str
    max_model_len: int
    vocab_size: int
    eos_token_ids: _containers.RepeatedScalarFieldContainer[int]
    weight_version: int
    logprobs_modes: _containers.RepeatedScalarFieldContainer[LogprobsMode]
    block_size: int
    num_blocks_total: int
    num_blocks_free: int
    num_blocks_cached: int
    max_num_seqs: int
    has_tokenizer: bool
    version: str
    model_config: str
    boot_id: str
    prefix_caching: bool
    state_bytes_per_seq: int
    max_state_snapshots: int
    default_logprobs_mode: LogprobsMode
    weight_group_ranks: int
    def __init__(self, model: _Optional[str] = ..., architecture: _Optional[str] = ..., dtype: _Optional[str] = ..., device: _Optional[str] = ..., max_model_len: _Optional[int] = ..., vocab_size: _Optional[int] = ..., eos_token_ids: _Optional[_Iterable[int]] = ..., weight_version: _Optional[int] = ..., logprobs_modes: _Optional[_Iterable[_Union[LogprobsMode, str]]] = ..., block_size: _Optional[int] = ..., num_blocks_total: _Optional[int] = ..., num_blocks_free: _Optional[int] = ..., num_blocks_cached: _Optional[int] = ..., max_num_seqs: _Optional[int] = ..., has_tokenizer: _Optional[bool] = ..., version: _Optional[str] = ..., model_config: _Optional[str] = ..., boot_id: _Optional[str] = ..., prefix_caching: _Optional[bool] = ..., state_bytes_per_seq: _Optional[int] = ..., max_state_snapshots: _Optional[int] = ..., default_logprobs_mode: _Optional[_Union[LogprobsMode, str]] = ..., weight_group_ranks: _Optional[int] = ...) -> None: ...

class ResetPrefixCacheRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ResetPrefixCacheResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class AbortRequest(_message.Message):
    __slots__ = ("request_id",)
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    def __init__(self, request_id: _Optional[str] = ...) -> None: ...

class AbortResponse(_message.Message):
    __slots__ = ("found",)
    FOUND_FIELD_NUMBER: _ClassVar[int]
    found: bool
    def __init__(self, found: _Optional[bool] = ...) -> None: ...

class PauseRequest(_message.Message):
    __slots__ = ("abort_running",)
    ABORT_RUNNING_FIELD_NUMBER: _ClassVar[int]
    abort_running: bool
    def __init__(self, abort_running: _Optional[bool] = ...) -> None: ...

class PauseResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ResumeRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ResumeResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SleepRequest(_message.Message):
    __slots__ = ("level", "abort_running")
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    ABORT_RUNNING_FIELD_NUMBER: _ClassVar[int]
    level: int
    abort_running: bool
    def __init__(self, level: _Optional[int] = ..., abort_running: _Optional[bool] = ...) -> None: ...

class SleepResponse(_message.Message):
    __slots__ = ("bytes_freed",)
    BYTES_FREED_FIELD_NUMBER: _ClassVar[int]
    bytes_freed: int
    def __init__(self, bytes_freed: _Optional[int] = ...) -> None: ...

class WakeUpRequest(_message.Message):
    __slots__ = ("tags",)
    TAGS_FIELD_NUMBER: _ClassVar[int]
    tags: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, tags: _Optional[_Iterable[str]] = ...) -> None: ...

class WakeUpResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class IsSleepingRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class IsSleepingResponse(_message.Message):
    __slots__ = ("is_sleeping", "level", "sleeping_tags", "awaiting_weights")
    IS_SLEEPING_FIELD_NUMBER: _ClassVar[int]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    SLEEPING_TAGS_FIELD_NUMBER: _ClassVar[int]
    AWAITING_WEIGHTS_FIELD_NUMBER: _ClassVar[int]
    is_sleeping: bool
    level: int
    sleeping_tags: _containers.RepeatedScalarFieldContainer[str]
    awaiting_weights: bool
    def __init__(self, is_sleeping: _Optional[bool] = ..., level: _Optional[int] = ..., sleeping_tags: _Optional[_Iterable[str]] = ..., awaiting_weights: _Optional[bool] = ...) -> None: ...

class GetMetricsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetMetricsResponse(_message.Message):
    __slots__ = ("prometheus_text",)
    PROMETHEUS_TEXT_FIELD_NUMBER: _ClassVar[int]
    prometheus_text: str
    def __init__(self, prometheus_text: _Optional[str] = ...) -> None: ...

class ScoreRequest(_message.Message):
    __slots__ = ("request_id", "sequences", "top_logprobs")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCES_FIELD_NUMBER: _ClassVar[int]
    TOP_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    sequences: _containers.RepeatedCompositeFieldContainer[TokenIds]
    top_logprobs: int
    def __init__(self, request_id: _Optional[str] = ..., sequences: _Optional[_Iterable[_Union[TokenIds, _Mapping]]] = ..., top_logprobs: _Optional[int] = ...) -> None: ...

class ScoreResult(_message.Message):
    __slots__ = ("request_id", "token_ids", "logprobs", "top_logprobs", "weight_version")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    TOP_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_VERSION_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    logprobs: _containers.RepeatedScalarFieldContainer[float]
    top_logprobs: _containers.RepeatedCompositeFieldContainer[TopLogprobs]
    weight_version: int
    def __init__(self, request_id: _Optional[str] = ..., token_ids: _Optional[_Iterable[int]] = ..., logprobs: _Optional[_Iterable[float]] = ..., top_logprobs: _Optional[_Iterable[_Union[TopLogprobs, _Mapping]]] = ..., weight_version: _Optional[int] = ...) -> None: ...

class ScoreResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[ScoreResult]
    def __init__(self, results: _Optional[_Iterable[_Union[ScoreResult, _Mapping]]] = ...) -> None: ...
