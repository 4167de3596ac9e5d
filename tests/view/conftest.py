"""Fixtures for the viewer: a real scripted tournament (the engine's duel script, run by the
engine against the scripted HTTP server, in the bubblewrap sandbox) whose author and solver
replies carry hostile markup; a canary HTTP server on loopback that must never be reached; the
viewer served by uvicorn on a loopback port; headless Chromium."""

from __future__ import annotations

import http.server
import sys
import threading
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).parents[1] / "engine"))
sys.path.insert(0, str(Path(__file__).parents[1]))

import duel_script  # noqa: E402  (the engine tests' script: a tournament worked out by hand)
from browser_helpers import chromium  # noqa: E402

KEY = "sk-view-test-secret"


class Canary:
    """A loopback HTTP server that records every request it gets: the hostile payloads point at
    it, so any request means something model-written ran or loaded."""

    def __init__(self) -> None:
        hits = self.hits = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                hits.append(self.path)
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def payload(self, where: str) -> str:
        """Markup that would reach the canary if it ever ran or loaded as HTML."""
        c = self.url
        return (f"<script>fetch('{c}/{where}/script')</script>"
                f"<img src=\"{c}/{where}/img\" onerror=\"fetch('{c}/{where}/onerror')\">"
                f"<img src=\"/{where}-same-origin.png\">"
                f"<a href=\"javascript:fetch('{c}/{where}/js')\">click {where}</a>")


def hostile_lock(canary: Canary) -> str:
    """duel_script's LOCK, with observations that carry the canary payload."""
    obs = canary.payload("observation").replace("\\", "\\\\").replace('"', '\\"')
    src = duel_script.LOCK_SOURCE.replace(
        'return "Wrong word, the lock stays shut.", 0.0, False, False, {}',
        f'return "Wrong word, the lock stays shut. " + "{obs}", 0.0, False, False, {{}}')
    src = src.replace('guess the code word. Answer like',
                      f'guess the code word. {obs.replace("{", "{{").replace("}", "}}")} Answer like')
    assert src != duel_script.LOCK_SOURCE
    return src


def respond_with(canary: Canary):
    lock = hostile_lock(canary)

    def respond(model: str, messages: list[dict]) -> str:
        if messages and messages[0]["content"].startswith(duel_script.AUTHOR_SYSTEM_START):
            attempt = sum(1 for m in messages if m["role"] == "assistant")
            if model == "m-alice":
                return (f"Here it is. {canary.payload('author')}\n```python\n{lock}```\n"
                        f"<hint>{duel_script.LOCK_HINT}</hint>\n"
                        "<domain>language</domain>\n<title>The lock</title>")
            return duel_script.author_reply(model, attempt)
        return f"{canary.payload('reply')} {duel_script.solver_reply(model, messages)}"

    return respond


@pytest.fixture(scope="session")
def canary():
    c = Canary()
    yield c
    c.server.shutdown()


@pytest.fixture(scope="session")
def scripted_run(tmp_path_factory, canary) -> Path:
    """A finished scripted tournament (3 environments, one invalid, 24 episodes) with hostile
    author replies, solver replies and environment observations."""
    from envduels.engine.commands import run_command
    from envduels.testing import ScriptedServer

    tmp = tmp_path_factory.mktemp("scripted")
    mp = pytest.MonkeyPatch()
    mp.setenv("ENVDUELS_TEST_KEY", KEY)
    try:
        with ScriptedServer(respond_with(canary), api_key=KEY) as server:
            run_dir = tmp / "run"
            path = tmp / "run.yaml"
            path.write_text(yaml.safe_dump(duel_script.config(server.base_url, str(run_dir))))
            assert run_command(path, unsafe_no_sandbox=False, quiet=True) == 0
    finally:
        mp.undo()
    return run_dir


def analysed(url: str, run: int = 0) -> str:
    """`url` once the viewer's first analysis of run `run` is done (pages before that show a
    placeholder for ratings and findings and reload themselves when it is)."""
    import time

    import httpx

    deadline = time.monotonic() + 120
    while not httpx.get(f"{url.rstrip('/')}/run/{run}/live.json", timeout=120).json()["analysis_ready"]:
        assert time.monotonic() < deadline, "the first analysis took over 2 minutes"
        time.sleep(0.2)
    return url


@pytest.fixture(scope="session")
def viewer(scripted_run):
    from envduels.view import create_app
    from envduels.view.commands import running

    app = create_app([scripted_run], bootstrap=100)
    with running(app) as url:
        yield analysed(url).rstrip("/")


@pytest.fixture(scope="session")
def browser(tmp_path_factory):
    yield from chromium(tmp_path_factory)
