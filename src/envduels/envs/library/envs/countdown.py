"""Countdown numbers: reach a target with + - * / over given numbers, each used at most once."""

import ast
import random
import re
from fractions import Fraction

_BOX = re.compile(r"^\s*\\boxed\{(.*)\}\s*$", re.S)
_OPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b,
        ast.Mult: lambda a, b: a * b, ast.Div: lambda a, b: a / b}


def _unbox(action):
    match = _BOX.match(action)
    return (match.group(1) if match else action).strip()


def _evaluate(node, used):
    """Exact value of an arithmetic expression tree; `used` collects the numbers it uses."""
    if isinstance(node, ast.Expression):
        return _evaluate(node.body, used)
    if isinstance(node, ast.Constant) and type(node.value) is int:
        used.append(node.value)
        return Fraction(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _evaluate(node.left, used), _evaluate(node.right, used)
        if isinstance(node.op, ast.Div) and right == 0:
            raise ValueError("division by zero")
        return _OPS[type(node.op)](left, right)
    raise ValueError("only whole numbers, + - * / and parentheses are allowed")


class Countdown:
    def __init__(self, max_turns=6):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.rng = random.Random(seed)
        while True:
            self.numbers = [self.rng.choice([25, 50, 75, 100])] + [self.rng.randint(1, 10) for _ in range(4)]
            order = self.numbers[:]
            self.rng.shuffle(order)
            expr = str(order[0])
            for n in order[1:]:
                op = self.rng.choice("+-*")
                expr = f"({expr} {op} {n})" if op != "*" else f"{expr} * {n}"
            value = _evaluate(ast.parse(expr, mode="eval"), [])
            if value.denominator == 1 and 101 <= value <= 999:
                break
        self.target, self.solution = int(value), expr
        self.tries_left = 4
        self.turn = 0
        self.done = False
        text = (
            f"Numbers: {' '.join(map(str, self.numbers))}. Target: {self.target}.\n"
            "Write an arithmetic expression equal to the target using + - * / and parentheses. "
            "Each given number may be used at most once (not all are needed); no other numbers. "
            "You have 4 tries.\nAction format: the expression, e.g. \\boxed{(7 - 2) * 25}."
        )
        return text, {"numbers": list(self.numbers), "target": self.target}

    def step(self, action):
        if self.done:
            return "The game is over.", 0.0, True, False, {}
        self.turn += 1
        raw = _unbox(action).replace("×", "*").replace("x", "*").replace("÷", "/")
        raw = raw.split("=")[0]
        terminated, reward = False, 0.0
        try:
            used = []
            value = _evaluate(ast.parse(raw, mode="eval"), used)
            pool = self.numbers[:]
            for n in used:
                if n not in pool:
                    raise ValueError(f"{n} is not available (numbers: {' '.join(map(str, self.numbers))})")
                pool.remove(n)
        except (SyntaxError, ValueError, RecursionError) as err:
            text = f"Invalid expression {raw.strip()!r}: {err}. Example: \\boxed{{(7 - 2) * 25}}."
        else:
            self.tries_left -= 1
            if value == self.target:
                text, reward, terminated = f"{raw.strip()} = {self.target}. You win!", 1.0, True
            elif self.tries_left == 0:
                text, terminated = f"{raw.strip()} = {value}, not {self.target}. No tries left.", True
            else:
                text = f"{raw.strip()} = {value}, not {self.target}. {self.tries_left} tries left."
        if terminated:
            self.done = True
            return text, reward, True, False, {}
        if self.turn >= self.max_turns:
            self.done = True
            return text + "\nOut of turns.", 0.0, False, True, {}
        return text, 0.0, False, False, {}

    def oracle_action(self):
        return f"\\boxed{{{self.solution}}}"
