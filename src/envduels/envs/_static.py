"""Checks that need no sandbox: the source parses, it defines one environment class, hint rules.

The source is only parsed here (`ast`), never executed: running it is the sandbox's job.
"""

from __future__ import annotations

import ast
import re

from envduels._text import one_line
from envduels.envs._spec import DEFAULT_MAX_TURNS

_BOXED = re.compile(r"\\boxed\s*\{")
_FENCE = re.compile(r"```|~~~")  # a fence anywhere, inline too

MAX_SOURCE_CHARS = 200_000
"""Longest environment source accepted: the library's largest is under 20 KB, and a cap keeps a
hostile reply from costing the parser (and every later sandbox load) unbounded time."""


class StaticError(Exception):
    """The source cannot be run at all; `reason` is the one-line verdict reason."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def parse_source(source: str) -> ast.Module:
    """The module's AST. Never raises anything but `StaticError`, whose one-line reason names the
    line of a syntax error, or says the source is over `MAX_SOURCE_CHARS`, too deeply nested or
    otherwise unparsable: the source is untrusted (a model's reply), and CPython's parser can
    exhaust its recursion limit or memory on a few kilobytes of nesting."""
    if len(source) > MAX_SOURCE_CHARS:
        raise StaticError(
            f"the source is {len(source):,} characters, over the limit of {MAX_SOURCE_CHARS:,}: "
            "write a smaller environment (generate data in reset instead of embedding it)"
        )
    try:
        return ast.parse(source)
    except SyntaxError as err:
        where = f"line {err.lineno}" if err.lineno else "the source"
        raise StaticError(f"syntax error at {where}: {err.msg}: fix the source so that it parses") from None
    except RecursionError:
        raise StaticError(
            "the source is too deeply nested to parse: flatten the deeply nested expression"
        ) from None
    except MemoryError:
        raise StaticError("the source is too large to parse: write a smaller environment") from None
    except ValueError as err:  # e.g. null bytes, lone surrogates
        raise StaticError(f"the source cannot be parsed ({one_line(err, 120)}): save it as plain UTF-8 Python") from None
    except Exception as err:  # anything else the parser may raise on hostile input
        raise StaticError(f"the source cannot be parsed ({type(err).__name__}): fix the source so that it parses") from None


def _methods(node: ast.ClassDef) -> set[str]:
    return {
        item.name
        for item in node.body
        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
    }


def find_env_class(tree: ast.Module, class_name: str | None = None) -> str:
    """The name of the environment class: `class_name` if given, else the one top-level class
    defining both `reset` and `step` (classes only serving as bases of another such class in the
    file do not count). `StaticError` when there is none, or several and no `class_name`."""
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    if class_name is not None:
        if class_name not in classes:
            raise StaticError(
                f"class_name {class_name!r} is not a top-level class of the source: "
                f"fix class_name (classes found: {', '.join(classes) or 'none'})"
            )
        return class_name
    candidates = [name for name, node in classes.items() if {"reset", "step"} <= _methods(node)]
    bases = {
        base.id
        for name in candidates
        for base in classes[name].bases
        if isinstance(base, ast.Name)
    }
    leaves = [name for name in candidates if name not in bases]
    if not leaves:
        raise StaticError(
            "no environment class: define one top-level class with reset(seed) and step(action) methods"
        )
    if len(leaves) > 1:
        raise StaticError(
            f"{len(leaves)} environment classes ({', '.join(leaves)}): keep exactly one "
            "class with reset and step, or name it with class_name"
        )
    return leaves[0]


def default_max_turns(tree: ast.Module, class_name: str) -> int:
    """The literal default of `max_turns` in the class's `__init__`, else `DEFAULT_MAX_TURNS`."""
    for node in tree.body:
        if not (isinstance(node, ast.ClassDef) and node.name == class_name):
            continue
        for item in node.body:
            if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                args = item.args
                positional = args.posonlyargs + args.args
                defaults = dict(zip([a.arg for a in positional[-len(args.defaults):]], args.defaults, strict=True)) if args.defaults else {}
                defaults.update({a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None})
                value = defaults.get("max_turns")
                if isinstance(value, ast.Constant) and type(value.value) is int and value.value > 0:
                    return value.value
    return DEFAULT_MAX_TURNS


def check_hint(hint: str, max_chars: int) -> list[str]:
    """The hint rules of SPEC §3, one reason per broken rule (empty list: the hint is fine).

    Non-empty after stripping, at most `max_chars` characters, no fenced code block, no
    `\\boxed{...}` (a hint states an insight; it never hands over an action).
    """
    reasons = []
    if not hint.strip():
        return ["the hint is empty: state the key insight that makes the task tractable"]
    if len(hint) > max_chars:
        reasons.append(
            f"the hint is {len(hint)} characters, over the limit of {max_chars}: shorten it to the key insight"
        )
    if _FENCE.search(hint):
        reasons.append("the hint contains a code block: state the insight in prose, without ``` fences")
    if _BOXED.search(hint):
        reasons.append("the hint contains \\boxed{...}: a hint may not hand over an action; describe the idea instead")
    return reasons
