"""Sorting swaps: sort a row of numbers with adjacent swaps, with exactly as many swaps as needed."""

import random
import re

_BOX = re.compile(r"^\s*\\boxed\{(.*)\}\s*$", re.S)


def _unbox(action):
    match = _BOX.match(action)
    return (match.group(1) if match else action).strip().lower()


def _inversions(row):
    return sum(1 for i in range(len(row)) for j in range(i + 1, len(row)) if row[i] > row[j])


class SortingSwaps:
    def __init__(self, max_turns=40):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.rng = random.Random(seed)
        size = self.rng.randint(6, 8)
        while True:
            self.row = self.rng.sample(range(1, 50), size)
            if 6 <= _inversions(self.row) <= 20:
                break
        self.swaps_left = _inversions(self.row)
        self.turn = 0
        self.done = False
        text = (
            f"Sort this row into increasing order: {self._show()}. A move swaps two neighbours: "
            f"\\boxed{{i}} swaps positions i and i+1 (positions 1 to {len(self.row)}). You have "
            f"exactly {self.swaps_left} swaps; an invalid action costs no swap.\n"
            "Action format: the left position of the pair, e.g. \\boxed{3}."
        )
        return text, {"row": list(self.row), "swaps": self.swaps_left}

    def _show(self):
        return " ".join(str(x) for x in self.row)

    def step(self, action):
        if self.done:
            return "The game is over.", 0.0, True, False, {}
        self.turn += 1
        raw = _unbox(action).removeprefix("swap").strip()
        terminated, reward = False, 0.0
        if not raw.isdigit() or not 1 <= int(raw) < len(self.row):
            text = (f"Invalid action {raw!r}: give a position from 1 to {len(self.row) - 1}, "
                    f"e.g. \\boxed{{1}}. Row: {self._show()}.")
        else:
            i = int(raw) - 1
            self.row[i], self.row[i + 1] = self.row[i + 1], self.row[i]
            self.swaps_left -= 1
            if self.row == sorted(self.row):
                text, reward, terminated = f"Row: {self._show()}. Sorted. You win!", 1.0, True
            elif self.swaps_left == 0:
                text, terminated = f"Row: {self._show()}. No swaps left and the row is not sorted.", True
            else:
                text = f"Row: {self._show()}. {self.swaps_left} swaps left."
        if terminated:
            self.done = True
            return text, reward, True, False, {}
        if self.turn >= self.max_turns:
            self.done = True
            return text + "\nOut of turns.", 0.0, False, True, {}
        return text, 0.0, False, False, {}

    def oracle_action(self):
        i = next(i for i in range(len(self.row) - 1) if self.row[i] > self.row[i + 1])
        return f"\\boxed{{{i + 1}}}"
