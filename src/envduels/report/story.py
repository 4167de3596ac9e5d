"""The report's story: the findings of one run in plain sentences, with their uncertainty.

Who is the best author, solver and duellist, how sure that is (the rank rule: a model is ahead
only when its 95% interval clears the other's), what drives each leader, and what could not be
said and why. Every sentence comes from the SPEC §8 record (`analysis.result.RunReport`), so the
terminal, the HTML report and a reader of report.json see the same story. Ties: models whose printed
ratings are equal are *level*; models that the rank rule cannot separate are *statistically
tied*; both are said as such, in `analysis.summary.ordered` order (rank, rating, name).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from envduels.analysis.metrics import HINT_GATED_HINTED_MIN, HINT_GATED_NO_HINT_MAX
from envduels.analysis.result import RatingMethod, RatingRow, RunReport
from envduels.analysis.summary import level_with_top
from envduels.duel.outcomes import Flag

Kind = Literal["author", "solver", "duel"]

ROLE = {"author": "author", "solver": "solver", "duel": "duellist"}
ROLES = {"author": "Authors", "solver": "Solvers", "duel": "Duellists"}

GLOSSARY: dict[str, str] = {
    "lift": "pass rate with the hint minus pass rate without it, on the same seeds (matched pairs)",
    "matched pair": "one solver on one environment and seed, played once without and once with the hint; "
                    "only pairs whose two episodes both ended in success or failure count",
    "panel": "the solvers of an environment other than its author",
    "duel rating": "Bradley–Terry rating on the Elo scale (1000 = the average rated model) from head-to-head "
                   "matches: on A's environments A scores when B needed the hint (failed without, won with), "
                   "B scores when it won without the hint; an invalid environment forfeits",
    "author rating": "the same rating from author-vs-author comparisons: on each solver both authors faced, "
                     "whose hints raised that solver's pass rate more",
    "solver rating": "the same rating from solver-vs-solver comparisons: on each environment both solvers "
                     "played, who solved more often without the hint",
    "95% interval": "the range the rating is 95% sure to lie in: over the matches (profile likelihood) for the "
                    "duel rating, over bootstrap resamples of the environments for the author and solver ratings; "
                    "an open end (∞) when a model won or lost everything",
    "rank": "1 + the number of models certainly better than this one (tested pairwise, family-wise at 95%)",
    "statistically tied": "the rank rule cannot tell the models apart: neither is certainly better",
    "level": "the same rating as printed, to the nearest point (ratings within 1e-6 logits are one tie and "
             "print alike)",
    "hint gain": "a solver's mean lift on other authors' environments",
    "rescue": "how often the hint turned a failure into a success: P(win with hint | lost without)",
    "harm": "how often the hint turned a success into a failure: P(lost with hint | won without)",
    "McNemar p": "exact test of rescues against harms on this run's environments: small means that on "
                 "these environments the hint turned this solver's failures into wins more (or less) often "
                 "than the reverse, beyond chance; it treats the environments as fixed, so it does not say "
                 "the hint helps this solver on other environments",
    "no hint / with hint": "share of matched pairs solved without / with the hint",
    "autonomous solve": "no-hint success rate per environment, averaged within each domain, then across "
                        "domains",
    "hint authoring": "an author's mean lift over the panel's matched pairs, per environment, then balanced "
                      "across domains: how much its hints help other models",
    "design score": "how well an author's environments separate solvers: the spread of the panel's "
                    "no-hint success rates (0: all alike, 1: maximally split), per seed, domain-balanced",
    "faults": "authoring attempts that failed validation or crashed before an environment was accepted",
    "difficulty": "item-response view: how hard an author's environments are (logit scale, higher is harder)",
    "teaching": "item-response view: the mean hint effect of an author's environments (logit scale)",
    "ability": "item-response view: a solver's skill on the logit scale",
    Flag.HINT_GATED: f"flag: the panel won at most {HINT_GATED_NO_HINT_MAX:.0%} of its matched pairs without the hint and "
                f"at least {HINT_GATED_HINTED_MIN:.0%} with it",
    Flag.HINT_LEAK: "flag: the hinted wins copy the hint (a winning answer found verbatim in it, or most wins made of "
               "nothing but the hint's words and what the environment showed)",
    Flag.UNSOLVED_WITH_HINT: "flag: no panel solver won even with the hint",
    Flag.NONDETERMINISTIC: "flag: the replay audit found an episode that a fresh instance given the same seed and "
                      "actions does not reproduce; every episode of it counts as its author's fault",
    Flag.TRIVIAL: "flag: in validation a policy without intelligence (random, constant or echoed actions, no hint) won "
             "most seeds; every episode of it counts as its author's fault",
    Flag.HINT_IS_KEY: "flag: in validation copying the hint's words (and echoing what the environment showed) won most "
                 "seeds: the hint is the answer or a password; every episode of it counts as its author's fault",
    Flag.FIXED_ANSWER: "flag: the winning answer is the same on every seed (validation's oracle gave one final answer "
                  "on every seed it played, or what the hint changed in the wins it rescued was the same on too many "
                  "seeds to be a coincidence), so a hint can simply hand it over, in any disguise; every episode of "
                  "it counts as its author's fault",
}
"""Every column and term the report shows, defined once (hover titles and the glossary section)."""


def _plural(n: int, word: str, many: str | None = None) -> str:
    """`1 environment`, `2 environments` (`many` for irregular plurals)."""
    return f"{n} {word if n == 1 else many or word + 's'}"


def names(models: list[str]) -> str:
    """`a`, `a and b`, `a, b and c`."""
    return models[0] if len(models) == 1 else ", ".join(models[:-1]) + " and " + models[-1]


def as_report(j: RunReport | Mapping[str, object]) -> RunReport:
    """`j` itself, or a report.json object read back (validated: ValidationError on another shape)."""
    return j if isinstance(j, RunReport) else RunReport.model_validate(j)


def _interval(r: RatingRow) -> str:
    lo, hi = r.ci_low, r.ci_high
    if lo is None and hi is None:
        return f"{r.rating:.0f}"
    s = f"{r.rating:.0f}, 95% interval {'−∞' if lo is None else f'{lo:.0f}'} to {'∞' if hi is None else f'{hi:.0f}'}"
    return s + (f"; {r.ci_note}" if r.ci_note else "")


def separation(rows: list[RatingRow]) -> tuple[list[str], list[str], bool]:
    """For the leader (`rows[0]`): the models statistically tied with it and those certainly
    behind it, in `ordered` order, and whether the rank rule separates no two models at all.

    Reads the rank rule's per-row lists (`tied_with`, `above`: family-wise, see
    `analysis.ratings`); rows without them (ranks withheld) fall back to rank 1 = tied."""
    top = rows[0]
    if top.tied_with is not None:
        tied = [r.model for r in rows if r.model in top.tied_with]
        behind = [r.model for r in rows if r.model in (top.above or [])]
        return tied, behind, all(not r.above for r in rows)
    first = [r.model for r in rows[1:] if r.rank == 1]
    return first, [r.model for r in rows[1:] if r.model not in first], len(first) == len(rows) - 1


def unrated_reason(kind: str, j: RunReport | Mapping[str, object]) -> str:
    """Why a rating kind has fewer than two rated models, in words a user can act on.

    `j` may also be a mapping with just `solvers` (`model`) and `environments` (`author`,
    `valid`, `fixed_pool`): the leaderboard knows no more before analysing."""
    if isinstance(j, RunReport):
        solvers = [s.model for s in j.solvers]
        authored = [(e.author, e.valid) for e in j.environments if not e.fixed_pool]
    else:
        solvers = [str(s["model"]) for s in _records(j, "solvers")]
        authored = [(str(e["author"]), bool(e["valid"])) for e in _records(j, "environments") if not e.get("fixed_pool")]
    writers = sorted({a for a, valid in authored if valid})
    if kind == "solver":
        if len(solvers) < 2:
            who = f" ({solvers[0]})" if solvers else ""
            return (f"this run has {_plural(len(solvers), 'solver')}{who}; a solver rating compares "
                    "two or more solvers on common environments")
        return "no two solvers both finished matched pairs on a common environment"
    if kind == "author":
        if authored and not writers:
            return "no authored environment was valid"
        if len(writers) < 2:
            return (f"{_plural(len(writers), 'author')} wrote a valid environment; an author rating compares "
                    "two or more authors on common solvers")
        return "no solver finished matched pairs on the valid environments of two different authors"
    return "no two models met in a scored duel"


def _records(j: Mapping[str, object], key: str) -> list[Mapping[str, object]]:
    rows = j.get(key) or []
    return [r for r in rows if isinstance(r, Mapping)] if isinstance(rows, list) else []


def _validity(j: RunReport) -> list[str]:
    authored = [e for e in j.environments if not e.fixed_pool]
    pool = [e for e in j.environments if e.fixed_pool]
    valid = [e for e in authored if e.valid]
    if not authored or valid:
        return []
    reasons = sorted({e.invalid_reason or "no reason recorded" for e in authored})
    s = (f"No authored environment was valid: {'the one' if len(authored) == 1 else f'all {len(authored)}'} "
         f"failed validation ({'; '.join(reasons[:2])}{'; …' if len(reasons) > 2 else ''}), so nothing here "
         "measures authoring")
    if pool:
        s += (f"; the solvers played only the {_plural(len(pool), 'library environment')} of the fixed pool, "
              "and the duels count each invalid environment as a forfeit")
    return [s + "."]


def _rows(j: RunReport, kind: Kind) -> list[RatingRow]:
    rows: list[RatingRow] = getattr(j.ratings, kind)
    return rows


def _driver(kind: Kind, j: RunReport, leaders: list[str]) -> str:
    """What the leading model(s) did to lead: the plain metric behind the rating, for the
    leaders and the next model in rating order (for scale)."""
    rest = [r.model for r in _rows(j, kind) if r.model not in leaders]
    models = leaders + rest[:1]
    if kind == "author":
        authoring = {r.model: r.hint_authoring for r in j.authors}
        vals = [(x, v) for x in models if (v := authoring.get(x)) is not None]
        if not vals:
            return ""
        parts = ", ".join(f"{x} {v:+.2f}" for x, v in vals)
        return f" Hint authoring (mean lift its hints gave the panel): {parts}."
    if kind == "solver":
        solved = {r.model: r.without_hint_accuracy for r in j.solvers}
        vals = [(x, v) for x in models if (v := solved.get(x)) is not None]
        if not vals:
            return ""
        return " Solved without the hint: " + ", ".join(f"{x} {100 * v:.0f}%" for x, v in vals) + "."
    duel = {r.model: r for r in j.ratings.duel}
    won = [f"{x} {duel[x].points:g} of {duel[x].games:g}" for x in models if x in duel]
    return " Matches won (a tie counts ½): " + ", ".join(won) + "." if won else ""


def leader(kind: Kind, j: RunReport) -> str:
    """One finding: who leads this rating, how sure that is, and what drives it."""
    rows = _rows(j, kind)
    role, roles = ROLE[kind], ROLES[kind]
    if len(rows) < 2:
        return f"No {kind} rating: {unrated_reason(kind, j)}."
    top = rows[0]
    level = level_with_top(rows)
    if len(level) == len(rows):
        return (f"{roles} are level: {names(level)} share the same {kind} rating ({top.rating:.0f}); "
                f"nothing in this run tells them apart.")
    if len(level) > 1:
        s = f"No single best {role}: {names(level)} share the top {kind} rating ({top.rating:.0f})"
    else:
        s = f"Best {role} by rating: {top.model} ({_interval(top)})"
    method: RatingMethod = getattr(j.rating_methods, kind)
    if top.rank is None and top.ci_low is not None and method.rank_note:
        # intervals were computed, ranks withheld (author ranks: docs/analysis.md)
        s += f"; no rank is claimed: {method.rank_note.rstrip('.')}."
    elif top.rank is None:
        if j.run.bootstrap == 0:
            reason = "intervals were not computed because --bootstrap is 0"
        else:
            reason = method.note or "no interval could be computed for this run"
        s += f", but how sure that is is unknown: {reason.rstrip('.')}."
    else:
        tied, behind, none_apart = separation(rows)
        tied = [m for m in tied if m not in level]
        if none_apart:
            s += (f". {roles} are indistinguishable: no {role} is certainly ahead of any other at 95% "
                  "confidence; you need more environments to tell them apart (`envduels plan CONFIG "
                  "--envs-per-author N` simulates how many).")
        elif tied:
            s += f", statistically tied with {names(tied)}" + (f"; certainly behind: {names(behind)}." if behind else ".")
        else:
            s += f"; clear first: certainly ahead of every other {role}."
    if not s.endswith("."):
        s += "."
    return s + _driver(kind, j, level if len(level) > 1 else [top.model])


def _flagged_lead(j: RunReport) -> str | None:
    """The call-out when the duel leader's lead comes from a leaking or hint-gated environment."""
    f = j.duel_flagged_lead
    if f is None:
        return None
    envs = "; ".join(f"{e.id} ({', '.join(e.flags)})" for e in f.environments)
    if f.position_without is None:
        after = "without them it would not be rated at all"
    elif f.position_without == 1:
        after = "it still leads without them"
    else:
        after = f"without them it would place #{f.position_without} of {f.models_without}"
    return (f"Caution: {f.model}'s duel lead comes partly from "
            f"{'an environment' if len(f.environments) == 1 else 'environments'} where the hint gives the "
            f"answer away or the puzzle cannot be solved without it: {envs}; {after}.")


def _unrated_authors(j: RunReport) -> str | None:
    """The authors the author rating leaves out, each with why (None when it leaves out none or
    has no rating at all, which `unrated_reason` explains)."""
    out = j.rating_methods.author.unrated
    if not out or len(j.ratings.author) < 2:
        return None
    return "Not in the author rating: " + "; ".join(f"{u.model}: {u.reason}" for u in out) + "."


def _p(p: float) -> str:
    return f"{p:.2g}"


def divergence_headline(report: RunReport | Mapping[str, object]) -> str | None:
    """The paper's headline, in one sentence: when the divergence test rejects (`claim`), that
    authoring and solving rank these models differently, naming the clearest crossing; when it
    does not, that nothing was found. None without a test (a report from before it existed, or
    too few models or environments: the ρ sentence then says why)."""
    j = as_report(report)
    d = j.divergence
    if d.p_value is None:
        return None
    why = (f"divergence test p = {_p(d.p_value)}: author strength, the mean hint lift of a model's environments, "
           f"falls as solver strength rises {'by more' if d.claim else 'by no more'} than the environments' noise "
           "explains")
    certain = d.crossings
    if not d.claim:
        s = f"No evidence that authoring and solving rank these models differently ({why})"
        if certain:
            s += (f"; yet the rank claims cross: {certain[0].better_solver} is certainly the better solver and "
                  f"{certain[0].better_author} certainly the better author")
        return s + "."
    s = f"Authoring and solving rank these models differently ({why})"
    c = d.clearest_crossing
    if c is None:
        return s + "."
    if c.certain:
        more = f" ({_plural(len(certain) - 1, 'more such pair')})" if len(certain) > 1 else ""
        return (f"{s}: {c.better_solver} is certainly the better solver and {c.better_author} certainly the better "
                f"author{more}.")
    return (f"{s}: the clearest crossing is {c.better_solver}, the better solver, and {c.better_author}, the better "
            f"author (rank tests p = {_p(c.p_solver)} and {_p(c.p_author)}; not certain as a pair on its own).")


def _divergence(j: RunReport) -> str | None:
    d = j.divergence
    if d.spearman is None:
        return None
    s = (f"Authoring vs solving: Spearman ρ = {d.spearman:.2f} between author and solver ratings over "
         f"{_plural(d.models, 'model')}")
    if d.ci_low is not None and d.ci_high is not None:
        s += f" (95% interval {d.ci_low:.2f} to {d.ci_high:.2f})"
        if d.ci_low <= 0 <= d.ci_high:
            s += "; the interval includes 0, so this run cannot say whether good solvers are good authors"
    else:
        s += f"; {d.ci_note or 'no interval'}, so this is a description of this run, not a finding"
    if d.p_value is None and d.test_note:
        s += f"; {d.test_note}"
    return s.rstrip(".") + "."


_BATTERY_WHY = {Flag.TRIVIAL: "a policy without intelligence won it in validation",
                Flag.HINT_IS_KEY: "copying the hint won it in validation",
                Flag.FIXED_ANSWER: "its winning answer is the same on every seed"}


def battery_faults(j: RunReport) -> str | None:
    """The environments flagged for how they can be won without teaching (`trivial`,
    `hint_is_key`, `fixed_answer`: scored as their author's fault), with their authors and
    why; None when none."""
    hit = [(e, f) for e in j.environments for f in e.flags if f in _BATTERY_WHY]
    if not hit:
        return None
    envs = "; ".join(f"{e.id} by {e.author} ({f}: {_BATTERY_WHY[f]})" for e, f in hit)
    return (f"{_plural(len(hit), 'environment')} scored as {'its' if len(hit) == 1 else 'their'} "
            f"author's fault in every episode (no lift, a forfeit in every duel): {envs}.")


def findings(report: RunReport | Mapping[str, object]) -> list[str]:
    """The summary sentences, most important first (`report`: a `RunReport`, or a report.json
    object read back)."""
    j = as_report(report)
    out = _validity(j)
    if (faults := battery_faults(j)) is not None:
        out.append(faults)
    authored_valid = any(e.valid and not e.fixed_pool for e in j.environments)
    kinds: tuple[Kind, ...] = ("author", "solver", "duel")
    for kind in kinds:
        if kind == "author" and not authored_valid and any(not e.fixed_pool for e in j.environments):
            continue  # said by the validity sentence
        out.append(leader(kind, j))
        if kind == "author" and (u := _unrated_authors(j)):
            out.append(u)
        if kind == "duel" and (f := _flagged_lead(j)):
            out.append(f)
    if (h := divergence_headline(j)) is not None:
        out.append(h)
    if (d := _divergence(j)) is not None:
        out.append(d)
    envs = j.environments
    valid = sum(1 for e in envs if e.valid)
    run = j.run
    cost = "" if run.cost_usd is None else f", ${run.cost_usd:.2f}"
    out.append(f"{_plural(len(envs), 'environment')} ({valid} valid), {_plural(run.episodes, 'episode')}, "
               f"{_plural(run.matched_pairs, 'matched pair')}{cost}.")
    t = j.transitivity
    if t.triads:
        sig = t.significant_cycles
        survive = (f"{sig} {'is' if sig == 1 else 'are'} significant (each edge backed by the environments "
                   "behind it, Bonferroni-corrected)")
        if t.triads == 1:
            s = f"The one triad of models {'forms' if t.cycles else 'does not form'} a 3-cycle"
            s += f"; it is {'' if sig else 'not '}significant" if t.cycles else ""
        else:
            s = f"{t.cycles} of {t.triads} triads of models form a 3-cycle; {survive}"
        x = t.expected.cycles if t.expected is not None else None
        if x is not None and x.mean is not None and x.low is not None and x.high is not None:
            s += (f"; a transitive model replaying the same matches gives {x.mean:.1f} "
                  f"(95% range {x.low:.0f} to {x.high:.0f})")
        out.append(s + ".")
    return out
