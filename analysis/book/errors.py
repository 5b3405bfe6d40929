"""Errors of the book package: invalid user input, with a message that quotes the bad part.

Anyone may import this module; it imports nothing (as seaborn's ``_core/exceptions.py``).
"""

from __future__ import annotations


class BookError(ValueError):
    """Invalid input to the book's model: an expression, mesh, dims, dtype, topology or
    hardware choice. The message names the part at fault."""


class NotationError(BookError):
    """An expression in the book's notation that does not parse or does not fit its mesh."""


class HardwareError(BookError):
    """A hardware entry that is unknown, malformed, or lacks a constant the model needs."""
