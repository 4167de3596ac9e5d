"""The server's own OpenAPI schema, fuzzed with schemathesis against a real `envduels serve`:
no generated request gets a 500 (503 is the documented "at --max-sessions"), every error is one
line, and the server logs no traceback (checked when the module's servers stop, in conftest).

Schemathesis' pytest plugin does not load under this pytest, so its Python API draws the cases
(each operation's own strategy) and Hypothesis runs them."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

schemathesis = pytest.importorskip("schemathesis", reason="the test extra is not installed")
pytest.importorskip("openenv.core", reason="the serve extra is not installed: pip install 'envduels[serve]'")

EXAMPLES = 20   # per operation: the whole module stays well under a minute on 2 busy cores


@pytest.fixture(scope="module")
def api(short_server):
    return schemathesis.openapi.from_url(f"{short_server.url}/openapi.json")


def _check(case) -> None:
    response = case.call(timeout=30)
    assert response.status_code < 500 or response.status_code == 503, \
        f"{case.method} {case.path}: {response.status_code} {response.text[:300]}"
    if response.status_code >= 400 and "json" in response.headers.get("content-type", ""):
        detail = response.json().get("detail")
        assert isinstance(detail, str) and "\n" not in detail, response.text[:300]


def test_no_generated_request_is_a_server_error(api):
    operations = [result.ok() for result in api.get_all_operations()]
    paths = {op.path for op in operations}
    assert {"/reset", "/step", "/state", "/environments", "/health", "/schema"} <= paths
    for operation in operations:
        run = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                       suppress_health_check=list(HealthCheck))(
            given(case=operation.as_strategy())(_check))
        run()
