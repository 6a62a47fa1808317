"""``WorkQueue``: the runner's queue of admitted pipelines behaves as ``asyncio.Queue`` does."""

from __future__ import annotations

import asyncio

import pytest

from pyattacker.engine.workqueue import EMPTY, WorkQueue


def test_offer_and_take_hand_items_over_in_order_up_to_the_bound() -> None:
    queue: WorkQueue[int] = WorkQueue(2)
    assert queue.take() is EMPTY and queue.empty()
    assert queue.offer(1) and queue.offer(2)
    assert not queue.offer(3)  # full: the caller awaits put()
    assert queue.qsize() == 2
    assert [queue.take(), queue.get_nowait()] == [1, 2]
    with pytest.raises(asyncio.QueueEmpty):
        queue.get_nowait()


def test_waiting_put_and_get_are_woken_in_order() -> None:
    async def main() -> list[object]:
        queue: WorkQueue[int] = WorkQueue(1)
        got: list[object] = []

        async def consumer() -> None:
            for _ in range(3):
                got.append(await queue.get())

        task = asyncio.create_task(consumer())
        await asyncio.sleep(0)  # the consumer waits on the empty queue
        for i in range(3):
            await queue.put(i)  # waits while the consumer has not taken the last one
        await task
        return got

    assert asyncio.run(main()) == [0, 1, 2]


def test_a_cancelled_waiter_hands_its_wake_up_on() -> None:
    """As in ``asyncio.Queue``: a getter woken for an item and then cancelled wakes the next
    getter, so the item is not left in the queue while another worker waits for it."""

    async def main() -> object:
        queue: WorkQueue[str] = WorkQueue(4)
        first = asyncio.create_task(queue.get())
        second = asyncio.create_task(queue.get())
        await asyncio.sleep(0)  # both wait
        assert queue.offer("item")  # wakes the first getter...
        first.cancel()  # ...which is cancelled before it runs
        got = await asyncio.wait_for(second, 1.0)
        with pytest.raises(asyncio.CancelledError):
            await first
        return got

    assert asyncio.run(main()) == "item"


def test_a_cancelled_putter_hands_its_wake_up_on() -> None:
    async def main() -> list[str]:
        queue: WorkQueue[str] = WorkQueue(1)
        assert queue.offer("a")
        first = asyncio.create_task(queue.put("b"))
        second = asyncio.create_task(queue.put("c"))
        await asyncio.sleep(0)  # both wait: the queue is full
        assert queue.take() == "a"  # wakes the first putter...
        first.cancel()  # ...which is cancelled before it runs
        await asyncio.wait_for(second, 1.0)
        with pytest.raises(asyncio.CancelledError):
            await first
        return [queue.take()]

    assert asyncio.run(main()) == ["c"]


def test_push_front_puts_items_back_ahead_in_order_past_the_bound_and_wakes_getters() -> None:
    async def main() -> tuple[list[object], list[object]]:
        queue: WorkQueue[int] = WorkQueue(2)
        woken: list[object] = []

        async def consumer() -> None:
            woken.append(await queue.get())

        waiting = [asyncio.create_task(consumer()) for _ in range(2)]
        await asyncio.sleep(0)  # both wait on the empty queue
        queue.push_front([7, 8])
        await asyncio.gather(*waiting)
        assert queue.offer(1) and queue.offer(2)
        queue.push_front([5, 6])  # beyond the bound of 2: these were counted when first admitted
        rest = [queue.take() for _ in range(queue.qsize())]
        return sorted(woken), rest

    woken, rest = asyncio.run(main())
    assert woken == [7, 8] and rest == [5, 6, 1, 2]
