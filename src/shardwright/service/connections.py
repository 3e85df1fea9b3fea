"""The jobs service's HTTP connections: a request head must arrive in time.

uvicorn waits for a request's head without a time limit (its keep-alive timeout starts only
after a response, and any byte received cancels it), so a client that sends half a head and
stops holds its connection, and a file descriptor, for as long as it likes: with the server's
open-file limit at 256, 300 such connections left the API unable to accept another (trust
round 11 row 42). :class:`HeadTimedProtocol` closes a connection whose request head is not
complete :data:`REQUEST_HEAD_SECONDS` after it opened or after its previous response, and
one whose request body is not complete :data:`REQUEST_BODY_SECONDS` after its head arrived:
the body is read whole before the token is checked (``api.problems.RequestLimits``), so a
client without a token that sent a head announcing a body and then stopped held its connection
for good, the same hole (trust round 12). A response, however long, is never cut.
Imported only by ``serve`` (uvicorn is the ``service`` extra's).
"""

from __future__ import annotations

import asyncio

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["REQUEST_BODY_SECONDS", "REQUEST_HEAD_SECONDS", "HeadTimedProtocol"]

#: seconds a client has to send a whole request head (a browser or curl needs milliseconds)
REQUEST_HEAD_SECONDS = 10.0
#: seconds a client has, once the head is in, to send the body (the largest allowed, 16 MiB by
#: default, at 0.5 MB/s; a job submission is a few KB)
REQUEST_BODY_SECONDS = 30.0


class HeadTimedProtocol(H11Protocol):
    """uvicorn's h11 protocol, closing a connection whose request head or body does not arrive."""

    head_timer: asyncio.TimerHandle | None = None
    body_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.arm_head_timer()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self.arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        _cancel(self.head_timer)
        _cancel(self.body_timer)
        self.head_timer = self.body_timer = None
        super().connection_lost(exc)

    def handle_events(self) -> None:
        super().handle_events()
        # SEND_BODY: a head has arrived and its body has not (all of it): the body's clock runs
        if self.conn.their_state is h11.SEND_BODY:
            if self.body_timer is None:
                self.body_timer = self.close_unless_moved_on(REQUEST_BODY_SECONDS, h11.SEND_BODY)
        else:
            _cancel(self.body_timer)
            self.body_timer = None

    def arm_head_timer(self) -> None:
        # IDLE: no request head parsed since the connection opened or the last response ended
        # (half a head included); any later state is a request under way, never cut here
        _cancel(self.head_timer)
        self.head_timer = self.close_unless_moved_on(REQUEST_HEAD_SECONDS, h11.IDLE)

    def close_unless_moved_on(self, seconds: float, waiting_in: object) -> asyncio.TimerHandle | None:
        """A timer closing the connection if the client is still ``waiting_in`` that state
        (``conn.their_state``) ``seconds`` from now; None when it is closing already."""
        if self.transport.is_closing():
            return None

        def timed_out() -> None:
            if self.conn.their_state is waiting_in and not self.transport.is_closing():
                self.transport.close()

        return self.loop.call_later(seconds, timed_out)


def _cancel(timer: asyncio.TimerHandle | None) -> None:
    if timer is not None:
        timer.cancel()
