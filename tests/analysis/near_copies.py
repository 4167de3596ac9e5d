"""The convergence calibration set: the 13 library environments and near-copies of each.

A near-copy is the same design as a second author might write it, made mechanically so that
nothing is hand-picked: `renamed_restyled` renames every name the module defines (`heaps` ->
`the_heaps`), drops docstrings and comments, reformats (ast.unparse), shifts every integer
constant >= 2 by one, lower-cases the title and reverses the order of the hint's sentences;
`redescribed` is that code with no title and the manifest's one-line description in place of the
hint (different words for the same game).
"""

from __future__ import annotations

import ast
import io
import re
import tokenize

from envduels.envs import library_env, library_names

_CONTRACT = {"self", "reset", "step", "oracle_action", "max_turns", "seed", "action"}


def env_text(title: str, hint: str, source: str) -> str:
    """The text convergence embeds for one environment (as `analysis.summary.analyze` builds it)."""
    return f"{title}\n{hint}\n{source}"


def renamed(source: str) -> str:
    tree = ast.parse(source)
    defined: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.FunctionDef | ast.ClassDef):
            defined.add(n.name)
        elif isinstance(n, ast.arg):
            defined.add(n.arg)
        elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            defined.add(n.id)
        elif isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store):
            defined.add(n.attr)
    new = {d: "the_" + d.lstrip("_") for d in defined - _CONTRACT if not d.startswith("__")}
    toks = [t._replace(string=new.get(t.string, t.string)) if t.type == tokenize.NAME else t
            for t in tokenize.generate_tokens(io.StringIO(source).readline)]
    return tokenize.untokenize(toks)


def restyled(source: str) -> str:
    tree = ast.parse(source)
    for n in ast.walk(tree):
        if isinstance(n, ast.Module | ast.FunctionDef | ast.ClassDef) and n.body and isinstance(n.body[0], ast.Expr) \
                and isinstance(n.body[0].value, ast.Constant) and isinstance(n.body[0].value.value, str):
            n.body = n.body[1:] or [ast.Pass()]
        if isinstance(n, ast.Constant) and type(n.value) is int and n.value >= 2:
            n.value += 1
    return ast.unparse(tree)


def reordered(hint: str) -> str:
    return " ".join(reversed(re.split(r"(?<=[.!?])\s+", hint.strip())))


def calibration_set() -> tuple[list[str], list[str]]:
    """(texts, design) for every library environment: the original, `renamed_restyled`, `redescribed`."""
    texts, design = [], []
    for name in library_names():
        spec = library_env(name)
        title = spec.title or spec.metadata.get("title", name)
        copy = restyled(renamed(spec.source))
        texts += [env_text(title, spec.hint, spec.source),
                  env_text(title.lower(), reordered(spec.hint), copy),
                  env_text("", spec.metadata["description"], copy)]
        design += [name] * 3
    return texts, design
