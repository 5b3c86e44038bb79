"""Choosing which snapshots to restore, and falling back when one is damaged.

``restore_latest(backend, storage)`` is the one entry point: it finds the newest checkpoint whose manifests cover the
backend's key groups, lets the backend verify every file before it loads anything, and on a corrupt or missing file
logs which file failed and tries the next older retained checkpoint.
"""

from __future__ import annotations

import logging
from typing import Any, Optional, Sequence

from keyedstate.checkpoint.manifest import SnapshotManifest
from keyedstate.errors import ConfigurationError, NoRestorableSnapshotError, SnapshotCorruptedError, SnapshotError
from keyedstate.keygroups import KeyGroupRange

__all__ = ["restore_latest", "covering_manifests", "assign_key_groups", "merged_state_metadata"]

logger = logging.getLogger("keyedstate.checkpoint")


def covering_manifests(manifests: Sequence[SnapshotManifest], target: KeyGroupRange) -> Optional[list[SnapshotManifest]]:
    """The manifests that hold part of ``target``, or None when some key group of ``target`` is in none of them."""
    relevant = [m for m in manifests if len(m.key_group_range.intersection(target))]
    covered = set()
    for manifest in relevant:
        covered.update(manifest.key_group_range.intersection(target))
    return relevant if len(covered) == len(target) else None


def assign_key_groups(manifests: Sequence[SnapshotManifest], target: KeyGroupRange,
                      max_parallelism: int) -> list[tuple[SnapshotManifest, list[KeyGroupRange]]]:
    """Which key-group ranges of ``target`` to load from which manifest: every owned key group from exactly one
    manifest (the newest written when snapshots overlap), never an unowned one."""
    for manifest in manifests:
        if manifest.max_parallelism != max_parallelism:
            raise ConfigurationError(
                f"{manifest.describe()} was written with max_parallelism {manifest.max_parallelism}, but the backend "
                f"uses {max_parallelism}; max_parallelism cannot change once state exists"
            )
    preference = sorted(manifests, key=lambda m: (m.created_at_ms, m.scope), reverse=True)
    runs: dict[int, list[KeyGroupRange]] = {id(m): [] for m in manifests}
    for key_group in target:
        owner = next((m for m in preference if key_group in m.key_group_range), None)
        if owner is None:
            raise SnapshotError(f"no snapshot among {[m.describe() for m in manifests]} holds key group {key_group}")
        ranges = runs[id(owner)]
        if ranges and ranges[-1].end == key_group - 1:
            ranges[-1] = KeyGroupRange(ranges[-1].start, key_group)
        else:
            ranges.append(KeyGroupRange(key_group, key_group))
    return [(m, runs[id(m)]) for m in manifests if runs[id(m)]]


def restore_latest(backend: Any, storage: Any = None) -> Optional[list[SnapshotManifest]]:
    """Restore ``backend`` from the newest restorable checkpoint in ``storage`` (default: the backend's).

    Returns the manifests used, or None when the storage holds no snapshot at all. Raises NoRestorableSnapshotError,
    listing every checkpoint tried and why, when snapshots exist but none can be restored.
    """
    storage = storage if storage is not None else backend.checkpoint_storage
    if storage is None:
        raise ConfigurationError("restore_latest needs a CheckpointStorage (pass one or give the backend one)")
    target = backend.key_group_range
    tried: list[str] = []
    found_any = False
    for checkpoint_id in reversed(storage.list_checkpoint_ids()):
        manifests, problems = storage.load_manifests(checkpoint_id)
        found_any = found_any or bool(manifests or problems)
        for problem in problems:
            logger.warning("checkpoint %d: %s", checkpoint_id, problem)
        chosen = covering_manifests(manifests, target)
        if chosen is None:
            if manifests or problems:
                scopes = ", ".join(m.scope for m in manifests) or "none readable"
                tried.append(f"checkpoint {checkpoint_id}: its snapshots ({scopes}) do not cover key groups "
                             f"{target.start}..{target.end}" + (f" ({'; '.join(problems)})" if problems else ""))
            continue
        try:
            backend.restore(chosen)
        except SnapshotCorruptedError as error:
            logger.warning("checkpoint %d cannot be restored, falling back to the previous retained checkpoint: %s",
                           checkpoint_id, error)
            tried.append(f"checkpoint {checkpoint_id}: {error}")
            continue
        logger.info("restored key groups %d..%d from checkpoint %d (%s)", target.start, target.end, checkpoint_id,
                    ", ".join(m.scope for m in chosen))
        return chosen
    if not found_any:
        return None
    raise NoRestorableSnapshotError(
        f"no retained checkpoint in {storage.location} can restore key groups {target.start}..{target.end}; tried: "
        + "; ".join(tried)
    )


def merged_state_metadata(backend: Any, manifests: Sequence[SnapshotManifest]) -> dict[str, Any]:
    """The state metadata of all ``manifests``, checked against each other and against the states the backend
    already registered, before anything is loaded (a type change fails here, naming the state and both types)."""
    merged: dict[str, Any] = {}
    for manifest in manifests:
        for metadata in manifest.states:
            existing = merged.setdefault(metadata.name, metadata)
            if existing != metadata:
                raise ConfigurationError(
                    f"snapshots disagree about state {metadata.name!r}: {existing} vs {metadata}; they come from "
                    f"different jobs"
                )
    for name, metadata in merged.items():
        registered = backend._states.get(name)
        if registered is not None:
            metadata.check_compatible(registered.descriptor)
    return merged
