"""Gymnasium ids of environments: distinct ids for distinct environments, or a clear refusal."""

from __future__ import annotations

import gymnasium
import pytest

from envduels.envs import EnvSpec
from envduels.errors import UserError
from envduels.gym import _register, gym_id

SOURCE = "class E:\n    pass\n"


def test_hyphen_and_underscore_ids_stay_distinct():
    assert gym_id("a-b") == "envduels/a-b-v0"
    assert gym_id("a_b") == "envduels/a_b-v0"
    assert gym_id("x:y/z") == "envduels/x_y_z-v0"  # ':' would make Gymnasium import a module


def test_two_environments_that_still_collide_are_refused_naming_both():
    ids = _register([EnvSpec(id="a-b", source=SOURCE), EnvSpec(id="a_b", source=SOURCE)], "edtest1", {})
    assert ids == ["edtest1/a-b-v0", "edtest1/a_b-v0"]
    with pytest.raises(UserError, match=r"'a b' and 'a\?b' both map to the Gymnasium id 'edtest2/a_b-v0'"):
        _register([EnvSpec(id="a b", source=SOURCE), EnvSpec(id="a?b", source=SOURCE)], "edtest2", {})


def test_a_later_registration_may_repeat_an_environment_but_not_take_its_id():
    _register([EnvSpec(id="one two", source=SOURCE)], "edtest3", {})
    assert _register([EnvSpec(id="one two", source=SOURCE)], "edtest3", {}) == ["edtest3/one_two-v0"]
    with pytest.raises(UserError, match="'one two' and 'one_two' both map"):
        _register([EnvSpec(id="one_two", source=SOURCE)], "edtest3", {})
    assert gymnasium.registry["edtest3/one_two-v0"].kwargs["spec"].id == "one two"
