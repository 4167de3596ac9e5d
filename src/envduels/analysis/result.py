"""The analysis of one run as typed records: `RunReport` is the SPEC §8 object of `report --json`.

`analysis.summary.analyze` builds a `RunReport` (validated: a wrong shape fails where the report
is made, not where it is read); the report, the viewer and the export read its attributes.
`RunReport.to_json()` is exactly the JSON `report --json` wrote before these types existed (same
keys in the same order, same values), and `RunReport.model_json_schema()` is what
`envduels report --schema` prints.

Conventions a caller may rely on:
- a metric with no data is None (JSON null), never 0 (SPEC §8);
- a `Real` (`int | float`) keeps an integer as an integer (a count stays `3`, not `3.0`), so the JSON is the one
  the analysis functions produced;
- a few keys are absent, not null, in some reports (`run.source`, `irt.converged`,
  `convergence.null_ci`): the field's docstring says when; `to_json()` leaves them out then;
- flags are `envduels.duel.outcomes.Flag` members of `FLAGS`, which serialise to the stored names;
- unknown keys are refused (`extra="forbid"`): a new analysis key is declared here first.
"""

from __future__ import annotations

from typing import Annotated, Literal, TypeAlias

from pydantic import AfterValidator, BaseModel, ConfigDict, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from envduels.duel.outcomes import FLAGS, Flag

JSONValue: TypeAlias = None | bool | int | float | str | list["JSONValue"] | dict[str, "JSONValue"]
"""Any value `json.dumps` writes without help (what `summary.json_safe` returns)."""

Real = int | float
"""A JSON number: a float, or an int where the analysis produced an int (kept as is: pydantic's
smart union keeps the exact type, so the JSON keeps the producer's `3` or `3.0`)."""


def _listed(flag: Flag) -> Flag:
    if flag not in FLAGS:
        raise ValueError(f"{flag.value!r} is validation's own flag, which no report lists")
    return flag


class _ListedInSchema:
    """The schema's `Flag` lists what a report can hold (`FLAGS`), not every member."""

    @staticmethod
    def __get_pydantic_json_schema__(schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        ref = handler(schema)
        handler.resolve_ref_schema(ref)["enum"] = [flag.value for flag in FLAGS]
        return ref


ReportedFlag: TypeAlias = Annotated[Flag, AfterValidator(_listed), _ListedInSchema()]
"""A flag a report lists: one of `duel.outcomes.FLAGS` (`Flag.SEED_IGNORED` is validation's
alone), in the schema too."""


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class RunInfo(_Record):
    """What was run: its name, players, size and cost."""

    name: str
    """The run's name (its config's `name`, else its folder's name; an episodes file's stem)."""
    players: list[str]
    """Every player of the config, in config order."""
    rounds: int
    """The highest round an environment was authored in (0 when there are none)."""
    episodes: int
    """Episodes in the run database, every outcome."""
    cost_usd: Real | None
    """Total provider cost in US dollars; None when no player reported a cost."""
    history: str | None
    """The tournament's `history` mode; None when the run has no config."""
    matched_pairs: int
    """Matched pairs (one solver, environment and seed, played without and with the hint)."""
    bootstrap: int
    """Bootstrap resamples behind the intervals (0: none were computed)."""
    source: Literal["episodes"] | None = None
    """`"episodes"` when the report rates a JSON Lines episodes file; absent for a run database."""


class SolverRow(_Record):
    """One solver's SPEC §5 metrics over other authors' environments."""

    model: str
    hint_gain: Real | None
    """Mean lift (with-hint minus without-hint success) over its matched pairs."""
    hint_rescue: Real | None
    """P(win with the hint | lost without it)."""
    hint_harm: Real | None
    """P(lost with the hint | won without it)."""
    without_hint_accuracy: Real | None
    """Share of its matched pairs solved without the hint."""
    with_hint_accuracy: Real | None
    """Share of its matched pairs solved with the hint."""
    canonical_autonomous_solve: Real | None
    """No-hint success per environment, averaged within each domain, then across domains."""
    common_panel_solve: Real | None
    """No-hint success on the environments every solver played; None without such environments."""
    episodes: int
    """Its episodes, every outcome."""
    incomplete: int
    """Its episodes that ended `incomplete` (the environment's fault)."""
    errors: int
    """Its episodes that ended `error` (the host's or provider's fault)."""
    self_play_episodes: int
    """Its episodes on environments it wrote itself (not in any metric)."""
    pairs: int
    """Its matched pairs."""
    rescues: int
    """Pairs lost without the hint and won with it."""
    harms: int
    """Pairs won without the hint and lost with it."""
    mcnemar_p: Real | None
    """Exact McNemar p of rescues against harms; None without discordant pairs."""


class AuthorRow(_Record):
    """One author's SPEC §5 metrics."""

    model: str
    environments: int
    """Environments it wrote (valid or not)."""
    valid_environments: int
    invalid_environments: int
    author_faults: int
    """Episodes on its environments that ended `incomplete`."""
    hint_authoring: Real | None
    """Mean lift its hints gave the panel, per environment, domain-balanced."""
    design_score: Real | None
    """How well its environments separate solvers (0: all alike, 1: maximally split)."""
    pairs: int
    """Matched pairs played on its environments."""


class RatingRow(_Record):
    """One model's rating of one kind, on the Elo scale (1000 = the average rated model)."""

    model: str
    rating: Real
    ci_low: Real | None
    """Lower end of the 95% interval; None when open (lost everything) or not computed."""
    ci_high: Real | None
    """Upper end of the 95% interval; None when open (won everything) or not computed."""
    ci_note: str | None
    """Why an end of the interval is open, in words."""
    rank: int | None
    """1 + the number of models certainly better (rank rule); None when ranks are withheld."""
    above: list[str] | None
    """The models this one is certainly above; None when ranks are withheld."""
    below: list[str] | None
    """The models certainly above this one; None when ranks are withheld."""
    tied_with: list[str] | None
    """The models the rank rule cannot separate from this one; None when ranks are withheld."""
    points: Real
    """Points scored (a tie counts ½)."""
    games: Real
    """Comparisons played."""


class Ratings(_Record):
    """The three ratings, each best first (`analysis.summary.ordered`)."""

    duel: list[RatingRow]
    author: list[RatingRow]
    solver: list[RatingRow]


class RatingMethod(_Record):
    """How one rating's intervals were made, and why intervals or ranks are missing."""

    interval: str
    """`"profile likelihood"`, `"bootstrap"` or `"none"`."""
    note: str | None
    """Why there are no intervals; None when there are."""
    rank_note: str | None
    """Why ranks are withheld though intervals exist; None when ranks are given."""


class UnratedAuthor(_Record):
    """An author the author rating leaves out."""

    model: str
    reason: str
    """Why, in words a user can act on."""


class DuelMethod(RatingMethod):
    overdispersion: Real | None
    """The factor the duel's profile intervals are widened by (environments' overdispersion)."""


class AuthorMethod(RatingMethod):
    unrated: list[UnratedAuthor]
    """Every author without an author-rating row, in author order."""


class RatingMethods(_Record):
    duel: DuelMethod
    author: AuthorMethod
    solver: RatingMethod


class Cycle(_Record):
    """One 3-cycle of the duel's head-to-head shares."""

    models: list[str]
    significant: bool
    """Every edge is significant (Bonferroni-corrected)."""


class ExpectedRate(_Record):
    """A rate under a transitive (Bradley–Terry) model replaying the same matches."""

    mean: Real | None
    low: Real | None
    """2.5th percentile."""
    high: Real | None
    """97.5th percentile."""
    p_at_least_observed: Real | None
    """Share of replays at least as high as observed."""


class ExpectedTransitivity(_Record):
    draws: int
    """Replays simulated."""
    tie_rate: Real
    cycles: ExpectedRate
    wst_violations: ExpectedRate
    sst_violations: ExpectedRate


class Transitivity(_Record):
    """Whether the duel results are transitive (SPEC §5)."""

    triads: int
    """Triads of models whose three pairs all met."""
    cycles: int
    """Triads that form a 3-cycle."""
    significant_cycles: int
    significant_edges: int
    significance: Literal["environments", "bootstrap", "wilson"]
    """What backs an edge's significance."""
    wst_violations: Real | None
    """Share of chains violating weak stochastic transitivity; None without chains."""
    sst_violations: Real | None
    """Share of chains violating strong stochastic transitivity; None without chains."""
    chains: int
    cycle_list: list[Cycle]
    bt_log_loss: Real | None
    """Log loss of the Bradley–Terry fit per game; None without games."""
    saturated_log_loss: Real | None
    """Log loss of the observed shares per game; None without games."""
    expected: ExpectedTransitivity | None
    """The same rates under a transitive model; None without triads or a fit."""


class Crossing(_Record):
    """A pair the author and solver ratings order oppositely."""

    better_solver: str
    better_author: str
    p_solver: Real
    """The solver rank test's two-sided p-value for this pair (it favours `better_solver`)."""
    p_author: Real
    """The author rank test's two-sided p-value for this pair (it favours `better_author`)."""
    certain: bool
    """Both orders are rank claims under the ratings' family-wise rule (Holm at 0.05)."""


class Divergence(_Record):
    """Whether good solvers are good authors: author vs solver ratings over common models."""

    spearman: Real | None
    """Spearman ρ; None with fewer than 3 common models."""
    ci_low: Real | None
    ci_high: Real | None
    models: int
    """Models rated both as author and as solver."""
    best_solver: str | None
    best_author: str | None
    best_solver_is_best_author: bool | None
    spearman_bias_corrected: Real | None
    ci_method: str | None
    ci_note: str | None
    """Why there is no interval, in words."""
    reliability_author: Real | None
    reliability_solver: Real | None
    p_value: Real | None = None
    """The divergence test's one-sided p-value (null: authoring and solving rank the models the
    same way, author strength a non-decreasing function of solver strength; small when author
    strength falls as solver strength rises); None without a test (`test_note` says why).
    Absent from reports written before the test existed, and read back as None."""
    claim: bool = False
    """True exactly when the report states that authoring and solving rank these models
    differently: p_value < 0.05."""
    test_note: str | None = None
    """Why there is no test, in words; None when there is one."""
    crossings: list[Crossing] = []
    """Pairs where one model is certainly the better solver and the other certainly the better
    author (both rank claims hold under the ratings' family-wise rule), clearest first."""
    clearest_crossing: Crossing | None = None
    """The pair the two ratings order most clearly oppositely: the first certain crossing, else
    the pair whose rank tests together give the smallest p-value; None when the ratings order
    no pair oppositely (or have no rank tests)."""


class EnvironmentRow(_Record):
    """One environment: who wrote it, whether it is valid, its flags and its panel's rates."""

    id: str
    author: str
    round: int
    domain: str | None
    valid: bool
    invalid_reason: str | None
    """Why validation refused it; None when valid."""
    hint: str | None
    fixed_pool: bool
    """A library environment of the fixed pool (not authored in this run)."""
    flags: list[ReportedFlag]
    """Its flags, in `duel.outcomes.FLAGS` order."""
    title: str | None
    panel_no_hint: Real | None
    """The panel's no-hint success over its matched pairs; None without pairs."""
    panel_with_hint: Real | None
    lift: Real | None
    """`panel_with_hint - panel_no_hint`; None without pairs."""
    pairs: int


class IrtSolver(_Record):
    model: str
    ability: Real
    """Logit scale, centred to mean 0."""


class IrtAuthor(_Record):
    model: str
    difficulty: Real
    teaching: Real
    """Mean hint effect of its environments (logit scale)."""
    environments: int


class IrtEnvironment(_Record):
    id: str
    difficulty: Real
    hint_effect: Real


class Irt(_Record):
    """The item-response view of the matched pairs."""

    converged: bool | None = None
    """Whether the fit converged; absent when there were no matched pairs to fit."""
    solvers: list[IrtSolver]
    authors: list[IrtAuthor]
    environments: list[IrtEnvironment]


class Slope(_Record):
    """An OLS slope over rounds with its 95% interval; all None when it cannot be fitted."""

    slope: Real | None
    ci_low: Real | None
    ci_high: Real | None
    p: Real | None
    p_holm: Real | None
    """Holm-adjusted across the authors."""


class LearningRound(_Record):
    round: int
    environments: int
    lift: Real | None
    validity: Real | None


class LearningAuthor(_Record):
    model: str
    rounds: list[LearningRound]
    lift_slope: Slope
    validity_slope: Slope


class Learning(_Record):
    """Per-author lift and validity by round."""

    rounds: list[int]
    authors: list[LearningAuthor]
    correction: str
    """How the p-values were corrected for multiple authors."""


class Cluster(_Record):
    environments: list[str]
    authors: list[str]


class MapPoint(_Record):
    id: str
    author: str
    x: Real
    y: Real


class Convergence(_Record):
    """Whether authors converge on similar designs (embedding similarity)."""

    backend: str
    """The embedding used: `"minilm"` or `"tfidf"`."""
    backend_reason: str
    cluster_similarity: Real
    environments: int
    cross_author_similarity: Real | None
    within_author_similarity: Real | None
    null_mean: Real | None
    null_ci: list[Real] | None = None
    """The shuffled-author null's 95% range; absent when there were too few environments."""
    p_distinct: Real | None
    p_converge: Real | None
    clusters: list[Cluster]
    multi_author_clusters: int
    vendi: Real | None
    map: list[MapPoint]


class ScalePoint(_Record):
    model: str
    params_b: Real
    rating: Real


class ScaleKind(_Record):
    points: list[ScalePoint]
    spearman: Real | None
    """Spearman ρ of size against rating; None with fewer than 3 distinct sizes."""


class Scale(_Record):
    """Does a player's size (`params_b`) predict its rating?"""

    models_with_size: int
    author: ScaleKind
    solver: ScaleKind
    duel: ScaleKind


class CostRow(_Record):
    """One player's usage, as the run database totals it (None where it holds no figure)."""

    model: str
    cost_usd: Real | None
    input_tokens: Real | None
    output_tokens: Real | None
    cache_read_tokens: Real | None
    cache_write_tokens: Real | None
    reasoning_tokens: Real | None
    saved_usd: Real | None
    """What prompt caching saved against billing every input token at the input price."""


class LearnabilityRow(_Record):
    env_id: str
    solver: str
    p: Real
    learnability: Real


class FlaggedEnvironment(_Record):
    id: str
    flags: list[ReportedFlag]


class FlaggedLead(_Record):
    """The duel leader's `hint_leak`/`hint_gated` environments and where it lands without them."""

    model: str
    environments: list[FlaggedEnvironment]
    position_without: int | None
    """1-based place when refitted without them; None when it is no longer rated."""
    models_without: int


class RatingNotes(_Record):
    """Kept for readers of earlier reports: the same as `rating_methods.<kind>.note`."""

    duel: str | None
    author: str | None
    solver: str | None


class RunReport(_Record):
    """The whole analysis of one run: the SPEC §8 object and the keys the report adds."""

    run: RunInfo
    solvers: list[SolverRow]
    authors: list[AuthorRow]
    ratings: Ratings
    rating_methods: RatingMethods
    transitivity: Transitivity
    divergence: Divergence
    environments: list[EnvironmentRow]
    irt: Irt
    learning: Learning
    convergence: Convergence | None
    """None when the tables carry no environment source (an episodes file)."""
    scale: Scale
    costs: list[CostRow] | None
    """None for an episodes file (no usage recorded)."""
    learnability: list[LearnabilityRow]
    duel_flagged_lead: FlaggedLead | None
    """None when the duel leader wrote no `hint_leak`/`hint_gated` environment."""
    rating_notes: RatingNotes

    def to_json(self) -> dict[str, object]:
        """The JSON object `report --json` writes: the fields in declaration order, the keys a
        producer left out left out (`exclude_unset`), flags as their names."""
        return self.model_dump(mode="json", exclude_unset=True)
