"""Dark maze: reach the exit of a maze when you only see the exits of the room you stand in."""

import random
import re

_BOX = re.compile(r"^\s*\\boxed\{(.*)\}\s*$", re.S)
MOVES = {"north": (0, -1), "south": (0, 1), "east": (1, 0), "west": (-1, 0)}


def _unbox(action):
    match = _BOX.match(action)
    return (match.group(1) if match else action).strip().lower()


class DarkMaze:
    def __init__(self, max_turns=100):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.rng = random.Random(seed)
        self.w, self.h = self.rng.randint(4, 6), self.rng.randint(4, 6)
        self.open = {(x, y): set() for x in range(self.w) for y in range(self.h)}
        stack, seen = [(0, 0)], {(0, 0)}
        while stack:  # randomized depth-first carving: a maze without loops
            x, y = stack[-1]
            options = [(d, (x + dx, y + dy)) for d, (dx, dy) in MOVES.items()
                       if (x + dx, y + dy) in self.open and (x + dx, y + dy) not in seen]
            if not options:
                stack.pop()
                continue
            d, nxt = self.rng.choice(sorted(options))
            self.open[(x, y)].add(d)
            back = {"north": "south", "south": "north", "east": "west", "west": "east"}[d]
            self.open[nxt].add(back)
            seen.add(nxt)
            stack.append(nxt)
        self.pos = (0, 0)
        self.exit = (self.w - 1, self.h - 1)
        self.moves_left = 2 * self.w * self.h
        self.turn = 0
        self.done = False
        text = (
            f"You are in a dark maze of {self.w} x {self.h} rooms, in the north-west corner room. "
            "The exit is in the south-east corner room. You cannot see the map: in each room you "
            f"only learn which doors are open. You have {self.moves_left} moves; walking into a "
            f"wall or an invalid action costs one.\n{self._here()}\n"
            "Action format: a direction, e.g. \\boxed{south}."
        )
        return text, {"width": self.w, "height": self.h}

    def _here(self):
        doors = ", ".join(d for d in MOVES if d in self.open[self.pos])
        return f"Open doors here: {doors}."

    def step(self, action):
        if self.done:
            return "The game is over.", 0.0, True, False, {}
        self.turn += 1
        self.moves_left -= 1
        word = _unbox(action)
        word = {"n": "north", "s": "south", "e": "east", "w": "west"}.get(word, word)
        terminated, reward = False, 0.0
        if word not in MOVES:
            text = f"Invalid action {word!r}: use north, south, east or west. {self._here()}"
        elif word not in self.open[self.pos]:
            text = f"A wall blocks the way {word}. {self._here()}"
        else:
            dx, dy = MOVES[word]
            self.pos = (self.pos[0] + dx, self.pos[1] + dy)
            if self.pos == self.exit:
                text, reward, terminated = "You found the exit. You win!", 1.0, True
            else:
                text = f"You walk {word}. {self._here()}"
        if not terminated and self.moves_left <= 0:
            text, terminated = text + " You are out of moves.", True
        if terminated:
            self.done = True
            return text, reward, True, False, {}
        if self.turn >= self.max_turns:
            self.done = True
            return text + "\nOut of turns.", 0.0, False, True, {}
        return text + f" {self.moves_left} moves left.", 0.0, False, False, {}

    def oracle_action(self):
        parent = {self.pos: None}
        queue = [self.pos]
        for cell in queue:  # breadth-first search to the exit
            for d in sorted(self.open[cell]):
                dx, dy = MOVES[d]
                nxt = (cell[0] + dx, cell[1] + dy)
                if nxt not in parent:
                    parent[nxt] = (cell, d)
                    queue.append(nxt)
        cell, first = self.exit, None
        while parent[cell] is not None:
            cell, first = parent[cell]
        return f"\\boxed{{{first}}}"
