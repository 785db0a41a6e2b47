"""hookgate's HTTP protocol: uvicorn's httptools protocol, with each loop pass's writes sent together.

uvicorn writes a response as two ``transport.write`` calls, the status line and headers and then the
body, and each is a ``send(2)`` at once. Under load that is two system calls per response. Worse, a
response written while its client sleeps wakes the client, one wake-up per response when the
responses of a commit group trickle out between other work. On a VM that wake-up (an
inter-processor interrupt) cost the writing thread ~20 µs of system time.

Here a connection's writes are held until the end of the event loop's current pass: one
``send(2)`` per connection and pass, and the responses a commit group completed leave back to back.
Nothing waits longer than the rest of the pass it was written in. Closing a connection sends what
it holds first. This holds for a response the gateway hands over whole, as bytes (below), too:
sent the moment it was ready (``write_now``, until the twenty-third VM), the responses of a pass
trickled out between the requests still being worked on, and each woke a client that had gone back
to sleep — under wrk on the same machine 0.57 – 0.85 wake-ups of its threads per request, against
0.11 – 0.16 when they leave together at the end of the pass, and 32 – 44 % more rejected requests
a second (bench/README.md, twenty-third VM). A callback per response costs less than a wake-up:
the instruction count that chose ``write_now`` counted no kernel time. A reverse proxy on the same
host is woken the same way.

A request whose head and body arrive in one read (a webhook's small JSON POST, nearly every request)
is handed to the gateway whole (``Gateway.serve_read``) instead of through uvicorn's ASGI cycle (a
scope, an event, a receive and two sends whose headers are checked one by one): the gateway's answer
comes back as bytes, one write held with the pass's others. Everything else — a body still
arriving, ``Expect: 100-continue``, a request pipelined behind one not yet answered, any other ASGI
app — takes uvicorn's cycle, unchanged. An idle keep-alive connection is closed by the once-a-second
sweep, not by a timer armed after every response.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Coroutine
from typing import Any

import httptools
from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT, FlowControl
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

LINGER_S = 2.0  # a close while the client still sends its body: how long what it sends is taken in


class PassTransport:
    """A transport whose ``write``s are joined and sent at the end of the loop pass.

    ``close`` while the client is still sending the request's body (``linger()`` says so: an answer
    given before the body arrived) lingers (RFC 9112 §9.6): the answer is sent and the write side
    shut, and what the client still sends is taken in and dropped for up to ``LINGER_S`` before the
    connection closes. Closed at once, the kernel would answer those bytes with a reset, which can
    destroy the answer in the client's buffers before it read it."""

    __slots__ = ("_held", "_lingering", "_loop", "_transport", "linger")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: list[bytes] = []
        self._lingering = False
        self.linger: Callable[[], bool] | None = None

    def write(self, data: bytes) -> None:
        held = self._held
        if not held:
            self._loop.call_soon(self.send_held)
        held.append(data)

    def is_closing(self) -> bool:
        return self._lingering or self._transport.is_closing()

    def writelines(self, lines: Any) -> None:
        for data in lines:
            self.write(data)

    def send_held(self) -> None:
        held = self._held
        if not held:
            return
        self._held = []
        if self._transport.is_closing():
            return  # aborted, or the peer is gone: nothing can be delivered
        self._transport.write(held[0] if len(held) == 1 else b"".join(held))

    def close(self) -> None:
        self.send_held()
        transport = self._transport
        if self._lingering or transport.is_closing():
            return
        if self.linger is not None and self.linger() and transport.can_write_eof():
            self._lingering = True
            transport.write_eof()
            self._loop.call_later(LINGER_S, transport.close)
            return
        transport.close()

    def write_eof(self) -> None:
        self.send_held()
        self._transport.write_eof()

    def __getattr__(self, name: str) -> Any:  # abort, get_extra_info, pause_reading, …
        return getattr(self._transport, name)


# The methods llhttp parses. Any other token is a valid method too (RFC 9110 §9.1: a token,
# case-sensitive) that llhttp refuses as a malformed request; such a request is parsed as PATCH and
# handed to the app with its own method, which then answers it like any method it does not take (405).
_PARSED_METHODS = frozenset(
    b"DELETE GET HEAD POST PUT CONNECT OPTIONS TRACE COPY LOCK MKCOL MOVE PROPFIND PROPPATCH SEARCH "
    b"UNLOCK BIND REBIND UNBIND ACL REPORT MKACTIVITY CHECKOUT MERGE M-SEARCH NOTIFY SUBSCRIBE "
    b"UNSUBSCRIBE PATCH PURGE MKCALENDAR LINK UNLINK SOURCE PRI DESCRIBE ANNOUNCE SETUP PLAY PAUSE "
    b"TEARDOWN GET_PARAMETER SET_PARAMETER REDIRECT RECORD FLUSH QUERY".split()
)
_MAX_METHOD = 256  # longer than any method a client sends; a longer token is refused as malformed
_TOKEN = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]{1," + str(_MAX_METHOD).encode() + rb"}")
MAX_HEAD_BYTES = 64 * 1024  # request line and headers of one request: the bytes of the reads that were all
# head so far, and the line and fields as parsed once the head ends (the read that ends it may hold body too)
HEAD_TIMEOUT_S = 15.0  # from connecting, or a request's first byte, to the end of its headers
_SWEEP_EVERY_S = 1.0
# Pipelined requests of one connection queued behind the one being answered. A read (up to 256 KiB,
# ~7 700 minimal requests) is parsed in slices, and what is left once this many wait is kept as bytes
# and read on as they are answered: uvicorn parsed every read whole into a request each (~2 KB) and
# read on after each answer, so one client that pipelined 3.4 MB of GETs held ~220 MB.
PIPELINE_MAX = 32
FEED_SLICE = 4 * 1024  # a slice holds at most ~230 minimal requests: the bound is PIPELINE_MAX and one slice


class _HeldFlow(FlowControl):
    """uvicorn's flow control, except that reading stays paused while ``held()``: the protocol holds
    read bytes unparsed. (uvicorn's request cycle resumes reading at each ``receive()``: every POST
    read on past PIPELINE_MAX, and the held bytes grew with whatever the client sent.)"""

    def __init__(self, transport: asyncio.Transport, held: Callable[[], bool]) -> None:
        super().__init__(transport)
        self._held = held

    def resume_reading(self) -> None:
        if not self._held():
            super().resume_reading()


class _NoEvent:
    """What uvicorn's ``connection_lost`` sets on a cycle: an exchange has nobody waiting on it."""

    __slots__ = ()

    def set(self) -> None:
        pass


_NO_EVENT = _NoEvent()
_SERVER_ERROR = (b"content-type: text/plain; charset=utf-8\r\ncontent-length: 21\r\nconnection: close\r\n\r\n"
                 b"Internal Server Error")


class Exchange:
    """One request read whole, and its answer: what ``Gateway.serve_read`` works on. It stands where
    uvicorn keeps its request cycle (``protocol.cycle``), with the attributes the protocol reads there."""

    __slots__ = ("body", "client", "default_headers", "disconnected", "headers", "keep_alive", "message_event",
                 "method", "pieces", "protocol", "query", "raw_path", "response_complete")

    def __init__(self, protocol: HookgateHttpProtocol, method: str, raw_path: bytes, query: bytes,
                 headers: list[tuple[bytes, bytes]], keep_alive: bool) -> None:
        self.protocol = protocol
        self.method = method
        self.raw_path = raw_path
        self.query = query
        self.headers = headers
        self.client = protocol.client
        self.default_headers: list[tuple[bytes, bytes]] = protocol.server_state.default_headers
        self.keep_alive = keep_alive  # False also once the server shuts down (uvicorn's ``shutdown``)
        self.body = b""
        self.pieces: bytearray | None = None  # a body that came in several pieces, until it is complete
        self.disconnected = False
        self.response_complete = False
        self.message_event = _NO_EVENT

    def served(self, task: asyncio.Task[None]) -> None:
        """The app's task ended. As uvicorn's ``run_asgi``: whatever escaped the app is logged, and
        answered with a plain 500 when nothing was written yet."""
        self.protocol.tasks.discard(task)
        exc = task.exception() if not task.cancelled() else asyncio.CancelledError()
        if exc is None:
            return
        logging.getLogger("uvicorn.error").error("Exception in ASGI application\n", exc_info=exc)
        if not self.response_complete:
            head = [STATUS_LINE[500]]
            head += [name + b": " + value + b"\r\n" for name, value in self.default_headers]
            self.respond(b"".join(head) + _SERVER_ERROR, True)

    def respond(self, data: bytes | None, close: bool) -> None:
        """Write the response (``None``: none) and close the connection or go on to the next request."""
        if self.response_complete:
            return
        self.response_complete = True
        if self.disconnected:
            return
        protocol = self.protocol
        transport: PassTransport = protocol.transport  # type: ignore[assignment]  # see connection_made
        if data is not None:
            transport.write(data)  # held until the end of the pass, with the pass's other responses
        if close or data is None:
            transport.close()
        protocol.on_response_complete()


class HookgateHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol on a ``PassTransport``, with what uvicorn leaves unbounded bounded:

    - a request whose line and headers pass ``MAX_HEAD_BYTES`` gets a 431 and the connection is
      closed (uvicorn buffered them without limit: 100 MiB of headers took 110 MiB);
    - a connection that has not finished a request's headers ``HEAD_TIMEOUT_S`` after it connected
      or after the request's first byte is closed, with a 408 when it sent part of a request
      (uvicorn held such connections for ever, one descriptor each). One sweep a second over the
      connections checks this: no timer per request;
    - bytes the parser refuses get the app's JSON 400 instead of uvicorn's plain-text one;
    - an ``Upgrade`` request (``curl --http2`` sends ``Upgrade: h2c``) is answered as the HTTP/1.1
      request it also is (RFC 9110 §7.8: a server may ignore the header): llhttp took its body for
      the other protocol's bytes, and the app got the request with an empty body (a mapped hook
      committed an empty payload) and the connection went silent.

    The answers come from the app (``Gateway.refuse``): JSON with the common headers, logged and
    counted like any request."""

    _head_since: float | None = None  # loop time the current request's head began; None: complete
    _request_since: float | None = None  # loop time the current request began, until its message ends
    _head_bytes = 0
    _head_marks = 0  # bumped at every request start and head end: did a boundary fall in this read?
    _head_too_large = False  # the head that just ended is past MAX_HEAD_BYTES (the connection closes)
    _read_size = 0  # the length of the read being parsed (a head within it is no longer than that)
    _refusal: bytes | None = None  # a refusal waiting for the answer to an earlier request (_refuse)
    _head_reads = 0  # the length of the reads that held part of the current head: no less than its size
    _message_begun = False
    _at_message_start = True  # the next byte read starts a request (its method)
    _other_method: str | None = None  # a method llhttp does not parse, read as PATCH
    _upgrade_ignored = False  # llhttp ended this head as an upgrade: it is parsed again without one
    _method_start = b""  # a request's first bytes, all method so far: held until its space arrives
    _serve_read: Callable[[Exchange], Coroutine[Any, Any, None]] | None = None  # the app's entry for whole requests
    _reading: Exchange | None = None  # a request whose head is parsed and whose body is being read
    _idle_since: float | None = None  # loop time the last response completed, while no request follows
    _peer_done = False  # the client half-closed: the connection closes once the answers owed are written
    _unfed = b""  # read but not yet parsed, from _unfed_at: PIPELINE_MAX requests wait (reading paused)
    _unfed_at = 0
    _head_held = False  # a head was cut where parsing stopped: its clock restarts when parsing goes on
    _method_cut = False  # the current request's method came in pieces: its head's clock is running

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        passing = PassTransport(transport, self.loop)
        passing.linger = self._body_still_coming
        super().connection_made(passing)  # type: ignore[arg-type]
        self.flow = _HeldFlow(passing, lambda: bool(self._unfed))  # type: ignore[arg-type]
        self._serve_read = getattr(self.app, "serve_read", None)
        self._head_since = self.loop.time()
        state = self.server_state
        if not getattr(state, "hookgate_sweeping", False):
            state.hookgate_sweeping = True  # type: ignore[attr-defined]
            self.loop.call_later(_SWEEP_EVERY_S, _sweep, self.loop, state)

    def on_message_begin(self) -> None:
        if self._serve_read is None:
            super().on_message_begin()
        else:  # the ASGI scope is made only for a request that goes through ASGI (_to_asgi)
            self.url = b""
            self.expect_100_continue = False
            self.headers = []
        if self._method_cut:  # the head's clock started with the method's first bytes, in an earlier read
            self._method_cut = False  # (restarted here, a head sent a byte at a time had twice the timeout)
        else:
            self._head_since = self.loop.time()
        if self._request_since is None:  # (else set by the request's first byte, in an earlier read)
            self._request_since = self._head_since
        self._head_bytes = 0
        self._head_reads = 0
        self._head_marks += 1
        self._message_begun = True
        self._at_message_start = False  # a request began inside this read: its next byte is not one

    def on_headers_complete(self) -> None:
        self._head_since = None
        self._head_marks += 1
        if (self._head_reads + self._read_size > MAX_HEAD_BYTES  # else it cannot be: no sum per request
                and _parsed_head_size(self.url, self.headers) > MAX_HEAD_BYTES):
            self._head_too_large = True
            raise _HeadTooLarge  # stops the parser: its feed_data raises, and _receive answers 431
        if self.parser.should_upgrade():  # no request of it yet: see _receive
            self._upgrade_ignored = True
            return
        if (self._serve_read is not None and not self.expect_100_continue and not self.pipeline
                and (self.cycle is None or self.cycle.response_complete) and self.limit_concurrency is None
                and not self.flow.write_paused):  # (a client not reading its answers: uvicorn's cycle waits)
            # read on: if the body completes in this read, the gateway gets the request whole
            parser = self.parser
            url = httptools.parse_url(self.url)
            method = self._other_method or parser.get_method().decode("ascii")
            self._other_method = None
            keep_alive = parser.get_http_version() != "1.0" and parser.should_keep_alive()
            self._reading = Exchange(self, method, url.path, url.query or b"", self.headers, keep_alive)
            self.cycle = self._reading  # type: ignore[assignment]  # it has what the protocol reads of a cycle
            return
        self._asgi_headers_complete()

    def _asgi_headers_complete(self) -> None:
        if self.scope is None or self.scope.get("headers") is not self.headers:
            url, headers, expect = self.url, self.headers, self.expect_100_continue
            HttpToolsProtocol.on_message_begin(self)  # uvicorn's scope for this request
            self.url, self.headers, self.expect_100_continue = url, headers, expect
            self.scope["headers"] = headers
        super().on_headers_complete()
        if self._other_method is not None:  # the app reads the scope when its task runs: after this
            self.scope["method"] = self._other_method
            self._other_method = None

    def _to_asgi(self) -> None:
        """The request being read did not end with this read: it goes through uvicorn's cycle, which
        gets the body read so far and reads the rest (with the app's timeout and size limit)."""
        reading = self._reading
        assert reading is not None
        self._reading = None
        # it stood for the request being read; the one before it, if any, is answered (uvicorn types
        # ``cycle`` as never None, yet starts with None)
        self.cycle = None  # type: ignore[assignment]
        if reading.method != self.parser.get_method().decode("ascii"):
            self._other_method = reading.method
        self._asgi_headers_complete()
        read = reading.body if reading.pieces is None else reading.pieces
        if read:
            cycle = self.cycle
            cycle.body += read
            if len(cycle.body) > HIGH_WATER_LIMIT:
                self.flow.pause_reading()
            cycle.message_event.set()

    def on_body(self, body: bytes) -> None:
        reading = self._reading
        if reading is None:
            super().on_body(body)
        elif reading.pieces is not None:  # a chunked body's pieces: appended in place
            reading.pieces += body
        elif not reading.body:
            reading.body = body  # the usual case: the whole body in one piece, not copied
        else:  # (bytes += bytes would copy everything so far for each piece)
            reading.pieces = bytearray(reading.body)
            reading.pieces += body

    def _serve(self, exchange: Exchange) -> None:
        assert self._serve_read is not None
        task = self.loop.create_task(self._serve_read(exchange))
        task.add_done_callback(exchange.served)
        self.tasks.add(task)

    def on_message_complete(self) -> None:
        if self._upgrade_ignored:  # llhttp skipped the body: the message is not complete
            return
        self._request_since = None
        reading = self._reading
        if reading is not None:
            self._reading = None
            if reading.pieces is not None:
                reading.body, reading.pieces = bytes(reading.pieces), None
            self._serve(reading)
        else:
            super().on_message_complete()
        self._at_message_start = True  # until the parser begins another request in the same read

    def on_response_complete(self) -> None:
        """uvicorn's, with the keep-alive timeout kept by the sweep instead of a timer per response;
        a refusal that waited for this answer (``_refuse``) follows it when nothing else is owed."""
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        if self._refusal is not None and not self.pipeline:
            self.transport.write(self._refusal)
            self.transport.close()
            return
        started = bool(self.pipeline)
        if started:
            cycle, app = self.pipeline.pop()
            self._start_asgi_task(cycle, app)
        if self._unfed and self._refusal is None and len(self.pipeline) < PIPELINE_MAX:
            # parsing goes on with what was read, now that there is room
            unfed, at = self._unfed, self._unfed_at
            self._unfed, self._unfed_at = b"", 0
            if self._head_held:  # the client sent this head long ago: its clock runs from now
                self._head_held, self._head_since = False, self.loop.time()
            cycle_before = self.cycle
            self._feed(unfed, at)
            started = started or self.cycle is not cycle_before  # a request of it began
            if not self._unfed and self._peer_done and not self.transport.is_closing():
                self._input_ended()  # the half-close came while bytes were held: they are all parsed now
        if self._unfed or self.transport.is_closing():
            return  # reading stays paused
        if not self._peer_done:
            self.flow.resume_reading()
        if started:
            return
        if self._peer_done:
            self.transport.close()  # the client sends nothing more (eof_received): nothing follows
        else:
            self._idle_since = self.loop.time()

    def shutdown(self) -> None:
        """uvicorn's (an idle connection closes; a request being answered gets ``Connection: close``),
        except that a request whose head has begun to arrive is in progress too (operations.md §1.1):
        it is read and answered — during shutdown every answer closes its connection, and ``/readyz``
        says 503 ``"failing":["shutdown"]`` — within the drain and the head timeout; uvicorn closed
        its connection with no answer."""
        cycle: Any = self.cycle
        answering = cycle is not None and not cycle.response_complete
        if self._message_begun and self._head_since is not None and not answering and not self.transport.is_closing():
            return
        super().shutdown()

    def eof_received(self) -> bool | None:  # type: ignore[override]  # asyncio.Protocol's: True keeps it open
        """The client shut its sending side: a half-close, after which it may still read (RFC 9112
        §9.6; ``curl``/``nc -N`` style clients, a proxy ending its upload). The requests it sent
        whole are answered — a wake may be committed already, and a client that never saw its 200
        would retry it — and then the connection closes. A request it left unfinished can never
        finish: it is dropped, as on a close (its app learns the client is gone, nothing of it is
        committed). With nothing to answer the transport closes at once, as before. Bytes held
        unparsed (PIPELINE_MAX) hold requests too: the end is taken once they are parsed."""
        if self._peer_done:  # reported again (reading resumed after it): handled already
            return True
        self._peer_done = True  # (no lingering at the close: the client sends nothing more)
        self._head_since = None  # no head can come: the close, not a head timeout, ends it
        self._head_held = False
        if self._unfed:
            return True  # on_response_complete parses them, then calls _input_ended
        return self._input_ended()

    def _input_ended(self) -> bool | None:
        """Everything the client sent is parsed and it sends nothing more: the newest request, if its
        body is unfinished and it waits in the pipeline, is dropped; with nothing owed, the close."""
        pipeline = self.pipeline
        owed = self._answer_owed()  # (before the pop: a queued request waits behind an unanswered one)
        if pipeline and getattr(pipeline[0][0], "more_body", False) is True:
            pipeline.popleft()  # the newest request (uvicorn appends on the left), not started: never run
        if owed:
            return True
        self.transport.close()  # an answer written in this pass leaves first; connection_lost follows
        return None

    def _unset_keepalive_if_required(self) -> None:
        # uvicorn's cancels the keep-alive timer its ``on_response_complete`` arms; the override above
        # arms none (the sweep reads ``_idle_since``), so there is nothing to cancel
        self._idle_since = None

    def data_received(self, data: bytes) -> None:
        if self._refusal is not None or self.transport.is_closing():  # ending: nothing more is parsed
            return
        if self._unfed:  # read before the pause took hold (it should not be): after what waits, in order
            self._unfed, self._unfed_at = self._unfed[self._unfed_at:] + data, 0
            self.flow.pause_reading()
            return
        self._feed(data)

    def _feed(self, data: bytes, at: int = 0) -> None:
        """Parse ``data[at:]`` in slices of ``FEED_SLICE``; once ``PIPELINE_MAX`` requests wait, hold
        the rest unparsed and pause reading (``on_response_complete`` feeds it on). An ignored upgrade
        hands back its head, rebuilt, and the rest of its slice: a loop, not recursion."""
        while at < len(data):
            if len(self.pipeline) >= PIPELINE_MAX:
                self._unfed, self._unfed_at = data, at
                if self._head_since is not None:  # cut here by the server, not by the client
                    self._head_held, self._head_since = True, None
                self.flow.pause_reading()
                break
            piece = data[at:at + FEED_SLICE]  # (the whole of a small read: not copied)
            at += len(piece)
            again = self._receive(piece)
            if self._refusal is not None or self.transport.is_closing():
                return
            if again is not None:
                data, at = again + data[at:], 0
        if self._reading is not None:  # its body goes on in a later read
            self._to_asgi()

    def _receive(self, data: bytes) -> bytes | None:
        """Feed one slice of a read to the parser; returns bytes to feed next (after an ignored
        upgrade). A request read whole in the slices of one read stays whole (``_feed``)."""
        boundary, lead = self._at_message_start, 0
        if boundary:  # the previous read ended where a request may begin
            if self._method_start:
                data, self._method_start = self._method_start + data, b""
            lead = len(data) - len(data.lstrip(b"\r\n"))  # empty lines before a request (RFC 9112 §2.2)
            if lead == len(data):  # only empty lines: no request begins, the idle and head clocks run on
                return None
            if self._request_since is None:  # a request's first byte (its latency counts from here)
                self._request_since = self.loop.time()
            space = data.find(b" ", lead, lead + _MAX_METHOD + 2)
            if space < 0 and 0 < len(data) - lead <= _MAX_METHOD and _TOKEN.fullmatch(data, lead):
                self._method_start = data  # the method is not complete yet: which one it is decides
                self._unset_keepalive_if_required()
                self._message_begun = self._method_cut = True
                if self._head_since is None:  # the head's clock starts with its first byte
                    self._head_since = self._request_since = self.loop.time()
                return None
            if space > lead and data[lead:space] not in _PARSED_METHODS and _TOKEN.fullmatch(data, lead, space):
                self._other_method = data[lead:space].decode("ascii")
                data = data[:lead] + b"PATCH" + data[space:]
            # (the parser's on_message_begin clears _at_message_start once a request begins)
        marks = self._head_marks
        self._unset_keepalive_if_required()
        self._read_size = len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            if self._head_too_large:
                self._refuse(431, "headers_too_large")
            else:
                msg = "Invalid HTTP request received."
                self.logger.warning(msg)  # as uvicorn does (logged as ``server.message``)
                self.send_400_response(msg)
            self._reading = None
            return None
        except httptools.HttpParserUpgrade as exc:  # the rest of ``data`` is the request's body and after
            if self.parser.get_method() == b"CONNECT":  # llhttp takes every CONNECT as one; no proxy here
                self._upgrade_ignored = False
                self.send_400_response("CONNECT is not served")
                return None
            return self._without_upgrade(data[exc.args[0]:])
        if self._head_since is not None:  # a head goes on in the next read
            self._head_reads += len(data)
            if marks == self._head_marks:  # all of it was head
                self._head_bytes += len(data)
            elif boundary and self._head_marks == marks + 1:  # the read began with this head, its only one
                self._head_bytes += len(data) - lead
            if self._head_bytes > MAX_HEAD_BYTES and not self.transport.is_closing():
                self._refuse(431, "headers_too_large")
        return None

    def _without_upgrade(self, rest: bytes) -> bytes:
        """The head llhttp ended as an upgrade, rebuilt without the ``upgrade`` token of its
        ``Connection`` header (the ``Upgrade`` header stays for the app to see), then ``rest``: what
        a fresh parser is fed next."""
        self._upgrade_ignored = False
        head = [self.parser.get_method(), b" ", self.url, b" HTTP/", self.parser.get_http_version().encode(), b"\r\n"]
        for name, value in self.headers:
            if name == b"connection":
                value = b",".join(t for t in value.split(b",") if t.strip().lower() != b"upgrade")
                if not value.strip():
                    continue
            head += [name, b": ", value, b"\r\n"]
        head.append(b"\r\n")
        self.parser = _new_parser(self)
        return b"".join(head) + rest

    def send_400_response(self, msg: str) -> None:
        self._refuse(400, "malformed_request", fallback=msg)

    def head_timed_out(self) -> None:
        if self._message_begun:
            self._refuse(408, "header_timeout")
        else:  # connected and never sent a byte: nothing to answer
            self.transport.close()

    def _refuse(self, status: int, reason: str, fallback: str | None = None) -> None:
        """Answer what cannot be a request, and close. When an earlier request of this connection is
        still being answered (pipelined in the same read), the refusal waits for that answer, which
        may stand for a committed effect: nothing more is read meanwhile. Its latency counts from
        the request's first byte (a head's time-out took the head timeout, not 0 s)."""
        since = self._request_since if self._request_since is not None else self._head_since
        elapsed = self.loop.time() - since if since is not None else 0.0
        self._head_since = None
        refuse = getattr(self.app, "refuse", None)
        if refuse is None:  # an app without one (the benchmark's minimal app)
            if fallback is not None:
                super().send_400_response(fallback)
            else:
                self.transport.close()
            return
        answer = refuse(status, reason, self.client, elapsed, self.server_state.default_headers)
        pipeline, cycle = self.pipeline, self.cycle
        if pipeline and pipeline[0][0] is cycle and getattr(cycle, "more_body", False) is True:
            # the refused request itself (a body the parser refused, behind earlier ones): never
            # started — it waited in the pipeline, then for a body that cannot come, and got the
            # body timeout's 408 instead of this answer
            pipeline.popleft()
        if self._answer_owed():
            self._refusal = answer  # sent by on_response_complete, after the answers still owed
            self.transport.pause_reading()
            return
        self.transport.write(answer)
        self.transport.close()

    def _body_still_coming(self) -> bool:
        """The request being answered has body bytes the client has not sent yet (uvicorn's cycle);
        never once the client has half-closed."""
        return not self._peer_done and getattr(self.cycle, "more_body", False) is True

    def _answer_owed(self) -> bool:
        """An earlier request, read whole, is still without its answer (it runs, or waits in the pipeline)."""
        if self.pipeline:
            return True
        cycle: Any = self.cycle  # uvicorn's cycle, or the Exchange standing in for one
        if cycle is None or cycle.response_complete or cycle is self._reading:
            return False  # (the request being read is the one refused: no answer of its own is owed)
        return getattr(cycle, "more_body", False) is False


class _HeadTooLarge(Exception):
    """Raised in ``on_headers_complete`` to stop the parser at the end of a head past ``MAX_HEAD_BYTES``."""


def _parsed_head_size(url: bytes, headers: list[tuple[bytes, bytes]]) -> int:
    """The fewest bytes a head parsed as ``url`` and ``headers`` can have been sent as: its line (a
    method of at least 3 characters and ``HTTP/1.1`` around the target) and each field as
    ``name:value`` and CRLF. A head within the limit is never taken for one past it; whitespace
    around values, which the parser drops, is not counted."""
    return len(url) + 15 + sum(len(name) + len(value) + 3 for name, value in headers)


def _new_parser(protocol: HttpToolsProtocol) -> httptools.HttpRequestParser:
    """A parser as uvicorn makes one: lenient to bytes after a ``Connection: close`` request, so that
    request is still answered."""
    parser = httptools.HttpRequestParser(protocol)
    parser.set_dangerous_leniencies(lenient_data_after_close=True)
    return parser


def _sweep(loop: asyncio.AbstractEventLoop, state: Any) -> None:
    """Close the connections whose request head is overdue, or idle past the keep-alive timeout; runs
    once a second for the server's life."""
    now = loop.time()
    deadline = now - HEAD_TIMEOUT_S
    for conn in list(state.connections):
        since = getattr(conn, "_head_since", None)
        if since is not None and since < deadline and not conn.transport.is_closing():
            conn.head_timed_out()
        idle = getattr(conn, "_idle_since", None)
        if idle is not None and idle < now - conn.timeout_keep_alive and not conn.transport.is_closing():
            conn.transport.close()  # uvicorn's keep-alive timeout
    loop.call_later(_SWEEP_EVERY_S, _sweep, loop, state)
