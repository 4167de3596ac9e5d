"""EnvSpec, Verdict and benchmark seeds: pure values with exact, stable behaviour."""

import hashlib

from envduels.envs import EnvSpec, Verdict, benchmark_seeds


def test_benchmark_seeds_are_the_published_stable_values():
    assert benchmark_seeds(0, "nim", 3) == [6216735890298740852, 3905573520016254517, 8097460306565566891]
    assert benchmark_seeds(7, "author/r1/0", 2) == [4076994653524516961, 7978957219285303491]


def test_benchmark_seeds_follow_the_documented_sha256_derivation():
    digest = hashlib.sha256(b"envduels-benchmark-seed/v1|3|env-a|1").digest()
    assert benchmark_seeds(3, "env-a", 2)[1] == int.from_bytes(digest[:8], "big") >> 1


def test_benchmark_seeds_are_63_bit_and_seed_i_does_not_depend_on_n():
    seeds = benchmark_seeds(0, "x", 50)
    assert all(0 <= s < 2**63 for s in seeds)
    assert len(set(seeds)) == 50
    assert benchmark_seeds(0, "x", 4) == seeds[:4]
    assert benchmark_seeds(0, "x", 0) == []


def test_benchmark_seeds_differ_between_environments_and_run_seeds():
    assert benchmark_seeds(0, "a", 4) != benchmark_seeds(0, "b", 4)
    assert benchmark_seeds(0, "a", 4) != benchmark_seeds(1, "a", 4)


def test_hint_is_hint_then_graded_hint_1_then_empty():
    assert EnvSpec("e", "src", hints={"hint": "h", "hint_1": "h1"}).hint == "h"
    assert EnvSpec("e", "src", hints={"hint_1": "h1", "hint_2": "h2"}).hint == "h1"
    assert EnvSpec("e", "src").hint == ""


def test_source_sha256_is_the_hash_of_the_utf8_source():
    assert EnvSpec("e", "é = 1\n").source_sha256 == hashlib.sha256("é = 1\n".encode()).hexdigest()


def test_verdict_to_json_has_exactly_the_verdict_fields():
    verdict = Verdict(False, ["bad"], "failed", "Env", [1, 2])
    assert verdict.to_json() == {"valid": False, "reasons": ["bad"], "oracle": "failed",
                                 "class_name": "Env", "seeds": [1, 2]}
