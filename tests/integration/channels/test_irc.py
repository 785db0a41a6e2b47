"""The IRC adapter against a real IRC server (ngircd, see ircd.py), watched by an independent client.

Each test module run (one per xdist worker) starts its own ngircd processes on free loopback ports;
every test uses its own channel and nicks, so tests do not see each other.
"""

from __future__ import annotations

import asyncio
import itertools
import socket
import ssl
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from hookgate.channels.base import IRC_LINE_MAX_BYTES, DeliveryError, Envelope
from hookgate.channels.irc import IrcAdapter
from hookgate.config.settings import ChannelSettings, SecretSource

sys.path.insert(0, str(Path(__file__).parent))
from ircd import HOST, Ircd, TlsFiles, free_port, make_tls

PASSWORD = "s3cret-pass"
ENVELOPE = Envelope(delivery_id="d1", run_id="r1", agent_id="main", session_key="agent:main:main",
                    created_at=0)
_names = itertools.count(1)


def uniq(prefix: str) -> str:
    return f"{prefix}{next(_names)}"


# --- the watching client: plain sockets, its own parser --------------------------------------------

@dataclass(frozen=True)
class Msg:
    nick: str  # the sender's nick ('' for the server)
    command: str
    params: tuple[str, ...]
    raw: str


def parse(raw: str) -> Msg:
    prefix, rest = "", raw
    if rest.startswith(":"):
        prefix, _, rest = rest[1:].partition(" ")
    head, sep, trailing = rest.partition(" :")
    words = head.split()
    params = tuple(words[1:]) + ((trailing,) if sep else ())
    nick = prefix.partition("!")[0] if "!" in prefix else ""
    return Msg(nick, words[0].upper() if words else "", params, raw)


class Watcher:
    """A second IRC client that registers, joins and records what it is sent."""

    def __init__(self, server: Ircd, nick: str, *, password: str | None = None) -> None:
        self.nick = nick
        self.sock = socket.create_connection((server.host, server.port), timeout=5)
        self.buf = b""
        if password is not None:
            self.send(f"PASS {password}")
        self.send(f"NICK {nick}")
        self.send("USER watcher 0 * :watcher")
        self.wait_for(lambda m: m.command == "001")

    def send(self, line: str) -> None:
        self.sock.sendall(f"{line}\r\n".encode())

    def read(self, timeout: float) -> Msg | None:
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                return None
            if not data:
                raise AssertionError("the server closed the watcher's connection")
            self.buf += data
        line, _, self.buf = self.buf.partition(b"\n")
        msg = parse(line.decode().rstrip("\r"))
        if msg.command == "PING":
            self.send(f"PONG :{msg.params[-1]}")
        return msg

    def wait_for(self, until: Callable[[Msg], bool], timeout: float = 5.0) -> list[Msg]:
        """Every message up to and including the first that matches ``until``."""
        seen: list[Msg] = []
        deadline = time.monotonic() + timeout
        while True:
            msg = self.read(max(0.0, deadline - time.monotonic()))
            if msg is None:
                raise AssertionError(f"timed out; seen: {[m.raw for m in seen]}")
            seen.append(msg)
            if until(msg):
                return seen

    def quiet(self, seconds: float = 0.3) -> list[Msg]:
        """What arrives within ``seconds`` (PINGs answered)."""
        seen: list[Msg] = []
        deadline = time.monotonic() + seconds
        while (msg := self.read(max(0.0, deadline - time.monotonic()))) is not None:
            seen.append(msg)
        return seen

    def join(self, channel: str) -> None:
        self.send(f"JOIN {channel}")
        self.wait_for(lambda m: m.command == "366" and m.params[1] == channel)

    def mode(self, channel: str, *modes: str) -> None:
        self.send(f"MODE {channel} {' '.join(modes)}")
        self.wait_for(lambda m: m.command == "MODE" and m.nick == self.nick)

    def until_quit(self, nick: str) -> list[Msg]:
        """What ``nick`` did in our channels, up to its QUIT."""
        seen = self.wait_for(lambda m: m.command == "QUIT" and m.nick == nick)
        return [m for m in seen if m.nick == nick]

    def close(self) -> None:
        try:
            self.send("QUIT :done")
        except OSError:
            pass
        self.sock.close()


def texts(msgs: list[Msg], target: str) -> list[str]:
    assert all(m.command in ("PRIVMSG", "JOIN", "QUIT") for m in msgs), [m.raw for m in msgs]
    return [m.params[1] for m in msgs if m.command == "PRIVMSG" and m.params[0] == target]


# --- fixtures ----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls(tmp_path_factory.mktemp("irc-tls"))


@pytest.fixture(scope="module")
def ircd(tmp_path_factory: pytest.TempPathFactory, tls_files: TlsFiles) -> Iterator[Ircd]:
    server = Ircd(tmp_path_factory.mktemp("ircd"), tls=tls_files).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def ircd_pw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ircd]:
    server = Ircd(tmp_path_factory.mktemp("ircd-pw"), password=PASSWORD).start()
    yield server
    server.stop()


@pytest.fixture
def watchers() -> Iterator[Callable[..., Watcher]]:
    made: list[Watcher] = []

    def make(server: Ircd, nick: str | None = None, **kw: str) -> Watcher:
        w = Watcher(server, nick or uniq("watch"), **kw)
        made.append(w)
        return w

    yield make
    for w in made:
        w.close()


def irc_settings(port: int, nick: str, *, tls: bool = False, server: str = HOST,
                 password: SecretSource | str | None = None) -> ChannelSettings:
    secrets = {}
    if isinstance(password, str):
        secrets["password"] = SecretSource("channels.irc.password", "string", password)
    elif password is not None:
        secrets["password"] = password
    return ChannelSettings(id="irc", options={"server": server, "port": port, "tls": tls, "nick": nick},
                           secrets=secrets)


class Sent:
    def __init__(self) -> None:
        self.calls: list[tuple[int, str | None]] = []
        self.statuses: list[int | None] = []

    async def __call__(self, index: int, message_id: str | None, http_status: int | None) -> None:
        self.calls.append((index, message_id))
        self.statuses.append(http_status)


async def deliver(adapter: IrcAdapter, to: str, text: str, start: int = 0) -> Sent:
    sent = Sent()
    try:
        await adapter.send(to, adapter.split(text), start, ENVELOPE, sent)
    finally:
        await adapter.aclose()
    return sent


async def failure(adapter: IrcAdapter, to: str, text: str = "hello") -> tuple[DeliveryError, Sent]:
    sent = Sent()
    with pytest.raises(DeliveryError) as info:
        await adapter.send(to, adapter.split(text), 0, ENVELOPE, sent)
    await adapter.aclose()
    assert text not in str(info.value)
    return info.value, sent


# --- delivery ----------------------------------------------------------------------------------------

async def test_plain_channel(ircd: Ircd, watchers: Callable[..., Watcher]) -> None:
    channel, nick = uniq("#plain"), uniq("hgbot")
    w = watchers(ircd)
    w.join(channel)
    sent = await deliver(IrcAdapter(irc_settings(ircd.port, nick)), channel, "hello\nworld ✓")
    assert sent.calls == [(0, None), (1, None)]
    msgs = w.until_quit(nick)
    assert [m.command for m in msgs] == ["JOIN", "PRIVMSG", "PRIVMSG", "QUIT"]
    assert texts(msgs, channel) == ["hello", "world ✓"]


async def test_tls_with_ssl_context(ircd: Ircd, tls_files: TlsFiles, watchers: Callable[..., Watcher]) -> None:
    assert ircd.tls_port is not None
    channel, nick = uniq("#tls"), uniq("hgbot")
    w = watchers(ircd)
    w.join(channel)
    context = ssl.create_default_context(cafile=str(tls_files.ca))
    adapter = IrcAdapter(irc_settings(ircd.tls_port, nick, tls=True), ssl_context=context)
    await deliver(adapter, channel, "over TLS")
    assert texts(w.until_quit(nick), channel) == ["over TLS"]


async def test_tls_trusts_ssl_cert_file(ircd: Ircd, tls_files: TlsFiles, watchers: Callable[..., Watcher],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The default context honours SSL_CERT_FILE; the name is checked (localhost is in the cert)."""
    assert ircd.tls_port is not None
    monkeypatch.setenv("SSL_CERT_FILE", str(tls_files.ca))
    channel, nick = uniq("#tlsenv"), uniq("hgbot")
    w = watchers(ircd)
    w.join(channel)
    await deliver(IrcAdapter(irc_settings(ircd.tls_port, nick, tls=True, server="localhost")), channel, "env CA")
    assert texts(w.until_quit(nick), channel) == ["env CA"]


async def test_tls_untrusted_certificate_is_retryable(ircd: Ircd) -> None:
    assert ircd.tls_port is not None
    adapter = IrcAdapter(irc_settings(ircd.tls_port, uniq("hgbot"), tls=True),
                         ssl_context=ssl.create_default_context(cafile=None, capath=None, cadata=None))
    err, sent = await failure(adapter, "#untrusted")
    assert err.retryable and str(err).startswith("irc: tls error"), str(err)
    assert sent.calls == []


async def test_long_line_is_split_at_400_bytes(ircd: Ircd, watchers: Callable[..., Watcher]) -> None:
    channel, nick = uniq("#long"), uniq("hgbot")
    long_words = " ".join(f"wörd{i}-日本語" for i in range(60))  # > 400 bytes, multibyte
    no_spaces = "é" * 450  # 900 bytes, no space: cut at a character boundary
    text = f"first\n\n   \n{long_words}\r\n{no_spaces}\rlast"
    adapter = IrcAdapter(irc_settings(ircd.port, nick))
    parts = adapter.split(text)
    assert all(0 < len(p.encode()) <= IRC_LINE_MAX_BYTES for p in parts)
    assert parts[0] == "first" and parts[-1] == "last"
    assert " ".join(parts[1:-4]) == long_words
    assert parts[-4:-1] == ["é" * 200, "é" * 200, "é" * 50]
    w = watchers(ircd)
    w.join(channel)
    sent = await deliver(adapter, channel, text)
    assert sent.calls == [(i, None) for i in range(len(parts))]
    assert texts(w.until_quit(nick), channel) == parts


async def test_start_skips_parts_already_sent(ircd: Ircd, watchers: Callable[..., Watcher]) -> None:
    channel, nick = uniq("#resume"), uniq("hgbot")
    w = watchers(ircd)
    w.join(channel)
    sent = await deliver(IrcAdapter(irc_settings(ircd.port, nick)), channel, "one\ntwo\nthree", start=1)
    assert sent.calls == [(1, None), (2, None)]
    assert texts(w.until_quit(nick), channel) == ["two", "three"]


async def test_private_message_to_a_nick(ircd: Ircd, watchers: Callable[..., Watcher]) -> None:
    nick = uniq("hgbot")
    w = watchers(ircd)
    sent = await deliver(IrcAdapter(irc_settings(ircd.port, nick)), w.nick, "psst\nsecond")
    assert sent.calls == [(0, None), (1, None)]
    got = w.wait_for(lambda m: m.command == "PRIVMSG" and m.params[1] == "second")
    assert [(m.nick, m.params) for m in got if m.command == "PRIVMSG"] == [
        (nick, (w.nick, "psst")), (nick, (w.nick, "second"))]
    assert [m for m in w.quiet() if m.command == "PRIVMSG"] == []


async def test_unknown_nick_is_not_retryable_and_nothing_counts_as_sent(ircd: Ircd) -> None:
    err, sent = await failure(IrcAdapter(irc_settings(ircd.port, uniq("hgbot"))), uniq("nobody"), "a\nb")
    assert (str(err), err.retryable) == ("irc: 401 no such nick", False)
    assert sent.calls == []


async def test_nick_in_use_is_retried_with_a_suffix(ircd: Ircd, watchers: Callable[..., Watcher]) -> None:
    channel, nick = uniq("#nick"), uniq("hgbot")
    w = watchers(ircd)
    w.join(channel)
    watchers(ircd, nick)  # holds the adapter's nick
    await deliver(IrcAdapter(irc_settings(ircd.port, nick)), channel, "still here")
    got = w.wait_for(lambda m: m.command == "QUIT" and m.nick.startswith(nick))
    said = [m for m in got if m.command == "PRIVMSG"]
    assert [m.params for m in said] == [(channel, "still here")]
    assert said[0].nick.startswith(nick + "_") and said[0].nick != nick


async def test_long_nick_in_use_gets_a_suffix_within_the_server_limit(
        ircd: Ircd, watchers: Callable[..., Watcher]) -> None:
    """nick + suffix is over ngircd's 30 characters (432): the retry cuts the nick to make room."""
    channel, nick = uniq("#longnick"), uniq("hg").ljust(28, "x")
    w = watchers(ircd)
    w.join(channel)
    watchers(ircd, nick)
    await deliver(IrcAdapter(irc_settings(ircd.port, nick)), channel, "made room")
    got = w.wait_for(lambda m: m.command == "QUIT" and m.nick.startswith(nick[:24]))
    said = [m for m in got if m.command == "PRIVMSG"]
    assert [m.params for m in said] == [(channel, "made room")]
    assert len(said[0].nick) == 28 and said[0].nick.startswith(nick[:24] + "_")


async def test_nick_in_use_everywhere_is_retryable(ircd: Ircd, watchers: Callable[..., Watcher],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    nick = uniq("hgbot")
    watchers(ircd, nick)
    watchers(ircd, nick + "_123")
    monkeypatch.setattr("hookgate.channels.irc.random.randrange", lambda a, b: 123)
    err, _ = await failure(IrcAdapter(irc_settings(ircd.port, nick)), "#taken")
    assert (str(err), err.retryable) == ("irc: 433 nickname in use", True)


# --- server password ---------------------------------------------------------------------------------

async def test_server_password(ircd_pw: Ircd, watchers: Callable[..., Watcher]) -> None:
    channel, nick = uniq("#pw"), uniq("hgbot")
    w = watchers(ircd_pw, password=PASSWORD)
    w.join(channel)
    await deliver(IrcAdapter(irc_settings(ircd_pw.port, nick, password=PASSWORD)), channel, "authenticated")
    assert texts(w.until_quit(nick), channel) == ["authenticated"]


async def test_wrong_server_password_is_not_retryable(ircd_pw: Ircd) -> None:
    err, sent = await failure(IrcAdapter(irc_settings(ircd_pw.port, uniq("hgbot"), password="wrong-one")),
                              "#pw")
    assert not err.retryable and str(err).startswith("irc: password rejected"), str(err)
    assert "wrong-one" not in str(err) and sent.calls == []


async def test_missing_password_is_not_retryable(ircd_pw: Ircd) -> None:
    err, _ = await failure(IrcAdapter(irc_settings(ircd_pw.port, uniq("hgbot"))), "#pw")
    assert (str(err), err.retryable) == ("irc: password rejected (ERROR)", False)


async def test_unresolved_password_secret_is_not_retryable() -> None:
    secret = SecretSource("channels.irc.password", "env:default:IRC_PW", None, "env var IRC_PW is not set")
    adapter = IrcAdapter(irc_settings(free_port(), "hgbot", password=secret))  # nothing listens there
    err, _ = await failure(adapter, "#chan")
    assert (str(err), err.retryable) == ("irc: password: env var IRC_PW is not set", False)


# --- channel refusals --------------------------------------------------------------------------------

async def test_banned_from_channel_is_not_retryable(ircd: Ircd, watchers: Callable[..., Watcher]) -> None:
    channel, nick = uniq("#ban"), uniq("hgbot")
    w = watchers(ircd)
    w.join(channel)  # first in: channel operator
    w.mode(channel, "+b", f"{nick}!*@*")
    err, sent = await failure(IrcAdapter(irc_settings(ircd.port, nick)), channel)
    assert (str(err), err.retryable) == ("irc: 474 cannot join channel", False)
    assert sent.calls == [] and [m for m in w.quiet() if m.nick == nick] == []


async def test_moderated_channel_refuses_the_first_line(ircd: Ircd, watchers: Callable[..., Watcher]) -> None:
    channel, nick = uniq("#mod"), uniq("hgbot")
    w = watchers(ircd)
    w.join(channel)
    w.mode(channel, "+m")
    err, sent = await failure(IrcAdapter(irc_settings(ircd.port, nick)), channel, "one\ntwo")
    assert (str(err), err.retryable) == ("irc: 404 cannot send to channel", False)
    assert sent.calls == []
    assert [m.command for m in w.until_quit(nick)] == ["JOIN", "QUIT"]


# --- connection failures -----------------------------------------------------------------------------

async def test_closed_port_is_retryable() -> None:
    err, _ = await failure(IrcAdapter(irc_settings(free_port(), "hgbot")), "#chan")
    assert err.retryable and str(err).startswith("irc: connection error"), str(err)


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts TCP connections (the kernel's backlog) and never says a word."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        s.listen(8)
        yield int(s.getsockname()[1])


async def test_silent_server_times_out(silent_port: int) -> None:
    started = time.monotonic()
    err, _ = await failure(IrcAdapter(irc_settings(silent_port, "hgbot"), timeout=0.5), "#chan")
    assert (str(err), err.retryable) == ("irc: timeout (register)", True)
    assert time.monotonic() - started < 3


async def test_silent_tls_server_times_out(silent_port: int) -> None:
    started = time.monotonic()
    err, _ = await failure(IrcAdapter(irc_settings(silent_port, "hgbot", tls=True), timeout=0.5), "#chan")
    assert (str(err), err.retryable) == ("irc: timeout (connect)", True)
    assert time.monotonic() - started < 3


# --- no command injection ----------------------------------------------------------------------------

async def test_line_breaks_in_the_text_do_not_make_commands(ircd: Ircd, watchers: Callable[..., Watcher]) -> None:
    channel, evil, nick = uniq("#inj"), uniq("#evil"), uniq("hgbot")
    w = watchers(ircd)
    w.join(channel)
    w.join(evil)
    text = f"hi\r\nJOIN {evil}\rPRIVMSG {evil} :owned\nQUIT :x\x00y\nNICK other"
    adapter = IrcAdapter(irc_settings(ircd.port, nick))
    sent = Sent()
    parts = [*adapter.split(text), f"raw\r\nPRIVMSG {evil} :also\n", "nul\x00here"]  # parts not from split
    await adapter.send(channel, parts, 0, ENVELOPE, sent)
    assert len(sent.calls) == len(parts)
    msgs = w.until_quit(nick)
    assert [m.command for m in msgs] == ["JOIN"] + ["PRIVMSG"] * 7 + ["QUIT"]
    assert texts(msgs, channel) == ["hi", f"JOIN {evil}", f"PRIVMSG {evil} :owned", "QUIT :xy", "NICK other",
                                    f"raw  PRIVMSG {evil} :also", "nulhere"]  # the server drops the end space
    assert all(m.params[0] == channel for m in msgs if m.command in ("JOIN", "PRIVMSG"))


@pytest.mark.parametrize("target", ["#chan\r\nJOIN #evil", "#chan JOIN", "#a,#b", "nick\x00", "", ":x",
                                    "#tab\there"])
async def test_bad_target_is_not_retryable(target: str) -> None:
    err, _ = await failure(IrcAdapter(irc_settings(free_port(), "hgbot")), target)
    assert (str(err), err.retryable) == ("irc: invalid target", False)


# --- a scripted server: PING before 001, ERROR -------------------------------------------------------

async def scripted_server(script: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
                          ) -> tuple[asyncio.Server, int]:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await script(reader, writer)
        finally:
            writer.close()
            await writer.wait_closed()

    server = await asyncio.start_server(handle, HOST, 0)
    return server, int(server.sockets[0].getsockname()[1])


async def test_ping_is_answered_at_any_time() -> None:
    got: list[str] = []

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        async def line() -> str:
            text = (await reader.readline()).decode().rstrip("\r\n")
            got.append(text)
            return text

        await line(), await line()  # NICK, USER
        writer.write(b"PING :cookie-1\r\n")
        assert await line() == "PONG :cookie-1"
        writer.write(b":srv 001 hgbot :Welcome\r\nPING :cookie-2\r\n")
        while not (text := await line()).startswith("QUIT"):
            if text.startswith("PING "):
                writer.write(f":srv PONG srv :{text.partition(':')[2]}\r\n".encode())
        await writer.drain()

    server, port = await scripted_server(script)
    async with server:
        await deliver(IrcAdapter(irc_settings(port, "hgbot")), "someone", "hi there")
    assert got[:3] == ["NICK hgbot", "USER hookgate 0 * :hookgate", "PONG :cookie-1"]
    assert "PONG :cookie-2" in got and "PRIVMSG someone :hi there" in got
    assert got[-1].startswith("QUIT")


async def test_error_from_the_server_is_retryable() -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readline()
        writer.write(b"ERROR :Closing Link: too many connections\r\n")
        await writer.drain()

    server, port = await scripted_server(script)
    async with server:
        err, _ = await failure(IrcAdapter(irc_settings(port, "hgbot")), "#chan")
    assert (str(err), err.retryable) == ("irc: the server closed the link (ERROR)", True)


# --- settings and splitting --------------------------------------------------------------------------

@pytest.mark.parametrize(("options", "message"), [
    ({"port": 1, "nick": "hgbot"}, "irc: server is not configured"),
    ({"server": HOST, "port": 1}, "irc: nick is not configured"),
    ({"server": HOST, "port": 1, "nick": "bad nick"}, "irc: invalid nick"),
    ({"server": HOST, "port": 1, "nick": "x\r\nQUIT"}, "irc: invalid nick"),
])
async def test_bad_settings_are_not_retryable(options: dict[str, object], message: str) -> None:
    adapter = IrcAdapter(ChannelSettings(id="irc", options=options))
    err, _ = await failure(adapter, "#chan")
    assert (str(err), err.retryable) == (message, False)


def test_split() -> None:
    adapter = IrcAdapter(ChannelSettings(id="irc", options={}))
    assert adapter.split("") == []
    assert adapter.split(" \n\n\t\n") == []
    assert adapter.split("a\r\n\r\nb  \rc\x00d\n") == ["a", "b", "cd"]
    assert adapter.split("x" * 400) == ["x" * 400]
    assert adapter.split("x" * 401) == ["x" * 400, "x"]
    assert adapter.split("€" * 134) == ["€" * 133, "€"]  # 3 bytes each: 399 bytes in the first
    words = ("abc " * 150).strip()
    parts = adapter.split(words)
    assert all(len(p.encode()) <= 400 and not p.startswith(" ") and not p.endswith(" ") for p in parts)
    assert " ".join(parts) == words
