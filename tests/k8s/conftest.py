"""Fixtures for the Kubernetes executor tests: the default policy and example requests with ids."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gpu_platform.policy import Policy, load_policy
from gpu_platform.requests.model import JobRequest, validate_request_file


@pytest.fixture(scope="session")
def k8s_policy() -> Policy:
    return load_policy()


@pytest.fixture
def example_request(k8s_policy: Policy) -> Callable[[Path], JobRequest]:
    """Validate an example request file and give it a ledger-style request id."""

    def load(path: Path, request_id: str | None = None) -> JobRequest:
        req = validate_request_file(path, k8s_policy)
        rid = request_id or f"req-20261129-{path.stem.replace('_', '')[:10]}"
        return req.model_copy(update={"request_id": rid})

    return load
