"""The curriculum draws (environment, seed) groups with the probabilities it states: by the
export's panel learnability, or by the share of an environment's groups that were trainable."""

from __future__ import annotations

import random

import pytest
from scipy.stats import chisquare

from envduels.envs import EnvSpec, load_export, write_export
from envduels.errors import UserError
from envduels.rl import Curriculum, GroupRecord, HintedRescue

# learnability p(1 - p) of panel pass rates 1/2, 1/4, 1/10 and 1 (solved by every solver)
LEARNABILITY = {"half": 0.25, "quarter": 0.1875, "tenth": 0.09, "solved": 0.0}
SEEDS = {"half": (1, 2), "quarter": (3,), "tenth": (4, 5, 6), "solved": (7, 8)}


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> list[EnvSpec]:
    folder = tmp_path_factory.mktemp("curriculum")
    write_export(folder, [
        EnvSpec(id=e, source=f"class E:\n    pass  # {e}\n", hints={"hint": "h"},
                benchmark_seeds=SEEDS[e],
                metadata={"panel": {"no_hint_rate": None, "hinted_rate": None,
                                    "learnability": LEARNABILITY[e]}})
        for e in LEARNABILITY])
    return load_export(folder)


def test_the_stated_probabilities_are_learnability_shared_by_the_seeds(export):
    probs = Curriculum.from_specs(export).probabilities()
    total = sum(LEARNABILITY.values())
    assert probs == pytest.approx({(e, s): LEARNABILITY[e] / total / len(SEEDS[e])
                                   for e in LEARNABILITY for s in SEEDS[e]})
    assert sum(probs.values()) == pytest.approx(1.0)


def test_ten_thousand_draws_fit_the_stated_probabilities_and_never_the_solved_environment(export):
    curriculum = Curriculum.from_specs(export)
    draws = curriculum.draw(10_000, random.Random(2026))
    probs = {k: p for k, p in curriculum.probabilities().items() if p > 0}
    observed = [draws.count(k) for k in probs]
    assert sum(observed) == 10_000   # so no draw fell on the solved environment's seeds
    assert not any(e == "solved" for e, _ in draws)
    fit = chisquare(observed, [p * 10_000 for p in probs.values()])
    assert fit.pvalue > 0.01, fit
    # the same test rejects uniform draws: it can fail
    uniform = random.Random(2026).choices(list(probs), k=10_000)
    assert chisquare([uniform.count(k) for k in probs],
                     [p * 10_000 for p in probs.values()]).pvalue < 1e-6


def test_a_trainable_curriculum_weighs_each_environment_by_its_trainable_groups_so_far():
    curriculum = Curriculum({"a": (1,), "b": (2,), "c": (3,)}, by="trainable")
    assert curriculum.weights() == pytest.approx({"a": 1 / 3, "b": 1 / 3, "c": 1 / 3})
    curriculum.observe([
        GroupRecord(("a", 1), (0,), ((1.0, 0.0),)),            # trainable cold
        GroupRecord(("a", 1), (0, 1), ((0.0, 0.0), (1.0, 0.0))),   # made trainable by the hint
        GroupRecord(("b", 2), (0, 1), ((0.0, 0.0), (0.0, 0.0))),   # exhausted: constant
        GroupRecord(("z", 9), (0,), ((1.0, 0.0),)),            # not in this curriculum
    ])
    raw = {"a": 3 / 4, "b": 1 / 3, "c": 1 / 2}
    assert curriculum.weights() == pytest.approx({e: w / sum(raw.values()) for e, w in raw.items()})


def test_the_adapter_draws_each_group_from_the_curriculum_and_feeds_the_rescue_back():
    pytest.importorskip("trl", reason="needs the train extra: pip install 'envduels[train]'")
    from envduels.rl.grpo import EpisodeRollouts, Task

    from .test_episodes import SPEC, CharPolicy

    # seed 11 fails cold and wins hinted, seed 12 wins cold
    policy = CharPolicy({11: ["\\boxed{x}"], 12: ["\\boxed{open}"]},
                        hinted={11: ["\\boxed{open}"]})
    other = EnvSpec(id="never", source=SPEC.source, hints=SPEC.hints, benchmark_seeds=(11,))
    curriculum = Curriculum({"lock": (11, 12), "never": (11,)},
                            learnability={"lock": 0.25, "never": 0.0})
    rescue = HintedRescue()
    rollouts = EpisodeRollouts([Task(SPEC, 11), Task(SPEC, 12), Task(other, 11)], rescue,
                               max_turns=1, max_new_tokens=8, temperature=1.0,
                               curriculum=curriculum, rng=random.Random(3))
    prompts = [f"curriculum draw {i}" for i in range(6) for _ in range(2)]
    tasks = rollouts.groups_of(prompts, 2)
    assert [t.key for t in tasks] == curriculum.draw(6, random.Random(3))
    assert {t.spec.id for t in tasks} == {"lock"}
    trainable = Curriculum({"lock": (11, 12)}, by="trainable")
    rollouts.curriculum = trainable
    rollouts.roll_out([Task(SPEC, 11), Task(SPEC, 12)], 2, policy)
    # both groups closed constant (11: hinted wins only, 12: cold wins only): two groups seen,
    # neither trainable
    assert trainable.weights() == {"lock": 1.0}
    assert (trainable._groups, trainable._trainable) == ({"lock": 2}, {"lock": 0})


def test_the_no_rescue_baseline_never_re_rolls():
    pytest.importorskip("trl", reason="needs the train extra: pip install 'envduels[train]'")
    from envduels.rl.grpo import EpisodeRollouts, Task

    from .test_episodes import SPEC, CharPolicy

    policy = CharPolicy({11: ["\\boxed{x}"]}, hinted={11: ["\\boxed{open}"]})
    rescue = HintedRescue()
    rollouts = EpisodeRollouts([Task(SPEC, 11)], rescue, max_turns=1, max_new_tokens=8,
                               temperature=1.0, rescue_enabled=False)
    kept = rollouts.roll_out([Task(SPEC, 11)], 2, policy)
    assert [[r.request.hint_level for r in g] for g in kept] == [[0, 0]]
    counters = rescue.end_step(1)
    assert (counters.hinted_group_fraction, counters.constant_group_fraction) == (0.0, 1.0)


@pytest.mark.parametrize(("make", "message"), [
    (lambda: Curriculum({"a": (1,)}), "no environment has a measured learnability"),
    (lambda: Curriculum({"a": (1,)}, learnability={"a": 0.0}), "every environment has learnability 0"),
    (lambda: Curriculum({"a": ()}, by="trainable"), "a has none"),
    (lambda: Curriculum({"a": (1,)}, by="uniformish"), "curriculum 'uniformish' is unknown"),
    (lambda: Curriculum.from_listing([{"id": "a", "benchmark_seeds": "1"}]),
     "environment 0 of the listing has no id or no list of integer benchmark_seeds"),
])
def test_a_curriculum_that_cannot_draw_is_a_one_line_error(make, message):
    with pytest.raises(UserError) as err:
        make()
    assert message in err.value.message and "\n" not in err.value.message


def test_hostile_learnability_values_count_as_unmeasured():
    listing = [{"id": e, "benchmark_seeds": [1], "panel": {"learnability": v}}
               for e, v in [("nan", float("nan")), ("big", 1e300), ("neg", -0.1), ("bool", True),
                            ("text", "0.2"), ("ok", 0.2)]]
    curriculum = Curriculum.from_listing(listing)
    assert curriculum.unmeasured == ["nan", "big", "neg", "bool", "text"]
    assert curriculum.weights() == {"nan": 0.0, "big": 0.0, "neg": 0.0, "bool": 0.0, "text": 0.0,
                                    "ok": 1.0}


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_a_real_grpo_step_plays_only_what_the_curriculum_draws(smollm2, tmp_path):
    import copy
    import json
    from dataclasses import replace

    from envduels.envs import library_env
    from envduels.rl.grpo import TrainSettings, train

    model, tokenizer = smollm2
    specs = tuple(replace(library_env(name), benchmark_seeds=(seed,),
                          metadata={"panel": {"learnability": learn}})
                  for name, seed, learn in [("number_guess", 1, 0.25), ("nim", 2, 0.0)])
    settings = TrainSettings(specs=specs, out=tmp_path, steps=1, group=2, groups_per_step=2,
                             max_turns=1, max_new_tokens=8, curriculum="learnability")
    train(settings, model=copy.deepcopy(model), tokenizer=tokenizer, save=False)
    rows = [json.loads(line) for line in (tmp_path / "rescue.jsonl").read_text().splitlines()]
    assert [(r["step"], r["groups"], r["environments"]) for r in rows] == [(1, 2, {"number_guess": 2})]
