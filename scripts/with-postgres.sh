#!/usr/bin/env bash
# Run a command with a throwaway PostgreSQL 15 on 127.0.0.1 (free port, temp directory).
# Exports GPU_PLATFORM_TEST_PG_URL and DAGSTER_PG_* for the command; stops the server even when
# the command fails. Fails loudly (exit 3) if PostgreSQL cannot start.
set -euo pipefail

PG_BIN="${PG_BIN:-/usr/lib/postgresql/15/bin}"
if [ ! -x "$PG_BIN/initdb" ]; then
  echo "with-postgres: PostgreSQL 15 server binaries not found in $PG_BIN (apt-get install postgresql-15, or set PG_BIN)" >&2
  exit 3
fi

as_pg() {
  if [ "$(id -u)" = "0" ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

PGTMP="$(mktemp -d /tmp/gpu-platform-pg.XXXXXX)"
chmod 755 "$PGTMP"
[ "$(id -u)" = "0" ] && chown postgres "$PGTMP"
PGDATA="$PGTMP/data"
PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')"

cleanup() {
  as_pg "$PG_BIN/pg_ctl" -D "$PGDATA" -m immediate stop >/dev/null 2>&1 || true
  rm -rf "$PGTMP"
}
trap cleanup EXIT

as_pg "$PG_BIN/initdb" -D "$PGDATA" -U postgres -A trust --no-sync -E UTF8 >"$PGTMP/initdb.log" 2>&1 || {
  echo "with-postgres: initdb failed:" >&2; cat "$PGTMP/initdb.log" >&2; exit 3; }
if ! as_pg "$PG_BIN/pg_ctl" -D "$PGDATA" -l "$PGTMP/server.log" -w -t 30 \
    -o "-c listen_addresses=127.0.0.1 -c port=$PORT -c unix_socket_directories=$PGTMP -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200" start >/dev/null; then
  echo "with-postgres: PostgreSQL failed to start on 127.0.0.1:$PORT:" >&2
  cat "$PGTMP/server.log" >&2
  exit 3
fi
as_pg "$PG_BIN/createdb" -h 127.0.0.1 -p "$PORT" -U postgres gpu_platform_test

export GPU_PLATFORM_TEST_PG_URL="postgresql+psycopg2://postgres@127.0.0.1:$PORT/gpu_platform_test"
export DAGSTER_PG_HOST=127.0.0.1 DAGSTER_PG_PORT="$PORT" DAGSTER_PG_USER=postgres DAGSTER_PG_PASSWORD="" DAGSTER_PG_DB=gpu_platform_test
echo "with-postgres: PostgreSQL 15 on 127.0.0.1:$PORT (data in $PGDATA)"
set +e
"$@"
rc=$?
set -e
exit $rc
