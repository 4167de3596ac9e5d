"""Tower of Hanoi: move a stack of disks to a target peg in close to the fewest moves."""

import random
import re

_BOX = re.compile(r"^\s*\\boxed\{(.*)\}\s*$", re.S)
PEGS = "ABC"


def _unbox(action):
    match = _BOX.match(action)
    return (match.group(1) if match else action).strip().upper()


def _next_move(where, disk, target):
    """The first move of the shortest way to bring disks 0..disk onto `target`."""
    while disk >= 0 and where[disk] == target:
        disk -= 1
    if disk < 0:
        return None
    spare = 3 - where[disk] - target
    move = _next_move(where, disk - 1, spare)
    return move if move is not None else (where[disk], target)


class TowerOfHanoi:
    def __init__(self, max_turns=40):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.rng = random.Random(seed)
        self.n = self.rng.randint(3, 5)
        start = self.rng.randrange(3)
        self.target = self.rng.choice([p for p in range(3) if p != start])
        self.where = [start] * self.n  # where[d]: peg of disk d, disk 0 the smallest
        self.moves_left = 2 ** self.n - 1 + 2
        self.turn = 0
        self.done = False
        text = (
            f"Tower of Hanoi with {self.n} disks (1 = smallest) on pegs A, B, C. "
            f"{self._show()} Move the whole stack to peg {PEGS[self.target]}. A move takes the "
            "top disk of one peg and puts it on another peg, never onto a smaller disk. You have "
            f"{self.moves_left} moves (the minimum is {2 ** self.n - 1}); an illegal move costs one.\n"
            "Action format: from-peg and to-peg, e.g. \\boxed{A C}."
        )
        return text, {"disks": self.n, "target": PEGS[self.target]}

    def _show(self):
        pegs = []
        for p in range(3):
            disks = [str(d + 1) for d in reversed(range(self.n)) if self.where[d] == p]
            pegs.append(f"{PEGS[p]}: [{' '.join(disks) or 'empty'}]")
        return "Pegs (bottom to top): " + ", ".join(pegs) + "."

    def step(self, action):
        if self.done:
            return "The game is over.", 0.0, True, False, {}
        self.turn += 1
        self.moves_left -= 1
        letters = [c for c in _unbox(action) if c.isalpha()]
        terminated, reward = False, 0.0
        if len(letters) != 2 or not all(c in PEGS for c in letters) or letters[0] == letters[1]:
            text = f"Invalid move: write two different pegs, e.g. \\boxed{{A B}}. {self._show()}"
        else:
            src, dst = PEGS.index(letters[0]), PEGS.index(letters[1])
            on_src = [d for d in range(self.n) if self.where[d] == src]
            on_dst = [d for d in range(self.n) if self.where[d] == dst]
            if not on_src:
                text = f"Peg {letters[0]} is empty. {self._show()}"
            elif on_dst and on_dst[0] < on_src[0]:
                text = f"Disk {on_src[0] + 1} cannot go onto the smaller disk {on_dst[0] + 1}. {self._show()}"
            else:
                self.where[on_src[0]] = dst
                text = self._show()
                if all(p == self.target for p in self.where):
                    text, reward, terminated = text + " The stack is complete. You win!", 1.0, True
        if not terminated and self.moves_left <= 0:
            text, terminated = text + " No moves left.", True
        if not terminated:
            text += f" {self.moves_left} moves left."
        if terminated:
            self.done = True
            return text, reward, True, False, {}
        if self.turn >= self.max_turns:
            self.done = True
            return text + "\nOut of turns.", 0.0, False, True, {}
        return text, 0.0, False, False, {}

    def oracle_action(self):
        src, dst = _next_move(self.where, self.n - 1, self.target)
        return f"\\boxed{{{PEGS[src]} {PEGS[dst]}}}"
