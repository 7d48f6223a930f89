"""gRPC metadata keys that client and server both read: part of the wire contract, like the protos."""

BOOT_ID_KEY = "rollout-boot-id"  # initial metadata of every response: the answering server process's id
