"""A real IRC server for the tests: Debian's ngircd (``apt-get install ngircd``), one per caller.

``Ircd(workdir).start()`` writes its own config under ``workdir`` and runs ``ngircd -n -f <conf>`` in
the foreground (no daemon, no syslog, no DNS/ident look-ups, penalties off), listening on 127.0.0.1 on
free ports only (never the package's 6667): ``port`` plain, and ``tls_port`` when started with
``tls=make_tls(dir)`` (a CA and a server certificate for 127.0.0.1/localhost, made with the openssl
CLI). ``password=`` sets the server password (``[Global] Password``). ngircd's log goes to
``workdir/ngircd.log``; ``stop()`` ends the process.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

HOST = "127.0.0.1"
SERVER_NAME = "irc.test"
START_TIMEOUT = 10.0
START_TRIES = 5  # a free port can be taken between choosing it and ngircd binding it


def ngircd_binary() -> str:
    found = shutil.which("ngircd") or ("/usr/sbin/ngircd" if os.access("/usr/sbin/ngircd", os.X_OK) else None)
    if found is None:
        pytest.fail("ngircd is not installed: apt-get install -y ngircd (the IRC tests need a real server)",
                    pytrace=False)
    return found


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class TlsFiles:
    ca: Path  # the CA certificate clients trust
    cert: Path  # the server certificate (127.0.0.1, localhost), signed by the CA
    key: Path


def make_tls(directory: Path) -> TlsFiles:
    """A throwaway CA and a server certificate for 127.0.0.1 and localhost (openssl CLI)."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.fail("openssl is not installed: apt-get install -y openssl", pytrace=False)
    directory.mkdir(parents=True, exist_ok=True)
    ca, ca_key = directory / "ca.pem", directory / "ca.key"
    cert, key, csr = directory / "server.pem", directory / "server.key", directory / "server.csr"
    ext = directory / "server.ext"
    ext.write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
                   "keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n")

    def run(*args: str) -> None:
        proc = subprocess.run([openssl, *args], capture_output=True, text=True, timeout=60, check=False)
        if proc.returncode != 0:
            pytest.fail(f"openssl {args[0]} failed: {proc.stderr.strip()}", pytrace=False)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=hookgate test CA",
        "-keyout", str(ca_key), "-out", str(ca),
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    run("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost", "-keyout", str(key), "-out", str(csr))
    run("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial",
        "-days", "2", "-out", str(cert), "-extfile", str(ext))
    return TlsFiles(ca=ca, cert=cert, key=key)


class Ircd:
    def __init__(self, workdir: Path, *, tls: TlsFiles | None = None, password: str | None = None) -> None:
        self.workdir = workdir
        self.tls = tls
        self.password = password
        self.host = HOST
        self.port = 0
        self.tls_port: int | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = workdir / "ngircd.log"

    def config(self) -> str:
        include = self.workdir / "conf.d"  # empty: nothing from /etc/ngircd
        include.mkdir(parents=True, exist_ok=True)
        lines = [
            "[Global]",
            f"Name = {SERVER_NAME}",
            "Info = hookgate test server",
            "AdminInfo1 = hookgate tests",
            "AdminInfo2 = hookgate tests",
            "AdminEMail = tests@invalid",
            f"Listen = {HOST}",
            f"Ports = {self.port}",
            "MotdPhrase = hookgate test server",
            f"PidFile = {self.workdir / 'ngircd.pid'}",
        ]
        if self.password is not None:
            lines.append(f"Password = {self.password}")
        lines += [
            "[Limits]",
            "MaxConnections = 0",
            "MaxConnectionsIP = 0",
            "MaxNickLength = 30",
            "MaxPenaltyTime = 0",  # no flood throttling: the tests send bursts
            "PingTimeout = 120",
            "[Options]",
            "DNS = no",
            "Ident = no",
            "PAM = no",
            f"IncludeDir = {include}",
        ]
        if self.tls is not None:
            lines += [
                "[SSL]",
                f"CertFile = {self.tls.cert}",
                f"KeyFile = {self.tls.key}",
                f"Ports = {self.tls_port}",
            ]
        return "\n".join(lines) + "\n"

    def start(self) -> Ircd:
        binary = ngircd_binary()
        self.workdir.mkdir(parents=True, exist_ok=True)
        conf = self.workdir / "ngircd.conf"
        for _ in range(START_TRIES):
            self.port = free_port()
            self.tls_port = free_port() if self.tls is not None else None
            conf.write_text(self.config())
            with open(self.log_path, "wb") as log:
                self.proc = subprocess.Popen([binary, "-n", "-f", str(conf)], stdin=subprocess.DEVNULL,
                                             stdout=log, stderr=subprocess.STDOUT)
            outcome = self._wait_ready()
            if outcome == "ready":
                return self
            self.stop()
            if outcome != "port taken":
                break
        pytest.fail(f"ngircd did not start: {outcome}\n{self.log()}", pytrace=False)

    def _wait_ready(self) -> str:
        assert self.proc is not None
        wanted = [f"Now listening on [{HOST}]:{p}" for p in (self.port, self.tls_port) if p is not None]
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            text = self.log()
            if "Can't bind socket" in text:
                return "port taken"
            if all(w in text for w in wanted) and f'Server "{SERVER_NAME}"' in text and "ready." in text:
                return "ready"
            if self.proc.poll() is not None:
                return f"exited with {self.proc.returncode}"
            time.sleep(0.02)
        return f"not ready after {START_TIMEOUT} s"

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
