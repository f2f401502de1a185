"""LSNs as PostgreSQL writes them (``"16/B374D848"``) and as numbers."""

from __future__ import annotations

from typing import Union


def lsn_to_int(lsn: Union[str, int]) -> int:
    """``"0/1000360"`` as an integer (an integer is returned as it is)."""
    if isinstance(lsn, int):
        return lsn
    high, sep, low = lsn.partition("/")
    if not sep:
        raise ValueError(f"not an LSN: {lsn!r} (expected X/Y in hexadecimal)")
    return (int(high, 16) << 32) | int(low, 16)


def lsn_to_text(lsn: Union[str, int]) -> str:
    """An integer LSN as PostgreSQL writes it (a string is checked and returned)."""
    value = lsn_to_int(lsn)
    if not 0 <= value < 1 << 64:
        raise ValueError(f"not an LSN: {lsn!r} (out of range)")
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"
