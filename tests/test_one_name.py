"""One name, one meaning, one copy (issue 31): no two modules of src/envduels define the same
public top-level name, but the true protocol names of `ALLOWED`, each with its reason; and the
shape limits the issue set: no class over 25 methods, no store module over 400 lines.

A definition is a top-level `def`, `class` or assignment (a plain, annotated or tuple one) of a
name that does not start with `_`, in every module but the library environments' sources (which
run in the sandbox as text). An import is no definition: a name re-exported from its one home
(`from envduels.duel.protocol import last_boxed`) is the same name.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "envduels"

ALLOWED = {
    "main": "a script's entry point (`python -m`, the console script, the sandbox worker's "
            "program): the name the convention asks for",
    "log": "each module's own `logging.getLogger(...)`: the logging convention",
    "T": "a module's own `TypeVar`: a type parameter means nothing beyond its module",
    "run": "the CLI's command functions are named as the commands they are (`envduels run`); "
           "`envduels.run` is the library's entry point to the same work",
    "estimate": "the CLI's `envduels estimate` command function, named as the command",
    "plan": "the CLI's `envduels plan` command function, named as the command",
    "INFO_MAX_TOKENS": "the sandbox worker runs as a standalone program under a bare interpreter "
                       "(it imports nothing of envduels), so it keeps its own copy of the "
                       "channel's cap; the test below checks the two agree",
}


def _names(target: ast.expr) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, ast.Tuple | ast.List):
        return [n for e in target.elts for n in _names(e)]
    return []


def definitions(root: Path) -> dict[str, list[str]]:
    """Public top-level name -> the modules (paths under `root`) that define it."""
    found: dict[str, list[str]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        if "library" in path.parts:
            continue
        module = path.relative_to(root).as_posix()
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names = [node.name]
            elif isinstance(node, ast.Assign):
                names = [n for t in node.targets for n in _names(t)]
            elif isinstance(node, ast.AnnAssign):
                names = _names(node.target)
            else:
                continue
            found.update({n: [*found[n], module] for n in names if not n.startswith("_")})
    return found


def duplicates(root: Path) -> dict[str, list[str]]:
    return {name: modules for name, modules in definitions(root).items()
            if len(modules) > 1 and name not in ALLOWED}


def test_no_two_modules_define_the_same_public_name():
    assert duplicates(SRC) == {}


def test_every_allowed_name_is_still_defined_twice():
    defined = definitions(SRC)
    assert [name for name in ALLOWED if len(defined.get(name, [])) < 2] == []


def test_the_sandbox_worker_s_own_copy_of_the_info_cap_is_the_channel_s():
    from envduels.sandbox import _channel

    worker = ast.parse((SRC / "sandbox" / "_worker.py").read_text())
    (value,) = [ast.literal_eval(n.value) for n in worker.body if isinstance(n, ast.Assign)
                and _names(n.targets[0]) == ["INFO_MAX_TOKENS"]]
    assert value == _channel.INFO_MAX_TOKENS


def test_the_check_finds_a_name_defined_twice(tmp_path):
    (tmp_path / "a.py").write_text("class Session:\n    pass\n\nUNSOLVABLE, TRIVIAL = 0.2, 0.1\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.py").write_text("Session = object\nTRIVIAL: str = 'trivial'\n"
                                           "from a import Session as S  # an import: no definition\n"
                                           "def _private():\n    pass\n")
    assert duplicates(tmp_path) == {"Session": ["a.py", "sub/b.py"],
                                    "TRIVIAL": ["a.py", "sub/b.py"]}


def classes_over(root: Path, limit: int) -> dict[str, int]:
    """class -> its methods (every `def` in its body), for classes with more than `limit`."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        if "library" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                methods = sum(isinstance(b, ast.FunctionDef | ast.AsyncFunctionDef)
                              for b in node.body)
                if methods > limit:
                    out[f"{path.relative_to(root).as_posix()}:{node.name}"] = methods
    return out


def test_no_class_has_more_than_25_methods():
    assert classes_over(SRC, 25) == {}


def test_the_method_count_finds_a_big_class(tmp_path):
    (tmp_path / "big.py").write_text("class Store:\n" + "".join(
        f"    def m{i}(self):\n        pass\n" for i in range(26)))
    assert classes_over(tmp_path, 25) == {"big.py:Store": 26}


def test_no_store_module_is_over_400_lines():
    sizes = {p.name: len(p.read_text().splitlines()) for p in (SRC / "store").glob("*.py")}
    assert sizes and {name: n for name, n in sizes.items() if n > 400} == {}


def test_every_command_s_body_lives_in_its_package_s_commands_module():
    """As the CLI's docstring says: each command function the CLI calls is imported from a
    `commands` module (issue 31 found 8 of 15 so)."""
    tree = ast.parse((SRC / "cli.py").read_text())
    sources = {alias.name: node.module for node in ast.walk(tree)
               if isinstance(node, ast.ImportFrom) and node.module
               for alias in node.names if alias.name.endswith("_command")}
    assert len(sources) >= 15
    assert {name: module for name, module in sources.items()
            if not module.endswith(".commands")} == {}
