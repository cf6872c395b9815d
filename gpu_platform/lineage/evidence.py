"""Content-addressed, write-once evidence store with holds and retention.

Layout under `root` (a local directory; see docs/lineage-and-evidence.md for the object-store
layout used in production, which is the same keys under `s3://bucket/prefix/`):

    objects/sha256/<hex[:2]>/<hex>            the bytes, read-only (0o444), never overwritten
    refs/<key>/<hex[:16]>-<kind>-....json      one reference: who stored it, why, until when
    holds/<key>/<holder>.json                  an evidence hold on every object the request references
    holds/<key>/released/<holder>-<time>.json  a released hold: who released it, when and why

`<key>` is `path_key(request_id)`: a readable slug plus a hash of the id, so distinct ids
(`perc:exp-1`, `perc/exp-1`) never share a directory; every record also carries its exact
request id, which is what reads match on (a store written before keys were hashed is read
through the old slug directories the same way).

The index is plain files rather than a database table so that a store is self-describing
(copying the directory copies the evidence and its holds) and so that concurrent writers from
many runs need no lock: every file is created once with an atomic rename or link.

An object is deleted by `sweep` only when every reference to it has expired and no reference
is held, neither by its own `hold` flag nor by a hold on its request. Anything ambiguous (an
unreadable ref, an object without refs) is kept and reported. A sweep is restartable: it
deletes an object before its references, and repairs what an interrupted sweep or writer left
(references to an object it deleted, `.tmp-` files of writes that never finished).

Nothing here follows a symbolic link inside the store: the index and the objects are listed with
`lstat` (a symlinked directory or file, a FIFO, device or socket is left alone and reported in
`SweepReport.skipped`), index files are read through `safeload.read_confined` (a regular file
under the root, opened O_NOFOLLOW | O_NONBLOCK) and deletes go through
`safeload.unlink_confined` (every directory opened O_NOFOLLOW), so no file outside the store is
read, deleted or has its mode changed.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import stat
import tempfile
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

from gpu_platform.safeload import (
    PathRefused,
    lstat_kind,
    open_confined,
    open_regular,
    path_key,
    read_confined,
    unlink_confined,
)

_DIGEST = re.compile(r"^sha256:([0-9a-f]{64})$")
_SAFE = re.compile(r"[^A-Za-z0-9._-]")
_CHUNK = 1 << 20
_INDEX_MAX_BYTES = 1 << 20
"""A reference or hold file larger than this is unreadable (they are a few hundred bytes)."""


class EvidenceError(RuntimeError):
    """An evidence operation that cannot be carried out (unknown digest, corrupt object)."""


@dataclass(frozen=True, slots=True)
class EvidenceRef:
    """A stored object: `digest` is `sha256:<hex>`, `uri` where it lives, `size` in bytes."""

    digest: str
    uri: str
    size: int


@dataclass(frozen=True, slots=True)
class RefRecord:
    """One reference to an object. retention_until=None: no expiry (kept by every sweep)."""

    digest: str
    request_id: str
    kind: str
    retention_until: datetime | None
    hold: bool
    stored_at: datetime
    name: str = ""


@dataclass(frozen=True, slots=True)
class Hold:
    request_id: str
    holder: str
    reason: str
    set_at: datetime


@dataclass
class SweepReport:
    """deleted: digests removed (or that would be, on a dry run); kept: (digest, reason)."""

    now: datetime
    dry_run: bool
    deleted: list[str] = field(default_factory=list)
    kept: list[tuple[str, str]] = field(default_factory=list)
    freed_bytes: int = 0
    repaired: list[str] = field(default_factory=list)
    """References removed because an interrupted sweep had deleted their (expired) object."""
    missing: list[tuple[str, str]] = field(default_factory=list)
    """(digest, reference) of held or unexpired references whose object is gone: evidence lost."""
    cleaned: int = 0
    """`.tmp-` files of interrupted writes removed."""
    skipped: list[tuple[str, str]] = field(default_factory=list)
    """(path under the root, why) of symbolic links and special files the sweep did not follow,
    read or delete (a store holds only directories and regular files; a person should look)."""

    def summary(self) -> str:
        verb = "would delete" if self.dry_run else "deleted"
        out = f"{verb} {len(self.deleted)} object(s) ({self.freed_bytes} bytes), kept {len(self.kept)}"
        if self.repaired or self.cleaned:
            out += f"; repaired {len(self.repaired)} dangling reference(s), removed {self.cleaned} partial write(s)"
        if self.missing:
            out += f"; {len(self.missing)} held or unexpired reference(s) point at a missing object"
        if self.skipped:
            out += f"; skipped {len(self.skipped)} symbolic link(s) or special file(s) (not followed, not deleted)"
        return out


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return f"sha256:{h.hexdigest()}"


def sha256_bytes(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


def _hex(digest: str) -> str:
    m = _DIGEST.match(digest)
    if not m:
        raise EvidenceError(f"not a sha256 digest: {digest!r} (expected 'sha256:' + 64 hex characters)")
    return m.group(1)


def _utc(dt: datetime | None) -> datetime | None:
    if dt is None:
        return None
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)


def _safe(name: str) -> str:
    return _SAFE.sub("_", name) or "_"


def _dirs(base: Path, request_id: str) -> list[Path]:
    """The request's directory under `base`, then the slug directory of stores written before
    keys were hashed (shared by ids that differ only in unsafe characters: filter by id)."""
    out = [base / path_key(request_id)]
    legacy = base / _safe(request_id)
    if _is_real_dir(legacy):
        out.append(legacy)
    return out


def _is_real_dir(path: Path) -> bool:
    """A directory that is not a symbolic link."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _files_in(directory: Path, suffix: str, root: Path, skipped: list[tuple[str, str]] | None) -> list[Path]:
    """The regular files named `*<suffix>` directly in `directory`, sorted, never through a link:
    a symbolic link or special file is left out and named in `skipped` with why."""
    if not _is_real_dir(directory):
        return []
    out = []
    with os.scandir(directory) as it:
        entries = sorted(it, key=lambda e: e.name)
    for e in entries:
        if not e.name.endswith(suffix) or e.name.startswith(".tmp-"):
            continue
        if e.is_file(follow_symlinks=False):
            out.append(Path(e.path))
        elif skipped is not None and not e.is_dir(follow_symlinks=False):
            skipped.append((_rel(Path(e.path), root), f"{lstat_kind(e.path)}: not followed, not deleted"))
    return out


def _index_files(base: Path, suffix: str, root: Path, skipped: list[tuple[str, str]] | None = None) -> list[Path]:
    """`base/<dir>/*<suffix>` (refs, holds, objects), without following any link: `base` and
    every directory above it under `root` must be real directories; a symlinked `<dir>` is left
    out and named in `skipped`."""
    here = root
    for part in base.relative_to(root).parts:
        here = here / part
        if not _is_real_dir(here):
            if skipped is not None and os.path.lexists(here):
                skipped.append((_rel(here, root), f"{lstat_kind(here) or 'not a directory'}: not followed"))
            return []
    out: list[Path] = []
    with os.scandir(base) as it:
        entries = sorted(it, key=lambda e: e.name)
    for e in entries:
        if e.is_dir(follow_symlinks=False):
            out += _files_in(Path(e.path), suffix, root, skipped)
        elif skipped is not None and e.is_symlink():
            skipped.append((_rel(Path(e.path), root), "a symbolic link: not followed, not deleted"))
    return out


def _rel(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return str(path)


def _write_once(path: Path, data: bytes) -> bool:
    """Create `path` with `data` atomically; return False (touching nothing) when it exists."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        return True
    finally:
        os.unlink(tmp)


class EvidenceStore:
    """Write-once store rooted at a local directory (created on first use)."""

    def __init__(self, root: str | Path):
        root = str(root)
        if root.startswith("file://"):
            root = root.removeprefix("file://")
        if "://" in root:
            raise EvidenceError(
                f"evidence root {root!r}: only local directories are implemented; "
                "mount the object store (see docs/lineage-and-evidence.md)"
            )
        self.root = Path(root).resolve()
        self.objects = self.root / "objects" / "sha256"
        self.refs_dir = self.root / "refs"
        self.holds_dir = self.root / "holds"

    # objects ---------------------------------------------------------------------------------

    def path(self, digest: str) -> Path:
        hexd = _hex(digest)
        return self.objects / hexd[:2] / hexd

    def uri(self, digest: str) -> str:
        return self.path(digest).as_uri()

    def exists(self, digest: str) -> bool:
        return self.path(digest).is_file()

    def put(
        self,
        data: bytes | str | Path | BinaryIO,
        request_id: str,
        kind: str,
        retention_until: datetime | None = None,
        hold: bool = False,
        name: str = "",
    ) -> EvidenceRef:
        """Store bytes (or a file's bytes: pass a Path, or a file opened for binary reading, e.g.
        by `safeload.open_confined`) and reference them from `request_id`.

        A Path must be a regular file (a FIFO, device or socket is refused without blocking:
        EvidenceError); confining it to a root is the caller's job (it knows the root).
        The same content is stored once; an existing object is never rewritten. Each call adds a
        reference (kind, retention, hold) for the request; a repeated identical call is a no-op.
        """
        with self._lock(fcntl.LOCK_SH):
            if isinstance(data, Path):
                try:
                    src = open_regular(data, field=kind)
                except PathRefused as exc:
                    raise EvidenceError(f"not stored: {exc}") from None
                with src:
                    digest, size = self._put_stream(src)
                name = name or data.name
            elif hasattr(data, "read"):
                digest, size = self._put_stream(data)  # type: ignore[arg-type]
            else:
                content = data.encode() if isinstance(data, str) else bytes(data)
                digest, size = sha256_bytes(content), len(content)
                target = self.path(digest)
                if not target.exists():
                    _write_once(target, content)
                elif sha256_file(target) != digest:
                    raise EvidenceError(
                        f"{digest}: stored object is corrupt; refusing to overwrite (investigate {target})"
                    )
            record = {
                "digest": digest,
                "request_id": request_id,
                "kind": kind,
                "retention_until": _utc(retention_until).isoformat() if retention_until else None,
                "hold": bool(hold),
                "stored_at": datetime.now(UTC).isoformat(),
                "name": name,
            }
            # The digest prefix leads the name so a sweep can protect an object even when its
            # reference file cannot be parsed.
            until = _safe(record["retention_until"] or "none")
            ref_name = f"{digest[7:23]}-{_safe(kind)}-{'held' if hold else 'r'}-{until}.json"
            _write_once(self.refs_dir / path_key(request_id) / ref_name, json.dumps(record, sort_keys=True).encode())
        return EvidenceRef(digest=digest, uri=self.path(digest).as_uri(), size=size)

    def _put_stream(self, f: BinaryIO) -> tuple[str, int]:
        """Stream an open file into the store (hashing while copying), so large outputs never sit in memory."""
        self.objects.mkdir(parents=True, exist_ok=True)
        h = hashlib.sha256()
        size = 0
        fd, tmp = tempfile.mkstemp(dir=self.objects, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as out:
                while chunk := f.read(_CHUNK):
                    h.update(chunk)
                    out.write(chunk)
                    size += len(chunk)
                out.flush()
                os.fsync(out.fileno())
            digest = f"sha256:{h.hexdigest()}"
            target = self.path(digest)
            if target.exists():
                if sha256_file(target) != digest:
                    raise EvidenceError(
                        f"{digest}: stored object is corrupt; refusing to overwrite (investigate {target})"
                    )
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                os.chmod(tmp, stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
                with contextlib.suppress(FileExistsError):
                    os.link(tmp, target)
            return digest, size
        finally:
            os.unlink(tmp)

    @contextlib.contextmanager
    def _lock(self, mode: int) -> Iterator[None]:
        """Writers share the lock; a sweep takes it exclusively, so no object is deleted while a
        new reference to it is being written (local filesystems; see the docs for object stores)."""
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / ".lock", "a") as f:
            fcntl.flock(f.fileno(), mode)
            try:
                yield
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)

    def read(self, digest: str) -> bytes:
        if not self.exists(digest):
            raise EvidenceError(f"{digest}: not in the evidence store at {self.root}")
        try:
            with open_confined(self.path(digest), self.root, field=digest, root_name="the evidence store") as f:
                data = f.read()
        except PathRefused as exc:
            raise EvidenceError(str(exc)) from None
        if sha256_bytes(data) != digest:
            raise EvidenceError(f"{digest}: content does not match its digest")
        return data

    def verify(self, digest: str) -> bool:
        """True when the object is a regular file in the store (not a link) whose bytes hash to its digest."""
        p = self.path(digest)
        try:
            with open_confined(p, self.root, field=digest, root_name="the evidence store") as f:
                h = hashlib.sha256()
                while chunk := f.read(_CHUNK):
                    h.update(chunk)
        except PathRefused:
            return False
        return f"sha256:{h.hexdigest()}" == digest

    def _read_index(self, p: Path) -> bytes:
        """A reference or hold file's bytes: a regular file under the root, never through a link."""
        return read_confined(p, self.root, _INDEX_MAX_BYTES, field="index file", root_name="the evidence store")

    # references and holds ------------------------------------------------------------------

    def _index(self, base: Path, skipped: list[tuple[str, str]] | None = None) -> list[Path]:
        """Every `base/<key>/*.json` (refs or holds), never through a link."""
        return _index_files(base, ".json", self.root, skipped) if os.path.lexists(base) else []

    def refs(self, request_id: str | None = None) -> list[RefRecord]:
        if request_id is None:
            paths = self._index(self.refs_dir)
        else:
            paths = sorted(p for d in _dirs(self.refs_dir, request_id) for p in _files_in(d, ".json", self.root, None))
        out = []
        for p in paths:
            try:
                rec = _load_ref(self._read_index(p))
            except (OSError, ValueError, KeyError):
                continue
            if request_id is None or rec.request_id == request_id:
                out.append(rec)
        return out

    def set_hold(
        self, request_id: str, holder: str = "manual", reason: str = "", *, set_by: str = "", identity_source: str = ""
    ) -> Hold:
        """Place an evidence hold on everything `request_id` references; idempotent per holder.
        `set_by` / `identity_source`: who placed it and how that was established
        (`requests.identity.current_identity`), recorded with it when given."""
        hold = Hold(request_id, holder, reason, datetime.now(UTC))
        body = {"request_id": request_id, "holder": holder, "reason": reason, "set_at": hold.set_at.isoformat()}
        if set_by:
            body |= {"set_by": set_by, "identity_source": identity_source or "unknown"}
        with self._lock(fcntl.LOCK_SH):
            _write_once(self.holds_dir / path_key(request_id) / f"{_safe(holder)}.json", json.dumps(body).encode())
        return hold

    def release_hold(
        self, request_id: str, holder: str = "manual", *, released_by: str = "", reason: str = "",
        identity_source: str = "",
    ) -> bool:
        """Remove one holder's hold (other holders' holds stay), first recording who released it
        (`released_by`, `identity_source`: from `requests.identity.current_identity`; unset: the
        login name, marked `os_user`), when and why under `holds/<key>/released/`; False when there
        was no such hold."""
        for d in _dirs(self.holds_dir, request_id):
            p = d / f"{_safe(holder)}.json"
            if not os.path.lexists(p):
                continue
            try:
                raw = json.loads(self._read_index(p))
            except (OSError, ValueError):
                raw = {}
            if raw.get("request_id", request_id) != request_id:
                continue
            now = datetime.now(UTC)
            record = {
                **raw,
                "request_id": request_id,
                "holder": holder,
                "released_at": now.isoformat(),
                "released_by": released_by or os.environ.get("USER", "unknown"),
                "release_identity_source": identity_source if released_by else "os_user",
                "release_reason": reason,
            }
            with self._lock(fcntl.LOCK_SH):
                _write_once(
                    self.holds_dir / path_key(request_id) / "released" / f"{_safe(holder)}-{now:%Y%m%dT%H%M%S%fZ}.json",
                    json.dumps(record, sort_keys=True).encode(),
                )
                try:
                    unlink_confined(p, self.root, field="hold file")
                except PathRefused as exc:
                    raise EvidenceError(f"hold not released: {exc}") from None
            return True
        return False

    def released_holds(self, request_id: str) -> list[dict[str, str]]:
        """The release records of `request_id`'s holds, oldest first."""
        base = self.holds_dir / path_key(request_id) / "released"
        out = []
        for p in _files_in(base, ".json", self.root, None) if _is_real_dir(base.parent) else []:
            with contextlib.suppress(OSError, ValueError):
                out.append(json.loads(self._read_index(p)))
        return out

    def holds(self, request_id: str | None = None) -> list[Hold]:
        if request_id is None:
            paths = self._index(self.holds_dir)
        else:
            paths = sorted(p for d in _dirs(self.holds_dir, request_id) for p in _files_in(d, ".json", self.root, None))
        out = []
        for p in paths:
            try:
                raw = json.loads(self._read_index(p))
                hold = Hold(raw["request_id"], raw["holder"], raw.get("reason", ""), datetime.fromisoformat(raw["set_at"]))
            except (OSError, ValueError, KeyError):
                # Unreadable: its request is not known for sure; `_sweep` keeps its whole directory.
                hold = Hold(p.parent.name, p.stem, "unreadable hold file (kept as a hold)", datetime.now(UTC))
                if request_id is not None:
                    hold = Hold(request_id, p.stem, hold.reason, hold.set_at)
            if request_id is None or hold.request_id == request_id:
                out.append(hold)
        return out

    def _held(self, skipped: list[tuple[str, str]] | None = None) -> tuple[dict[str, list[Hold]], set[str]]:
        """Holds by exact request id, and the directories holding an unreadable hold file (a link
        or special file where a hold file belongs counts as unreadable: its directory is kept)."""
        by_id: dict[str, list[Hold]] = defaultdict(list)
        dirs: set[str] = set()
        mine: list[tuple[str, str]] = []
        for p in self._index(self.holds_dir, mine):
            try:
                raw = json.loads(self._read_index(p))
                by_id[raw["request_id"]].append(
                    Hold(raw["request_id"], raw["holder"], raw.get("reason", ""), datetime.fromisoformat(raw["set_at"]))
                )
            except (OSError, ValueError, KeyError):
                dirs.add(p.parent.name)
        for where, _ in mine:
            parts = where.split("/")
            if len(parts) >= 2 and parts[-1].endswith(".json"):
                dirs.add(parts[-2])  # a hold file that is a link: keep its request's evidence
            elif len(parts) >= 2:
                dirs.add(parts[-1])  # a symlinked hold directory: keep its request's evidence
        if skipped is not None:
            skipped += mine
        return by_id, dirs

    def held_digests(self) -> set[str]:
        """Every digest that a sweep must keep because of a hold."""
        by_id, dirs = self._held()
        out = set()
        for p in self._index(self.refs_dir):
            try:
                r = _load_ref(self._read_index(p))
            except (OSError, ValueError, KeyError):
                continue
            if r.hold or r.request_id in by_id or dirs & {p.parent.name, path_key(r.request_id), _safe(r.request_id)}:
                out.add(r.digest)
        return out

    def is_held(self, digest: str) -> bool:
        return digest in self.held_digests()

    # retention -------------------------------------------------------------------------------

    def sweep(self, now: datetime | None = None, dry_run: bool = False) -> SweepReport:
        """Delete objects whose every reference has expired and none is held; report the rest.

        Never deletes an object with any held reference or referenced by a held request.
        """
        now = _utc(now) or datetime.now(UTC)
        with self._lock(fcntl.LOCK_EX):
            return self._sweep(now, dry_run)

    def _sweep(self, now: datetime, dry_run: bool) -> SweepReport:
        report = SweepReport(now=now, dry_run=dry_run)
        # The store's own directories must be directories: a link there could lead anywhere.
        for d in (self.objects.parent, self.objects, self.refs_dir, self.holds_dir):
            if os.path.lexists(d) and not _is_real_dir(d):
                report.skipped.append(
                    (_rel(d, self.root), f"{lstat_kind(d) or 'not a directory'}: not followed; nothing was swept")
                )
                return report
        by_id, held_dirs = self._held(report.skipped)
        # Under the exclusive lock no writer is running: every `.tmp-` file is a write that died.
        for tmp in self._partial_writes(report.skipped):
            report.cleaned += 1
            if not dry_run:
                self._unlink(tmp, report)
        refs_by_digest: dict[str, list[tuple[Path, RefRecord]]] = defaultdict(list)
        unreadable: dict[str, str] = {}
        for p in self._index(self.refs_dir, report.skipped):
            try:
                rec = _load_ref(self._read_index(p))
            except (OSError, ValueError, KeyError):
                unreadable[p.name[:16]] = f"{p.parent.name}/{p.name}"
                continue
            refs_by_digest[rec.digest].append((p, rec))
        for where, _ in report.skipped:
            # a reference that is a link or special file: its object is kept for a person to review
            if where.startswith("refs/") and where.endswith(".json"):
                unreadable.setdefault(where.rsplit("/", 1)[-1][:16], where.removeprefix("refs/"))

        def held(p: Path, r: RefRecord) -> Hold | None:
            if r.request_id in by_id:
                return by_id[r.request_id][0]
            if held_dirs & {p.parent.name, path_key(r.request_id), _safe(r.request_id)}:
                return Hold(r.request_id, "?", "unreadable hold file (kept as a hold)", now)
            return None

        seen = len(report.skipped)
        stored = _index_files(self.objects, "", self.root, report.skipped) if os.path.lexists(self.objects) else []
        present = set()
        linked_shards: set[str] = set()
        for where, _ in report.skipped[seen:]:
            parts = where.split("/")
            if parts[:2] == ["objects", "sha256"] and len(parts) == 4:
                # a link (or special file) where an object belongs: its references stay too
                digest = f"sha256:{parts[3]}"
                present.add(digest)
                report.kept.append((digest, f"{where} is not a regular file: not followed, not deleted"))
            elif parts[:2] == ["objects", "sha256"] and len(parts) == 3:
                linked_shards.add(parts[2])
        for obj in stored:
            digest = f"sha256:{obj.name}"
            present.add(digest)
            refs = refs_by_digest.get(digest, [])
            reason = _keep_reason(refs, held, now)
            if obj.name[:16] in unreadable:
                reason = f"unreadable reference {unreadable[obj.name[:16]]}; kept for a person to review"
            if reason:
                report.kept.append((digest, reason))
                continue
            try:
                size = os.lstat(obj).st_size
            except OSError:
                size = 0
            if not dry_run:
                # Object first, then its references: a crash in between leaves references the
                # next sweep recognises (expired, unheld, object gone) and removes. Removing needs
                # only the directory's write permission, so the read-only object's mode is never
                # touched (and no link's target could be chmod-ed).
                if not self._unlink(obj, report):
                    report.kept.append((digest, "could not be removed without following a link; see skipped"))
                    continue
                for p, _ in refs:
                    self._unlink(p, report)
            report.deleted.append(digest)
            report.freed_bytes += size
        for digest, refs in refs_by_digest.items():
            if digest in present:
                continue
            if digest[7:9] in linked_shards:
                report.kept.append((digest, f"objects/sha256/{digest[7:9]} is a symbolic link: not followed"))
                continue
            for p, r in refs:
                name = f"{p.parent.name}/{p.name}"
                expired = r.retention_until is not None and r.retention_until <= now
                if expired and not r.hold and held(p, r) is None:
                    report.repaired.append(name)
                    if not dry_run:
                        self._unlink(p, report)
                else:
                    report.missing.append((digest, name))
        return report

    def _unlink(self, path: Path, report: SweepReport) -> bool:
        """Remove a regular file of the store without following any link; a refusal is reported
        in `report.skipped` (False)."""
        try:
            unlink_confined(path, self.root, field=_rel(path, self.root))
        except PathRefused as exc:
            report.skipped.append((_rel(path, self.root), f"{exc.why} (not followed, not deleted)"))
            return False
        return True

    def _partial_writes(self, skipped: list[tuple[str, str]] | None = None) -> list[Path]:
        """`.tmp-` files under objects/, refs/ and holds/, found without following links."""
        out: list[Path] = []
        for base in (self.objects, self.refs_dir, self.holds_dir):
            if not _is_real_dir(base):
                continue
            for here, dirs, files in os.walk(base, followlinks=False):
                for d in [d for d in dirs if os.path.islink(os.path.join(here, d))]:
                    dirs.remove(d)  # os.walk lists a symlinked directory among dirs; never descend
                for f in files:
                    if not f.startswith(".tmp-"):
                        continue
                    p = Path(here) / f
                    kind = lstat_kind(p)
                    if kind is None:
                        out.append(p)
                    elif kind != "missing" and skipped is not None:
                        skipped.append((_rel(p, self.root), f"{kind}: not followed, not deleted"))
        return sorted(out)


def _keep_reason(refs: list[tuple[Path, RefRecord]], held, now: datetime) -> str:
    if not refs:
        return "no reference records; kept for a person to review"
    for p, r in refs:
        if r.hold:
            return f"held: stored under evidence hold by {r.request_id} ({r.kind})"
        h = held(p, r)
        if h is not None:
            return f"held: request {r.request_id} under hold by {h.holder}" + (f" ({h.reason})" if h.reason else "")
    live = [r for _, r in refs if r.retention_until is None or r.retention_until > now]
    if live:
        r = max(live, key=lambda x: x.retention_until or datetime.max.replace(tzinfo=UTC))
        until = r.retention_until.isoformat() if r.retention_until else "no expiry"
        return f"retained: {r.request_id} ({r.kind}) until {until}"
    return ""


def _load_ref(data: bytes) -> RefRecord:
    raw = json.loads(data)
    until = raw.get("retention_until")
    return RefRecord(
        digest=raw["digest"],
        request_id=raw["request_id"],
        kind=raw["kind"],
        retention_until=_utc(datetime.fromisoformat(until)) if until else None,
        hold=bool(raw.get("hold", False)),
        stored_at=datetime.fromisoformat(raw["stored_at"]),
        name=raw.get("name", ""),
    )


def default_evidence_root(env: dict[str, str] | None = None) -> str:
    """`GPU_PLATFORM_EVIDENCE_ROOT`, else `evidence/` under `GPU_PLATFORM_HOME` (default `./var`)."""
    env = dict(os.environ) if env is None else env
    if env.get("GPU_PLATFORM_EVIDENCE_ROOT"):
        return env["GPU_PLATFORM_EVIDENCE_ROOT"]
    return str(Path(env.get("GPU_PLATFORM_HOME", "var")).resolve() / "evidence")
