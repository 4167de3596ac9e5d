"""The SDKs' HTTP clients carry the player's timeouts and connection limits, in the SDK's own
HTTP library's types (openai and anthropic build on httpx2 in recent releases; given httpx's
`Timeout`, httpx2's client made every timeout phase that object)."""

from __future__ import annotations

import asyncio
import threading

import pytest
from players_helpers import player_config

from envduels.players._base import sdk_http_client


@pytest.mark.parametrize("sdk", ["openai", "anthropic"])
def test_the_sdk_http_client_gets_the_players_timeouts_and_connection_limits(sdk) -> None:
    module = pytest.importorskip(sdk)
    cfg = player_config("http://127.0.0.1:9", timeout_s=30.0, max_concurrency=3)
    client = sdk_http_client(module.DefaultAsyncHttpxClient, cfg)
    try:
        timeout = client.timeout
        assert (timeout.connect, timeout.read, timeout.write, timeout.pool) == (10.0, 30.0, 30.0, 30.0)
        assert client._transport._pool._max_connections == cfg.concurrency.http_connections
    finally:
        asyncio.run(client.aclose())


def _https_server_cert(tmp_path) -> tuple[str, str]:
    """A self-signed certificate for 127.0.0.1 (cert, key), made with the openssl tool."""
    import shutil
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl tool to make a certificate")
    cert, key = str(tmp_path / "cert.pem"), str(tmp_path / "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key,
                    "-out", cert, "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    return cert, key


async def _get_over_tls(clients, cert: str, key: str) -> list[str]:
    """Each client's GET of a loopback HTTPS server serving `cert`: the body, or the error."""
    import ssl

    server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_tls.load_cert_chain(cert, key)

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=server_tls)
    port = server.sockets[0].getsockname()[1]
    out = []
    try:
        for client in clients:
            try:
                out.append((await client.get(f"https://127.0.0.1:{port}/")).text)
            except Exception as err:   # the library's ConnectError, its cause the TLS failure
                out.append("certificate verify failed" if "CERTIFICATE_VERIFY_FAILED" in repr(
                    err.__context__ or err) + str(err) else repr(err))
            finally:
                await client.aclose()
    finally:
        server.close()
        await server.wait_closed()
    return out


@pytest.mark.parametrize("sdk", ["openai", "anthropic"])
def test_players_share_one_tls_context_that_still_verifies_servers(sdk, tmp_path,
                                                                   monkeypatch) -> None:
    module = pytest.importorskip(sdk)
    cert, key = _https_server_cert(tmp_path)
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    cfg = player_config("https://127.0.0.1:9")
    first, second = (sdk_http_client(module.DefaultAsyncHttpxClient, cfg) for _ in range(2))
    assert first._transport._pool._ssl_context is second._transport._pool._ssl_context
    monkeypatch.setenv("SSL_CERT_FILE", cert)   # another trust store: another context
    trusting = sdk_http_client(module.DefaultAsyncHttpxClient, cfg)
    assert trusting._transport._pool._ssl_context is not first._transport._pool._ssl_context
    assert asyncio.run(_get_over_tls([first, second, trusting], cert, key)) == [
        "certificate verify failed", "certificate verify failed", "ok"]


@pytest.mark.parametrize("sdk", ["openai", "anthropic"])
def test_clients_made_in_another_thread_get_their_own_tls_context(sdk) -> None:
    # a client sets the context's ALPN list on every connection, unlocked in OpenSSL: two
    # threads' event loops must never connect through one context at the same moment
    module = pytest.importorskip(sdk)
    cfg = player_config("https://127.0.0.1:9")
    here = sdk_http_client(module.DefaultAsyncHttpxClient, cfg)
    made: list = []
    worker = threading.Thread(target=lambda: made.extend(
        sdk_http_client(module.DefaultAsyncHttpxClient, cfg) for _ in range(2)))
    worker.start()
    worker.join()
    contexts = [c._transport._pool._ssl_context for c in (here, *made)]
    assert contexts[1] is contexts[2] and contexts[1] is not contexts[0]


@pytest.mark.parametrize("sdk", ["openai", "anthropic"])
def test_a_plain_http_endpoint_loads_no_ca_bundle_and_its_client_refuses_tls(
        sdk, tmp_path, monkeypatch) -> None:
    # a local server over http:// needs no trust store (loading one held up a run's first
    # call by 20-80 ms); a TLS connection through that client fails, never goes unverified
    module = pytest.importorskip(sdk)
    cert, key = _https_server_cert(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", cert)   # even a trust store naming the server
    plain = sdk_http_client(module.DefaultAsyncHttpxClient, player_config("http://127.0.0.1:9"))
    context = plain._transport._pool._ssl_context
    assert context.cert_store_stats()["x509_ca"] == 0
    assert context.verify_mode.name == "CERT_REQUIRED" and context.check_hostname
    trusting = sdk_http_client(module.DefaultAsyncHttpxClient, player_config("https://127.0.0.1:9"))
    assert asyncio.run(_get_over_tls([plain, trusting], cert, key)) == [
        "certificate verify failed", "ok"]
