"""Knights and knaves: knights always tell the truth, knaves always lie; find out who is a knight."""

import itertools
import random
import re

_BOX = re.compile(r"^\s*\\boxed\{(.*)\}\s*$", re.S)
NAMES = ["Ada", "Ben", "Cleo", "Dev", "Eli", "Fay", "Gus", "Hana"]


def _unbox(action):
    match = _BOX.match(action)
    return (match.group(1) if match else action).strip().lower()


def _truth(claim, kinds):
    kind, a, b = claim
    if kind == "knight":
        return kinds[a]
    if kind == "knave":
        return not kinds[a]
    if kind == "same":
        return kinds[a] == kinds[b]
    return kinds[a] != kinds[b]


class KnightsKnaves:
    def __init__(self, max_turns=4):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.rng = random.Random(seed)
        n = self.rng.randint(4, 5)
        self.names = self.rng.sample(NAMES, n)
        while True:
            self.kinds = [self.rng.random() < 0.5 for _ in range(n)]
            self.claims = []
            for speaker in range(n):
                others = [p for p in range(n) if p != speaker]
                if self.rng.random() < 0.5:
                    a = self.rng.choice(others)
                    claim = ("knight", a, None)
                else:
                    a, b = self.rng.sample(others, 2)
                    claim = ("same", a, b)
                if _truth(claim, self.kinds) != self.kinds[speaker]:
                    claim = ({"knight": "knave", "same": "different"}[claim[0]], claim[1], claim[2])
                self.claims.append(claim)
            consistent = [ks for ks in itertools.product([True, False], repeat=n)
                          if all(_truth(c, ks) == ks[s] for s, c in enumerate(self.claims))]
            if len(consistent) == 1:
                break
        self.answer = {self.names[i].lower() for i in range(n) if self.kinds[i]}
        self.tries_left = 2
        self.turn = 0
        self.done = False
        lines = "\n".join(f"  {self.names[s]} says: {self._say(c)}" for s, c in enumerate(self.claims))
        text = (
            f"On this island every person is a knight (always tells the truth) or a knave "
            f"(always lies). You meet {', '.join(self.names)}.\n{lines}\n"
            "Who are the knights? You have 2 tries.\n"
            "Action format: the knights' names separated by commas, or none, e.g. \\boxed{Ada, Ben}."
        )
        return text, {"people": list(self.names)}

    def _say(self, claim):
        kind, a, b = claim
        if kind in ("knight", "knave"):
            return f"\"{self.names[a]} is a {kind}.\""
        return f"\"{self.names[a]} and {self.names[b]} are {'the same kind' if kind == 'same' else 'different kinds'}.\""

    def step(self, action):
        if self.done:
            return "The game is over.", 0.0, True, False, {}
        self.turn += 1
        raw = _unbox(action)
        named = set() if raw in ("none", "nobody") else {p.strip() for p in raw.replace(" and ", ",").split(",") if p.strip()}
        known = {name.lower() for name in self.names}
        terminated, reward = False, 0.0
        if raw == "" or not named <= known:
            text = (f"Invalid answer {raw!r}: list knights among {', '.join(self.names)} "
                    "separated by commas, or none.")
        else:
            self.tries_left -= 1
            if named == self.answer:
                text, reward, terminated = "Correct. You win!", 1.0, True
            elif self.tries_left == 0:
                text, terminated = "Wrong, and no tries left.", True
            else:
                text = "Wrong. 1 try left."
        if terminated:
            self.done = True
            return text, reward, True, False, {}
        if self.turn >= self.max_turns:
            self.done = True
            return text + "\nOut of turns.", 0.0, False, True, {}
        return text, 0.0, False, False, {}

    def oracle_action(self):
        knights = [name for i, name in enumerate(self.names) if self.kinds[i]]
        return f"\\boxed{{{', '.join(knights) or 'none'}}}"
