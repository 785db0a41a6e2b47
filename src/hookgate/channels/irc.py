"""The IRC channel (model.md §10.2, the ``irc`` row): one short-lived client connection per send.

Flow of one ``send``, on plain asyncio streams (no IRC library):

    connect (TLS by default: ``ssl.create_default_context()``, so ``SSL_CERT_FILE`` is honoured)
    PASS :<password>            only when a password is configured
    NICK <nick>                 on 433/437 (nick in use) retried with a random ``_NNN`` suffix
    USER <user> 0 * :hookgate
    … wait for 001              PING is answered with PONG at any time (a reader task does it)
    JOIN <#channel>             only for a channel target; wait for our JOIN echo or 366
    PRIVMSG <target> :<line>    one per part, from ``start``; ``sent(i, None, None)`` after each is written
                                and drained; the first one is confirmed with a PING/PONG round trip
                                first, so a target that refuses messages (401, 404) fails before any
                                part counts as sent
    PING/PONG                   a last round trip catches a refusal of the later lines
    QUIT :hookgate, close       best effort: the lines are already out

Each phase (connect, registration, join, each line, the round trips) has ``timeout`` seconds.
Retryable (model.md §10.4): connection errors, TLS errors, timeouts, the server's ``ERROR`` or a closed
connection, a nick still in use after the retries, 405/437/471. Not retryable: 401, 403, 404, 432,
464, 465, 473-477, 489, a bad target, a missing or unresolved setting. Error texts never hold the
password or the message text.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from hookgate.channels.base import (
    HTTP_TIMEOUT_SECONDS,
    IRC_LINE_MAX_BYTES,
    DeliveryError,
    Envelope,
    SentCallback,
)
from hookgate.config.settings import ChannelSettings

DEFAULT_PORT: Final = 6697
NICK_RETRIES: Final = 3
RFC_NICK_MAX: Final = 9  # every server accepts this length (RFC 1459)
QUIT_TIMEOUT_SECONDS: Final = 2.0
USERNAME: Final = "hookgate"
REALNAME: Final = "hookgate"

_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_NICK = re.compile(r"[A-Za-z\[\]\\`_^{|}][A-Za-z0-9\[\]\\`_^{|}-]*")
_BAD_TARGET = re.compile(r"[\x00-\x20\x7f,]")  # controls, space; a comma would name several targets

# Numerics that end an attempt: code → (text, retryable).
_FATAL: Final[dict[str, tuple[str, bool]]] = {
    "401": ("no such nick", False),
    "403": ("no such channel", False),
    "404": ("cannot send to channel", False),
    "405": ("too many channels", True),
    "464": ("password incorrect", False),
    "465": ("banned from server", False),
    "471": ("channel is full", True),
    "473": ("invite only channel", False),
    "474": ("cannot join channel", False),
    "475": ("bad channel key", False),
    "476": ("bad channel mask", False),
    "477": ("cannot join channel (registration required)", False),
    "489": ("cannot join channel (secure connection required)", False),
}
_NICK_IN_USE: Final = frozenset({"433", "437"})


@dataclass(frozen=True, slots=True)
class Message:
    """One parsed IRC line: ``prefix`` without the colon, ``command`` upper-cased, all params."""

    prefix: str
    command: str
    params: tuple[str, ...]


def parse_line(line: str) -> Message | None:
    """Parse one IRC line (tags skipped); None for an empty line."""
    rest = line.strip("\r\n")
    if rest.startswith("@"):
        rest = rest.partition(" ")[2]
    rest = rest.lstrip(" ")
    prefix = ""
    if rest.startswith(":"):
        prefix, _, rest = rest[1:].partition(" ")
    trailing: str | None = None
    if " :" in rest:
        rest, _, trailing = rest.partition(" :")
    elif rest.startswith(":"):
        rest, trailing = "", rest[1:]
    words = rest.split()
    if not words:
        return None
    params = words[1:] + ([trailing] if trailing is not None else [])
    return Message(prefix, words[0].upper(), tuple(params))


def irc_lower(name: str) -> str:
    """The rfc1459 case mapping: ``[]\\~`` are the upper case of ``{}|^``."""
    return name.lower().translate(str.maketrans("[]\\~", "{}|^"))


def is_channel(target: str) -> bool:
    return target[:1] in ("#", "&")


def clean(text: str) -> str:
    """No command injection: CR and LF become spaces, NUL goes."""
    return text.replace("\r", " ").replace("\n", " ").replace("\x00", "")


def split_line(line: str, limit: int = IRC_LINE_MAX_BYTES) -> list[str]:
    """Cut one line into pieces of at most ``limit`` UTF-8 bytes, at a character boundary, at the
    last space when there is one (the space is dropped)."""
    out: list[str] = []
    while len(line.encode()) > limit:
        fit = len(line.encode()[:limit].decode("utf-8", "ignore"))  # characters that fit whole
        space = line.rfind(" ", 0, fit + 1)
        head = line[:space].rstrip() if space > 0 else ""
        if head:
            line = line[space + 1:].lstrip(" ")
        else:
            head, line = line[:fit], line[fit:]
        out.append(head)
    if line.strip():
        out.append(line)
    return out


class IrcAdapter:
    channel = "irc"

    def __init__(self, cfg: ChannelSettings, *, timeout: float = HTTP_TIMEOUT_SECONDS,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        opts = cfg.options
        server = opts.get("server")
        nick = opts.get("nick")
        self._server = server.strip() if isinstance(server, str) else ""
        self._nick = nick.strip() if isinstance(nick, str) else ""
        port = opts.get("port", DEFAULT_PORT)
        self._port = port if isinstance(port, int) and not isinstance(port, bool) else DEFAULT_PORT
        self._tls = opts.get("tls", True) is not False
        self._password = cfg.secrets.get("password")
        self._timeout = timeout
        self._ssl_context = ssl_context

    def split(self, text: str) -> list[str]:
        """One part per non-blank line, lines over 400 bytes cut; no CR, LF or NUL in any part."""
        text = text.encode("utf-8", "replace").decode("utf-8")  # lone surrogates → "?"
        parts: list[str] = []
        for raw in _LINE_BREAK.split(text):
            line = raw.replace("\x00", "").rstrip()
            if line.strip():
                parts.extend(split_line(line))
        return parts

    async def send(self, to: str, parts: Sequence[str], start: int, envelope: Envelope,
                   sent: SentCallback) -> None:
        target = self._check(to)
        password = self._resolve_password()
        lines = [clean(p) for p in parts]
        if not any(line.strip() for line in lines[start:]):  # nothing to say: no connection
            for i in range(start, len(parts)):
                await sent(i, None, None)
            return
        conn = await self._connect()
        try:
            await conn.register(password, self._nick)
            if is_channel(target):
                await conn.join(target)
            confirmed = unconfirmed = False
            for i in range(start, len(parts)):
                if lines[i].strip():
                    conn.raise_pending()
                    await conn.write(f"PRIVMSG {target} :{lines[i]}", "send")
                    if confirmed:
                        unconfirmed = True
                    else:  # the target takes messages before any part counts as sent
                        await conn.sync()
                        confirmed = True
                await sent(i, None, None)
            if unconfirmed:
                await conn.sync()
            await conn.quit()
        finally:
            await conn.close()

    async def aclose(self) -> None:
        return None

    # --- helpers ---------------------------------------------------------------------------------

    def _check(self, to: str) -> str:
        if not self._server:
            raise DeliveryError("irc: server is not configured", retryable=False)
        if not self._nick:
            raise DeliveryError("irc: nick is not configured", retryable=False)
        if not _NICK.fullmatch(self._nick):
            raise DeliveryError("irc: invalid nick", retryable=False)
        target = to.strip(" ")
        if not target or _BAD_TARGET.search(target) or target.startswith(":"):
            raise DeliveryError("irc: invalid target", retryable=False)
        return target

    def _resolve_password(self) -> str | None:
        src = self._password
        if src is None:
            return None
        if src.value is None:
            raise DeliveryError(f"irc: password: {src.error or 'not resolved'}", retryable=False)
        if any(c in src.value for c in "\r\n\x00"):
            raise DeliveryError("irc: password: invalid characters", retryable=False)
        return src.value

    def _context(self) -> ssl.SSLContext:
        if self._ssl_context is None:
            self._ssl_context = ssl.create_default_context()
        return self._ssl_context

    async def _connect(self) -> _Connection:
        context = self._context() if self._tls else None
        try:
            async with asyncio.timeout(self._timeout):
                reader, writer = await asyncio.open_connection(
                    self._server, self._port, ssl=context,
                    server_hostname=self._server if context is not None else None)
        except TimeoutError:
            raise DeliveryError("irc: timeout (connect)", retryable=True) from None
        except ssl.SSLError as exc:
            raise DeliveryError(f"irc: tls error ({type(exc).__name__})", retryable=True) from None
        except OSError as exc:
            raise DeliveryError(f"irc: connection error ({type(exc).__name__})", retryable=True) from None
        return _Connection(reader, writer, self._timeout)


_EOF: Final = Message("", "", ())  # the reader's end marker


class _Connection:
    """One client connection: a reader task answers PING and queues every other message."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, timeout: float) -> None:
        self._reader = reader
        self._writer = writer
        self._timeout = timeout
        self._inbox: asyncio.Queue[Message] = asyncio.Queue()
        self._failure: DeliveryError | None = None  # why the reader stopped
        self._pings = 0
        self._deadline = 0.0  # loop time: the end of the current phase
        self.nick = ""  # set by 001: registered
        self._task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        try:
            while True:
                raw = await self._reader.readline()
                if not raw:
                    break
                msg = parse_line(raw.decode("utf-8", "replace"))
                if msg is None:
                    continue
                if msg.command == "PING":
                    token = msg.params[-1] if msg.params else ""
                    self._writer.write(f"PONG :{clean(token)}\r\n".encode())
                    continue
                self._inbox.put_nowait(msg)
        except ssl.SSLError as exc:
            self._failure = DeliveryError(f"irc: tls error ({type(exc).__name__})", retryable=True)
        except (OSError, ValueError) as exc:  # ValueError: a line over the stream limit
            self._failure = DeliveryError(f"irc: connection error ({type(exc).__name__})", retryable=True)
        finally:
            self._inbox.put_nowait(_EOF)

    def _closed(self) -> DeliveryError:
        return self._failure or DeliveryError("irc: connection closed", retryable=True)

    async def write(self, line: str, phase: str) -> None:
        try:
            async with asyncio.timeout(self._timeout):
                self._writer.write(f"{line}\r\n".encode())
                await self._writer.drain()
        except TimeoutError:
            raise DeliveryError(f"irc: timeout ({phase})", retryable=True) from None
        except OSError as exc:
            raise DeliveryError(f"irc: connection error ({type(exc).__name__})", retryable=True) from None

    async def _next(self, phase: str) -> Message:
        """The next message; the server's ERROR, a closed connection and fatal numerics raise."""
        try:
            async with asyncio.timeout_at(self._deadline):
                msg = await self._inbox.get()
        except TimeoutError:
            raise DeliveryError(f"irc: timeout ({phase})", retryable=True) from None
        self._check(msg)
        return msg

    def _check(self, msg: Message) -> None:
        if msg is _EOF:
            self._inbox.put_nowait(_EOF)  # stays the last word
            raise self._closed()
        if msg.command == "ERROR":
            if not self.nick and "password" in " ".join(msg.params).lower():
                # before 001: ngircd refuses a bad or missing PASS with ERROR alone (others say 464)
                raise DeliveryError("irc: password rejected (ERROR)", retryable=False)
            raise DeliveryError("irc: the server closed the link (ERROR)", retryable=True)
        fatal = _FATAL.get(msg.command)
        if fatal is not None:
            text, retryable = fatal
            raise DeliveryError(f"irc: {msg.command} {text}", retryable=retryable)

    def _start_phase(self) -> None:
        self._deadline = asyncio.get_running_loop().time() + self._timeout

    def raise_pending(self) -> None:
        """Raise for what the server said since the last look (a refused line, ERROR, close)."""
        while True:
            try:
                msg = self._inbox.get_nowait()
            except asyncio.QueueEmpty:
                return
            self._check(msg)

    async def register(self, password: str | None, nick: str) -> None:
        self._start_phase()
        if password is not None:
            await self.write(f"PASS :{password}", "register")
        await self.write(f"NICK {nick}", "register")
        await self.write(f"USER {USERNAME} 0 * :{REALNAME}", "register")
        retries = 0
        short = False  # alternatives no longer than 9 characters, after a 432 for a longer one
        while True:
            msg = await self._next("register")
            if msg.command == "001":
                self.nick = msg.params[0] if msg.params else nick
                return
            if msg.command == "432" and (retries == 0 or short):  # the configured nick is refused
                raise DeliveryError("irc: 432 erroneous nickname", retryable=False)
            if msg.command in _NICK_IN_USE or msg.command == "432":
                if retries >= NICK_RETRIES:
                    raise DeliveryError("irc: 433 nickname in use", retryable=True)
                retries += 1
                short = short or msg.command == "432"
                await self.write(f"NICK {_alternative(nick, short)}", "register")

    async def join(self, channel: str) -> None:
        self._start_phase()
        await self.write(f"JOIN {channel}", "join")
        want = irc_lower(channel)
        while True:
            msg = await self._next("join")
            if msg.command == "JOIN" and msg.params and irc_lower(msg.params[0]) == want \
                    and irc_lower(msg.prefix.partition("!")[0]) == irc_lower(self.nick):
                return
            if msg.command == "366" and len(msg.params) > 1 and irc_lower(msg.params[1]) == want:
                return
            if msg.command == "437":
                raise DeliveryError("irc: 437 channel temporarily unavailable", retryable=True)

    async def sync(self) -> None:
        """A PING/PONG round trip: whatever the server answered to earlier lines has arrived."""
        self._start_phase()
        self._pings += 1
        token = f"hookgate-{self._pings}"
        await self.write(f"PING :{token}", "send")
        while True:
            msg = await self._next("send")
            if msg.command == "PONG" and msg.params and msg.params[-1] == token:
                return

    async def quit(self) -> None:
        with contextlib.suppress(OSError, TimeoutError):
            async with asyncio.timeout(QUIT_TIMEOUT_SECONDS):
                self._writer.write(b"QUIT :hookgate\r\n")
                await self._writer.drain()

    async def close(self) -> None:
        self._task.cancel()
        await asyncio.wait([self._task])
        self._writer.close()
        with contextlib.suppress(Exception):
            async with asyncio.timeout(QUIT_TIMEOUT_SECONDS):
                await self._writer.wait_closed()


def _alternative(nick: str, short: bool) -> str:
    """``nick_NNN``; when ``short``, no longer than the nick or 9 characters (lengths the server took)."""
    suffix = f"_{random.randrange(100, 1000)}"
    if not short or len(nick) + len(suffix) <= RFC_NICK_MAX:
        return nick + suffix
    return nick[:max(len(nick), RFC_NICK_MAX) - len(suffix)] + suffix
