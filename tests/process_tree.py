"""Stop a command with a signal mid-work and name every process of it that outlives it.

The command runs under a small harness process that is a *child subreaper*
(prctl(PR_SET_CHILD_SUBREAPER)): a descendant orphaned by the command's exit is re-parented to
the harness instead of to init, so "no process left behind" is checked exactly, whatever
session or process group the descendant put itself in (a sandbox's bwrap calls setsid).
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

HARNESS = r'''
import ctypes, json, os, signal, subprocess, sys, time

spec = json.loads(sys.argv[1])
if ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) != 0:   # PR_SET_CHILD_SUBREAPER
    raise SystemExit("prctl(PR_SET_CHILD_SUBREAPER) failed")

def children(pid):
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as fh:
                out += [int(c) for c in fh.read().split()]
    except OSError:
        pass
    return out

def tree(pid):
    found, todo = [], children(pid)
    while todo:
        p = todo.pop()
        found.append(p)
        todo += children(p)
    return found

def cmd(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace").strip()[:200]
    except OSError:
        return "?"

def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False

out = open(spec["stdout"], "w")
err = open(spec["stderr"], "w")
proc = subprocess.Popen(spec["argv"], stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                        env=spec["env"], cwd=spec["cwd"])
deadline = time.monotonic() + spec["timeout"]
ready = False
while time.monotonic() < deadline and proc.poll() is None:
    text = open(spec["stdout"]).read() + open(spec["stderr"]).read()
    if spec["ready_text"] in text and len(tree(proc.pid)) >= spec["descendants"]:
        ready = True
        break
    time.sleep(0.05)
time.sleep(spec["settle"])
seen = [[p, cmd(p)] for p in tree(proc.pid)]
early = proc.poll()
try:   # gone already: the test reads why from its output (exited_early)
    os.kill(proc.pid, spec["signal"])
except ProcessLookupError:
    pass
try:
    rc = proc.wait(timeout=spec["timeout"])
except subprocess.TimeoutExpired:
    proc.kill()
    rc = proc.wait()
# an orphan that is still going away (a resource tracker reading its pipe's end) gets a moment
survivors = []
end = time.monotonic() + spec["grace"]
while True:
    while True:   # reap what has ended: orphans are the harness's children now
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            pid = 0
        if pid == 0:
            break
    survivors = [[p, cmd(p)] for p in children(os.getpid()) if alive(p)]
    if not survivors or time.monotonic() > end:
        break
    time.sleep(0.05)
for p, _ in survivors:   # leave nothing behind for the next test either
    try:
        os.kill(p, signal.SIGKILL)
    except OSError:
        pass
print(json.dumps({"rc": rc, "ready": ready, "exited_early": early, "seen": seen,
                  "survivors": survivors}))
'''


@dataclass
class Stopped:
    rc: int
    ready: bool            # the command reached `ready_text` and `descendants` before the signal
    seen: list[list]       # [pid, command line] of its descendants when the signal was sent
    survivors: list[list]  # [pid, command line] of those alive `grace` seconds after it exited
    stdout: str
    stderr: str


def stop_midway(argv: list[str], *, signal: int, env: dict[str, str], cwd: Path, ready_text: str,
                descendants: int, settle: float = 0.5, grace: float = 5.0,
                timeout: float = 120.0) -> Stopped:
    """Start `argv`; once its output holds `ready_text` and it has at least `descendants`
    descendant processes, wait `settle` seconds and send it `signal`; report what outlived it."""
    out, err = cwd / "stopped.stdout", cwd / "stopped.stderr"
    spec = {"argv": argv, "env": env, "cwd": str(cwd), "signal": int(signal),
            "ready_text": ready_text, "descendants": descendants, "settle": settle,
            "grace": grace, "timeout": timeout, "stdout": str(out), "stderr": str(err)}
    r = subprocess.run([sys.executable, "-c", HARNESS, json.dumps(spec)], capture_output=True,
                       text=True, timeout=3 * timeout + grace + 30)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.splitlines()[-1])
    return Stopped(got["rc"], got["ready"] and got["exited_early"] is None, got["seen"],
                   got["survivors"], out.read_text(), err.read_text())
