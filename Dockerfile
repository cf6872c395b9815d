# The code-location image of gpu_platform: the Dagster gRPC code server of `assets.definitions`,
# and the base every workload image extends (examples/images/Dockerfile.workload). docs/image.md.
#
#   make image                      # docker, podman or buildah; labels the image with the commit
#   make lock                       # after a dependency change in pyproject.toml
#
# The bases are pinned by tag; to pin by digest too, pass e.g.
#   --build-arg BASE_IMAGE=python:3.11.13-slim-bookworm@sha256:<digest>
# BUILDER_IMAGE must have the same Python and Debian release as BASE_IMAGE: the virtual
# environment built in it is copied over as it is.
ARG BUILDER_IMAGE=python:3.11.13-bookworm
ARG BASE_IMAGE=python:3.11.13-slim-bookworm

# The builder: the full Debian image carries gcc, which compiles the DCGM parser's scan
# (gpu_platform/finops/feeds/_dcgm_scan.c) into the wheel. Nothing of it but /opt/gpu-platform
# reaches the final image.
FROM ${BUILDER_IMAGE} AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src

# Dependencies first (their layer survives a source change): exactly the lock's pins, each wheel
# checked against its hash; a dependency missing from the lock fails the build.
COPY requirements/ requirements/
RUN python -m venv /opt/gpu-platform \
    && /opt/gpu-platform/bin/python -m pip install --require-hashes --only-binary=:all: \
        -r requirements/lock.txt \
    && python -m pip install --require-hashes --only-binary=:all: -r requirements/build-lock.txt

# The package as a wheel (not an editable install), with the compiled scan; the SQL models and
# examples under gpu_platform/ are links to dbt_like_sql/ and examples/, copied into the wheel.
COPY pyproject.toml setup.py MANIFEST.in README.md ./
COPY dbt_like_sql/ dbt_like_sql/
COPY examples/ examples/
COPY resources/ resources/
COPY assets/ assets/
COPY gpu_platform/ gpu_platform/
RUN python -m pip wheel --no-deps --no-build-isolation --wheel-dir /wheels . \
    && /opt/gpu-platform/bin/python -m pip install --no-deps --no-index /wheels/gpu_platform-*.whl \
    && /opt/gpu-platform/bin/python -m pip check \
    && /opt/gpu-platform/bin/python -c "from gpu_platform.finops.feeds.dcgm import SCAN_PATH; assert SCAN_PATH == 'compiled', SCAN_PATH"

FROM ${BASE_IMAGE}
ARG SOURCE_COMMIT=unknown
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="gpu-platform" \
      org.opencontainers.image.description="gpu_platform Dagster code location: admission gate, GPU workloads, FinOps models" \
      org.opencontainers.image.revision="${SOURCE_COMMIT}" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.base.name="${BASE_IMAGE}"

# A numeric, non-root user, so that a pod's `runAsNonRoot: true` can verify it; its home holds
# GPU_PLATFORM_HOME (SQLite ledger, DuckDB warehouse) unless a volume or the deployment sets others.
RUN groupadd --system --gid 10001 gpu-platform \
    && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/gpu-platform --create-home \
        --shell /usr/sbin/nologin gpu-platform
COPY --from=builder /opt/gpu-platform /opt/gpu-platform
ENV PATH=/opt/gpu-platform/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    GPU_PLATFORM_HOME=/var/lib/gpu-platform
USER 10001:10001
WORKDIR /var/lib/gpu-platform

# The gRPC code server on the port the Helm values give the user deployment (3030). CMD, not
# ENTRYPOINT: the Dagster chart and dagster-k8s start the code server, runs and step Jobs by
# setting the container's args to a whole `dagster ...` command line, which an ENTRYPOINT would prefix.
EXPOSE 3030
# Kubernetes ignores HEALTHCHECK (the chart probes with the same command); docker and podman use it.
HEALTHCHECK --interval=30s --timeout=10s --start-period=60s --retries=3 \
    CMD ["dagster", "api", "grpc-health-check", "--port", "3030"]
CMD ["dagster", "api", "grpc", "--host", "0.0.0.0", "--port", "3030", \
     "--module-name", "assets.definitions", "--attribute", "defs"]
