"""Payload encryption: a job's arguments, params and result sealed with AES-256-GCM.

Operators, backups and replicas read the job tables; a team that puts personal data in a job's
arguments opts in per task (``@ratchet.task(encrypt=True)``), per job
(``.with_encrypted_payload()``) or for every job (``RATCHET_ENCRYPT_ALL``). The cipher is the
``cryptography`` package's AES-GCM (the ``encryption`` extra); nothing here is cipher code.

A sealed column holds ``ratchet-sealed:v1:<key id>:<base64 of nonce and ciphertext>``: text no
JSON value starts with, so a reader tells it from a clear value without trying to decrypt. The
associated data is the job's id and the column's name, so a ciphertext copied into another row
or another column does not open: that job fails for good, naming the column, and the worker
goes on. What routes and filters jobs (task, queue, keys, tags, status, times) stays clear.

Keys are ``RATCHET_ENCRYPTION_KEYS`` (key id to 32 bytes, base64) and new writes use
``RATCHET_ENCRYPTION_CURRENT_KEY``: rotation adds a key and makes it current, and rows sealed
with an older key still open while that key is configured.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .errors import ConfigError, UnreadableJob

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

#: What every sealed value starts with (``v1``: AES-256-GCM, a 12-byte nonce first).
PREFIX = "ratchet-sealed:v1:"
#: A key id: short, and without the ``:`` that ends it in a sealed value.
_KEY_ID = re.compile(r"[A-Za-z0-9_.-]{1,32}")
_NONCE_BYTES = 12
_KEY_BYTES = 32


#: The namespace of the ids recurring masters' sealed arguments are bound to (a master's own
#: id is a text); a job's id is a UUIDv7, never one of these version-5 ids.
_MASTERS = uuid.UUID("5b0f2a0e-8f0c-4c57-9d3a-6a7e1f9c2b41")
#: The column name a master's sealed arguments are bound to.
MASTER_PAYLOAD = "recurring.payload"


def master_binding(recurring_id: str) -> uuid.UUID:
    """The id a recurring master's sealed arguments are bound to, with :data:`MASTER_PAYLOAD`:
    each child's copy is sealed again, for the child."""
    return uuid.uuid5(_MASTERS, recurring_id)


def is_sealed(text: str | None) -> bool:
    """Whether a stored column holds a sealed value."""
    return text is not None and text.startswith(PREFIX)


def sealed_key_id(text: str) -> str:
    """The id of the key a sealed value was written with."""
    return text[len(PREFIX) :].partition(":")[0]


class Keyring:
    """The configured keys: seals with the current one, opens with whichever a value names."""

    def __init__(self, keys: Mapping[str, bytes], current: str | None) -> None:
        self._keys = dict(keys)
        self._current = current
        self._ciphers: dict[str, AESGCM] = {}

    @property
    def can_seal(self) -> bool:
        return self._current is not None

    def seal(self, text: str, job_id: uuid.UUID, column: str) -> str:
        """``text`` sealed for ``column`` of job ``job_id`` with the current key."""
        if self._current is None:
            raise ConfigError(
                "a job asks for an encrypted payload, but RATCHET_ENCRYPTION_KEYS is not set: "
                "add a key (32 random bytes, base64) and RATCHET_ENCRYPTION_CURRENT_KEY"
            )
        nonce = os.urandom(_NONCE_BYTES)
        sealed = self._cipher(self._current).encrypt(
            nonce, text.encode(), _associated(job_id, column)
        )
        body = base64.b64encode(nonce + sealed).decode("ascii")
        return f"{PREFIX}{self._current}:{body}"

    def open(self, text: str, job_id: uuid.UUID, column: str) -> str:
        """The clear text of a sealed ``column`` of job ``job_id``.

        :raises UnreadableJob: naming the column, if its key is not configured or it was not
            sealed for this job and column (copied from another row, or altered).
        """
        from cryptography.exceptions import InvalidTag

        key_id, _, body = text[len(PREFIX) :].partition(":")
        if key_id not in self._keys:
            raise UnreadableJob(
                f"column {column!r} is encrypted with key {key_id!r}, which "
                "RATCHET_ENCRYPTION_KEYS does not hold: add that key back to read it"
            )
        try:
            raw = base64.b64decode(body, validate=True)
            clear = self._cipher(key_id).decrypt(
                raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], _associated(job_id, column)
            )
            return clear.decode()
        except (InvalidTag, binascii.Error, ValueError):
            raise UnreadableJob(
                f"column {column!r} does not decrypt as this job's: it was sealed for another "
                "job or column, or altered"
            ) from None

    def _cipher(self, key_id: str) -> AESGCM:
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM

            cipher = self._ciphers[key_id] = AESGCM(self._keys[key_id])
        return cipher


def _associated(job_id: uuid.UUID, column: str) -> bytes:
    return f"ratchet:{job_id}:{column}".encode()


def keys_setting(key: str, value: Any) -> dict[str, bytes]:
    """Read ``RATCHET_ENCRYPTION_KEYS``: key ids to 32-byte keys in base64.

    :raises ConfigError: naming the bad entry (never the key's value).
    """
    if not isinstance(value, Mapping):
        raise ConfigError(
            f"{key} must be a dict of key ids to 32-byte keys in base64, like "
            "{'2026-11': base64.b64encode(os.urandom(32)).decode()}"
        )
    keys: dict[str, bytes] = {}
    for key_id, encoded in value.items():
        if not isinstance(key_id, str) or not _KEY_ID.fullmatch(key_id):
            raise ConfigError(
                f"{key}: key id {key_id!r} must be 1 to 32 letters, digits, '_', '.' or '-'"
            )
        try:
            raw = base64.b64decode(encoded, validate=True) if isinstance(encoded, str) else b""
        except (binascii.Error, ValueError):
            raw = b""
        if len(raw) != _KEY_BYTES:
            raise ConfigError(
                f"{key}[{key_id!r}] must be {_KEY_BYTES} bytes in base64 (44 characters; make "
                "one with base64.b64encode(os.urandom(32)).decode()); the value is not shown"
            )
        keys[key_id] = raw
    if keys:
        _require_cryptography(key)
    return keys


def check_keys(keys: Mapping[str, bytes], current: str | None, encrypt_all: bool) -> None:
    """The encryption settings together: a current key that is configured, and keys for
    ``RATCHET_ENCRYPT_ALL``.

    :raises ConfigError: saying which setting to change.
    """
    if current is not None and current not in keys:
        known = ", ".join(repr(k) for k in keys) or "none"
        raise ConfigError(
            f"RATCHET_ENCRYPTION_CURRENT_KEY is {current!r}, which is not a key id of "
            f"RATCHET_ENCRYPTION_KEYS (they are: {known})"
        )
    if keys and current is None:
        raise ConfigError(
            "RATCHET_ENCRYPTION_KEYS is set but RATCHET_ENCRYPTION_CURRENT_KEY is not: name "
            "the key new writes use"
        )
    if encrypt_all and not keys:
        raise ConfigError(
            "RATCHET_ENCRYPT_ALL needs RATCHET_ENCRYPTION_KEYS and RATCHET_ENCRYPTION_CURRENT_KEY"
        )


def _require_cryptography(key: str) -> None:
    import importlib.util

    if importlib.util.find_spec("cryptography") is None:
        raise ConfigError(
            f'{key} needs the cryptography package: pip install "flask-ratchet[encryption]"'
        )


#: A keyring without keys: opens and seals nothing (an app without encryption).
NO_KEYS = Keyring({}, None)
