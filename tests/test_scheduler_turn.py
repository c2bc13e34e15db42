"""Slots go to waiting attempts in the order of their index (no barging by the thread that released one)."""

from __future__ import annotations

import contextlib
import queue
import threading
import time

from tik_agent.search.budget import StopReason
from tik_agent.search.scheduler import Scheduler
from tik_agent.search.tickets import Ticket


def _scheduler() -> Scheduler:
    return Scheduler(threading.Condition(threading.RLock()), None, None, None, 0, lambda: 0.0, {}, 1, [])


def _race(turn) -> list[str]:
    """The main thread holds the only slot; attempt 2 waits for it; the main thread releases it
    and at once asks again for attempt 3.  Who gets the slot first?"""
    free: queue.Queue = queue.Queue()
    order: list[str] = []
    waiting = threading.Event()

    def earlier():
        with turn(Ticket("a0002", 2, None, 0.0)):
            waiting.set()
            slot = free.get()
            order.append("a0002")
        free.put(slot)

    t = threading.Thread(target=earlier)
    t.start()
    waiting.wait(5)
    time.sleep(0.2)                    # a0002 is blocked in get()
    free.put("slot")
    with turn(Ticket("a0003", 3, None, 0.0)):
        slot = free.get()
        order.append("a0003")
    free.put(slot)
    t.join(5)
    return order


def test_the_earlier_attempt_gets_the_slot_first():
    scheduler = _scheduler()
    for _ in range(5):
        assert _race(scheduler.turn) == ["a0002", "a0003"]
    assert scheduler._queued == []


def test_control_without_the_turn_the_releasing_thread_barges():
    """The failure the turn prevents: a plain queue lets the releasing thread take the slot back."""
    orders = [_race(lambda ticket: contextlib.nullcontext()) for _ in range(5)]
    assert ["a0003", "a0002"] in orders


def test_a_stop_lets_every_waiter_through():
    scheduler = _scheduler()
    passed = threading.Event()
    with scheduler.turn(Ticket("a0001", 1, None, 0.0)):
        def later():
            with scheduler.turn(Ticket("a0002", 2, None, 0.0)):
                passed.set()
        t = threading.Thread(target=later)
        t.start()
        assert not passed.wait(0.3)          # waits behind a0001
        scheduler.request_stop(StopReason.INTERRUPTED)
        assert passed.wait(2)
        t.join(2)
