"""Validation's randomised probes and the fixed-pool rule for environments that ignore their seed."""

import json

from envduels.duel.outcomes import Flag
from envduels.envs import EnvSpec, load_env_file, validate_env, write_export
from envduels.envs._validate import PROBE_ACTIONS, perturbed, probe_actions
from envduels.envs.commands import validate_command

from .conftest import FIXTURES

SEEDS = [11, 22]

FIXED = '''
class Fixed:
    """One puzzle whatever the seed (allowed in the reference format's fixed pools)."""

    def __init__(self, max_turns: int = 4):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return "Say open. Answer like \\\\boxed{word}.", {}

    def step(self, action):
        if action.strip() == "\\\\boxed{open}":
            return "Open.", 1.0, True, False, {}
        return "Shut.", 0.0, False, False, {}

    def oracle_action(self):
        return "\\\\boxed{open}"
'''


def test_probe_actions_hold_the_public_ones_and_drawn_ones_reproducibly_per_salt():
    a = probe_actions("run-1", "sha")
    assert set(PROBE_ACTIONS) < set(a)
    assert a[0] not in PROBE_ACTIONS        # the first action is never a public one
    assert all(x.startswith("\\boxed{") and x.endswith("}") for x in a)
    assert a == probe_actions("run-1", "sha")
    assert a != probe_actions("run-2", "sha")
    assert a != probe_actions("run-1", "other source")


async def test_a_seed_ignoring_fixed_pool_environment_is_flagged_whatever_the_probes_drawn(pool):
    """Probes drawn per seed made the seeds' probe trajectories differ whenever one seed's
    probes held the winning word and the other's did not (salt "p100" here: 7 of 400 salts),
    so the environment that ignores its seed went unflagged."""
    for salt in ("p100", "p196", "x"):
        verdict = await validate_env(EnvSpec("fixed", FIXED), pool, seeds=[1, 2],
                                     require_oracle=True, fixed_pool=True, probe_seed=salt)
        assert (verdict.valid, verdict.flags) == (True, [Flag.SEED_IGNORED]), salt


def test_a_perturbed_action_is_a_near_miss_of_the_original():
    import random

    rng = random.Random(5)
    near = {perturbed("\\boxed{move 3 to 4}", rng) for _ in range(30)}
    assert "\\boxed{move 3 to 4}" not in near
    assert all(x.startswith("\\boxed{") and x.endswith("}") for x in near)


async def test_an_environment_deterministic_only_for_the_public_probes_and_its_oracle_is_invalid(pool):
    spec = load_env_file(FIXTURES / "deceive_probe.py")
    verdict = await validate_env(spec, pool, seeds=[11], require_oracle=True, probe_seed="x")
    assert not verdict.valid
    assert verdict.reasons[0].startswith("seed 11: not deterministic: two fresh instances")


async def test_an_authored_environment_that_ignores_its_seed_stays_invalid(pool):
    verdict = await validate_env(EnvSpec("fixed", FIXED), pool, seeds=SEEDS, require_oracle=True)
    assert not verdict.valid
    assert "ignores its seed" in verdict.reasons[0]
    assert verdict.flags == [] and verdict.warnings == []


async def test_a_fixed_pool_environment_that_ignores_its_seed_is_valid_with_a_warning(pool):
    verdict = await validate_env(EnvSpec("fixed", FIXED), pool, seeds=SEEDS, require_oracle=True,
                                 fixed_pool=True)
    assert (verdict.valid, verdict.reasons, verdict.flags) == (True, [], [Flag.SEED_IGNORED])
    assert "ignores its seed" in verdict.warnings[0]


def test_validate_json_of_an_export_whose_environment_ignores_its_seed_is_valid_and_flagged(
        tmp_path, capsys):
    # (a hint "Say open." would be the answer itself: `hint_is_key` besides `seed_ignored`)
    write_export(tmp_path / "export", [EnvSpec("fixed", FIXED, hints={"hint": "Do as it says."},
                                               benchmark_seeds=(1, 2))])
    code = validate_command(str(tmp_path / "export"), seeds=2, as_json=True, require_oracle=True,
                            hint_max_chars=600, unsafe_no_sandbox=False)
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["valid"] is True
    (env,) = out["environments"]
    assert env["flags"] == [Flag.SEED_IGNORED] and "ignores its seed" in env["warnings"][0]


async def test_a_reward_the_parent_cannot_take_is_a_reason_not_an_exception(pool):
    spec = load_env_file(FIXTURES / "deceive_crash_reward.py")
    verdict = await validate_env(spec, pool, seeds=[11], require_oracle=True)
    assert not verdict.valid
    assert verdict.reasons[0].startswith("seed 11, probe episode: in step (turn 1): ")


TRIPS_ON_NEAR_MISSES = '''
import random

class Trap:
    """Wins on the exact code; raises on anything close to it (a solver's near miss)."""

    CODE = "\\\\boxed{zebra-quokka 4242}"

    def __init__(self, max_turns: int = 4):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.rng = random.Random(seed)
        return f"Puzzle {self.rng.randint(0, 10**9)}. Answer like \\\\boxed{{word}}.", {}

    def step(self, action):
        if action == self.CODE:
            return "Open.", 1.0, True, False, {}
        if any(part in action for part in ("zebra", "quokka", "4242")):
            raise RuntimeError("a near miss crashes me")
        return "Shut.", 0.0, False, False, {}

    def oracle_action(self):
        return self.CODE
'''


async def test_a_fault_on_the_perturbed_oracle_is_invalid_with_the_oracle_still_passed(pool):
    verdict = await validate_env(EnvSpec("trap", TRIPS_ON_NEAR_MISSES), pool, seeds=[11],
                                 require_oracle=True, probe_seed="fixed")
    assert not verdict.valid
    assert verdict.reasons[0].startswith("seed 11, perturbed oracle: in step (turn 1):")
    # the oracle won and replayed before the near miss ran: its status is not "skipped"
    assert verdict.oracle == "passed"
