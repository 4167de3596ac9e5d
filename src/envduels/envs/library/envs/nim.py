"""Nim: several heaps; take any number from one heap; whoever takes the last object wins."""

import random
import re

_BOX = re.compile(r"^\s*\\boxed\{(.*)\}\s*$", re.S)


def _unbox(action):
    match = _BOX.match(action)
    return (match.group(1) if match else action).strip().lower()


def _xor(heaps):
    total = 0
    for h in heaps:
        total ^= h
    return total


def _winning_move(heaps):
    total = _xor(heaps)
    if total == 0:
        return None
    for i, h in enumerate(heaps):
        if h ^ total < h:
            return i, h - (h ^ total)
    return None


class Nim:
    def __init__(self, max_turns=30):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.rng = random.Random(seed)
        while True:
            self.heaps = [self.rng.randint(1, 12) for _ in range(self.rng.randint(3, 5))]
            if _xor(self.heaps) != 0:
                break
        self.turn = 0
        self.done = False
        text = (
            f"Nim. Heaps: {self._show()}. You and the house alternate; you move first. "
            "A move removes one or more objects from a single heap. Whoever takes the last "
            "object wins. The house plays perfectly whenever it can.\n"
            "Action format: heap number (1-based) and how many to take, e.g. \\boxed{2 3}."
        )
        return text, {"heaps": list(self.heaps)}

    def _show(self):
        return ", ".join(f"heap {i + 1}: {h}" for i, h in enumerate(self.heaps))

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
        parts = raw.replace(",", " ").split()
        if len(parts) != 2 or not all(p.isdigit() for p in parts):
            return self._end(f"Invalid move {raw!r}: write the heap number and the count, "
                             f"e.g. \\boxed{{1 2}}. {self._show()}.", 0.0, False)
        heap, count = int(parts[0]) - 1, int(parts[1])
        if not 0 <= heap < len(self.heaps) or not 1 <= count <= self.heaps[heap]:
            return self._end(f"Illegal move {raw!r}: pick a non-empty heap and take between 1 "
                             f"and its size. {self._show()}.", 0.0, False)
        self.heaps[heap] -= count
        if sum(self.heaps) == 0:
            return self._end("You took the last object. You win!", 1.0, True)
        move = _winning_move(self.heaps)
        if move is None:
            choices = [i for i, h in enumerate(self.heaps) if h > 0]
            move = (self.rng.choice(choices), 1)
        self.heaps[move[0]] -= move[1]
        said = f"You took {count} from heap {heap + 1}; the house took {move[1]} from heap {move[0] + 1}."
        if sum(self.heaps) == 0:
            return self._end(said + " The house took the last object. You lose.", 0.0, True)
        return self._end(f"{said} {self._show()}.", 0.0, False)

    def oracle_action(self):
        move = _winning_move(self.heaps)
        if move is None:
            move = (next(i for i, h in enumerate(self.heaps) if h > 0), 1)
        return f"\\boxed{{{move[0] + 1} {move[1]}}}"
