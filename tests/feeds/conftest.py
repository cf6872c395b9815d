from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "feeds"


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES


@pytest.fixture
def scraped_at() -> datetime:
    return datetime(2024, 9, 18, 12, 0, tzinfo=UTC)
