"""Subtraction game: take 1..k stones from one pile; whoever takes the last stone wins."""

import random
import re

_BOX = re.compile(r"^\s*\\boxed\{(.*)\}\s*$", re.S)


def _unbox(action):
    match = _BOX.match(action)
    return (match.group(1) if match else action).strip().lower()


class SubtractionGame:
    def __init__(self, max_turns=20):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.rng = random.Random(seed)
        self.k = self.rng.randint(2, 6)
        self.pile = self.rng.randint(3 * self.k, 8 * self.k)
        if self.pile % (self.k + 1) == 0:
            self.pile += self.rng.randint(1, self.k)
        self.turn = 0
        self.done = False
        text = (
            f"Subtraction game. There is one pile of {self.pile} stones. You and the house "
            f"take turns; you move first. On each move a player removes between 1 and {self.k} "
            "stones. Whoever takes the last stone wins.\n"
            "Action format: the number of stones to take, e.g. \\boxed{2}."
        )
        return text, {"pile": self.pile, "max_take": self.k}

    def _end(self, text, reward, terminated):
        if terminated:
            self.done = True
            return text, reward, True, False, {}
        if self.turn >= self.max_turns:
            self.done = True
            return text + "\nOut of turns.", 0.0, False, True, {}
        return text, 0.0, False, False, {}

    def step(self, action):
        if self.done:
            return "The game is over.", 0.0, True, False, {}
        self.turn += 1
        raw = _unbox(action)
        if not raw.isdigit() or not 1 <= int(raw) <= min(self.k, self.pile):
            return self._end(
                f"Invalid move {raw!r}: take a whole number of stones from 1 to "
                f"{min(self.k, self.pile)}, e.g. \\boxed{{1}}. The pile has {self.pile} stones.",
                0.0, False)
        self.pile -= int(raw)
        if self.pile == 0:
            return self._end(f"You took {raw} and the last stone. You win!", 1.0, True)
        reply = self.pile % (self.k + 1) or self.rng.randint(1, min(self.k, self.pile))
        self.pile -= reply
        if self.pile == 0:
            return self._end(f"You took {raw}; the house took the last {reply}. You lose.", 0.0, True)
        return self._end(
            f"You took {raw}; the house took {reply}. The pile has {self.pile} stones. "
            f"Take 1 to {min(self.k, self.pile)}.", 0.0, False)

    def oracle_action(self):
        take = self.pile % (self.k + 1) or 1
        return f"\\boxed{{{take}}}"
