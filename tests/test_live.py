"""Live pacing without a network: the calls in flight follow Little's law up and down, a model's calls are spread
over clients of bounded size, and an answer is decoded once, a mangled one sent again."""

import asyncio
from types import SimpleNamespace

import pytest

from nspec.errors import ConnectionFailed
from nspec.runners.live import MAX_SLOTS, Limiter
from nspec.runners.providers import Clients, answer_json


async def permits(limiter: Limiter) -> int:
    """How many calls can be in flight at once now: take every free slot, then give them all back."""
    held = 0
    while not limiter.slots.locked():
        await limiter.slots.acquire()
        held += 1
    for _ in range(held):
        limiter.release()
    return held


def test_adaptive_slots_follow_the_latency_up_and_back_down():
    async def scenario() -> list[int]:
        # 1,000 calls/s, paced at 98% of it: 980/s
        limiter = Limiter({"concurrency": 8, "requests_per_minute": 60_000}, adaptive=True)
        seen = [await permits(limiter)]
        limiter.observe(2.0, 100)  # a slow start (connections being made): 1,000/s x 2 s is over the cap
        seen += [limiter.capacity, await permits(limiter)]
        for _ in range(60):  # calls come back in 10 ms: 980/s x 0.01 s x 1.5 headroom, plus one
            limiter.observe(0.01, 100)
        seen += [limiter.capacity, await permits(limiter), await permits(limiter)]
        for _ in range(60):  # and then in 100 ms: 980/s x 0.1 s x 1.5, plus one
            limiter.observe(0.1, 100)
        seen += [limiter.capacity, await permits(limiter)]
        return seen

    start, grown, grown_permits, shrunk, first_round, second_round, regrown, regrown_permits = asyncio.run(scenario())
    assert start == 8
    assert grown == grown_permits == MAX_SLOTS
    assert shrunk == 16
    # Slots free when the cap came down are retired as they come back: the round after holds only the cap.
    assert first_round == MAX_SLOTS and second_round == 16
    assert regrown == regrown_permits == 148


def test_fixed_concurrency_is_kept_whatever_the_latency():
    async def scenario() -> tuple[int, int]:
        limiter = Limiter({"concurrency": 5, "requests_per_minute": 60_000}, adaptive=False)
        limiter.observe(3.0, 100)
        return limiter.capacity, await permits(limiter)

    assert asyncio.run(scenario()) == (5, 5)


def test_calls_are_spread_over_clients_of_bounded_size():
    made: list[object] = []

    def make() -> object:
        made.append(object())
        return made[-1]

    async def scenario() -> list[int]:
        clients = Clients(make)
        peak: list[int] = []
        release = asyncio.Event()

        async def call() -> None:
            async with clients.client():
                peak.append(max(clients.in_flight))
                await release.wait()

        tasks = [asyncio.ensure_future(call()) for _ in range(150)]
        await asyncio.sleep(0)
        release.set()
        await asyncio.gather(*tasks)
        async with clients.client() as again:
            assert again is made[0]  # the first client is used again once it has room
        return peak

    peak = asyncio.run(scenario())
    assert len(made) == 3 and max(peak) == Clients.PER_CLIENT


def raw(body: bytes) -> SimpleNamespace:
    """What the SDKs' raw responses have in common: the HTTP response, read."""
    return SimpleNamespace(http_response=SimpleNamespace(content=body))


@pytest.mark.parametrize("body", [b"<html>Bad gateway</html>", b'{"id": "cut off', b"[1, 2]"])
def test_an_answer_that_is_not_a_json_object_is_a_connection_error_sent_again(body):
    with pytest.raises(ConnectionFailed, match="openai: no complete response"):
        answer_json("openai", raw(body))
    assert answer_json("openai", raw(b'{"id": "x"}')) == {"id": "x"}
