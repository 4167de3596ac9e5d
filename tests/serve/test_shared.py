"""What the server processes of `envduels serve --workers N` share (serve/_shared.py), between
real processes: claims against one `--max-sessions` from several processes at once never pass
it, a process killed while it holds the lock blocks no one, and an HTTP episode id names the
same process everywhere."""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import signal
import time
from pathlib import Path

from envduels.serve._shared import Held, Place, owner

CLAIMS = 20_000


def _claim(place: Place, tries: int, start: object, done: object) -> None:
    start.wait()   # type: ignore[attr-defined]   (all at once: the claims race)
    done.put(sum(place.claim(Held.SANDBOXES) for _ in range(tries)))   # type: ignore[attr-defined]


def _hold_the_lock(place: Place, holding: object) -> None:
    with place._locked():
        holding.set()   # type: ignore[attr-defined]
        time.sleep(600)


def _places(tmp_path: Path, count: int, max_sessions: int) -> list[Place]:
    context = multiprocessing.get_context("spawn")
    lock = tmp_path / "capacity.lock"
    lock.touch()
    first = Place(index=0, count=count, max_sessions=max_sessions,
                  counts=context.RawArray("q", 2 * count), lock_path=str(lock))
    return [dataclasses.replace(first, index=k) for k in range(count)]


def test_three_processes_claiming_at_once_take_exactly_max_sessions(tmp_path):
    context = multiprocessing.get_context("spawn")
    places = _places(tmp_path, 3, max_sessions=CLAIMS)
    done, start = context.Queue(), context.Barrier(len(places))
    workers = [context.Process(target=_claim, args=(place, CLAIMS, start, done))
               for place in places]
    for process in workers:
        process.start()
    taken = [done.get(timeout=120) for _ in workers]
    for process in workers:
        process.join(30)
    assert sum(taken) == CLAIMS                       # never one more, never one less
    assert places[0].total(Held.SANDBOXES) == CLAIMS
    assert places[0].total(Held.CONNECTIONS) == 0     # the other kind is counted apart


def test_a_process_killed_holding_the_lock_blocks_no_claim(tmp_path):
    context = multiprocessing.get_context("spawn")
    places = _places(tmp_path, 2, max_sessions=4)
    holding = context.Event()
    holder = context.Process(target=_hold_the_lock, args=(places[1], holding))
    holder.start()
    assert holding.wait(60)
    assert holder.pid is not None
    os.kill(holder.pid, signal.SIGKILL)
    holder.join(30)
    started = time.monotonic()
    assert [places[0].claim(Held.CONNECTIONS) for _ in range(5)] == [True] * 4 + [False]
    assert time.monotonic() - started < 5
    places[0].clear(0)                                # what the supervisor does for the dead
    assert places[0].total(Held.CONNECTIONS) == 0


def test_an_episode_id_names_the_same_process_in_every_process():
    context = multiprocessing.get_context("spawn")
    ids = [f"episode-{k}" for k in range(200)]
    with context.Pool(1) as pool:
        elsewhere = pool.starmap(owner, [(eid, 3) for eid in ids])
    here = [owner(eid, 3) for eid in ids]
    assert here == elsewhere
    assert set(here) == {0, 1, 2}
