"""Hidden word rule: infer a secret transformation from examples and apply it to a new word."""

import random
import re

_BOX = re.compile(r"^\s*\\boxed\{(.*)\}\s*$", re.S)
WORDS = ["planet", "garden", "bridge", "candle", "forest", "silver", "window", "rocket", "marble",
         "pepper", "stone", "river", "cloud", "orange", "castle", "dragon", "frozen", "jungle",
         "lemon", "mirror", "pocket", "saddle", "thunder", "velvet", "whisper", "yellow"]


def _unbox(action):
    match = _BOX.match(action)
    return (match.group(1) if match else action).strip().lower()


class WordTransform:
    def __init__(self, max_turns=4):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.rng = random.Random(seed)
        self.rotate = self.rng.randint(1, 3)
        self.shift = self.rng.randint(1, 4)
        words = self.rng.sample(WORDS, 5)
        self.query, examples = words[0], words[1:]
        self.answer = self._apply(self.query)
        self.tries_left = 2
        self.turn = 0
        self.done = False
        lines = "\n".join(f"  {w} -> {self._apply(w)}" for w in examples)
        text = (
            "A secret rule turns each word into a new string. Examples:\n"
            f"{lines}\n"
            f"Apply the same rule to: {self.query}\n"
            "You have 2 tries. Action format: the transformed string, e.g. \\boxed{abcdef}."
        )
        return text, {"tries": 2}

    def _apply(self, word):
        k = self.rotate % len(word)
        moved = word[k:] + word[:k]
        return "".join(chr((ord(c) - 97 + self.shift) % 26 + 97) for c in moved)

    def step(self, action):
        if self.done:
            return "The game is over.", 0.0, True, False, {}
        self.turn += 1
        guess = "".join(_unbox(action).split())
        terminated, reward = False, 0.0
        if not guess.isalpha():
            text = "Invalid action: write only the transformed letters, e.g. \\boxed{qrstuv}."
        else:
            self.tries_left -= 1
            if guess == self.answer:
                text, reward, terminated = "Correct. You win!", 1.0, True
            elif self.tries_left == 0:
                text, terminated = f"Wrong. No tries left; the answer was {self.answer}.", True
            else:
                text = f"Wrong. {self.tries_left} try left."
        if terminated:
            self.done = True
            return text, reward, True, False, {}
        if self.turn >= self.max_turns:
            self.done = True
            return text + "\nOut of turns.", 0.0, False, True, {}
        return text, 0.0, False, False, {}

    def oracle_action(self):
        return f"\\boxed{{{self.answer}}}"
