"""The duel engine: authoring, solving, history digests and the scheduling of a run.

- `authoring`: the author prompt, reply parsing, validate-and-repair (SPEC §3);
- `solving`: one episode exactly as SPEC §4 (`EpisodeTask`, `play_episode`, `last_boxed`);
- `history`: the digest of earlier rounds an author may see;
- `scheduler`: rounds, matched pairs, concurrency, resume, budget (`Tournament`, `Executor`);
- `checks`: what `run` checks before it writes anything (fixed pools, players, cost);
- `run`: `check_run` and `run_session`, what both `envduels run` and `envduels.run(...)` call
  (the CLI adds the display, the summary and the exit codes);
- `status`, `play`, `estimate`: the commands `envduels status`, `play`, `estimate`.

Design notes: docs/engine.md.
"""

from envduels.engine.authoring import AuthorReply, author_prompt, parse_reply
from envduels.engine.history import history_digest
from envduels.engine.scheduler import AsyncioExecutor, Executor, RunResult, Tournament
from envduels.engine.solving import EpisodeResult, EpisodeTask, last_boxed, play_episode

__all__ = [
    "AsyncioExecutor",
    "AuthorReply",
    "EpisodeResult",
    "EpisodeTask",
    "Executor",
    "RunResult",
    "Tournament",
    "author_prompt",
    "history_digest",
    "last_boxed",
    "parse_reply",
    "play_episode",
]
