"""Number guess: find a hidden number from higher/lower answers with a tight guess budget."""

import random
import re

_BOX = re.compile(r"^\s*\\boxed\{(.*)\}\s*$", re.S)


def _unbox(action):
    match = _BOX.match(action)
    return (match.group(1) if match else action).strip().lower()


class NumberGuess:
    def __init__(self, max_turns=12):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.rng = random.Random(seed)
        self.high = self.rng.choice([100, 200, 500, 1000])
        self.secret = self.rng.randint(1, self.high)
        self.guesses_left = self.high.bit_length()
        self.low_known, self.high_known = 1, self.high
        self.turn = 0
        self.done = False
        text = (
            f"I picked a whole number from 1 to {self.high}. Guess it. After each wrong guess "
            f"I say whether the number is higher or lower. You have {self.guesses_left} guesses; "
            "an invalid action does not cost a guess.\n"
            "Action format: your guess, e.g. \\boxed{42}."
        )
        return text, {"range": [1, self.high], "guesses": self.guesses_left}

    def step(self, action):
        if self.done:
            return "The game is over.", 0.0, True, False, {}
        self.turn += 1
        raw = _unbox(action)
        if not raw.isdigit() or not 1 <= int(raw) <= self.high:
            text, reward, terminated = (f"Invalid guess {raw!r}: give a whole number from 1 to "
                                        f"{self.high}, e.g. \\boxed{{7}}.", 0.0, False)
        else:
            guess = int(raw)
            self.guesses_left -= 1
            if guess == self.secret:
                text, reward, terminated = f"{guess} is correct. You win!", 1.0, True
            elif self.guesses_left == 0:
                text, reward, terminated = f"{guess} is wrong and you are out of guesses. The number was {self.secret}.", 0.0, True
            else:
                if guess < self.secret:
                    self.low_known = max(self.low_known, guess + 1)
                else:
                    self.high_known = min(self.high_known, guess - 1)
                direction = "higher" if guess < self.secret else "lower"
                text, reward, terminated = (f"{guess} is wrong: the number is {direction}. "
                                            f"{self.guesses_left} guesses left.", 0.0, False)
        if terminated:
            self.done = True
            return text, reward, True, False, {}
        if self.turn >= self.max_turns:
            self.done = True
            return text + "\nOut of turns.", 0.0, False, True, {}
        return text, 0.0, False, False, {}

    def oracle_action(self):
        return f"\\boxed{{{self.secret}}}"
