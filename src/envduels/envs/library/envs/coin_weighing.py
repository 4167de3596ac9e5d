"""Counterfeit coin: find the one heavier coin with a balance scale and very few weighings."""

import random
import re

_BOX = re.compile(r"^\s*\\boxed\{(.*)\}\s*$", re.S)


def _unbox(action):
    match = _BOX.match(action)
    return (match.group(1) if match else action).strip().lower()


class CoinWeighing:
    def __init__(self, max_turns=8):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.rng = random.Random(seed)
        self.coins = self.rng.randint(10, 27)
        self.fake = self.rng.randint(1, self.coins)
        self.weighings_left = 3
        self.turn = 0
        self.done = False
        text = (
            f"There are {self.coins} coins numbered 1 to {self.coins}. Exactly one is a fake and "
            "it is heavier than the others, which all weigh the same. You have a balance scale "
            "and may use it 3 times, then you must name the fake. A wrong name loses.\n"
            "Action format: \\boxed{weigh 1 2 3 vs 4 5 6} to compare two groups of coins, or "
            "\\boxed{answer 7} to name the fake."
        )
        return text, {"coins": self.coins, "weighings": 3}

    def _coins(self, text):
        parts = text.replace(",", " ").split()
        if not parts or not all(p.isdigit() and 1 <= int(p) <= self.coins for p in parts):
            return None
        return {int(p) for p in parts}

    def step(self, action):
        if self.done:
            return "The game is over.", 0.0, True, False, {}
        self.turn += 1
        words = _unbox(action)
        terminated, reward = False, 0.0
        if words.startswith("answer"):
            named = self._coins(words[len("answer"):])
            if named is None or len(named) != 1:
                text = f"Invalid answer: name one coin from 1 to {self.coins}, e.g. \\boxed{{answer 3}}."
            elif named == {self.fake}:
                text, reward, terminated = f"Coin {self.fake} is the fake. You win!", 1.0, True
            else:
                text, terminated = f"Wrong: the fake was coin {self.fake}.", True
        elif words.startswith("weigh") and " vs " in words:
            left_text, right_text = words[len("weigh"):].split(" vs ", 1)
            left, right = self._coins(left_text), self._coins(right_text)
            if self.weighings_left == 0:
                text = "No weighings left: name the fake with \\boxed{answer N}."
            elif left is None or right is None or left & right:
                text = (f"Invalid weighing: list coins 1 to {self.coins} on each side, no coin on "
                        "both sides, e.g. \\boxed{weigh 1 2 vs 3 4}.")
            else:
                self.weighings_left -= 1
                lw = len(left) + (self.fake in left)
                rw = len(right) + (self.fake in right)
                result = "balance" if lw == rw else ("left side heavier" if lw > rw else "right side heavier")
                text = f"The scale shows: {result}. {self.weighings_left} weighings left."
        else:
            text = ("Invalid action: use \\boxed{weigh 1 2 vs 3 4} or \\boxed{answer 5}. "
                    f"{self.weighings_left} weighings left.")
        if terminated:
            self.done = True
            return text, reward, True, False, {}
        if self.turn >= self.max_turns:
            self.done = True
            return text + "\nOut of turns.", 0.0, False, True, {}
        return text, 0.0, False, False, {}

    def oracle_action(self):
        return f"\\boxed{{answer {self.fake}}}"
