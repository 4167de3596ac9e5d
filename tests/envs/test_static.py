"""Checks that need no sandbox: parsing, finding the environment class, the hint rules."""

import pytest

from envduels.envs import check_hint
from envduels.envs._static import StaticError, default_max_turns, find_env_class, parse_source

ENV = """
class {name}:
    def reset(self, seed=None):
        return "", {{}}

    def step(self, action):
        return "", 0.0, True, False, {{}}
"""


def reason(source, class_name=None):
    with pytest.raises(StaticError) as caught:
        find_env_class(parse_source(source), class_name)
    return caught.value.reason


def test_syntax_error_names_the_line():
    assert reason("x = 1\ndef f(:\n    pass\n").startswith("syntax error at line 2: ")
    assert reason("x = 1\ndef f(:\n    pass\n").endswith(": fix the source so that it parses")


def test_no_environment_class_is_refused():
    assert reason("def reset(seed):\n    pass\n") == (
        "no environment class: define one top-level class with reset(seed) and step(action) methods")


def test_two_environment_classes_need_class_name():
    source = ENV.format(name="A") + ENV.format(name="B")
    assert reason(source) == ("2 environment classes (A, B): keep exactly one class with reset "
                              "and step, or name it with class_name")
    assert find_env_class(parse_source(source), "B") == "B"


def test_unknown_class_name_is_refused_listing_the_classes():
    assert reason(ENV.format(name="A"), "Nope") == (
        "class_name 'Nope' is not a top-level class of the source: fix class_name (classes found: A)")


def test_a_base_class_does_not_count_as_a_second_environment():
    source = ENV.format(name="Base") + ENV.format(name="Game").replace("class Game:", "class Game(Base):")
    assert find_env_class(parse_source(source)) == "Game"


def test_default_max_turns_reads_the_literal_init_default():
    source = ENV.format(name="G").replace("class G:\n", "class G:\n    def __init__(self, max_turns=7):\n        pass\n\n")
    assert default_max_turns(parse_source(source), "G") == 7
    assert default_max_turns(parse_source(ENV.format(name="A")), "A") == 20


def test_a_good_hint_passes():
    assert check_hint("Leave a multiple of four stones for your opponent.", 600) == []


def test_empty_hint_is_refused():
    assert check_hint("  \n", 600) == ["the hint is empty: state the key insight that makes the task tractable"]


def test_over_long_hint_is_refused_with_its_length():
    assert check_hint("x" * 601, 600) == [
        "the hint is 601 characters, over the limit of 600: shorten it to the key insight"]
    assert check_hint("x" * 600, 600) == []


def test_hint_with_a_code_block_is_refused():
    assert check_hint("Try this:\n```python\nprint(1)\n```", 600) == [
        "the hint contains a code block: state the insight in prose, without ``` fences"]


def test_hint_with_boxed_is_refused():
    assert check_hint("Answer \\boxed{42} first.", 600) == [
        "the hint contains \\boxed{...}: a hint may not hand over an action; describe the idea instead"]


def test_every_broken_hint_rule_is_its_own_reason():
    assert len(check_hint("```\n\\boxed{1}\n```" + "y" * 50, 20)) == 3


DEEP = "x = " + "-" * 3000 + "1\n"  # 3 KB: CPython's parser runs out of recursion depth


def test_a_deeply_nested_source_is_one_reason_not_a_recursion_error():
    assert reason(DEEP) == (
        "the source is too deeply nested to parse: flatten the deeply nested expression")


def test_a_source_over_the_size_cap_is_refused_before_parsing():
    source = ENV.format(name="Big") + "#" * 200_000 + "\n"
    assert reason(source) == (
        f"the source is {len(source):,} characters, over the limit of 200,000: write a smaller "
        "environment (generate data in reset instead of embedding it)")


def test_a_lone_surrogate_in_the_source_is_one_reason():
    source = ENV.format(name="S") + "x = '\ud800'\n"
    assert reason(source) == (
        "the source cannot be parsed ('utf-8' codec can't encode character '\\ud800' in position "
        f"{source.index(chr(0xD800))}: surrogates not allowed): save it as plain UTF-8 Python")
