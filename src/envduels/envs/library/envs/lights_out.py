"""Lights Out: press cells to toggle them and their neighbours until the whole grid is dark."""

import itertools
import random
import re

_BOX = re.compile(r"^\s*\\boxed\{(.*)\}\s*$", re.S)


def _unbox(action):
    match = _BOX.match(action)
    return (match.group(1) if match else action).strip().lower()


def _press(grid, n, r, c):
    for dr, dc in ((0, 0), (1, 0), (-1, 0), (0, 1), (0, -1)):
        if 0 <= r + dr < n and 0 <= c + dc < n:
            grid[r + dr][c + dc] ^= 1


def _solution(grid, n):
    """The smallest set of presses that darkens `grid` (by light chasing over all top rows)."""
    best = None
    for top in itertools.product((0, 1), repeat=n):
        work = [row[:] for row in grid]
        presses = [(0, c) for c in range(n) if top[c]]
        for r, c in presses:
            _press(work, n, r, c)
        for r in range(1, n):
            for c in range(n):
                if work[r - 1][c]:
                    _press(work, n, r, c)
                    presses.append((r, c))
        if not any(work[n - 1]) and (best is None or len(presses) < len(best)):
            best = presses
    return best


class LightsOut:
    def __init__(self, max_turns=20):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.rng = random.Random(seed)
        self.n = self.rng.choice([3, 4, 4])
        self.grid = [[0] * self.n for _ in range(self.n)]
        need = self.rng.randint(3, self.n + 3)
        while not any(map(any, self.grid)) or len(_solution(self.grid, self.n)) < need:
            r, c = self.rng.randrange(self.n), self.rng.randrange(self.n)
            _press(self.grid, self.n, r, c)
        self.presses_left = len(_solution(self.grid, self.n)) + 2
        self.turn = 0
        self.done = False
        text = (
            f"Lights Out on a {self.n}x{self.n} grid (1 = lit, 0 = dark). Pressing a cell toggles "
            "it and its up/down/left/right neighbours. Make every cell dark. You have "
            f"{self.presses_left} presses; an invalid action costs none.\n{self._show()}\n"
            "Action format: row and column, 1-based, e.g. \\boxed{2 3}."
        )
        return text, {"size": self.n, "presses": self.presses_left}

    def _show(self):
        return "\n".join(" ".join(str(v) for v in row) for row in self.grid)

    def step(self, action):
        if self.done:
            return "The game is over.", 0.0, True, False, {}
        self.turn += 1
        parts = _unbox(action).replace(",", " ").split()
        terminated, reward = False, 0.0
        if len(parts) != 2 or not all(p.isdigit() and 1 <= int(p) <= self.n for p in parts):
            text = (f"Invalid action: give a row and a column from 1 to {self.n}, e.g. "
                    f"\\boxed{{1 2}}.\n{self._show()}")
        else:
            _press(self.grid, self.n, int(parts[0]) - 1, int(parts[1]) - 1)
            self.presses_left -= 1
            text = self._show()
            if not any(map(any, self.grid)):
                text, reward, terminated = text + "\nAll dark. You win!", 1.0, True
            elif self.presses_left == 0:
                text, terminated = text + "\nNo presses left.", True
            else:
                text += f"\n{self.presses_left} presses left."
        if terminated:
            self.done = True
            return text, reward, True, False, {}
        if self.turn >= self.max_turns:
            self.done = True
            return text + "\nOut of turns.", 0.0, False, True, {}
        return text, 0.0, False, False, {}

    def oracle_action(self):
        r, c = _solution(self.grid, self.n)[0]
        return f"\\boxed{{{r + 1} {c + 1}}}"
