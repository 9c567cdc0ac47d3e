"""Leases in ``ratchet_lock``: owner-checked, expiring, so a dead holder blocks nobody for long."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.engine import Engine

from ..store import Store


@dataclass(frozen=True, slots=True)
class Lease:
    """The lease ``name`` as held (or wanted) by ``owner``."""

    store: Store
    engine: Engine
    name: str
    owner: str

    def try_acquire(self, ttl: float) -> bool:
        """Take the lease (or extend it, if held) for ``ttl`` seconds; False if another holds it."""
        with self.store.begin(self.engine) as conn:
            return self.store.cluster.try_lease(conn, self.name, self.owner, ttl)

    def renew(self, ttl: float) -> bool:
        """Extend a lease this owner holds; False if it was lost."""
        return self.try_acquire(ttl)

    def release(self) -> bool:
        """Give the lease up; False if this owner did not hold it."""
        with self.store.begin(self.engine) as conn:
            return self.store.cluster.release_lease(conn, self.name, self.owner)
