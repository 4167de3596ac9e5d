"""What prompt caching saves on one long episode, billed by a provider's own usage fields.

A real player plays a 24-turn solver conversation with the library's observation lengths
(`estimate.LIBRARY`) and replies of `--reply-words` words against the scripted server, which
bills like a provider with a prompt cache (OpenAI's `cached_tokens` on any repeated prefix of
1,024 tokens or more, Anthropic's cache reads and writes behind `cache_control` breakpoints), once
with `cache: true` and once with `cache: false`. Printed side by side, per wire format: input
tokens billed uncached, read and written, their dollars at list prices, and the ratio to the
same input with no cache at all (every token at the input price).

    .venv/bin/python bench/bench_cost.py [--turns 24] [--reply-words 100] [--measure]

`--measure` plays every library environment with its oracle (in this process: library code is
trusted) and prints the lengths `envduels.engine.estimate.LIBRARY` ships.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics

from envduels.config import PlayerConfig, Price
from envduels.engine.estimate import LIBRARY
from envduels.engine.solving import SYSTEM_PROMPT, first_turn, next_turn
from envduels.players import build_player
from envduels.testing import ScriptedServer

# List prices (USD per million tokens) at the time of writing; only their ratios matter here.
PRICES = {
    "anthropic": Price(input_per_mtok=3.0, output_per_mtok=15.0, cached_input_per_mtok=0.30,
                       cache_write_per_mtok=3.75),     # Claude Sonnet, 5-minute cache
    "openai": Price(input_per_mtok=2.0, output_per_mtok=8.0, cached_input_per_mtok=0.50),  # GPT-4.1
}


def _text(chars: float, word: str = "obs") -> str:
    """Filler of about `chars` characters in 4-character words: the scripted server counts a
    word as a token, and real text runs about 4 characters per token."""
    return " ".join([word] * max(1, round(chars / (len(word) + 1))))


async def episode(provider: str, url: str, turns: int, cache: bool) -> dict[str, float]:
    """Billed input of one episode: tokens uncached, read, written; `usd` the input's dollars
    as billed, `list_usd` at the input price for every token."""
    os.environ.setdefault("BENCH_KEY", "bench-key")
    cfg = PlayerConfig(name=f"bench-{provider}", provider=provider, model="scripted",
                       base_url=url, api_key_env="BENCH_KEY", max_tokens=64, timeout_s=30,
                       price=PRICES[provider], cache=cache)
    player = build_player(cfg, cache=None, run_seed=0)
    messages = [{"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": first_turn(_text(LIBRARY.first_observation),
                                                       hint=_text(LIBRARY.hint, "hnt"))}]
    total = {"uncached": 0.0, "read": 0.0, "written": 0.0, "usd": 0.0, "list_usd": 0.0}
    price = PRICES[provider]
    for turn in range(1, turns + 1):
        reply = await player.chat(messages, call_id=f"ep:bench-{cache}:turn:{turn}", role="solver")
        total["read"] += reply.cache_read_tokens
        total["written"] += reply.cache_write_tokens
        total["uncached"] += reply.input_tokens - reply.cache_read_tokens - reply.cache_write_tokens
        uncached = reply.input_tokens - reply.cache_read_tokens - reply.cache_write_tokens
        total["usd"] += (uncached * price.input_per_mtok + reply.cache_read_tokens
                         * price.cached_input + reply.cache_write_tokens * price.cache_write) / 1e6
        total["list_usd"] += reply.input_tokens * price.input_per_mtok / 1e6
        messages += [{"role": "assistant", "content": reply.text},
                     {"role": "user", "content": next_turn(
                         _text(LIBRARY.later_observation, f"t{turn:02d}"))}]
    await player.aclose()
    return total


async def compare(turns: int, reply_words: int) -> None:
    print(f"one {turns}-turn episode: observations of {LIBRARY.first_observation:.0f} then "
          f"{LIBRARY.later_observation:.0f} characters (library play), replies of "
          f"{reply_words} words; a word is a token")
    print(f"{'provider':<10} {'cache':<6} {'uncached':>9} {'read':>9} {'written':>9} "
          f"{'input $':>9} {'no cache $':>10} {'ratio':>6}")
    reply = " ".join(["step"] * (reply_words - 1) + ["\\boxed{north}"])
    for provider in ("anthropic", "openai"):
        for cache in (False, True):
            # a fresh server per episode, nothing cached before it; like both APIs, no prefix
            # under 1,024 tokens is cached
            with ScriptedServer(lambda m, msgs: reply, prompt_cache=True,
                                cache_min_tokens=1024) as srv:
                r = await episode(provider, srv.base_url, turns, cache)
            print(f"{provider:<10} {str(cache).lower():<6} {r['uncached']:>9,.0f} "
                  f"{r['read']:>9,.0f} {r['written']:>9,.0f} {r['usd']:>9.4f} "
                  f"{r['list_usd']:>10.4f} {r['usd'] / r['list_usd']:>6.2f}")
    print("OpenAI caches repeated prefixes by itself: `cache: false` only drops prompt_cache_key,"
          " which keeps one episode's turns on one cache machine at a provider's scale.")


def measure(seeds: int = 8) -> None:
    """Play every library environment with its oracle; print mean lengths in characters."""
    from envduels.envs import library_env, library_names

    first, later, turns, actions, hints, sources = [], [], [], [], [], []
    for name in library_names():
        spec = library_env(name)
        namespace: dict = {"__name__": f"library_{name}"}
        exec(compile(spec.source, spec.id, "exec"), namespace)  # noqa: S102 (the library's own code)
        cls = namespace[spec.class_name]
        hints.append(len(spec.hint))
        sources.append(len(spec.source))
        for seed in range(seeds):
            env = cls(max_turns=spec.max_turns)
            obs, _ = env.reset(seed)
            first.append(len(obs))
            played, over = 0, False
            while not over and played < spec.max_turns:
                action = env.oracle_action()
                actions.append(len(action))
                obs, _reward, terminated, truncated, _ = env.step(action)
                later.append(len(obs))
                played, over = played + 1, terminated or truncated
            turns.append(played)
    print(f"{len(library_names())} environments x {seeds} seeds, oracle play:")
    print(f"LibraryPlay(first_observation={statistics.mean(first):.0f}, "
          f"later_observation={statistics.mean(later):.0f}, "
          f"oracle_turns={statistics.mean(turns):.1f}, oracle_action={statistics.mean(actions):.0f}, "
          f"hint={statistics.mean(hints):.0f}, source={statistics.mean(sources):.0f}, "
          f"source_min={min(sources):.0f})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--turns", type=int, default=24)
    ap.add_argument("--reply-words", type=int, default=100,
                    help="words per solver reply (a short reasoning and the boxed action)")
    ap.add_argument("--measure", action="store_true", help="measure the library lengths")
    args = ap.parse_args()
    if args.measure:
        measure()
    asyncio.run(compare(args.turns, args.reply_words))


if __name__ == "__main__":
    main()
