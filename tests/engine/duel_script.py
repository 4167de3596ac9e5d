"""A tournament scripted per model, whose every outcome is worked out by hand below.

Authors (replies scripted by model name):
- m-alice writes LOCK: the code word is "open", a hyphen and the last digit of the lock's number
  (`lock_code`: it changes with the seed, as every winning answer must); oracle that word. Valid
  at once.
- m-bob first writes a syntax error (invalid; the validator's reason goes back in a repair turn),
  then CRASHY: `win` and the last digit of the room wins, `crash` raises
  mid-episode, anything else loses. Valid on repair.
- m-dave never writes code: invalid after both attempts, never played.

Solvers (carol only solves, dave only authors):
- alice: LOCK's code (1 turn, success) in both conditions (self-play). CRASHY without hint:
  first a reply with no \\boxed{} (format error, the turn is spent), then `lose` -> failure
  after 2 turns; with the hint the magic word -> success in 1 turn.
- bob: LOCK without hint `closed` every turn -> failure at the 4-turn cap; with the hint the
  code -> success. CRASHY (self-play) the magic word -> success in both conditions.
- carol: LOCK's code -> success in both conditions (the hint does not change anything).
  CRASHY `crash` -> the environment raises: incomplete in both conditions, blamed on bob.
"""

from __future__ import annotations

import random
import re

LOCK_SOURCE = '''
class Lock:
    """Guess the code word."""

    def __init__(self, max_turns: int = 20):
        self.max_turns = max_turns

    def reset(self, seed=None):
        import random
        self.turn = 0
        number = random.Random(seed).randint(1, 10**9)
        self.code = f"open-{number % 10}"
        return f"LOCK: lock #{number}: guess the code word. Answer like \\\\boxed{{word}}.", {}

    def step(self, action):
        self.turn += 1
        word = action.strip()[len("\\\\boxed{"):-1].strip().lower()
        if word == self.code:
            return "The lock opens.", 1.0, True, False, {}
        return "Wrong word, the lock stays shut.", 0.0, False, False, {}

    def oracle_action(self):
        return "\\\\boxed{%s}" % self.code
'''

CRASHY_SOURCE = '''
class Crashy:
    def __init__(self, max_turns: int = 20):
        self.max_turns = max_turns

    def reset(self, seed=None):
        import random
        room = random.Random(seed).randint(1, 10**9)
        self.magic = f"win {room % 10}"
        return f"CRASHY: room {room}: say the magic word.", {}

    def step(self, action):
        word = action.strip()[len("\\\\boxed{"):-1].strip().lower()
        if word == "crash":
            raise RuntimeError("the author forgot this case")
        if word == self.magic:
            return "You win.", 1.0, True, False, {}
        return "You lose.", 0.0, True, False, {}

    def oracle_action(self):
        return "\\\\boxed{%s}" % self.magic
'''

LOCK_HINT = "Say open, a hyphen, and the lock's last digit."
CRASHY_HINT = "Say what you want to do, a space, the room's last digit."


def lock_code(seed: int) -> str:
    """LOCK's code word on `seed`."""
    return f"open-{random.Random(seed).randint(1, 10**9) % 10}"


_LOCK_NUMBER = re.compile(r"lock #(\d+)")
_ROOM_NUMBER = re.compile(r"room (\d+)")


def _code(first: str) -> str:
    """LOCK's code word, worked out from its first observation."""
    return f"open-{int(_LOCK_NUMBER.search(first).group(1)) % 10}"


def _magic(first: str) -> str:
    """CRASHY's magic word, worked out from its first observation."""
    return f"win {int(_ROOM_NUMBER.search(first).group(1)) % 10}"


AUTHOR_SYSTEM_START = "You are an expert designer of interactive text environments"


def author_reply(model: str, attempt: int) -> str:
    if model == "m-alice":
        return (f"Here it is.\n```python\n{LOCK_SOURCE}```\n<hint>{LOCK_HINT}</hint>\n"
                "<domain>language</domain>\n<title>The lock</title>")
    if model == "m-bob" and attempt == 0:
        return ("```python\nclass Broken(:\n    pass\n```\n<hint>no</hint>\n<domain>logic</domain>")
    if model == "m-bob":
        return (f"```python\n{CRASHY_SOURCE}```\n<hint>{CRASHY_HINT}</hint>\n"
                "<domain>logic</domain>\n<title>Crashy</title>")
    return "I would rather not write code today."


def solver_reply(model: str, messages: list[dict]) -> str:
    first = next(m["content"] for m in messages if m["role"] == "user")
    hinted = first.startswith("Hint: ")
    lock = "LOCK:" in first
    turn = sum(1 for m in messages if m["role"] == "assistant") + 1
    if model == "m-alice":
        if lock or hinted:
            if lock:
                return f"Easy. \\boxed{{{_code(first)}}}"
            return f"With the hint: \\boxed{{{_magic(first)}}}"
        return "Let me think about it." if turn == 1 else "\\boxed{lose}"
    if model == "m-bob":
        if lock:
            return f"\\boxed{{{_code(first)}}}" if hinted else "I guess \\boxed{closed}"
        return f"\\boxed{{{_magic(first)}}}"
    if model == "m-carol":
        return f"\\boxed{{{_code(first)}}}" if lock else "\\boxed{crash}"
    raise AssertionError(f"unexpected solver {model}")


def respond(model: str, messages: list[dict]) -> str:
    """The ScriptedServer responder: authors by system prompt, solvers by observation."""
    if messages and messages[0]["content"].startswith(AUTHOR_SYSTEM_START):
        attempt = sum(1 for m in messages if m["role"] == "assistant")
        return author_reply(model, attempt)
    return solver_reply(model, messages)


# (env, solver, hinted) -> (outcome, turns), the same on both seeds
EXPECTED = {
    ("r1-alice-0", "alice", False): ("success", 1),
    ("r1-alice-0", "alice", True): ("success", 1),
    ("r1-alice-0", "bob", False): ("failure", 4),
    ("r1-alice-0", "bob", True): ("success", 1),
    ("r1-alice-0", "carol", False): ("success", 1),
    ("r1-alice-0", "carol", True): ("success", 1),
    ("r1-bob-0", "alice", False): ("failure", 2),
    ("r1-bob-0", "alice", True): ("success", 1),
    ("r1-bob-0", "bob", False): ("success", 1),
    ("r1-bob-0", "bob", True): ("success", 1),
    ("r1-bob-0", "carol", False): ("incomplete", 1),
    ("r1-bob-0", "carol", True): ("incomplete", 1),
}


def config(base_url: str, output_dir: str, *, key_env: str = "ENVDUELS_TEST_KEY",
           rounds: int = 1, seeds: int = 2, extra: dict | None = None) -> dict:
    def player(name: str, roles: list[str]) -> dict:
        return {"name": name, "provider": "openai", "model": f"m-{name}", "base_url": base_url,
                "api_key_env": key_env, "roles": roles, "max_retries": 4, "timeout_s": 20,
                "max_concurrency": 4, "temperature": 0.0,
                "price": {"input_per_mtok": 1.0, "output_per_mtok": 2.0}}

    cfg = {
        "name": "scripted", "seed": 7, "output_dir": output_dir,
        "players": [player("alice", ["author", "solver"]), player("bob", ["author", "solver"]),
                    player("carol", ["solver"]), player("dave", ["author"])],
        "tournament": {"rounds": rounds, "envs_per_author": 1, "seeds_per_env": seeds,
                       "trials_per_seed": 1, "max_turns": 4, "history": "all",
                       "author_repairs": 1, "require_oracle": True},
        "sandbox": {"warm_workers": 1},
    }
    for k, v in (extra or {}).items():
        cfg[k] = v
    return cfg
