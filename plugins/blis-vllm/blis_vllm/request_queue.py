"""Waiting queues: FCFS deque and priority heap.

Port of ``vllm/v1/core/sched/request_queue.py`` (vLLM 0.33.0). ``prepend_request``
puts a preempted request back at the head of an FCFS queue; in a priority queue it
is simply re-inserted, as upstream.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable, Iterator
from enum import StrEnum
from typing import Protocol

from blis_vllm.request import Request

__all__ = [
    "FCFSRequestQueue",
    "PriorityRequestQueue",
    "RequestQueue",
    "SchedulingPolicy",
    "create_request_queue",
]


class SchedulingPolicy(StrEnum):
    """``--scheduling-policy``."""

    FCFS = "fcfs"
    PRIORITY = "priority"


class RequestQueue(Protocol):
    """What the scheduler needs of a waiting queue."""

    def add_request(self, request: Request) -> None: ...
    def pop_request(self) -> Request: ...
    def peek_request(self) -> Request: ...
    def prepend_request(self, request: Request) -> None: ...
    def prepend_requests(self, requests: Iterable[Request]) -> None: ...
    def remove_requests(self, requests: Iterable[Request]) -> None: ...
    def __len__(self) -> int: ...
    def __bool__(self) -> bool: ...
    def __iter__(self) -> Iterator[Request]: ...


class FCFSRequestQueue:
    """First come, first served."""

    def __init__(self) -> None:
        self._q: deque[Request] = deque()

    def add_request(self, request: Request) -> None:
        """Append at the tail."""
        self._q.append(request)

    def pop_request(self) -> Request:
        """Take the head."""
        return self._q.popleft()

    def peek_request(self) -> Request:
        """The head, without removing it; refuses an empty queue."""
        if not self._q:
            raise IndexError("peek from an empty queue")
        return self._q[0]

    def prepend_request(self, request: Request) -> None:
        """Put at the head (a preempted request resumes first)."""
        self._q.appendleft(request)

    def prepend_requests(self, requests: Iterable[Request]) -> None:
        """``extendleft``: the requests end up at the head in reverse order."""
        self._q.extendleft(requests)

    def remove_requests(self, requests: Iterable[Request]) -> None:
        """Remove the given requests, keeping the order of the rest."""
        drop = set(id(r) for r in requests)
        self._q = deque(r for r in self._q if id(r) not in drop)

    def __len__(self) -> int:
        return len(self._q)

    def __bool__(self) -> bool:
        return bool(self._q)

    def __iter__(self) -> Iterator[Request]:
        return iter(self._q)


class PriorityRequestQueue:
    """A heap ordered by (priority, arrival time, request id)."""

    def __init__(self) -> None:
        self._heap: list[Request] = []

    def add_request(self, request: Request) -> None:
        """Insert by priority."""
        heapq.heappush(self._heap, request)

    def pop_request(self) -> Request:
        """Take the most urgent request."""
        return heapq.heappop(self._heap)

    def peek_request(self) -> Request:
        """The most urgent request; refuses an empty queue."""
        if not self._heap:
            raise IndexError("peek from an empty heap")
        return self._heap[0]

    def prepend_request(self, request: Request) -> None:
        """No front in a heap: re-insert by priority."""
        self.add_request(request)

    def prepend_requests(self, requests: Iterable[Request]) -> None:
        """Re-insert each by priority."""
        for r in requests:
            self.add_request(r)

    def remove_requests(self, requests: Iterable[Request]) -> None:
        """Remove the given requests and re-heapify."""
        drop = set(id(r) for r in requests)
        self._heap = [r for r in self._heap if id(r) not in drop]
        heapq.heapify(self._heap)

    def __len__(self) -> int:
        return len(self._heap)

    def __bool__(self) -> bool:
        return bool(self._heap)

    def __iter__(self) -> Iterator[Request]:
        heap = self._heap[:]
        while heap:
            yield heapq.heappop(heap)


def create_request_queue(policy: SchedulingPolicy) -> FCFSRequestQueue | PriorityRequestQueue:
    """The queue for ``policy``."""
    if policy is SchedulingPolicy.PRIORITY:
        return PriorityRequestQueue()
    return FCFSRequestQueue()
