"""Prompt texts (model.md §4.3, §5.2, §6.3; webhooks.md §5.4): time formats, events, run prompts.

All functions are pure except that ``envelopeTimezone: "local"`` looks at the host's zone (``TZ``,
``/etc/localtime``, ``/etc/timezone``) each time it is resolved.
"""

from __future__ import annotations

import os
import re
import time
import zoneinfo
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta, tzinfo
from typing import NamedTuple

from hookgate.runtime.events import sanitize_system_text
from hookgate.runtime.wrapper import wrap_external

DELIVERY_LINE = "Return your response as plain text; it will be delivered automatically."
DEFAULT_HEARTBEAT_PROMPT = (
    "Review the system events above, if any. If something needs the user's attention, reply with a "
    "short message for them. If nothing needs attention, reply HEARTBEAT_OK."
)
DEFAULT_TASK_NAME = "Task"
SOURCE_LABELS = {"webhook": "Webhook", "gmail": "Email"}

# A host linked to one of these is shown as plain "UTC" (what Intl reports for such hosts, too).
_HOST_UTC_NAMES = frozenset(
    {"UTC", "Etc/UTC", "Etc/UCT", "UCT", "Etc/Universal", "Universal", "Etc/Zulu", "Zulu"}
)
_ABBREVIATION = re.compile(r"[A-Za-z]{1,10}")


class Zone(NamedTuple):
    """A resolved ``envelopeTimezone``: the zone and its display name for the time block."""

    tz: tzinfo
    name: str


class HostZone(tzinfo):
    """The host's zone via the C library, for a ``local`` setting whose IANA name is unknown."""

    def fromutc(self, dt: datetime) -> datetime:
        seconds = dt.replace(tzinfo=UTC).timestamp()
        return dt + timedelta(seconds=time.localtime(seconds).tm_gmtoff)

    def _local(self, dt: datetime | None) -> time.struct_time:
        if dt is None:
            return time.localtime()
        wall = (dt.year, dt.month, dt.day, dt.hour, dt.minute, dt.second, 0, 0, -1)
        return time.localtime(time.mktime(wall))

    def utcoffset(self, dt: datetime | None) -> timedelta:
        return timedelta(seconds=self._local(dt).tm_gmtoff)

    def tzname(self, dt: datetime | None) -> str:
        return self._local(dt).tm_zone

    def dst(self, dt: datetime | None) -> timedelta | None:
        return None

    def __repr__(self) -> str:
        return "HostZone()"


def _zone_key(raw: str) -> str | None:
    """``raw`` as a loadable IANA key (``:Europe/Berlin``, ``/usr/share/zoneinfo/Europe/Berlin``)."""
    key = raw.strip().removeprefix(":")
    if "zoneinfo/" in key:
        key = key.rsplit("zoneinfo/", 1)[1]
    for prefix in ("posix/", "right/"):
        key = key.removeprefix(prefix)
    if not key or key.startswith("/"):
        return None
    try:
        zoneinfo.ZoneInfo(key)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        return None
    return key


def host_zone_name() -> str | None:
    """The host's IANA zone name when it can be known: ``TZ``, the ``/etc/localtime`` link, ``/etc/timezone``."""
    tz_env = os.environ.get("TZ")
    if tz_env is not None:
        # An empty TZ means UTC to the C library; an unloadable one (a POSIX rule) has no IANA name.
        return "UTC" if not tz_env.strip() else _zone_key(tz_env)
    try:
        key = _zone_key(os.readlink("/etc/localtime"))
    except OSError:
        key = None
    if key is None:
        try:
            with open("/etc/timezone", encoding="utf-8") as handle:
                key = _zone_key(handle.readline())
        except OSError:
            key = None
    return key


def zone_for(setting: str) -> Zone:
    """Resolve ``agents.defaults.envelopeTimezone``: ``local``, ``utc`` or an IANA name.

    ``local`` without a knowable IANA name gives a :class:`HostZone` named by its current offset.
    An unknown IANA name raises ``ValueError`` (configuration loading rejects it earlier).
    """
    if setting.lower() == "utc":
        return Zone(UTC, "UTC")
    if setting == "local":
        key = host_zone_name()
        if key is None:
            return Zone(HostZone(), format_offset(timedelta(seconds=time.localtime().tm_gmtoff)))
        if key in _HOST_UTC_NAMES:
            return Zone(UTC, "UTC")
    else:
        key = setting
    try:
        return Zone(zoneinfo.ZoneInfo(key), key)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError) as exc:
        raise ValueError(f'unknown time zone "{setting}"') from exc


def format_offset(offset: timedelta) -> str:
    """``UTC+05:30`` / ``UTC-03:00`` (seconds of historic offsets are dropped)."""
    minutes = int(offset.total_seconds()) // 60
    sign = "+" if minutes >= 0 else "-"
    hours, mins = divmod(abs(minutes), 60)
    return f"UTC{sign}{hours:02d}:{mins:02d}"


def _local_time(ms: int, zone: Zone) -> tuple[datetime, str]:
    """Wall time at ``ms`` in ``zone`` and its ``<zone>`` label (abbreviation, else offset)."""
    seconds = ms // 1000
    if isinstance(zone.tz, HostZone):
        local = time.localtime(seconds)
        wall = datetime(local.tm_year, local.tm_mon, local.tm_mday, local.tm_hour, local.tm_min, local.tm_sec)
        abbreviation, offset = local.tm_zone, timedelta(seconds=local.tm_gmtoff)
    else:
        aware = datetime.fromtimestamp(seconds, zone.tz)
        wall = aware.replace(tzinfo=None)
        abbreviation, offset = aware.tzname() or "", aware.utcoffset() or timedelta(0)
    # tzdata writes numeric abbreviations ("-03", "+0530") for zones without a letter one.
    label = abbreviation if _ABBREVIATION.fullmatch(abbreviation) else format_offset(offset)
    return wall, label


def envelope_time(ms: int, tz_setting: str) -> str:
    """``YYYY-MM-DD HH:MM:SS <zone>``: the zone abbreviation, or ``UTC+05:30`` when it has none."""
    wall, label = _local_time(ms, zone_for(tz_setting))
    return f"{wall:%Y-%m-%d %H:%M:%S} {label}"


def time_block(ms: int, tz_setting: str) -> str:
    """The run-prompt time block: ``Current time: … (<zone name>)`` and ``Reference UTC: …``."""
    zone = zone_for(tz_setting)
    wall, label = _local_time(ms, zone)
    name = zone.name
    if isinstance(zone.tz, HostZone):
        name = format_offset(timedelta(seconds=time.localtime(ms // 1000).tm_gmtoff))
    utc = datetime.fromtimestamp(ms // 1000, UTC)
    return f"Current time: {wall:%Y-%m-%d %H:%M:%S} {label} ({name})\nReference UTC: {utc:%Y-%m-%d %H:%M} UTC"


def render_events(events: Sequence[tuple[int, str]], tz_setting: str) -> str:
    """Pending events as ``System: [<ts>] L1`` / ``System: L2`` lines, in the order given (§4.3)."""
    rendered: list[str] = []
    for created_ms, text in events:
        lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        rendered.append(f"System: [{envelope_time(created_ms, tz_setting)}] {lines[0]}")
        rendered.extend(f"System: {line}" for line in lines[1:])
    return "\n".join(rendered)


def source_label(source: str) -> str:
    """The wrapper's ``Source:`` label: ``Webhook`` for ``webhook``, ``Email`` for ``gmail``."""
    try:
        return SOURCE_LABELS[source.lower()]
    except KeyError:
        raise ValueError(f'unknown external-content source "{source}"') from None


def hook_prompt(
    *,
    run_id: str,
    name: str,
    message: str,
    received_ms: int,
    now_ms: int,
    tz_setting: str,
    wrap: bool,
    source: str,
    deliver: bool,
    marker_id: str | None = None,
) -> str:
    """The prompt of a hook run (model.md §5.2), wrapped or not, with the delivery line if asked."""
    block = time_block(now_ms, tz_setting)
    if wrap:
        wrapped = wrap_external(
            message,
            name=name,
            job_id=run_id,
            received=envelope_time(received_ms, tz_setting),
            source_label=source_label(source),
            marker_id=marker_id,
        )
        prompt = f"{wrapped}\n\n{block}"
    else:
        prompt = f"[hook:{run_id} {sanitize_system_text(name)}] {message}\n{block}"
    if deliver:
        prompt = f"{prompt}\n\n{DELIVERY_LINE}"
    return prompt


def task_name(label: str | None) -> str:
    """The run name of an executed task: its label (trimmed) or ``Task``."""
    stripped = (label or "").strip()
    return stripped or DEFAULT_TASK_NAME


def task_prompt(
    *,
    task_id: str,
    label: str | None,
    task: str,
    received_ms: int,
    now_ms: int,
    tz_setting: str,
    marker_id: str | None = None,
) -> str:
    """The prompt of an executed webhook task (webhooks.md §5.4): always wrapped, no delivery line."""
    wrapped = wrap_external(
        task,
        name=task_name(label),
        job_id=task_id,
        received=envelope_time(received_ms, tz_setting),
        source_label=SOURCE_LABELS["webhook"],
        marker_id=marker_id,
    )
    return f"{wrapped}\n\n{time_block(now_ms, tz_setting)}"


def heartbeat_prompt_text(configured: str | None) -> str:
    """The configured ``heartbeat.prompt`` when non-blank, else :data:`DEFAULT_HEARTBEAT_PROMPT`."""
    if configured is not None and configured.strip():
        return configured
    return DEFAULT_HEARTBEAT_PROMPT


def heartbeat_skipped(rendered_events: str, configured: str | None) -> bool:
    """§6.3 step 2: no pending event and no configured prompt → the turn makes no model call."""
    return not rendered_events and not (configured is not None and configured.strip())


def heartbeat_prompt(rendered_events: str, configured: str | None) -> str:
    """The heartbeat turn's prompt (§6.3 step 3): events, a blank line, the prompt.

    Without events the prompt stands alone (no leading blank line); callers skip the turn first when
    :func:`heartbeat_skipped` says so.
    """
    prompt = heartbeat_prompt_text(configured)
    return f"{rendered_events}\n\n{prompt}" if rendered_events else prompt
