"""The program that runs inside the sandbox: loads one environment and serves calls.

Standard library only; it runs under `python -I -S` and must work on Python >= 3.8. Frames are
a 4-byte big-endian length followed by UTF-8 JSON, on two dedicated pipes whose numbers come in
argv (the environment's stdout/stderr are separate, captured pipes). The parent validates
everything this program sends: code in this interpreter can rewrite any of it, so nothing here
is trusted, it only makes honest environments' results and errors precise.

Usage: python -I -S _worker.py REQUEST_FD RESPONSE_FD OBSERVATION_MAX_CHARS FRAME_MAX_BYTES RLIMITS
RLIMITS: "AS,CPU_SOFT,CPU_HARD,NOFILE,FSIZE,NPROC"; the worker lowers its own limits to these
before it reads any environment code, so everything the environment runs or forks has them.
"""

import os
import sys


class _DecodeContext:
    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int

    @staticmethod
    def parse_constant(name):
        raise ValueError("non-finite number " + name)


def _not_json(value):
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


try:  # the C codec directly: `import json` pulls in `re` and `enum`, a third of start-up time
    import _json

    # (typeshed types the context as a scanner; the C scanner reads these attributes)
    _SCAN = _json.make_scanner(_DecodeContext())  # type: ignore[arg-type]
    _ENCODE = _json.make_encoder({}, _not_json, _json.encode_basestring_ascii, None, ":", ",",
                                 False, False, False)

    def _dumps(obj):
        return "".join(_ENCODE(obj, 0))

    def _loads(text):
        obj, end = _SCAN(text, 0)
        if end != len(text):
            raise ValueError("extra data in frame")
        return obj
except (ImportError, AttributeError, TypeError):
    import json

    def _dumps(obj):
        return json.dumps(obj, allow_nan=False, separators=(",", ":"))

    def _loads(text):
        return json.loads(text)

_SCALARS = (str, int, float, bool, type(None))
# `info` is parsed by the harness on its event loop (and only gym.py uses it): a bounded size
# keeps one sandbox from stalling every other episode. The harness refuses larger frames too.
INFO_MAX_BYTES = 64 << 10
INFO_MAX_TOKENS = 10000   # , : " [ { in its JSON: bounds the values the harness builds
_MAIN_PID = os.getpid()


def _read_exact(fd, n):
    parts = []
    while n:
        chunk = os.read(fd, n)
        if not chunk:
            raise EOFError
        parts.append(chunk)
        n -= len(chunk)
    return b"".join(parts)


def _write_frame(fd, obj, frame_max):
    if os.getpid() != _MAIN_PID:
        os._exit(70)  # a child the environment forked fell back into this loop: it may not speak
    data = _dumps(obj).encode("ascii")
    if len(data) > frame_max:
        data = _dumps({"id": obj.get("id"), "ok": False, "kind": "result",
                       "error": f"result too large ({len(data)} bytes > {frame_max} byte frame cap)"}).encode()
    data = len(data).to_bytes(4, "big") + data
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _observation(reply, obs, cap):
    """Only the first `cap` characters travel; the parent adds the visible marker."""
    if isinstance(obs, str):
        reply["observation_chars"] = len(obs)
        obs = obs[:cap]
    reply["observation"] = _field(obs)


def _info(reply, info, op):
    """The info dict as JSON-able data, or the reply turned into an error when it is too big."""
    if not isinstance(info, dict):
        reply["info"] = _field(info)
        return
    plain = _plain(info)
    text = _dumps(plain)
    tokens = sum(text.count(c) for c in (",", ":", '"', "[", "{"))
    if len(text) > INFO_MAX_BYTES or tokens > INFO_MAX_TOKENS:
        rid = reply.get("id")
        reply.clear()
        reply.update(id=rid, ok=False, kind="result", error=(
            f"{op} returned an info dict of {len(text)} bytes as JSON with {tokens} commas, "
            f"colons, quotes and brackets; at most {INFO_MAX_BYTES} bytes and {INFO_MAX_TOKENS}: "
            "keep info small"))
        return
    reply["info"] = plain


def _plain(value, depth=0):
    """A JSON-able copy of `value`: non-finite floats and unknown objects become strings."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        value = float(value)
        return value if value == value and value not in (float("inf"), float("-inf")) else repr(value)
    if depth > 20:
        return "<too deep>"
    if isinstance(value, dict):
        return {str(k): _plain(v, depth + 1) for k, v in list(value.items())[:1000]}
    if isinstance(value, (list, tuple)):
        return [_plain(v, depth + 1) for v in list(value)[:1000]]
    try:
        return str(value)[:1000]
    except BaseException:
        return f"<unprintable {type(value).__name__}>"


def _field(value):
    """Scalars travel as they are; anything else only by its type name (the parent rejects it)."""
    if type(value) in _SCALARS:
        return value
    return {"$type": type(value).__name__}


def _error_text(exc):
    try:
        return _describe(exc)
    except BaseException:  # e.g. MemoryError while formatting: keep the essentials
        return type(exc).__name__ + ": " + _first_line(exc), ""


def _describe(exc):
    """One line naming the exception and its innermost frame in the env, plus a short
    traceback; written by hand because importing `traceback` costs start-up time."""
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        frames.append((tb.tb_frame.f_code.co_filename, tb.tb_lineno, tb.tb_frame.f_code.co_name))
        tb = tb.tb_next
    where = ""
    for filename, lineno, name in reversed(frames):
        if filename == "<env>":
            where = f" (env line {lineno} in {name})"
            break
    message = f"{type(exc).__name__}: {_first_line(exc)}"
    lines = ["Traceback (most recent call last):"]
    lines += [f'  File "{f}", line {n}, in {name}' for f, n, name in frames[-6:]]
    lines.append(message)
    return message + where, "\n".join(lines)[-2000:]


def _first_line(exc):
    try:
        text = str(exc)
    except BaseException:
        text = "<unprintable>"
    text = text.strip().splitlines()[0] if text.strip() else ""
    return text[:300]


def _accepts_max_turns(cls):
    init = getattr(cls, "__init__", None)
    code = getattr(init, "__code__", None)
    if code is None:
        return False
    named = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
    return "max_turns" in named or bool(code.co_flags & 0x08)


# A template (_zygote.py) compiles its environment's source once: (code, None) or (None, error).
_PRECOMPILED = None


def _compile_source(source):
    try:
        return compile(source, "<env>", "exec"), None
    except SyntaxError as exc:
        return None, f"the source does not compile: {exc.msg} (line {exc.lineno})"


def _load(msg):
    if _PRECOMPILED is not None:   # an instance forked from a template: the source is its own
        code, error = _PRECOMPILED
    else:
        source = msg.get("source")
        if not isinstance(source, str):
            return {"ok": False, "kind": "load", "error": "source must be text"}
        code, error = _compile_source(source)
    if error is not None:
        return {"ok": False, "kind": "load", "error": error}
    module = type(sys)("envduels_env")
    module.__file__ = "<env>"
    sys.modules["envduels_env"] = module
    try:
        exec(code, module.__dict__)
    except BaseException as exc:
        message, tail = _error_text(exc)
        return {"ok": False, "kind": "load", "error": "loading the source raised " + message,
                "detail": tail}
    classes = [obj for obj in list(module.__dict__.values())
               if isinstance(obj, type) and getattr(obj, "__module__", None) == "envduels_env"
               and callable(getattr(obj, "reset", None)) and callable(getattr(obj, "step", None))]
    wanted = msg.get("class_name")
    if wanted is not None:
        chosen = [c for c in classes if c.__name__ == wanted]
        if not chosen:
            return {"ok": False, "kind": "load",
                    "error": f"no environment class named {wanted} (a class with reset and step)"}
        cls = chosen[0]
    elif not classes:
        return {"ok": False, "kind": "load",
                "error": "no environment class (a class with reset and step) in the source"}
    else:
        # A base class that another candidate extends is not a candidate itself.
        leaves = [c for c in classes if not any(o is not c and issubclass(o, c) for o in classes)]
        if len(leaves) > 1:
            names = ", ".join(c.__name__ for c in leaves)
            return {"ok": False, "kind": "load",
                    "error": f"{len(leaves)} environment classes ({names}); set class_name"}
        cls = leaves[0]
    max_turns = msg.get("max_turns")
    try:
        if max_turns is not None and _accepts_max_turns(cls):
            env = cls(max_turns=max_turns)
        else:
            env = cls()
    except BaseException as exc:
        message, tail = _error_text(exc)
        return {"ok": False, "kind": "load", "error": f"constructing {cls.__name__} raised {message}", "detail": tail}
    declared = getattr(env, "max_turns", None)
    if type(declared) is not int or declared <= 0:
        declared = max_turns if max_turns is not None else 20
    return {"ok": True, "env": env, "class_name": cls.__name__, "max_turns": declared,
            "has_oracle": callable(getattr(env, "oracle_action", None))}


def _limit_self(spec):
    import resource

    mem, cpu, cpu_hard, nofile, fsize, nproc = (int(v) for v in spec.split(","))
    for which, soft, hard in ((resource.RLIMIT_AS, mem, mem),
                              (resource.RLIMIT_CPU, cpu, cpu_hard),
                              (resource.RLIMIT_NOFILE, nofile, nofile),
                              (resource.RLIMIT_FSIZE, fsize, fsize),
                              (resource.RLIMIT_CORE, 0, 0),
                              (resource.RLIMIT_NPROC, nproc, nproc)):
        resource.setrlimit(which, (soft, hard))


_WARMUP_SOURCE = """
class _Warmup:
    def reset(self, seed=None):
        return "warm", {"seed": seed}
    def step(self, action):
        return action, 0.0, False, False, {}
"""


def _handle(msg, env, obs_cap):
    """One request: the reply and the environment loaded afterwards."""
    rid, op = msg.get("id"), msg.get("op")
    reply = {"id": rid, "ok": True}
    try:
        if op == "load":
            loaded = _load(msg)
            env = loaded.pop("env", None)
            reply.update(loaded)
        elif env is None:
            reply.update(ok=False, kind="protocol", error="no environment loaded")
        elif op == "reset":
            result = env.reset(seed=msg.get("seed"))
            if not isinstance(result, tuple) or len(result) != 2:
                reply.update(ok=False, kind="result", error=(
                    f"reset must return (observation, info), got {_shape(result)}"))
            else:
                obs, info = result
                _observation(reply, obs, obs_cap)
                _info(reply, info, "reset")
        elif op == "step":
            result = env.step(msg.get("action"))
            if not isinstance(result, tuple) or len(result) != 5:
                reply.update(ok=False, kind="result", error=(
                    "step must return (observation, reward, terminated, truncated, info), "
                    f"got {_shape(result)}"))
            else:
                obs, reward, terminated, truncated, info = result
                if type(reward) is float and not (reward == reward and abs(reward) != float("inf")):
                    reply.update(ok=False, kind="result",
                                 error=f"step returned a non-finite reward ({reward!r})")
                else:
                    _observation(reply, obs, obs_cap)
                    reply.update(
                        reward=_field(reward), terminated=_field(terminated),
                        truncated=_field(truncated))
                    _info(reply, info, "step")
        elif op == "oracle_action":
            oracle = getattr(env, "oracle_action", None)
            if not callable(oracle):
                reply.update(ok=False, kind="result", error="the environment has no oracle_action")
            else:
                reply.update(action=_field(oracle()))
        else:
            reply.update(ok=False, kind="protocol", error=f"unknown operation {op!r}")
    except BaseException as exc:
        message, tail = _error_text(exc)
        reply = {"id": rid, "ok": False, "kind": "raised",
                 "error": f"{op} raised {message}", "detail": tail}
    return reply, env


def _warm_up(obs_cap):
    """Run the request path a few times on a trivial environment before the worker says it is
    ready: the first requests of a fresh interpreter are several times slower than later ones
    (cold code paths and pages), and a worker from the pool should answer its first real
    request at full speed. Start-up runs in the background, so this costs an episode nothing."""
    env = None
    for msg in ({"id": -1, "op": "load", "source": _WARMUP_SOURCE},
                *({"id": -1, "op": "reset", "seed": i} for i in range(4)),
                *({"id": -1, "op": "step", "action": "\\boxed{x}"} for _ in range(4))):
        reply, env = _handle(_loads(_dumps(msg)), env, obs_cap)
        _dumps(reply)
    sys.modules.pop("envduels_env", None)


def main():
    if sys.path and sys.path[0] == "":
        del sys.path[0]   # `-c` puts the scratch directory first; the env gets no say in imports
    req_fd, resp_fd = int(sys.argv[1]), int(sys.argv[2])
    obs_cap, frame_max = int(sys.argv[3]), int(sys.argv[4])
    _limit_self(sys.argv[5])
    _warm_up(obs_cap)
    _serve(req_fd, resp_fd, obs_cap, frame_max)


def _serve(req_fd, resp_fd, obs_cap, frame_max):
    """Greet, then answer requests until the parent closes the request pipe."""
    env = None
    _write_frame(resp_fd, {"id": 0, "ok": True, "ready": True}, frame_max)
    while True:
        try:
            size = int.from_bytes(_read_exact(req_fd, 4), "big")
            msg = _loads(_read_exact(req_fd, size).decode("utf-8"))
        except EOFError:
            os._exit(0)
        reply, env = _handle(msg, env, obs_cap)
        rid, op = msg.get("id"), msg.get("op")
        for stream in (sys.stdout, sys.stderr):
            try:  # noqa: SIM105 (no contextlib import: start-up time)
                stream.flush()
            except BaseException:
                pass
        try:
            _write_frame(resp_fd, reply, frame_max)
        except (ValueError, TypeError) as exc:
            _write_frame(resp_fd, {"id": rid, "ok": False, "kind": "result",
                                   "error": f"{op} returned a value that is not JSON: {_first_line(exc)}"},
                         frame_max)


def _shape(value):
    if isinstance(value, tuple):
        return f"a tuple of {len(value)}"
    return f"a value of type {type(value).__name__}"


if __name__ == "__main__" and sys.argv[1:2] != ["template"]:   # templates: _zygote.py
    main()
