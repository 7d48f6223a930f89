"""The gRPC rollout server: one engine loop fed by every client (see docs/server.md)."""
