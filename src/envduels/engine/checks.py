"""What `envduels run` checks before it writes anything: the fixed-pool environments of the
config, every player's server, key and model, and the estimated cost against the budget.

Each check raises one `UserError` naming every problem it found, so a user fixes them all at
once; `play` uses `check_reachable` too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from envduels._fixed_envs import load_fixed_envs
from envduels._net import unreachable
from envduels.config import RunConfig
from envduels.errors import UserError

if TYPE_CHECKING:
    from envduels.envs import EnvSpec

__all__ = ["check_estimate", "check_players", "check_reachable", "load_fixed_envs"]


def _unreachable_url(base_url: str, timeout_s: float) -> str | None:
    """Why `base_url`'s server does not accept connections, or None."""
    url = urlparse(base_url)
    try:
        port = url.port or (443 if url.scheme == "https" else 80)
    except ValueError as err:   # a port out of range or not a number
        return f"not a usable address: {err}"
    return unreachable(url.hostname or "localhost", port, timeout_s)


def _server_problems(cfg: RunConfig, timeout_s: float) -> dict[str, str]:
    """First player's name on each unreachable server -> one line naming every player on it
    (one server shared by four players is one problem, said once)."""
    users: dict[str, list[str]] = {}
    for p in cfg.players:
        if p.provider != "local" and p.base_url:
            users.setdefault(p.base_url, []).append(p.name)
    problems = {}
    for url, names in users.items():
        if (why := _unreachable_url(url, timeout_s)) is not None:
            who = (f"player {names[0]!r}" if len(names) == 1
                   else "players " + ", ".join(repr(n) for n in names))
            problems[names[0]] = (f"{who}: cannot reach {url} ({why}); start the server or fix "
                                  "players[].base_url")
    return problems


def _raise_all(problems: list[str]) -> None:
    if len(problems) == 1:
        raise UserError(problems[0])
    if problems:
        raise UserError(f"{len(problems)} problems; fix them all, then run again:\n  "
                        + "\n  ".join(problems))


def check_reachable(cfg: RunConfig, timeout_s: float = 3.0) -> None:
    """Fail fast, before any work, when a player's server does not accept connections; every
    unreachable server is named, in config order."""
    _raise_all(list(_server_problems(cfg, timeout_s).values()))


def check_players(cfg: RunConfig, timeout_s: float = 3.0) -> None:
    """Every player's preconditions at once (its server accepts connections, its key is set,
    its model file or runtime exists), reported together in config order; players with the
    same problem (one server, one unset variable) share one line. Raises one UserError."""
    from envduels.players import build_player

    servers = _server_problems(cfg, timeout_s)
    grouped: dict[str, list[str]] = {}   # problem without its "player 'x': " -> players
    for p in cfg.players:
        found = [servers[p.name]] if p.name in servers else []
        try:
            build_player(p, cache=None, run_seed=cfg.seed).discard()
        except UserError as err:
            found.append(err.message)
        prefix = f"player {p.name!r}: "
        for message in found:
            if not message.startswith(prefix):   # already names its players: kept as it is
                grouped[message] = []
                continue
            grouped.setdefault(message[len(prefix):], []).append(p.name)
    lines = []
    for rest, names in grouped.items():
        if not names:
            lines.append(rest)
        elif len(names) == 1:
            lines.append(f"player {names[0]!r}: {rest}")
        else:
            lines.append(f"players {', '.join(repr(n) for n in names)}: {rest}")
    _raise_all(lines)


def check_estimate(cfg: RunConfig, fixed_envs: list[EnvSpec], *,
                   say: Callable[[str], None] | None = None) -> None:
    """Print the run's estimated cost (or pass the line to `say`: `envduels.run` prints
    nothing); refuse (UserError) when even its low end is over `budget.max_usd`, before
    anything is spent."""
    from envduels.engine.estimate import dollars, estimate_for, usd

    estimate = estimate_for(cfg, fixed_envs)
    cost = estimate.total("cost_usd")
    spent = f", {usd(estimate.spent_usd)} of it spent" if estimate.spent_usd else ""
    line = f"estimated cost {dollars(cost)}{spent} (`envduels estimate` for the detail)"
    if say is None:
        print(line, flush=True)
    else:
        say(line)
    limit = cfg.budget.max_usd
    if limit is not None and cost.low > limit:
        raise UserError(f"the estimated cost is at least {usd(cost.low)}{spent}, over "
                        f"budget.max_usd {usd(limit)}; raise budget.max_usd or shrink the design "
                        "(rounds, seeds_per_env, trials_per_seed, max_turns)")
