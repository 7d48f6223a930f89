from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class InFlightPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    IN_FLIGHT_POLICY_UNSPECIFIED: _ClassVar[InFlightPolicy]
    IN_FLIGHT_POLICY_WAIT: _ClassVar[InFlightPolicy]
    IN_FLIGHT_POLICY_ABORT: _ClassVar[InFlightPolicy]
    IN_FLIGHT_POLICY_KEEP: _ClassVar[InFlightPolicy]
    IN_FLIGHT_POLICY_RECOMPUTE: _ClassVar[InFlightPolicy]

class WeightGroupBackend(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    WEIGHT_GROUP_BACKEND_UNSPECIFIED: _ClassVar[WeightGroupBackend]
    WEIGHT_GROUP_BACKEND_GLOO: _ClassVar[WeightGroupBackend]
    WEIGHT_GROUP_BACKEND_NCCL: _ClassVar[WeightGroupBackend]
IN_FLIGHT_POLICY_UNSPECIFIED: InFlightPolicy
IN_FLIGHT_POLICY_WAIT: InFlightPolicy
IN_FLIGHT_POLICY_ABORT: InFlightPolicy
IN_FLIGHT_POLICY_KEEP: InFlightPolicy
IN_FLIGHT_POLICY_RECOMPUTE: InFlightPolicy
WEIGHT_GROUP_BACKEND_UNSPECIFIED: WeightGroupBackend
WEIGHT_GROUP_BACKEND_GLOO: WeightGroupBackend
WEIGHT_GROUP_BACKEND_NCCL: WeightGroupBackend

class TensorSpec(_message.Message):
    __slots__ = ("name", "shape", "dtype")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    name: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    dtype: str
    def __init__(self, name: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ..., dtype: _Optional[str] = ...) -> None: ...

class WeightManifest(_message.Message):
    __slots__ = ("tensors",)
    TENSORS_FIELD_NUMBER: _ClassVar[int]
    tensors: _containers.RepeatedCompositeFieldContainer[TensorSpec]
    def __init__(self, tensors: _Optional[_Iterable[_Union[TensorSpec, _Mapping]]] = ...) -> None: ...

class CommitOptions(_message.Message):
    __slots__ = ("version", "abort_running", "in_flight", "update_id", "lora_targets", "base")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    ABORT_RUNNING_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    UPDATE_ID_FIELD_NUMBER: _ClassVar[int]
    LORA_TARGETS_FIELD_NUMBER: _ClassVar[int]
    BASE_FIELD_NUMBER: _ClassVar[int]
    version: int
    abort_running: bool
    in_flight: InFlightPolicy
    update_id: str
    lora_targets: _containers.RepeatedCompositeFieldContainer[LoraTarget]
    base: WeightBase
    def __init__(self, version: _Optional[int] = ..., abort_running: _Optional[bool] = ..., in_flight: _Optional[_Union[InFlightPolicy, str]] = ..., update_id: _Optional[str] = ..., lora_targets: _Optional[_Iterable[_Union[LoraTarget, _Mapping]]] = ..., base: _Optional[_Union[WeightBase, _Mapping]] = ...) -> None: ...

class WeightBase(_message.Message):
    __slots__ = ("boot_id", "version")
    BOOT_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    boot_id: str
    version: int
    def __init__(self, boot_id: _Optional[str] = ..., version: _Optional[int] = ...) -> None: ...

class LoraTarget(_message.Message):
    __slots__ = ("module", "scaling", "fan_in_fan_out", "parameter")
    MODULE_FIELD_NUMBER: _ClassVar[int]
    SCALING_FIELD_NUMBER: _ClassVar[int]
    FAN_IN_FAN_OUT_FIELD_NUMBER: _ClassVar[int]
    PARAMETER_FIELD_NUMBER: _ClassVar[int]
    module: str
    scaling: float
    fan_in_fan_out: bool
    parameter: bool
    def __init__(self, module: _Optional[str] = ..., scaling: _Optional[float] = ..., fan_in_fan_out: _Optional[bool] = ..., parameter: _Optional[bool] = ...) -> None: ...

class WeightUpdateHeader(_message.Message):
    __slots__ = ("manifest", "options")
    MANIFEST_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    manifest: WeightManifest
    options: CommitOptions
    def __init__(self, manifest: _Optional[_Union[WeightManifest, _Mapping]] = ..., options: _Optional[_Union[CommitOptions, _Mapping]] = ...) -> None: ...

class WeightChunk(_message.Message):
    __slots__ = ("offset", "data")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    offset: int
    data: bytes
    def __init__(self, offset: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...

class UpdateWeightsRequest(_message.Message):
    __slots__ = ("header", "chunk")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    header: WeightUpdateHeader
    chunk: WeightChunk
    def __init__(self, header: _Optional[_Union[WeightUpdateHeader, _Mapping]] = ..., chunk: _Optional[_Union[WeightChunk, _Mapping]] = ...) -> None: ...

class UpdateWeightsResponse(_message.Message):
    __slots__ = ("weight_version", "num_tensors", "num_bytes", "base")
    WEIGHT_VERSION_FIELD_NUMBER: _ClassVar[int]
    NUM_TENSORS_FIELD_NUMBER: _ClassVar[int]
    NUM_BYTES_FIELD_NUMBER: _ClassVar[int]
    BASE_FIELD_NUMBER: _ClassVar[int]
    weight_version: int
    num_tensors: int
    num_bytes: int
    base: WeightBase
    def __init__(self, weight_version: _Optional[int] = ..., num_tensors: _Optional[int] = ..., num_bytes: _Optional[int] = ..., base: _Optional[_Union[WeightBase, _Mapping]] = ...) -> None: ...

class InitWeightGroupRequest(_message.Message):
    __slots__ = ("master_addr", "master_port", "world_size", "rank", "backend", "timeout_s", "num_ranks")
    MASTER_ADDR_FIELD_NUMBER: _ClassVar[int]
    MASTER_PORT_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    NUM_RANKS_FIELD_NUMBER: _ClassVar[int]
    master_addr: str
    master_port: int
    world_size: int
    rank: int
    backend: WeightGroupBackend
    timeout_s: float
    num_ranks: int
    def __init__(self, master_addr: _Optional[str] = ..., master_port: _Optional[int] = ..., world_size: _Optional[int] = ..., rank: _Optional[int] = ..., backend: _Optional[_Union[WeightGroupBackend, str]] = ..., timeout_s: _Optional[float] = ..., num_ranks: _Optional[int] = ...) -> None: ...

class InitWeightGroupResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class UpdateWeightsFromGroupRequest(_message.Message):
    __slots__ = ("manifest", "options", "update_id", "bucket_bytes")
    MANIFEST_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    UPDATE_ID_FIELD_NUMBER: _ClassVar[int]
    BUCKET_BYTES_FIELD_NUMBER: _ClassVar[int]
    manifest: WeightManifest
    options: CommitOptions
    update_id: str
    bucket_bytes: int
    def __init__(self, manifest: _Optional[_Union[WeightManifest, _Mapping]] = ..., options: _Optional[_Union[CommitOptions, _Mapping]] = ..., update_id: _Optional[str] = ..., bucket_bytes: _Optional[int] = ...) -> None: ...

class UpdateWeightsFromGroupResponse(_message.Message):
    __slots__ = ("weight_version", "base")
    WEIGHT_VERSION_FIELD_NUMBER: _ClassVar[int]
    BASE_FIELD_NUMBER: _ClassVar[int]
    weight_version: int
    base: WeightBase
    def __init__(self, weight_version: _Optional[int] = ..., base: _Optional[_Union[WeightBase, _Mapping]] = ...) -> None: ...

class UpdateWeightsFromDiskRequest(_message.Message):
    __slots__ = ("path", "options")
    PATH_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    path: str
    options: CommitOptions
    def __init__(self, path: _Optional[str] = ..., options: _Optional[_Union[CommitOptions, _Mapping]] = ...) -> None: ...

class UpdateWeightsFromDiskResponse(_message.Message):
    __slots__ = ("weight_version", "num_tensors", "base")
    WEIGHT_VERSION_FIELD_NUMBER: _ClassVar[int]
    NUM_TENSORS_FIELD_NUMBER: _ClassVar[int]
    BASE_FIELD_NUMBER: _ClassVar[int]
    weight_version: int
    num_tensors: int
    base: WeightBase
    def __init__(self, weight_version: _Optional[int] = ..., num_tensors: _Optional[int] = ..., base: _Optional[_Union[WeightBase, _Mapping]] = ...) -> None: ...

class CloseWeightGroupRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CloseWeightGroupResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SharedMemoryHandle(_message.Message):
    __slots__ = ("manager_handle", "storage_handle", "storage_bytes")
    MANAGER_HANDLE_FIELD_NUMBER: _ClassVar[int]
    STORAGE_HANDLE_FIELD_NUMBER: _ClassVar[int]
    STORAGE_BYTES_FIELD_NUMBER: _ClassVar[int]
    manager_handle: bytes
    storage_handle: bytes
    storage_bytes: int
    def __init__(self, manager_handle: _Optional[bytes] = ..., storage_handle: _Optional[bytes] = ..., storage_bytes: _Optional[int] = ...) -> None: ...

class CudaIpcHandle(_message.Message):
    __slots__ = ("device", "storage_handle", "storage_bytes", "storage_offset_bytes", "ref_counter_handle", "ref_counter_offset", "event_handle", "event_sync_required")
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    STORAGE_HANDLE_FIELD_NUMBER: _ClassVar[int]
    STORAGE_BYTES_FIELD_NUMBER: _ClassVar[int]
    STORAGE_OFFSET_BYTES_FIELD_NUMBER: _ClassVar[int]
    REF_COUNTER_HANDLE_FIELD_NUMBER: _ClassVar[int]
    REF_COUNTER_OFFSET_FIELD_NUMBER: _ClassVar[int]
    EVENT_HANDLE_FIELD_NUMBER: _ClassVar[int]
    EVENT_SYNC_REQUIRED_FIELD_NUMBER: _ClassVar[int]
    device: int
    storage_handle: bytes
    storage_bytes: int
    storage_offset_bytes: int
    ref_counter_handle: bytes
    ref_counter_offset: int
    event_handle: bytes
    event_sync_required: bool
    def __init__(self, device: _Optional[int] = ..., storage_handle: _Optional[bytes] = ..., storage_bytes: _Optional[int] = ..., storage_offset_bytes: _Optional[int] = ..., ref_counter_handle: _Optional[bytes] = ..., ref_counter_offset: _Optional[int] = ..., event_handle: _Optional[bytes] = ..., event_sync_required: _Optional[bool] = ...) -> None: ...

class SharedTensor(_message.Message):
    __slots__ = ("spec", "stride", "storage_offset", "cpu", "cuda")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    STRIDE_FIELD_NUMBER: _ClassVar[int]
    STORAGE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    CPU_FIELD_NUMBER: _ClassVar[int]
    CUDA_FIELD_NUMBER: _ClassVar[int]
    spec: TensorSpec
    stride: _containers.RepeatedScalarFieldContainer[int]
    storage_offset: int
    cpu: SharedMemoryHandle
    cuda: CudaIpcHandle
    def __init__(self, spec: _Optional[_Union[TensorSpec, _Mapping]] = ..., stride: _Optional[_Iterable[int]] = ..., storage_offset: _Optional[int] = ..., cpu: _Optional[_Union[SharedMemoryHandle, _Mapping]] = ..., cuda: _Optional[_Union[CudaIpcHandle, _Mapping]] = ...) -> None: ...

class HostIdentity(_message.Message):
    __slots__ = ("boot_id", "hostname")
    BOOT_ID_FIELD_NUMBER: _ClassVar[int]
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    boot_id: str
    hostname: str
    def __init__(self, boot_id: _Optional[str] = ..., hostname: _Optional[str] = ...) -> None: ...

class UpdateWeightsFromSharedRequest(_message.Message):
    __slots__ = ("tensors", "options", "host")
    TENSORS_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    tensors: _containers.RepeatedCompositeFieldContainer[SharedTensor]
    options: CommitOptions
    host: HostIdentity
    def __init__(self, tensors: _Optional[_Iterable[_Union[SharedTensor, _Mapping]]] = ..., options: _Optional[_Union[CommitOptions, _Mapping]] = ..., host: _Optional[_Union[HostIdentity, _Mapping]] = ...) -> None: ...

class UpdateWeightsFromSharedResponse(_message.Message):
    __slots__ = ("weight_version", "num_tensors", "num_bytes", "base")
    WEIGHT_VERSION_FIELD_NUMBER: _ClassVar[int]
    NUM_TENSORS_FIELD_NUMBER: _ClassVar[int]
    NUM_BYTES_FIELD_NUMBER: _ClassVar[int]
    BASE_FIELD_NUMBER: _ClassVar[int]
    weight_version: int
    num_tensors: int
    num_bytes: int
    base: WeightBase
    def __init__(self, weight_version: _Optional[int] = ..., num_tensors: _Optional[int] = ..., num_bytes: _Optional[int] = ..., base: _Optional[_Union[WeightBase, _Mapping]] = ...) -> None: ...
