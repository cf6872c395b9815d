"""Evidence store: write-once content addressing, verification, holds, and a sweep that never
deletes held evidence."""

from __future__ import annotations

import os
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu_platform.lineage.evidence import EvidenceError, EvidenceStore, sha256_bytes
from gpu_platform.safeload import path_key

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
PAST = NOW - timedelta(days=1)
FUTURE = NOW + timedelta(days=1)


def test_put_is_content_addressed_and_write_once(tmp_path: Path):
    store = EvidenceStore(tmp_path)
    a = store.put(b"log line\n", "req-1", "log", PAST)
    b = store.put(b"log line\n", "req-2", "log", FUTURE)
    assert a.digest == b.digest == sha256_bytes(b"log line\n")
    assert a.uri == b.uri and a.uri.startswith("file://")
    path = store.path(a.digest)
    assert path.read_bytes() == b"log line\n"
    assert not os.stat(path).st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)
    assert len(list(store.objects.glob("*/*"))) == 1
    assert {r.request_id for r in store.refs()} == {"req-1", "req-2"}


def test_put_from_file_and_verify_detects_tampering(tmp_path: Path):
    src = tmp_path / "run.log"
    src.write_text("step 1\nstep 2\n")
    store = EvidenceStore(tmp_path / "ev")
    ref = store.put(src, "req-1", "log")
    assert store.verify(ref.digest)
    assert store.read(ref.digest) == src.read_bytes()
    p = store.path(ref.digest)
    p.chmod(0o644)
    p.write_text("rewritten\n")
    assert not store.verify(ref.digest)
    with pytest.raises(EvidenceError, match="corrupt"):
        store.put(src, "req-1", "log")
    assert not store.verify("sha256:" + "0" * 64)
    with pytest.raises(EvidenceError, match="not a sha256 digest"):
        store.verify("md5:abc")


def test_large_files_stream_in_and_leave_no_temporary_files(tmp_path: Path):
    src = tmp_path / "model.bin"
    src.write_bytes(os.urandom(3 * (1 << 20) + 17))
    store = EvidenceStore(tmp_path / "ev")
    ref = store.put(src, "req-1", "output:model")
    again = store.put(src, "req-2", "output:model")
    assert ref == again and ref.size == src.stat().st_size
    assert store.verify(ref.digest)
    assert not [p for p in store.root.rglob(".tmp-*")]


def test_sweep_deletes_only_expired_unheld_and_says_why_it_kept(tmp_path: Path):
    store = EvidenceStore(tmp_path)
    expired = store.put(b"expired", "req-a", "log", PAST)
    retained = store.put(b"retained", "req-a", "log", FUTURE)
    held_item = store.put(b"held item", "req-b", "log", PAST, hold=True)
    held_req = store.put(b"held request", "req-c", "log", PAST)
    shared = store.put(b"shared", "req-a", "log", PAST)
    store.put(b"shared", "req-d", "results", FUTURE)
    store.set_hold("req-c", "incident", "INC-1")

    dry = store.sweep(NOW, dry_run=True)
    assert dry.deleted == [expired.digest]
    assert store.exists(expired.digest)

    report = store.sweep(NOW)
    assert report.deleted == [expired.digest]
    assert not store.exists(expired.digest)
    kept = dict(report.kept)
    assert kept[retained.digest].startswith("retained: req-a")
    assert kept[held_item.digest].startswith("held: stored under evidence hold by req-b")
    assert "req-c under hold by incident (INC-1)" in kept[held_req.digest]
    assert kept[shared.digest].startswith("retained: req-d")
    for d in (retained, held_item, held_req, shared):
        assert store.verify(d.digest)


def test_released_hold_lets_the_sweep_delete(tmp_path: Path):
    store = EvidenceStore(tmp_path)
    ref = store.put(b"x", "req-1", "log", PAST)
    store.set_hold("req-1", "release:r1")
    store.set_hold("req-1", "incident:i1")
    assert store.sweep(NOW).deleted == []
    assert store.release_hold("req-1", "release:r1")
    assert store.sweep(NOW).deleted == [], "the other holder still holds it"
    assert store.release_hold("req-1", "incident:i1")
    assert store.sweep(NOW).deleted == [ref.digest]


def test_unreadable_reference_or_hold_keeps_the_object(tmp_path: Path):
    store = EvidenceStore(tmp_path)
    a = store.put(b"a", "req-1", "log", PAST)
    b = store.put(b"b", "req-2", "log", PAST)
    ref_file = next((store.refs_dir / path_key("req-1")).glob("*.json"))
    ref_file.chmod(0o644)
    ref_file.write_text("{not json")
    # an unreadable hold in the slug directory of a store written before keys were hashed
    (store.holds_dir / "req-2").mkdir(parents=True)
    (store.holds_dir / "req-2" / "legal.json").write_text("garbage")
    report = store.sweep(NOW)
    assert report.deleted == []
    kept = dict(report.kept)
    assert "unreadable reference" in kept[a.digest]
    assert "held" in kept[b.digest]


def test_object_store_urls_are_documented_not_silently_used(tmp_path: Path):
    with pytest.raises(EvidenceError, match="docs/lineage-and-evidence.md"):
        EvidenceStore("s3://bucket/evidence")
    assert EvidenceStore(f"file://{tmp_path}").root == tmp_path.resolve()


items = st.lists(
    st.tuples(
        st.integers(0, 5),  # request index
        st.integers(-3, 3),  # retention offset in days (<= 0 expired)
        st.booleans(),  # item-level hold at write
        st.integers(0, 3),  # content id (collisions share an object)
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(items=items, held_requests=st.sets(st.integers(0, 5)), dry_run=st.booleans())
def test_sweep_never_deletes_held_evidence(tmp_path_factory, items, held_requests, dry_run):
    store = EvidenceStore(tmp_path_factory.mktemp("ev"))
    refs = []
    for req, days, hold, content in items:
        ref = store.put(f"content-{content}".encode(), f"req-{req}", "log", NOW + timedelta(days=days), hold=hold)
        refs.append((ref.digest, f"req-{req}", days, hold))
    for r in held_requests:
        store.set_hold(f"req-{r}", "legal")
    protected = {d for d, req, days, hold in refs if hold or int(req[4:]) in held_requests}
    live = {d for d, _, days, _ in refs if days > 0}
    report = store.sweep(NOW, dry_run=dry_run)
    deleted = set(report.deleted)
    assert not deleted & protected
    assert not deleted & live
    assert deleted == {d for d, *_ in refs} - protected - live
    assert {d for d, _ in report.kept} == ({d for d, *_ in refs} - deleted)
    for d in protected:
        assert store.verify(d)
    for d in deleted:
        assert store.exists(d) == dry_run
