"""Trimming as the JavaScript gateway whose contract hookgate keeps trims: ``String.prototype.trim``.

The spec's "trimmed" is JavaScript's: its whitespace set holds U+FEFF, which ``str.strip()`` keeps,
and not U+001C – U+001F or U+0085, which ``str.strip()`` removes.
"""

from __future__ import annotations

from typing import Final

# JavaScript's WhiteSpace + LineTerminator (what String.prototype.trim and /\s/ match).
JS_WHITESPACE: Final = (
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000\ufeff"
)


def js_trim(value: str) -> str:
    """``String.prototype.trim``: strip JavaScript whitespace and line terminators."""
    return value.strip(JS_WHITESPACE)
