"""A blocking client for one `envduels serve` session, in the shape trainers' environment hooks
take: `reset(**dataset_row)` returns the first user turn, `play(reply)` one turn, `get_reward()`
the episode's reward. TRL's `GRPOTrainer(environment_factory=lambda: DuelClient(url))` uses it
as is (its `reset` gets each dataset row's columns; `play` becomes the model's tool); other
trainers wrap it (docs/training.md). Built on OpenEnv's own `GenericEnvClient` (WebSocket).
"""

from __future__ import annotations

from envduels.duel.protocol import Entry

RESET_COLUMNS = ("env_id", "seed", "hint", "max_turns")


class DuelClient:
    """One session (one WebSocket, one sandbox at a time) on the server at `base_url`.

    Episodes follow the duel's rules on the server (`envduels.duel.protocol`). A server error
    (a bad row, an environment fault) raises RuntimeError with the server's one line; so does a
    step after the server closed the session for idleness (its reason). A `reset` after such a
    close opens a new session: a trainer idle between episodes longer than the server's
    `--idle-timeout` goes on.
    """

    def __init__(self, base_url: str, *, message_timeout_s: float = 120.0) -> None:
        # the serve extra's: imported here so that `envduels.serve.client` imports without it
        from openenv.core.generic_client import GenericEnvClient
        from websockets.exceptions import ConnectionClosed

        self._closed_by_server = ConnectionClosed
        self._client = GenericEnvClient(base_url=base_url,
                                        message_timeout_s=message_timeout_s).sync()
        self.text = ""
        self.system = ""
        self.reward = 0.0
        self.done = True
        self.success = False
        self.observation: dict[str, object] = {}

    def reset(self, **row: object) -> str:
        """Start an episode from a dataset row: its `env_id`, `seed`, `hint` (0, 1 or 2) and
        `max_turns` columns are the reset's (the others, such as `prompt`, are ignored), so
        that a GRPO group, which repeats one row, is one environment and seed. Returns the
        duel's first user turn (`Hint: ...` first when hinted); `system` holds the duel's
        solver system prompt."""
        kwargs = {k: v for k, v in row.items() if k in RESET_COLUMNS and v is not None}
        try:
            result = self._client.reset(**kwargs)
        except self._closed_by_server:   # reaped while idle: a new connection is a new session
            self._client.disconnect()
            result = self._client.reset(**kwargs)
        self.observation = dict(result.observation)
        self.system = str(self.observation.get("system", ""))
        self.text, self.reward, self.done, self.success = (str(self.observation["text"]), 0.0,
                                                           False, False)
        return self.text

    def play(self, reply: str) -> str:
        """Play one turn of the game.

        Args:
            reply: Your whole reply for this turn; the action is its last \\boxed{...}.

        Returns:
            What the game says next.
        """
        if self.done:
            return "The episode is over; no more actions are taken."
        try:
            result = self._client.step({"message": reply})
        except self._closed_by_server as err:
            self.done, self.success = True, False
            why = err.rcvd.reason if err.rcvd is not None and err.rcvd.reason else str(err)
            raise RuntimeError(f"the server closed the session: {why}") from None
        except RuntimeError as err:
            # OpenEnv's client (0.10) reconnects by itself after the server closed the socket,
            # so a reaped session shows as a fresh connection with no episode
            if "no episode is running" not in str(err):
                raise
            self.done, self.success = True, False
            why = str(err).removeprefix("Server error: ")
            raise RuntimeError(f"the server closed the session: {why}") from None
        self.observation = dict(result.observation)
        self.text = str(self.observation["text"])
        self.reward = float(result.reward or 0.0)
        self.done = bool(result.done)
        self.success = bool(self.observation.get("success"))
        return self.text

    def get_reward(self) -> float:
        """The episode's reward: 1.0 for a success (terminated with reward > 0), else 0.0."""
        return 1.0 if self.success else 0.0

    def transcript(self) -> list[Entry]:
        """The episode's transcript as the server recorded it (the duel's)."""
        return list(self._client.state().get("transcript", []))

    def close(self) -> None:
        """End the session (the server kills its sandbox)."""
        self._client.close()

    def __enter__(self) -> DuelClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
