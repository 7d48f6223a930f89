"""The client side: RolloutClient (rollout_client.py), its generate calls, load spreading and weight pushes.

Importing it loads grpc and the protocol stubs, never torch or the engine.
"""

from rollout.client.rollout_client import RolloutClient

__all__ = ["RolloutClient"]
