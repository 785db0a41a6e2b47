"""The log sink never fails its caller (operations.md §2 lines are best effort; a 2xx is not)."""

from __future__ import annotations

import json
import os

import pytest

from hookgate.obs.logging import _Sink


def sink_on_pipe() -> tuple[_Sink, int]:
    read, write = os.pipe()
    sink = _Sink()
    sink.fd = write
    return sink, read


def test_lines_are_held_until_flushed_then_written_in_order() -> None:
    sink, read = sink_on_pipe()
    sink.autoflush = False
    sink.write(b'{"n":1}\n', False)
    sink.write(b'{"n":2}\n', False)
    os.set_blocking(read, False)
    with pytest.raises(BlockingIOError):  # nothing written before the flush
        os.read(read, 100)
    sink.flush()
    assert [json.loads(line)["n"] for line in os.read(read, 100).splitlines()] == [1, 2]
    sink.write(b'{"n":3}\n', True)  # urgent: at once
    assert os.read(read, 100) == b'{"n":3}\n'
    os.close(read)


def test_a_broken_pipe_drops_lines_instead_of_raising() -> None:
    sink, read = sink_on_pipe()
    sink.autoflush = False
    os.close(read)  # the log reader is gone: every write(2) is EPIPE
    for i in range(5000):  # past the 64 KiB that force a write
        sink.write(b'{"event":"http.request","n":%d}\n' % i, False)
    sink.write(b'{"event":"hook.auth_failed"}\n', True)  # a warning: written at once
    sink.flush()
    assert sink.dropped == 5001
    os.close(sink.fd)
    sink.fd = os.open(os.devnull, os.O_WRONLY)  # a reader again: lines flow
    sink.write(b"{}\n", True)
    assert sink.dropped == 5001


def test_with_the_writer_thread_a_stalled_reader_blocks_no_caller_and_drops_are_reported() -> None:
    import threading

    sink, read = sink_on_pipe()
    sink.MAX_PENDING = 64 * 1024  # what a stalled reader holds, small for the test
    sink.autoflush = False
    sink.start_writer()
    line = b'{"event":"http.request","pad":"' + b"x" * 200 + b'"}\n'
    done = threading.Event()

    def caller() -> None:  # a request's access lines and warnings, with nobody reading the pipe
        for _ in range(2000):
            sink.write(line, False)
        sink.write(b'{"event":"hook.auth_failed"}\n', True)
        sink.flush(timeout=0.2)  # waits a bounded time, not for the reader
        done.set()

    threading.Thread(target=caller, daemon=True).start()
    assert done.wait(30), "a caller blocked on the stalled reader"
    assert sink.dropped > 0
    dropped = sink.dropped
    got = b""
    os.set_blocking(read, False)
    sink.write(b'{"event":"after"}\n', True)
    for _ in range(500):  # the reader is back: what was held, then the report, then the new line
        try:
            got += os.read(read, 1 << 20)
        except BlockingIOError:
            if got.endswith(b'{"event":"after"}\n'):
                break
            threading.Event().wait(0.01)
    events = [json.loads(x) for x in got.splitlines()]
    report = [e for e in events if e["event"] == "log.dropped"]
    # one report, or more when the writer took a batch while drops were still happening (a slow machine)
    assert report and sum(e["count"] for e in report) == dropped and {e["level"] for e in report} == {"warning"}
    assert events[-1]["event"] == "after"
    assert sum(1 for e in events if e["event"] in ("http.request", "hook.auth_failed")) + dropped == 2001
    sink.stop_writer()
    os.close(read)


def test_a_line_logged_while_its_thread_holds_the_sink_is_kept_not_a_deadlock() -> None:
    """A collector run inside the sink's locked section (any allocation there can start one) runs
    finalisers on that thread, and a failed task's or a ``__del__``'s error is logged from there: the
    write waited on the lock its own thread held, and the event loop's next flush behind it."""
    import threading

    sink, read = sink_on_pipe()
    sink.autoflush = False
    sink.start_writer()
    done = threading.Event()

    def holder() -> None:
        with sink._locked():
            sink.write(b'{"event":"from.a.finaliser"}\n', True)  # re-entered: queued, no wait
            sink.flush()  # nor does a flush from there wait
        done.set()

    threading.Thread(target=holder, daemon=True).start()
    assert done.wait(10), "the re-entered write waited on its own thread's lock"
    sink.write(b'{"event":"after"}\n', True)
    sink.flush()
    os.set_blocking(read, False)
    events = [json.loads(line)["event"] for line in os.read(read, 1 << 16).splitlines()]
    assert events == ["from.a.finaliser", "after"], events
    sink.stop_writer()
    os.close(read)
