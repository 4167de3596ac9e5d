"""Water jugs: measure an exact amount with two unmarked jugs, a tap and a drain."""

import math
import random
import re

_BOX = re.compile(r"^\s*\\boxed\{(.*)\}\s*$", re.S)


def _unbox(action):
    match = _BOX.match(action)
    return (match.group(1) if match else action).strip().lower()


class WaterJugs:
    def __init__(self, max_turns=30):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.rng = random.Random(seed)
        while True:
            self.cap = {"a": self.rng.randint(3, 7), "b": self.rng.randint(8, 13)}
            if math.gcd(self.cap["a"], self.cap["b"]) != 1:
                continue
            self.goal = self.rng.randint(1, self.cap["b"] - 1)
            if self.goal != self.cap["a"] and len(self._plan({"a": 0, "b": 0})) >= 4:
                break
        self.water = {"a": 0, "b": 0}
        self.moves_left = min(self._routine("a", "b"), self._routine("b", "a")) + 2
        self.turn = 0
        self.done = False
        text = (
            f"You have jug A (holds {self.cap['a']} litres) and jug B (holds {self.cap['b']} litres), "
            f"both empty and unmarked, a tap and a drain. Get exactly {self.goal} litres into "
            f"either jug. You have {self.moves_left} moves.\n"
            "Actions: \\boxed{fill A}, \\boxed{empty B}, \\boxed{pour A B} (pour A into B until A "
            "is empty or B is full)."
        )
        return text, {"capacities": dict(self.cap), "goal": self.goal}

    def _moves(self, water):
        for jug in "ab":
            yield f"fill {jug}", {**water, jug: self.cap[jug]}
            yield f"empty {jug}", {**water, jug: 0}
        for src, dst in (("a", "b"), ("b", "a")):
            amount = min(water[src], self.cap[dst] - water[dst])
            yield f"pour {src} {dst}", {src: water[src] - amount, dst: water[dst] + amount}

    def _routine(self, src, dst):
        """Moves taken by: fill `src` when empty, empty `dst` when full, else pour src into dst."""
        water, moves = {"a": 0, "b": 0}, 0
        while self.goal not in water.values():
            if water[src] == 0:
                water = {**water, src: self.cap[src]}
            elif water[dst] == self.cap[dst]:
                water = {**water, dst: 0}
            else:
                amount = min(water[src], self.cap[dst] - water[dst])
                water = {src: water[src] - amount, dst: water[dst] + amount}
            moves += 1
        return moves

    def _plan(self, water):
        """Shortest list of moves from `water` to a state holding the goal (breadth-first)."""
        start = (water["a"], water["b"])
        paths = {start: []}
        queue = [start]
        for a, b in queue:
            if self.goal in (a, b):
                return paths[(a, b)]
            for name, nxt in self._moves({"a": a, "b": b}):
                key = (nxt["a"], nxt["b"])
                if key not in paths:
                    paths[key] = paths[(a, b)] + [name]
                    queue.append(key)
        return []

    def step(self, action):
        if self.done:
            return "The game is over.", 0.0, True, False, {}
        self.turn += 1
        self.moves_left -= 1
        words = _unbox(action).replace("jug", " ").replace("into", " ").split()
        moves = dict(self._moves(self.water))
        key = " ".join(words)
        terminated, reward = False, 0.0
        if key not in moves:
            text = "Invalid action: use fill A, fill B, empty A, empty B, pour A B or pour B A."
        else:
            self.water = moves[key]
            text = f"A holds {self.water['a']}, B holds {self.water['b']}."
            if self.goal in self.water.values():
                text, reward, terminated = text + " Goal reached. You win!", 1.0, True
        if not terminated and self.moves_left <= 0:
            text, terminated = text + " No moves left.", True
        if terminated:
            self.done = True
            return text, reward, True, False, {}
        if self.turn >= self.max_turns:
            self.done = True
            return text + "\nOut of turns.", 0.0, False, True, {}
        return text + f" {self.moves_left} moves left.", 0.0, False, False, {}

    def oracle_action(self):
        return f"\\boxed{{{self._plan(self.water)[0].upper()}}}"
