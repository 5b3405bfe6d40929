"""The runner's errors, in a leaf module anyone in :mod:`runner` may import."""

from __future__ import annotations


class ConfigError(ValueError):
    """A config value that cannot run. The message names the key, the value and what is allowed."""


class PlatformError(ConfigError):
    """JAX runs on another platform than the config asks for (an accelerator install that fell
    back to CPU): no point of the sweep can measure what was asked, so the run stops."""


class WorkerDied(RuntimeError):
    """The worker process ended (or was killed for its timeout) in the middle of a point."""


class WorkerRefused(WorkerDied):
    """The worker could not start JAX because of the config (``distributed=auto`` with no
    cluster to join): the message says why in full, and the point fails as a config error."""


class OutputError(RuntimeError):
    """A run folder cannot be written (disk full, read-only): one line, and the run stops."""
