"""Caesar cipher: decode a short English sentence whose letters were all shifted by one secret amount."""

import random
import re

_BOX = re.compile(r"^\s*\\boxed\{(.*)\}\s*$", re.S)
SUBJECTS = ["the old sailor", "a quiet student", "my neighbour", "the tired baker", "a young fox",
            "the village doctor", "our teacher", "the brave pilot", "a clever robot", "the gardener"]
VERBS = ["found", "painted", "carried", "opened", "repaired", "watched", "borrowed", "hid"]
OBJECTS = ["a silver key", "the broken clock", "an empty basket", "the green door", "a tiny boat",
           "the heavy letter", "a paper lantern", "the secret map"]
PLACES = ["near the river", "before dawn", "in the market", "under the bridge", "after the storm",
          "behind the mill", "at the harbour", "on the hill"]


def _unbox(action):
    match = _BOX.match(action)
    return (match.group(1) if match else action).strip().lower()


def _normal(text):
    return " ".join("".join(c for c in text.lower() if c.isalpha() or c.isspace()).split())


def _shift(text, k):
    return "".join(chr((ord(c) - 97 + k) % 26 + 97) if "a" <= c <= "z" else c for c in text)


class CaesarCipher:
    def __init__(self, max_turns=4):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.rng = random.Random(seed)
        self.plain = " ".join([self.rng.choice(SUBJECTS), self.rng.choice(VERBS),
                               self.rng.choice(OBJECTS), self.rng.choice(PLACES)])
        self.key = self.rng.randint(3, 23)
        self.tries_left = 3
        self.turn = 0
        self.done = False
        text = (
            "Decode this message. Every letter was replaced by the letter a fixed, secret number "
            "of places later in the alphabet (wrapping from z to a); spaces are unchanged.\n"
            f"Ciphertext: {_shift(self.plain, self.key)}\n"
            "You have 3 tries. Action format: the decoded sentence in lowercase, e.g. "
            "\\boxed{the cat sat on the mat}."
        )
        return text, {"tries": 3}

    def step(self, action):
        if self.done:
            return "The game is over.", 0.0, True, False, {}
        self.turn += 1
        guess = _normal(_unbox(action))
        terminated, reward = False, 0.0
        if not guess:
            text = "Invalid action: write the decoded sentence inside \\boxed{...}."
        else:
            self.tries_left -= 1
            if guess == self.plain:
                text, reward, terminated = "Correct. You win!", 1.0, True
            elif self.tries_left == 0:
                text, terminated = f"Wrong. No tries left; the message was: {self.plain}", True
            else:
                right = sum(1 for a, b in zip(guess.split(), self.plain.split()) if a == b)
                text = (f"Wrong ({right} of {len(self.plain.split())} words in place). "
                        f"{self.tries_left} tries left.")
        if terminated:
            self.done = True
            return text, reward, True, False, {}
        if self.turn >= self.max_turns:
            self.done = True
            return text + "\nOut of turns.", 0.0, False, True, {}
        return text, 0.0, False, False, {}

    def oracle_action(self):
        return f"\\boxed{{{self.plain}}}"
