"""The scripted server speaks real HTTP to the official clients and injects each fault exactly."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time

import httpx
import openai
import pytest

from envduels.testing import ScriptedServer


def _client(base_url: str, timeout: float = 5.0) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key="test", max_retries=0, timeout=timeout)


def test_openai_client_gets_the_responder_reply_and_word_usage() -> None:
    with ScriptedServer(lambda model, messages: f"{model} says hi there") as srv:
        r = _client(srv.base_url).chat.completions.create(
            model="m1", messages=[{"role": "user", "content": "one two three"}], seed=7,
            temperature=0.5)
    assert r.choices[0].message.content == "m1 says hi there"
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (3, 4)
    assert srv.request_count == 1
    req = srv.requests[0]
    assert req["model"] == "m1" and req["params"]["seed"] == 7 and req["fault"] is None


def test_a_streamed_request_gets_the_reply_as_openai_s_server_sent_events() -> None:
    with ScriptedServer(lambda model, messages: "a \\boxed{7}") as srv:
        stream = _client(srv.base_url).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "one two"}], stream=True,
            stream_options={"include_usage": True})
        chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "a \\boxed{7}"
    assert [c.choices[0].finish_reason for c in chunks if c.choices] == [None, "stop"]
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (2, 2)


def test_faults_are_consumed_in_order_then_service_resumes() -> None:
    with ScriptedServer(faults=["429:2", "500", "400", "overflow", "401", "404"]) as srv:
        c = _client(srv.base_url)
        msgs = [{"role": "user", "content": "x"}]
        with pytest.raises(openai.RateLimitError) as e429:
            c.chat.completions.create(model="m", messages=msgs)
        assert e429.value.response.headers["retry-after"] == "2"
        with pytest.raises(openai.InternalServerError):
            c.chat.completions.create(model="m", messages=msgs)
        with pytest.raises(openai.BadRequestError):
            c.chat.completions.create(model="m", messages=msgs)
        with pytest.raises(openai.BadRequestError) as eo:
            c.chat.completions.create(model="m", messages=msgs)
        assert eo.value.code == "context_length_exceeded"
        with pytest.raises(openai.AuthenticationError):
            c.chat.completions.create(model="m", messages=msgs)
        with pytest.raises(openai.NotFoundError):
            c.chat.completions.create(model="m", messages=msgs)
        assert c.chat.completions.create(model="m", messages=msgs).choices[0].message.content == "OK"
    assert [r["fault"] for r in srv.requests] == ["429:2", "500", "400", "overflow", "401", "404", None]


def test_hang_truncated_drop_and_nochoices_are_broken_responses() -> None:
    with ScriptedServer(faults=["hang", "truncated", "drop", "nochoices"]) as srv:
        url = srv.base_url + "/chat/completions"
        body = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(url, json=body, timeout=0.3)
        r = httpx.post(url, json=body)
        with pytest.raises(json.JSONDecodeError):
            json.loads(r.content)
        with pytest.raises(httpx.RemoteProtocolError):
            httpx.post(url, json=body)
        assert "choices" not in httpx.post(url, json=body).json()
        assert httpx.post(url, json=body).json()["choices"][0]["message"]["content"] == "OK"
    assert srv.request_count == 5


def test_api_key_and_model_list_are_enforced() -> None:
    with ScriptedServer(api_key="sk-right", models=["known"]) as srv:
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=srv.base_url, api_key="sk-wrong", max_retries=0).chat.completions.create(
                model="known", messages=[{"role": "user", "content": "x"}])
        ok = openai.OpenAI(base_url=srv.base_url, api_key="sk-right", max_retries=0)
        with pytest.raises(openai.NotFoundError):
            ok.chat.completions.create(model="other", messages=[{"role": "user", "content": "x"}])
        assert ok.chat.completions.create(model="known", messages=[{"role": "user", "content": "x"}])
    assert all("sk-right" not in json.dumps(r) for r in srv.requests)


def test_latency_delays_each_answer() -> None:
    with ScriptedServer(latency_s=0.2) as srv:
        t0 = time.monotonic()
        _client(srv.base_url).chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert time.monotonic() - t0 >= 0.2


def test_anthropic_client_is_served_on_v1_messages() -> None:
    import anthropic

    with ScriptedServer(lambda model, messages: messages[0]["content"].upper()) as srv:
        c = anthropic.Anthropic(base_url=srv.base_url.removesuffix("/v1"), api_key="k", max_retries=0)
        r = c.messages.create(model="claude-x", max_tokens=10, system="be terse",
                              messages=[{"role": "user", "content": "hello"}])
    assert r.content[0].text == "BE TERSE"
    assert (r.usage.input_tokens, r.usage.output_tokens) == (3, 2)


def test_stop_frees_the_port() -> None:
    srv = ScriptedServer()
    url = srv.start()
    srv.stop()
    port = int(url.split(":")[2].split("/")[0])
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_subprocess_prints_base_url_and_uses_the_script(tmp_path) -> None:
    script = tmp_path / "reply.py"
    script.write_text("def respond(model, messages):\n    return 'scripted ' + model\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "envduels.testing.server", "--port", "0", "--latency-ms", "10",
         "--script", str(script)], stdout=subprocess.PIPE, text=True)
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
        r = _client(url).chat.completions.create(model="abc", messages=[{"role": "user", "content": "x"}])
        assert r.choices[0].message.content == "scripted abc"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_ctrl_c_stops_the_subprocess_at_once_with_an_answer_in_flight() -> None:
    # its close cancels its connections' tasks and only those: cancelling every task on the
    # loop (the main one too, which waits for the server) hung it on Ctrl-C
    proc = subprocess.Popen(
        [sys.executable, "-m", "envduels.testing.server", "--port", "0", "--latency-ms", "5000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = proc.stdout.readline().strip()
        with socket.create_connection(("127.0.0.1", int(url.split(":")[2].split("/")[0]))) as conn:
            body = b'{"model": "m", "messages": [{"role": "user", "content": "x"}]}'
            conn.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: "
                         b"application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
            time.sleep(0.3)   # the answer is now waiting out its latency
            started = time.monotonic()
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=5) == 0
        assert time.monotonic() - started < 2
        assert "Traceback" not in proc.stderr.read()
    finally:
        proc.kill()
        proc.wait(timeout=10)


@pytest.mark.parametrize(("fault", "anthropic", "raw"), [
    ("usage_inf", False, b'"prompt_tokens": 1e400,'),
    ("usage_negative", False, b'"prompt_tokens": -1600000000,'),
    ("usage_fraction", True, b'"input_tokens": 2.5,'),
])
def test_hostile_usage_faults_send_the_raw_number(fault, anthropic, raw) -> None:
    with ScriptedServer(faults=[fault]) as srv:
        path = "/messages" if anthropic else "/chat/completions"
        r = httpx.post(srv.base_url + path, json={"model": "m", "messages": [
            {"role": "user", "content": "x"}], "max_tokens": 5})
    assert r.status_code == 200 and raw in r.content


def test_deep_and_finish_error_faults_are_hostile_200s() -> None:
    with ScriptedServer(faults=["deep", "finish_error", "finish_error"]) as srv:
        body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 5}
        deep = httpx.post(srv.base_url + "/chat/completions", json=body)
        openai_error = httpx.post(srv.base_url + "/chat/completions", json=body).json()
        anthropic_error = httpx.post(srv.base_url + "/messages", json=body).json()
    assert (deep.status_code, deep.content) == (200, b"[" * 100_000 + b"]" * 100_000)
    assert openai_error["choices"][0]["finish_reason"] == "error"
    assert anthropic_error["stop_reason"] == "error"


def test_it_bills_openai_prompt_caching_and_reasoning_in_openai_usage_fields() -> None:
    with ScriptedServer(lambda m, msgs: "a b c", prompt_cache=True, reasoning_words=5) as srv:
        c = httpx.Client(base_url=srv.base_url)
        first = [{"role": "system", "content": "s1 s2"}, {"role": "user", "content": "u1 u2 u3"}]
        one = c.post("/chat/completions", json={"model": "m", "messages": first}).json()
        more = [*first, {"role": "assistant", "content": "a b c"}, {"role": "user", "content": "x"}]
        two = c.post("/chat/completions", json={"model": "m", "messages": more,
                                                "prompt_cache_key": "k1"}).json()
        other = c.post("/chat/completions", json={"model": "n", "messages": more}).json()
    assert one["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
    assert two["usage"]["prompt_tokens"] == 9
    assert two["usage"]["prompt_tokens_details"] == {"cached_tokens": 5}   # the first request
    assert two["usage"]["completion_tokens"] == 3 + 5
    assert two["usage"]["completion_tokens_details"] == {"reasoning_tokens": 5}
    assert other["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}  # a model's own cache
    assert srv.requests[1]["body"]["prompt_cache_key"] == "k1"
    assert srv.requests[1]["usage"] == two["usage"]


def test_it_bills_anthropic_breakpoints_as_cache_reads_and_writes() -> None:
    def block(text: str, mark: bool = False) -> dict:
        return {"type": "text", "text": text, **({"cache_control": {"type": "ephemeral"}}
                                                  if mark else {})}

    with ScriptedServer(lambda m, msgs: "ok", prompt_cache=True, cache_min_tokens=3) as srv:
        c = httpx.Client(base_url=srv.base_url)
        first = {"model": "c", "max_tokens": 9, "system": [block("s1 s2", True)],
                 "messages": [{"role": "user", "content": [block("u1 u2 u3", True)]}]}
        one = c.post("/messages", json=first).json()["usage"]
        later = {**first, "messages": [
            {"role": "user", "content": "u1 u2 u3"}, {"role": "assistant", "content": "ok"},
            {"role": "user", "content": [block("next turn", True)]}]}
        two = c.post("/messages", json=later).json()["usage"]
    # the system prompt alone (2 words) is under the minimum of 3: never cached
    assert (one["input_tokens"], one["cache_read_input_tokens"],
            one["cache_creation_input_tokens"]) == (0, 0, 5)
    # read back by lookback from the new breakpoint; only the new turns are written
    assert (two["input_tokens"], two["cache_read_input_tokens"],
            two["cache_creation_input_tokens"]) == (0, 5, 3)
    assert srv.requests[0]["messages"][1] == {"role": "user", "content": "u1 u2 u3"}
    assert srv.requests[0]["body"]["messages"][0]["content"][0]["cache_control"] == {
        "type": "ephemeral"}


def test_a_refused_parameter_gets_a_400_naming_it() -> None:
    with ScriptedServer(refuse_params=["prompt_cache_key"]) as srv:
        c = _client(srv.base_url)
        with pytest.raises(openai.BadRequestError, match="prompt_cache_key"):
            c.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}],
                                      extra_body={"prompt_cache_key": "k"})
        ok = c.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert ok.choices[0].message.content == "OK"
