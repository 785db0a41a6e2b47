"""SQL resources of the SQLite backend: named statements (``queries.sql``) and migrations.

Adding a migration = adding ``migrations/<NNNN>_<what>.sql``; the number is the schema version. Each
file runs in one transaction and is recorded in ``schema_migrations``. A database whose version is
newer than the newest file refuses to open. A file whose first line is ``-- hookgate: foreign keys
off`` (one that rebuilds a table other tables reference) runs with foreign keys off and commits only
if ``PRAGMA foreign_key_check`` finds no dangling reference.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from types import MappingProxyType

from hookgate.store.base import StoreOpenError

_PACKAGE = "hookgate.store.sqlite"
_NAME_LINE = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)
_MIGRATION_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


def parse_named_queries(text: str) -> dict[str, str]:
    """``-- name: x`` blocks → {name: statement}; comment lines inside a block are kept (harmless)."""
    parts = _NAME_LINE.split(text)
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2]):
        statement = body.strip()
        if name in queries:
            raise ValueError(f"duplicate query name {name!r}")
        if not statement:
            raise ValueError(f"query {name!r} is empty")
        queries[name] = statement
    return queries


def _load_queries() -> Mapping[str, str]:
    text = resources.files(_PACKAGE).joinpath("queries.sql").read_text(encoding="utf-8")
    return MappingProxyType(parse_named_queries(text))


Q: Mapping[str, str] = _load_queries()
"""Every named statement, loaded once at import."""


FOREIGN_KEYS_OFF = "-- hookgate: foreign keys off"


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def foreign_keys_off(self) -> bool:
        """A migration that rebuilds a table other tables reference says so on its first line."""
        return self.sql.startswith(FOREIGN_KEYS_OFF)


def load_migrations() -> tuple[Migration, ...]:
    """The packaged migrations in version order; versions must be 1, 2, 3, … without gaps."""
    found: list[Migration] = []
    for entry in resources.files(_PACKAGE).joinpath("migrations").iterdir():
        match = _MIGRATION_FILE.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), match.group(2), entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    for expected, migration in enumerate(found, start=1):
        if migration.version != expected:
            raise RuntimeError(f"migration {migration.version:04d} out of sequence (expected {expected:04d})")
    return tuple(found)


MIGRATIONS = load_migrations()
LATEST_VERSION = MIGRATIONS[-1].version


def migrate(conn: sqlite3.Connection, now_ms: int, migrations: tuple[Migration, ...] = MIGRATIONS) -> int:
    """Bring the schema up to date on an autocommit connection; returns the resulting version.

    Raises ``StoreOpenError`` when the database is newer than ``migrations``.
    """
    latest = migrations[-1].version if migrations else 0
    conn.execute(Q["create_schema_migrations"])
    current = _version(conn)
    if current > latest:
        raise _newer(current, latest)
    for migration in migrations:
        if migration.version <= current:
            continue
        # The pragma is a no-op inside a transaction: it is switched before BEGIN and back after the end.
        restore_fk = migration.foreign_keys_off and bool(conn.execute("PRAGMA foreign_keys").fetchone()[0])
        if restore_fk:
            conn.execute("PRAGMA foreign_keys=OFF")
        try:
            conn.execute("BEGIN IMMEDIATE")
            # Re-check under the write lock: a concurrent CLI process may have migrated meanwhile.
            if _version(conn) >= migration.version:
                conn.execute("ROLLBACK")
                continue
            for statement in _statements(migration.sql):
                conn.execute(statement)
            if migration.foreign_keys_off:
                dangling = conn.execute("PRAGMA foreign_key_check").fetchall()
                if dangling:
                    raise sqlite3.IntegrityError(
                        f"migration {migration.version:04d} leaves {len(dangling)} dangling references, "
                        f"e.g. {dangling[0][0]} row {dangling[0][1]} → {dangling[0][2]}"
                    )
            conn.execute(Q["record_migration"], (migration.version, migration.name, now_ms))
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        finally:
            if restore_fk:
                conn.execute("PRAGMA foreign_keys=ON")
    return _version(conn)


def _version(conn: sqlite3.Connection) -> int:
    row = conn.execute(Q["schema_version"]).fetchone()
    return int(row[0])


def _newer(current: int, latest: int) -> StoreOpenError:
    return StoreOpenError(f"database schema version {current} is newer than this hookgate ({latest})")


def schema_version(conn: sqlite3.Connection) -> int:
    """The file's schema version, without creating anything: 0 for a file hookgate never migrated."""
    has_table = conn.execute(Q["has_schema_migrations"]).fetchone() is not None
    return _version(conn) if has_table else 0


def check_current(conn: sqlite3.Connection, latest: int = LATEST_VERSION) -> None:
    """For a connection that must not change the file (a read-only command): the schema must be this
    code's, neither migrated here nor newer. Raises ``StoreOpenError``."""
    current = schema_version(conn)
    if current > latest:
        raise _newer(current, latest)
    if current < latest:
        raise StoreOpenError(f"database schema version {current} is older than this hookgate ({latest}): "
                             "hookgate serve migrates it when it starts")


def _statements(script: str) -> list[str]:
    """Split a migration script into complete statements (``executescript`` would commit early)."""
    statements: list[str] = []
    pending = ""
    for line in script.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            if pending.strip():
                statements.append(pending.strip())
            pending = ""
    if pending.strip() and not _only_comments(pending):
        raise ValueError(f"incomplete SQL statement at the end of a migration: {pending.strip()[:60]!r}")
    return statements


def _only_comments(text: str) -> bool:
    return all(not line.strip() or line.strip().startswith("--") for line in text.splitlines())


def start_transcript(conn: sqlite3.Connection, key: str, agent_id: str, session_id: str, now_ms: int) -> bool:
    """An isolated run starts a new transcript (model.md §3): the session record, created on first
    use, points at ``session_id``. A main session (``agent:<id>:main``) keeps its transcript, which
    heartbeat turns append to; then nothing is written and the result is ``False``."""
    parts = key.split(":")
    if len(parts) == 3 and parts[0] == "agent" and parts[2] == "main":
        return False
    conn.execute(Q["start_session_transcript"], (key, agent_id, session_id, now_ms))
    return True
