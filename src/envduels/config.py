"""The run configuration of SPEC §6: a validated pydantic schema, and the facts about its fields.

Unknown keys are errors; `load_config` turns every validation problem into a one-line
`UserError` naming the key and the fix.

Every field changes a run's results unless it is declared with `json_schema_extra=NO_RESULT_EFFECT`
(how fast, how often retried, what it may cost, where results go, what reports show): the run
fingerprint (`engine/_keys.result_settings`) is derived from these declarations, so a new field
enters it by default, and a field that does not change results says so where it is declared.
The price of that default: a release that adds a result-changing field changes the fingerprint
of every existing config (the new key is in it), so runs started before it no longer resume
(`envduels run` says which setting differs). Such a release should say so in its notes.
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo

from envduels import _sandbox_defaults as _sandbox
from envduels.errors import UserError

_ROLES: tuple[Literal["author", "solver"], ...] = ("author", "solver")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")

NO_RESULT_EFFECT: dict[str, JsonValue] = {"changes_results": False}
"""`Field(..., json_schema_extra=NO_RESULT_EFFECT)`: the field never changes a result (a run may
resume with another value). Without it a field changes results and enters the run fingerprint."""

HINT_MAX_CHARS = 600
"""The longest hint an environment may have unless the config (`tournament.hint_max_chars`) or
`envduels validate --hint-max-chars` says otherwise."""


MAX_OPEN_SANDBOXES = 64
"""Sandboxes a run keeps open at once (episodes, validations and audits together), whatever the
players' concurrency: each is a process tree with its own memory cap."""


@dataclass(frozen=True)
class PlayerConcurrency:
    """One player's concurrency limits, decided here from its `max_concurrency`.

    `units`: the player's units of work in flight at once, in both roles together (an episode it
    solves, an environment it authors: the scheduler's slots), and also its calls in flight (its
    own semaphore: each unit holds at most one call at a time). `http_keepalive` and
    `http_connections` size its HTTP client's connection pool: `units` connections kept open
    (at least 8), twice that in all."""

    units: int
    http_keepalive: int
    http_connections: int


@dataclass(frozen=True)
class RunConcurrency:
    """A run's concurrency limits (`RunConfig.concurrency`): the scheduler, the players and the
    sandbox pool's sizing read them here, and nowhere else derives one."""

    players: dict[str, PlayerConcurrency]
    open_sandboxes: int       # sandboxes open at once (MAX_OPEN_SANDBOXES)
    warm_sandboxes: int       # workers the pool keeps ready at least (`sandbox.warm_workers`)
    max_warm_sandboxes: int   # ... and at most: as many as the solvers can use at once


def changes_results(field: FieldInfo) -> bool:
    """Whether a config field can change a run's results (True unless declared `NO_RESULT_EFFECT`)."""
    extra = field.json_schema_extra
    return not (isinstance(extra, dict) and extra.get("changes_results") is False)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Price(_Strict):
    """US dollars per million tokens. Input read from the provider's prompt cache is billed at
    `cached_input_per_mtok`, input written to it at `cache_write_per_mtok`; each defaults to
    `input_per_mtok` (`cached_input`, `cache_write` give the figure in force)."""

    input_per_mtok: float = Field(default=0.0, ge=0)
    output_per_mtok: float = Field(default=0.0, ge=0)
    cached_input_per_mtok: float | None = Field(default=None, ge=0)
    cache_write_per_mtok: float | None = Field(default=None, ge=0)

    @property
    def cached_input(self) -> float:
        """Dollars per million input tokens read from the prompt cache."""
        return self.input_per_mtok if self.cached_input_per_mtok is None else self.cached_input_per_mtok

    @property
    def cache_write(self) -> float:
        """Dollars per million input tokens written to the prompt cache."""
        return self.input_per_mtok if self.cache_write_per_mtok is None else self.cache_write_per_mtok


class PlayerConfig(_Strict):
    name: str
    provider: Literal["local", "openai", "anthropic"]
    model: str
    base_url: str | None = Field(default=None, json_schema_extra=NO_RESULT_EFFECT)
    api_key_env: str | None = Field(default=None, json_schema_extra=NO_RESULT_EFFECT)
    temperature: float = Field(default=0.7, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    max_tokens: int = Field(default=1024, ge=1, le=200_000)
    # Authoring writes a whole program; solving writes one action. None: same as max_tokens.
    author_max_tokens: int | None = Field(default=None, ge=1, le=200_000)
    context_tokens: int | None = Field(default=None, ge=256)
    reasoning_effort: Literal["minimal", "low", "medium", "high"] | None = None
    timeout_s: float = Field(default=120.0, gt=0, json_schema_extra=NO_RESULT_EFFECT)
    max_retries: int = Field(default=6, ge=0, le=50, json_schema_extra=NO_RESULT_EFFECT)
    # calls in flight at once (see `concurrency`): how fast, never what is answered
    max_concurrency: int = Field(default=4, ge=1, le=4096, json_schema_extra=NO_RESULT_EFFECT)
    requests_per_minute: float | None = Field(default=None, gt=0, json_schema_extra=NO_RESULT_EFFECT)
    tokens_per_minute: float | None = Field(default=None, gt=0, json_schema_extra=NO_RESULT_EFFECT)
    params_b: float | None = Field(default=None, gt=0, json_schema_extra=NO_RESULT_EFFECT)   # reports' model size, nothing else
    roles: list[Literal["author", "solver"]] = Field(default_factory=lambda: [*_ROLES])
    price: Price = Field(default_factory=Price, json_schema_extra=NO_RESULT_EFFECT)
    # Ask the provider's prompt cache to hold the conversation (docs/players.md); never
    # changes an answer, only what it is billed.
    cache: bool = Field(default=True, json_schema_extra=NO_RESULT_EFFECT)

    @field_validator("name")
    @classmethod
    def _name_ok(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError("use letters, digits, '_', '-', '.' (at most 64 characters)")
        return v

    @field_validator("roles")
    @classmethod
    def _roles_ok(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("give at least one of author, solver")
        if len(set(v)) != len(v):
            raise ValueError("list each role once")
        return v

    @field_validator("api_key_env")
    @classmethod
    def _env_name_ok(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", v):
            raise ValueError("give the NAME of an environment variable that holds the key, never the key")
        return v

    @property
    def concurrency(self) -> PlayerConcurrency:
        """This player's concurrency limits (the one place that derives them)."""
        keepalive = max(self.max_concurrency, 8)
        return PlayerConcurrency(units=self.max_concurrency, http_keepalive=keepalive,
                                 http_connections=2 * keepalive)

    @property
    def authors(self) -> bool:
        return "author" in self.roles

    @property
    def solves(self) -> bool:
        return "solver" in self.roles


class TournamentConfig(_Strict):
    # more (or fewer) rounds extend a run; earlier rounds do not depend on how many follow
    rounds: int = Field(default=1, ge=1, le=100, json_schema_extra=NO_RESULT_EFFECT)
    envs_per_author: int = Field(default=1, ge=1, le=1000)
    seeds_per_env: int = Field(default=4, ge=1, le=1000)
    trials_per_seed: int = Field(default=1, ge=1, le=100)
    max_turns: int = Field(default=24, ge=1, le=1000)
    history: Literal["none", "own", "all"] = "all"
    history_chars: int = Field(default=6000, ge=0)
    author_repairs: int = Field(default=2, ge=0, le=20)
    require_oracle: bool = True
    hint_max_chars: int = Field(default=HINT_MAX_CHARS, ge=1)
    self_play: bool = True
    environments: list[str] = Field(default_factory=list)


class SandboxConfig(_Strict):
    """The sandbox's limits (`sandbox.SandboxLimits.from_config`). The limits on resources
    decide only how soon a misbehaving environment is stopped, never what a well-behaved one
    does; the observation cap changes what a solver sees."""

    memory_mb: int = Field(default=_sandbox.MEMORY_MB, ge=64, le=65536, json_schema_extra=NO_RESULT_EFFECT)
    step_timeout_s: float = Field(default=_sandbox.STEP_TIMEOUT_S, gt=0, le=600, json_schema_extra=NO_RESULT_EFFECT)
    cpu_s: int = Field(default=_sandbox.CPU_S, ge=1, json_schema_extra=NO_RESULT_EFFECT)
    max_procs: int = Field(default=_sandbox.MAX_PROCS, ge=1, le=4096, json_schema_extra=NO_RESULT_EFFECT)
    observation_max_chars: int = Field(default=_sandbox.OBSERVATION_MAX_CHARS, ge=100)
    warm_workers: int = Field(default=2, ge=0, le=256, json_schema_extra=NO_RESULT_EFFECT)
    # harness worker processes that hold the sandboxes (docs/workers.md): None, one per core;
    # 0, none (all sandbox work on the command's own event loop). Never changes a result.
    workers: int | None = Field(default=None, ge=0, le=1024, json_schema_extra=NO_RESULT_EFFECT)
    # bubblewrap (the default) or gvisor: gVisor's user-space kernel (`runsc`) gives each
    # sandbox its own kernel counters, /proc and clocks (docs/sandbox.md, "Runtimes")
    runtime: Literal["bubblewrap", "gvisor"] = Field(default=_sandbox.RUNTIME,
                                                     json_schema_extra=NO_RESULT_EFFECT)


class BudgetConfig(_Strict):
    """When a run stops spending; a resumed run may raise it."""

    max_usd: float | None = Field(default=None, ge=0, json_schema_extra=NO_RESULT_EFFECT)
    max_tokens: int | None = Field(default=None, ge=0, json_schema_extra=NO_RESULT_EFFECT)


class ExecutorConfig(_Strict):
    """Where environment code runs (docs/engine.md, "Executors"). Never changes a result: a run
    may resume on the other executor."""

    kind: Literal["local", "ray"] = Field(default="local", json_schema_extra=NO_RESULT_EFFECT)
    address: str | None = Field(default=None, json_schema_extra=NO_RESULT_EFFECT)   # ray: "auto" (this machine's cluster) or HOST:PORT
    sandboxes_per_cpu: int = Field(default=4, ge=1, le=256, json_schema_extra=NO_RESULT_EFFECT)   # ray: sandboxes a node holds per CPU


class RunConfig(_Strict):
    name: str = Field(json_schema_extra=NO_RESULT_EFFECT)
    seed: int = 0
    output_dir: str | None = Field(default=None, json_schema_extra=NO_RESULT_EFFECT)
    players: list[PlayerConfig] = Field(default_factory=list)
    tournament: TournamentConfig = Field(default_factory=TournamentConfig)
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    budget: BudgetConfig = Field(default_factory=BudgetConfig)
    executor: ExecutorConfig = Field(default_factory=ExecutorConfig)

    @model_validator(mode="after")
    def _coherent(self) -> RunConfig:
        names = [p.name for p in self.players]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"player names must be unique; repeated: {', '.join(dupes)}")
        if not any(p.solves for p in self.players):
            raise ValueError("at least one player needs the solver role")
        if not any(p.authors for p in self.players) and not self.tournament.environments:
            raise ValueError(
                "nothing to play: give a player the author role or list tournament.environments"
            )
        return self

    @property
    def concurrency(self) -> RunConcurrency:
        """The run's concurrency limits (the one place that derives them)."""
        warm = self.sandbox.warm_workers
        in_flight = sum(p.max_concurrency for p in self.players if p.solves)
        return RunConcurrency(
            players={p.name: p.concurrency for p in self.players},
            open_sandboxes=MAX_OPEN_SANDBOXES, warm_sandboxes=warm,
            max_warm_sandboxes=max(warm, min(MAX_OPEN_SANDBOXES, in_flight)))

    @property
    def run_dir(self) -> Path:
        return Path(self.output_dir or f"runs/{self.name}")

    def player(self, name: str) -> PlayerConfig:
        for p in self.players:
            if p.name == name:
                return p
        raise UserError(f"no player named {name!r} in the config; choose one of {', '.join(p.name for p in self.players)}")


def _describe(err: ValidationError, source: str) -> str:
    first = err.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "(top level)"
    kind = first["type"]
    if kind == "extra_forbidden":
        return f"{source}: unknown key '{where}'; remove it or check its spelling against docs/SPEC.md §6"
    if kind == "missing":
        return f"{source}: missing key '{where}'; add it (see examples/quickstart.yaml)"
    msg = first["msg"].removeprefix("Value error, ")
    more = f" (and {len(err.errors()) - 1} more problem(s))" if len(err.errors()) > 1 else ""
    return f"{source}: '{where}': {msg}{more}"


def parse_config(data: object, source: str = "config") -> RunConfig:
    """Validate an already-parsed mapping; raises `UserError` with one line on any problem."""
    if not isinstance(data, dict):
        raise UserError(f"{source}: expected a YAML mapping with keys name, players, tournament, ...")
    try:
        return RunConfig.model_validate(data)
    except ValidationError as err:
        raise UserError(_describe(err, source)) from None


def parse_recorded_config(data: object) -> RunConfig | None:
    """A config a run database recorded, validated by today's schema; None if it cannot be.

    The database may come from another version: keys this version does not know are dropped
    and values it no longer accepts take today's defaults, so an older run still opens (its
    fingerprint, recorded beside it, still decides whether it may resume). None when nothing
    usable was recorded (no config, a required key unusable, players that no longer cohere).
    """
    if not isinstance(data, dict):
        return None
    data = copy.deepcopy(data)
    for _ in range(256):   # each pass removes one value: a bound, not a tuning knob
        try:
            return RunConfig.model_validate(data)
        except ValidationError as err:
            # one value per pass: dropping a list item shifts the indices of the later errors
            refused = [e for e in err.errors() if e["type"] != "missing"]
            if not refused or not _drop(data, refused[0]["loc"]):
                return None
    return None


def _drop(data: object, loc: tuple[int | str, ...]) -> bool:
    """Remove the deepest key of `loc` (a pydantic error location, which may end in a union
    member's name) that exists in the nested dicts and lists of `data`."""
    drop: Callable[[], object] | None = None
    for step in loc:
        if isinstance(data, dict) and step in data:
            drop, data = functools.partial(data.pop, step), data[step]
            continue
        if isinstance(data, list) and isinstance(step, int) and 0 <= step < len(data):
            drop, data = functools.partial(data.pop, step), data[step]
            continue
        break
    if drop is None:
        return False
    drop()
    return True


CONFIG_MAX_BYTES = 1 << 20
"""The largest config file read (an honest one is a few KB; `envduels._safe_load`)."""


def load_config(path: str | Path) -> RunConfig:
    """Read and validate a YAML run configuration. A missing, non-regular or oversized file,
    bad YAML, nesting, integers or aliases past `envduels._safe_load`'s limits: one-line
    `UserError`."""
    from envduels._safe_load import parse_yaml, read_text_capped

    p = Path(path)
    missing = (f"config file {str(p)!r} not found; pass the path to a YAML file such as "
               "examples/quickstart.yaml")
    text = read_text_capped(p, CONFIG_MAX_BYTES, "config file", missing)
    try:
        data = parse_yaml(text, str(p))
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise UserError(f"{p}: not valid YAML{where}; fix the syntax (indentation, colons, quotes)") from None
    return parse_config(data, str(p))
