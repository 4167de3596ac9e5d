"""The transfer loop as a CPU smoke test: a scripted duel, then transfer.py with the bundled SmolLM2.

    python examples/transfer/smoke.py OUT_DIR

It proves the plumbing, nothing about models: its numbers are a smoke test, not a finding.

1. A real `envduels run` (engine, sandbox, run database) whose players are scripted by the
   OpenAI-compatible `envduels.testing.ScriptedServer` on loopback: authors a1-a4 and h each
   write a one-turn "vault" environment (say the password: the author's word and the last
   digit of the vault's number, so the answer differs per seed) with a hint; five panel solvers
   s1-s5 always win with the hint, and without it solvers s1..s_k win author a_k's vault, so the
   panel's no-hint pass rate is k/5 and the hint lift 1 - k/5 (0.8, 0.6, 0.4, 0.2).
2. `envduels export --author h`: h's environment is the held-out export.
3. `transfer.py` on the four author pools (learnable band 0.05-0.95), SmolLM2 trained for one
   GRPO step each (group 2, one turn, 8-token replies) and evaluated on the held-out export,
   ending with `envduels correlate` over the four pools.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import transfer  # noqa: E402  (the loop itself, beside this file)

AUTHORS = {"a1": "anchor", "a2": "bridge", "a3": "candle", "a4": "dragon", "h": "ember"}
COLD_WINNERS = {"a1": 1, "a2": 2, "a3": 3, "a4": 4, "h": 2}   # solvers s1..sk win cold
SOLVERS = [f"s{i}" for i in range(1, 6)]
KEY_ENV = "ENVDUELS_SMOKE_KEY"

VAULT = r'''
import random


class Vault:
    def __init__(self, max_turns: int = 2):
        self.max_turns = max_turns

    def reset(self, seed=None):
        number = random.Random(seed).randint(1, 999)
        self.password = f"WORD{number % 10}"
        return f"Vault AUTHOR #{number}: say the password.", {}

    def step(self, action):
        word = action.strip()[len("\\boxed{"):-1].strip().lower()
        if word == self.password:
            return "The vault opens.", 1.0, True, False, {}
        return "Wrong password: the vault stays shut.", 0.0, True, False, {}

    def oracle_action(self):
        return "\\boxed{" + self.password + "}"
'''


def author_reply(author: str) -> str:
    word = AUTHORS[author]
    source = VAULT.replace("AUTHOR", author).replace("WORD", word)
    hint = f"The password is {word[::-1]!r} read backwards, then the last digit of the vault's number."
    return (f"```python\n{source}```\n<hint>{hint}</hint>\n"
            f"<domain>language</domain>\n<title>Vault of {author}</title>")


def respond(model: str, messages: list[dict]) -> str:
    """The scripted players: authors by name, solvers by the vault they see."""
    name = model.removeprefix("m-")
    if name in AUTHORS:
        return author_reply(name)
    first = next(m["content"] for m in messages if m["role"] == "user")
    author, number = first.split("Vault ", 1)[1].split(":", 1)[0].split(" #")
    wins = first.startswith("Hint: ") or int(name[1:]) <= COLD_WINNERS[author]
    return f"\\boxed{{{AUTHORS[author] + number[-1] if wins else 'nope'}}}"


def config(base_url: str, out: Path) -> dict:
    def player(name: str, role: str) -> dict:
        return {"name": name, "provider": "openai", "model": f"m-{name}", "base_url": base_url,
                "api_key_env": KEY_ENV, "roles": [role], "temperature": 0.0, "max_concurrency": 4}

    return {
        "name": "transfer-smoke", "seed": 0, "output_dir": str(out / "run"),
        "players": [player(a, "author") for a in AUTHORS] + [player(s, "solver") for s in SOLVERS],
        "tournament": {"rounds": 1, "envs_per_author": 1, "seeds_per_env": 2, "max_turns": 2,
                       "author_repairs": 0, "history": "none"},
        "sandbox": {"warm_workers": 2},
    }


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python examples/transfer/smoke.py OUT_DIR", file=sys.stderr)
        return 2
    from envduels.testing import ScriptedServer

    out = Path(args[0])
    out.mkdir(parents=True, exist_ok=True)
    envduels = transfer.envduels_command()
    env = {**os.environ, KEY_ENV: "smoke-test-key"}
    with ScriptedServer(respond) as server:
        cfg_path = out / "duel.yaml"
        cfg_path.write_text(yaml.safe_dump(config(server.base_url, out)), encoding="utf-8")
        subprocess.run([*envduels, "run", str(cfg_path), "--quiet"], env=env, check=True)
    subprocess.run([*envduels, "export", str(out / "run"), str(out / "heldout"), "--author", "h"],
                   check=True)
    return transfer.main([str(out / "run"), "--heldout", str(out / "heldout"),
                          "--out", str(out / "transfer"), "--authors", "a1", "a2", "a3", "a4",
                          "--steps", "1", "--group", "2", "--max-turns", "1",
                          "--max-new-tokens", "8", "--label", "smoke test"])


if __name__ == "__main__":
    sys.exit(main())
