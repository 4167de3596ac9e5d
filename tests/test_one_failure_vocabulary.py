"""The fault -> outcome rule lives in `envduels/duel/faults.py` alone (issue 31): no other module
of src/envduels decides what a failure means for an episode, or spells a reason's wording.

What counts as a decision, per module AST (every module but `duel/faults.py`, the rule, and
`duel/protocol.py`, whose own endings are the protocol's: a win, a loss, truncation, the cap):

- an `Outcome` member inside an `except` handler, but in a comparison: the handler chose an
  outcome for a failure;
- an `Outcome` member given as the outcome of an episode anywhere: an argument of `end`,
  `done`, `EpisodeResult` or `Ending`, or an `outcome=` keyword;
- an SQL statement that sets an episode's outcome (`UPDATE episodes SET outcome`) with an
  `Outcome` member bound to it;
- a string (or the start of an f-string) that begins with one of the vocabulary's reason
  wordings ("environment fault", "sandbox error", ...): the wording is spelled once, there.

Reading an outcome (`episode.outcome is Outcome.ERROR`, SQL that selects by outcome, counting
outcomes) is no decision. The cases below are what the rule must catch, so the test can fail.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from envduels.duel import faults

SRC = Path(__file__).resolve().parents[1] / "src" / "envduels"
RULE = {"duel/faults.py", "duel/protocol.py"}
WORDINGS = tuple(w for w in (
    faults.START_FAILED, faults.ENVIRONMENT_FAULT, faults.SANDBOX_ERROR, faults.CONTEXT_OVERFLOW,
    faults.CONTENT_REFUSED, faults.PROVIDER_ERROR, faults.SOLVER_CALL_FAILED, faults.HARNESS_ERROR,
    faults.SESSION_ENDED, faults.REPLAY_FAULTED, faults.REPLAY_FAILED))
DECIDING_CALLS = {"end", "done", "EpisodeResult", "Ending"}


def _is_outcome(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            and node.value.id == "Outcome")


def _outcomes_in(node: ast.AST) -> list[ast.AST]:
    """The `Outcome` members under `node` that are not compared with something (read)."""
    compared = {id(n) for c in ast.walk(node) if isinstance(c, ast.Compare)
                for side in (c.left, *c.comparators) for n in ast.walk(side)}
    return [n for n in ast.walk(node) if _is_outcome(n) and id(n) not in compared]


def _name(call: ast.Call) -> str:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def decisions(source: str) -> list[tuple[int, str]]:
    """(line, what) of every outcome decision and reason wording in `source`."""
    found: list[tuple[int, str]] = []
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.ExceptHandler):
            found += [(n.lineno, "an outcome chosen in an except handler")
                      for stmt in node.body for n in _outcomes_in(stmt)]
        elif isinstance(node, ast.Call):
            name = _name(node)
            if name in DECIDING_CALLS:
                found += [(n.lineno, f"an outcome given to {name}()")
                          for arg in node.args for n in _outcomes_in(arg)]
            found += [(n.lineno, "an outcome given as outcome=") for kw in node.keywords
                      if kw.arg == "outcome" for n in _outcomes_in(kw.value)]
            sql = next((a.value for a in node.args if isinstance(a, ast.Constant)
                        and isinstance(a.value, str)), "")
            if "SET outcome" in " ".join(sql.split()):
                found += [(n.lineno, "an outcome written by SQL")
                          for arg in node.args for n in _outcomes_in(arg)]
        elif isinstance(node, ast.JoinedStr) and node.values:
            first = node.values[0]
            if isinstance(first, ast.Constant) and str(first.value).startswith(WORDINGS):
                found.append((node.lineno, f"a reason's wording: {first.value!r}"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and node.value.startswith(WORDINGS):
            found.append((node.lineno, f"a reason's wording: {node.value!r}"))
    return sorted(set(found))


def _modules() -> list[str]:
    """Every module of the package but the rule's and the library environments' sources."""
    return sorted(m for p in SRC.rglob("*.py") if "library" not in p.parts
                  and (m := p.relative_to(SRC).as_posix()) not in RULE)


@pytest.mark.parametrize("module", _modules())
def test_no_module_but_the_vocabulary_decides_an_outcome_for_a_failure(module):
    assert decisions((SRC / module).read_text()) == []


def test_the_rule_is_where_the_vocabulary_says():
    text = (SRC / "duel" / "faults.py").read_text()
    assert decisions(text), "duel/faults.py decides nothing: the rule moved"


# what the rule must catch: each of the shapes the drivers used before issue 31
CAUGHT = {
    "a ladder of except clauses": '''
async def play():
    try:
        result = await env.step(action)
    except SandboxStartError as fault:
        return done(Outcome.ERROR, "sandbox error: " + fault.reason)
    except EnvFault as fault:
        episode.step_failed(fault.reason)
        return done(Outcome.INCOMPLETE, f"environment fault: {fault.reason}")
''',
    "an outcome passed on from a handler": '''
try:
    instance.step(action)
except Exception as err:
    return self._fault(str(err), outcome=Outcome.ERROR)
''',
    "an outcome decided outside any handler": '''
def expire(self, why):
    self.episode.end(Outcome.FAILURE, why)
''',
    "an outcome written by SQL": '''
def put_audit(db, key, detail):
    db.execute("UPDATE episodes SET outcome = ?, reason = ? WHERE episode_key = ?",
               (Outcome.INCOMPLETE, detail, key))
''',
    "a result made with an outcome": '''
result = EpisodeResult(Outcome.INCOMPLETE, "not played", 0)
''',
    "a reason spelled again": '''
REASON = "environment failed to start"
''',
}


@pytest.mark.parametrize("shape", list(CAUGHT))
def test_the_check_catches_every_shape_of_decision(shape):
    assert decisions(CAUGHT[shape])


def test_the_check_lets_reading_an_outcome_through():
    assert decisions('''
done = sum(1 for e in episodes if e.outcome is not Outcome.ERROR)
rows = db.query("SELECT COUNT(*) FROM episodes WHERE outcome != ?", (Outcome.ERROR,))
try:
    x = 1
except ValueError:
    log.error("no outcome here")
status = 503 if episode.outcome is Outcome.ERROR else 502
try:
    replay()
except Exception as err:
    if ending(err, Phase.REPLAY).outcome is Outcome.ERROR:
        raise HostError from None
''') == []
