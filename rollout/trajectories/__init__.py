"""Token-exact trajectories from any agent framework, recorded under its `openai` client (recorder.py, with
the httpx transports in recording_transport.py): each reply's tokens, logprobs and weight versions (turn.py,
streams assembled by stream_capture.py), per episode with the prefix check per turn (episode.py), exported
to what TRL's rollout_func and custom loops train on (trl_export.py). Needs httpx (the `openai` client's
own dependency); imports nothing of the engine or the server. docs/openai.md, "Trajectory recorder".
"""

from rollout.trajectories.episode import Episode, TrajectorySample
from rollout.trajectories.recorder import EPISODE_HEADER, TrajectoryRecorder
from rollout.trajectories.trl_export import TrajectoryError, episode_sample, trl_batch
from rollout.trajectories.turn import Turn

__all__ = [
    "EPISODE_HEADER",
    "Episode",
    "TrajectoryError",
    "TrajectoryRecorder",
    "TrajectorySample",
    "Turn",
    "episode_sample",
    "trl_batch",
]
