"""Whether a server accepts TCP connections: the one check behind `envduels run`'s and `play`'s
"cannot reach player's server" and the Ray executor's "cannot reach the cluster"."""

from __future__ import annotations

import socket

from envduels._text import one_line


def unreachable(host: str, port: int, timeout_s: float) -> str | None:
    """Why `host:port` does not accept a TCP connection within `timeout_s` (the OS's words,
    e.g. "Connection refused"), or None when it does. The connection is closed at once."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            pass
    except OSError as err:
        return str(err.strerror or err)
    except (UnicodeError, OverflowError, ValueError) as err:
        # a host name IDNA cannot encode (a label over 63 characters), a port over 65535:
        # nothing could answer there, and the caller's one line says which setting to fix
        return one_line(f"not a usable address: {err}", 200)
    return None
