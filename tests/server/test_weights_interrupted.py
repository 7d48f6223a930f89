"""A weight push whose client is killed midway leaves the server on its old weights and version."""

import os
import signal
import subprocess
import sys
import textwrap

import torch

from tests.builders import tiny_model
from tests.server.server_builders import client_for
from tests.weights.server_builders import greedy_tokens, reference_tokens, weight_server

# The pushing client: streams a real update and stalls after a few chunks, so it dies mid-stream.
PUSHER = textwrap.dedent(
    """
    import sys, threading
    from rollout.client import RolloutClient
    from rollout.weights import streaming
    from tests.builders import tiny_model

    chunks = streaming.iter_byte_chunks

    def stalling_chunks(tensors, chunk_bytes):
        for count, chunk in enumerate(chunks(tensors, chunk_bytes)):
            if count == 3:
                print("sent", flush=True)
                threading.Event().wait()
            yield chunk

    import rollout.client.weight_push as push
    push.iter_byte_chunks = stalling_chunks
    RolloutClient(sys.argv[1]).update_weights(tiny_model(seed=1), transport="grpc", chunk_bytes=4096)
    """
)


def test_killed_pushing_client_leaves_old_weights_and_version_serving() -> None:
    with weight_server(seed=0) as server, client_for(server) as client:
        before = {name: t.clone() for name, t in server.loop.engine.model.state_dict().items()}
        pusher = subprocess.Popen(
            [sys.executable, "-c", PUSHER, server.address], stdout=subprocess.PIPE, text=True, cwd=os.getcwd()
        )
        try:
            assert pusher.stdout.readline().strip() == "sent"
        finally:
            os.kill(pusher.pid, signal.SIGKILL)
            pusher.wait()
        assert greedy_tokens(client) == reference_tokens(0)
        assert server.loop.engine.weight_version == 0
        after = server.loop.engine.model.state_dict()
        assert all(torch.equal(after[name], before[name]) for name in before)
        assert client.update_weights(tiny_model(seed=1), transport="grpc") == 1  # the server is not stuck
        assert greedy_tokens(client) == reference_tokens(1)
