"""libpq connection strings: read (key=value form, or a ``postgresql://`` URI) and
written, quoting what needs it."""

from __future__ import annotations

import re
import urllib.parse
from typing import Dict, Mapping


def quote(value: str) -> str:
    """A connection string's value, quoted when it must be."""
    if value and not re.search(r"[\s'\\]", value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def conninfo_words(conninfo: str) -> Dict[str, str]:
    """A libpq connection string's words (key=value form, or a postgresql:// URI)."""
    if conninfo.startswith(("postgresql://", "postgres://")):
        url = urllib.parse.urlsplit(conninfo)
        words: Dict[str, str] = {}
        if url.username:
            words["user"] = urllib.parse.unquote(url.username)
        if url.password:
            words["password"] = urllib.parse.unquote(url.password)
        if url.hostname:
            words["host"] = url.hostname
        if url.port:
            words["port"] = str(url.port)
        if url.path.strip("/"):
            words["dbname"] = urllib.parse.unquote(url.path.lstrip("/"))
        words.update({k: v[-1] for k, v in urllib.parse.parse_qs(url.query).items()})
        return words
    words = {}
    pattern = re.compile(r"\s*([A-Za-z_]+)\s*=\s*('(?:[^'\\]|\\.)*'|\S*)")
    position = 0
    while position < len(conninfo.rstrip()):
        match = pattern.match(conninfo, position)
        if not match:
            raise ValueError(f"not a connection string: {conninfo!r}")
        value = match.group(2)
        if value.startswith("'"):
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        words[match.group(1)] = value
        position = match.end()
    return words


def join_conninfo(words: Mapping[str, str]) -> str:
    """The key=value form of ``words``."""
    return " ".join(f"{k}={quote(v)}" for k, v in words.items())
