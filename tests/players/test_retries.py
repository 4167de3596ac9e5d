"""Transient faults are retried until the real answer arrives, and every retry is counted."""

from __future__ import annotations

import logging
import time

import pytest
from players_helpers import FAST, HELLO, answer, player_config

from envduels.players import ProviderError, RetryPolicy, build_player
from envduels.players._retry import parse_retry_after
from envduels.testing import ScriptedServer

EXPECTED = "scripted-1 heard: Say hello"


@pytest.mark.parametrize("fault", ["429:0", "500", "503", "hang", "truncated", "drop", "nochoices"])
async def test_each_fault_is_retried_once_and_never_reported_as_an_answer(fault: str) -> None:
    with ScriptedServer(answer, faults=[fault]) as srv:
        player = build_player(player_config(srv.base_url, timeout_s=0.5), retry_policy=FAST)
        result = await player.chat(HELLO, call_id="c1", role="solver")
        await player.aclose()
    assert result.text == EXPECTED
    assert result.retries == 1
    assert srv.request_count == 2
    assert [r["fault"] for r in srv.requests] == [fault, None]
    assert player.usage["solver"].retries == 1


async def test_a_run_of_every_fault_still_succeeds_with_exact_retry_counts() -> None:
    faults = ["429:0", "500", "hang", "truncated", "drop", "nochoices"]
    with ScriptedServer(answer, faults=faults) as srv:
        player = build_player(player_config(srv.base_url, timeout_s=0.5, max_retries=6),
                              retry_policy=FAST)
        first = await player.chat(HELLO, call_id="c1", role="author")
        second = await player.chat(HELLO, call_id="c2", role="author")
        await player.aclose()
    assert (first.text, first.retries) == (EXPECTED, 6)
    assert (second.text, second.retries) == (EXPECTED, 0)
    assert srv.request_count == 8
    usage = player.usage["author"]
    assert (usage.calls, usage.retries) == (2, 6)
    assert usage.output_tokens == 2 * len(EXPECTED.split())


async def test_retry_after_is_honoured_before_the_next_attempt() -> None:
    with ScriptedServer(answer, faults=["429:0.4"]) as srv:
        player = build_player(player_config(srv.base_url), retry_policy=FAST)
        started = time.monotonic()
        result = await player.chat(HELLO, call_id="c1", role="solver")
        elapsed = time.monotonic() - started
        await player.aclose()
    assert result.retries == 1
    assert elapsed >= 0.4


async def test_retry_after_is_capped_by_the_policy() -> None:
    with ScriptedServer(answer, faults=["429:3600"]) as srv:
        player = build_player(player_config(srv.base_url),
                              retry_policy=RetryPolicy(base_s=0.01, max_retry_after_s=0.1))
        started = time.monotonic()
        await player.chat(HELLO, call_id="c1", role="solver")
        await player.aclose()
    assert time.monotonic() - started < 3


async def test_after_max_retries_the_call_raises_provider_error(caplog) -> None:
    caplog.set_level(logging.WARNING, logger="envduels.players")
    with ScriptedServer(answer, faults=["500"] * 10) as srv:
        player = build_player(player_config(srv.base_url, max_retries=3), retry_policy=FAST)
        with pytest.raises(ProviderError, match="still failing after 3 retries"):
            await player.chat(HELLO, call_id="c1", role="solver")
        await player.aclose()
    assert srv.request_count == 4
    assert len([r for r in caplog.records if "retry" in r.getMessage()]) == 3
    assert player.usage["solver"].calls == 0


async def test_unreachable_server_raises_provider_error_after_retries() -> None:
    srv = ScriptedServer()
    url = srv.start()
    srv.stop()
    player = build_player(player_config(url, max_retries=2), retry_policy=FAST)
    with pytest.raises(ProviderError, match="connection to .* failed"):
        await player.chat(HELLO, call_id="c1", role="solver")
    await player.aclose()


def test_backoff_grows_exponentially_with_bounded_jitter() -> None:
    import random

    policy = RetryPolicy(base_s=1.0, max_backoff_s=8.0)
    rng = random.Random(1)
    for attempt, ceiling in [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (9, 8.0)]:
        d = policy.delay(attempt, rng)
        assert ceiling / 2 <= d <= ceiling


def test_retry_after_accepts_seconds_milliseconds_and_http_dates() -> None:
    from email.utils import formatdate

    assert parse_retry_after({"retry-after": "7"}) == 7.0
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "7"}) == 0.25
    in_30 = parse_retry_after({"retry-after": formatdate(time.time() + 30, usegmt=True)})
    assert in_30 is not None and 27 <= in_30 <= 31
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None


async def test_jitter_never_touches_the_global_random_generator() -> None:
    import random

    random.seed(1234)
    before = random.getstate()
    with ScriptedServer(answer, faults=["500", "500"]) as srv:
        player = build_player(player_config(srv.base_url), retry_policy=FAST)
        await player.chat(HELLO, call_id="c1", role="solver")
        await player.aclose()
    assert random.getstate() == before
