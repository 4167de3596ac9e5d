"""The scripted models of bench_engine.py, served by `python -m envduels.testing.server --script`.

Every author writes the same small environment (a number to pick; the observation shows a code
N and the answer is N mod 3 + 1, which the hint reveals). Without the hint a solver guesses its
favourite number; with it, it computes the answer. Solvers whose name ends in an odd digit waste
their first turn on a reply without \\boxed{}.

A solver of the library's `number_guess` (`--design solver-eval`) bisects the range from the
"higher"/"lower" answers so far.
"""

import re

ENV = '''
import random

class Pick:
    def __init__(self, max_turns: int = 20):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.code = random.Random(seed).randint(10, 10**6)
        return f"Code {self.code}. Pick 1, 2 or 3 as \\\\boxed{{n}}.", {}

    def step(self, action):
        n = action.strip()[len("\\\\boxed{"):-1].strip()
        won = n == str(self.code % 3 + 1)
        return ("Right." if won else "Wrong."), float(won), True, False, {}

    def oracle_action(self):
        return "\\\\boxed{%d}" % (self.code % 3 + 1)
'''


def respond(model, messages):
    if messages[0]["content"].startswith("You are an expert"):
        return (f"```python\n{ENV}```\n<hint>The answer is the code modulo 3, plus one.</hint>\n"
                "<domain>math</domain>\n<title>Pick</title>")
    first = next(m["content"] for m in messages if m["role"] == "user")
    span = re.search(r"whole number from 1 to (\d+)", first)
    if span:
        return _bisect(int(span.group(1)), messages)
    turn = sum(1 for m in messages if m["role"] == "assistant") + 1
    index = int(model[-1])
    if index % 2 and turn == 1:
        return "Let me think about this first."
    if first.startswith("Hint: "):
        code = int(re.search(r"Code (\d+)", first).group(1))
        return f"\\boxed{{{code % 3 + 1}}}"
    return f"\\boxed{{{index % 3 + 1}}}"


def _bisect(high, messages):
    low = 1
    for m in messages:
        said = re.search(r"(\d+) is wrong: the number is (higher|lower)", m["content"])
        if m["role"] == "user" and said:
            guess = int(said.group(1))
            low, high = (guess + 1, high) if said.group(2) == "higher" else (low, guess - 1)
    return f"\\boxed{{{(low + high) // 2}}}"
