"""Reading a configuration file: bounded size, UTF-8, every failure a ConfigError.

Configurations are a few kB. A file over MAX_BYTES is refused before it is
parsed (a 30 MB YAML would otherwise take a minute to fail), and an endless
special file (``/dev/zero``) is never read whole.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import ConfigError

MAX_BYTES = 1_000_000


def read_text(path: Path, field: str, shown: str) -> str:
    """A configuration file's UTF-8 text; ConfigError (naming ``field``) otherwise.

    Reads at most MAX_BYTES + 1 bytes, so a huge file or an endless special
    file (``/dev/zero``) is refused without being read whole.
    """
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_BYTES + 1)
    except OSError as exc:
        raise ConfigError(field, shown, f"cannot be read: {exc.strerror or exc}") from None
    if len(raw) > MAX_BYTES:
        raise ConfigError(field, shown, f"is larger than {MAX_BYTES // 1_000_000} MB; "
                          "a configuration is a few kB") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(field, shown,
                          f"is not UTF-8 text (byte {exc.start}); expected a YAML file") from None
