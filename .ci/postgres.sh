#!/usr/bin/env bash
# Start a PostgreSQL server on 127.0.0.1:5432 for the distributed-search (postgres-marked) tests.
#
#   source .ci/postgres.sh   # as .ci/run does: exports ROPE_ADAPTER_TEST_POSTGRES_URL into this shell
#   .ci/postgres.sh          # run on its own: prints the export line to paste
#
# Idempotent: installs Debian's `postgresql` only when no server is installed, creates the cluster only when
# missing, starts it only when stopped, and (re)sets the role's password every time. Needs root (or sudo).
# Uses Debian's cluster tools (pg_lsclusters, pg_ctlcluster) when present, else initdb + pg_ctl on a data
# directory of its own. Settings (environment): ROPE_PG_PORT (5432), ROPE_PG_USER (rope), ROPE_PG_DB
# (rope_test), ROPE_PG_PASSWORD (rope_test_pw), ROPE_PG_DATA (data directory for the pg_ctl path).

_rope_pg_log() { echo "postgres.sh: $*" >&2; }

# Run a command as the postgres system user, from a directory it can read.
_rope_pg_as_postgres() {
    if [[ "$(id -un)" == postgres ]]; then
        (cd / && "$@")
    elif [[ "$(id -u)" == 0 ]]; then
        (cd / && runuser -u postgres -- "$@")
    else
        (cd / && sudo -n -u postgres -- "$@")
    fi
}

_rope_pg_root() {
    if [[ "$(id -u)" == 0 ]]; then "$@"; else sudo -n -- "$@"; fi
}

# The bin directory of the newest installed server, or nothing.
_rope_pg_bindir() {
    local postgres
    postgres="$(ls -d /usr/lib/postgresql/*/bin/postgres 2>/dev/null | sort -V | tail -n 1)"
    if [[ -n "$postgres" ]]; then
        dirname "$postgres"
    elif command -v pg_ctl >/dev/null && command -v initdb >/dev/null; then
        dirname "$(command -v pg_ctl)"
    fi
}

_rope_pg_install() {
    if [[ -n "$(_rope_pg_bindir)" ]]; then
        return 0
    fi
    _rope_pg_log "no PostgreSQL server installed; installing Debian's postgresql with apt-get"
    _rope_pg_root apt-get update -q
    _rope_pg_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        postgresql postgresql-client
}

_rope_pg_wait() {
    local port="$1" logfile="$2" i
    for i in $(seq 1 60); do
        if pg_isready -q -h 127.0.0.1 -p "$port"; then
            return 0
        fi
        sleep 1
    done
    _rope_pg_log "the server does not answer on 127.0.0.1:$port after 60 s; the end of $logfile:"
    tail -n 30 "$logfile" >&2 || true
    return 1
}

# Debian: the version's "main" cluster, managed by pg_ctlcluster.
_rope_pg_start_debian() {
    local port="$1" version line status cluster_port
    version="$(basename "$(dirname "$(_rope_pg_bindir)")")"
    line="$(pg_lsclusters -h | awk -v v="$version" '$1 == v && $2 == "main"')"
    if [[ -z "$line" ]]; then
        _rope_pg_log "creating cluster $version/main on port $port"
        _rope_pg_root pg_createcluster "$version" main --port "$port" >&2
        line="$(pg_lsclusters -h | awk -v v="$version" '$1 == v && $2 == "main"')"
    fi
    cluster_port="$(awk '{print $3}' <<<"$line")"
    status="$(awk '{print $4}' <<<"$line")"
    if [[ "$cluster_port" != "$port" ]]; then
        _rope_pg_log "moving cluster $version/main from port $cluster_port to $port"
        _rope_pg_root pg_conftool "$version" main set port "$port"
        if [[ "$status" == online* ]]; then
            _rope_pg_root pg_ctlcluster "$version" main restart
        fi
    fi
    if _rope_pg_root pg_ctlcluster "$version" main status >/dev/null 2>&1; then
        _rope_pg_log "cluster $version/main is already running"
    else
        _rope_pg_log "starting cluster $version/main"
        _rope_pg_root install -d -o postgres -g postgres -m 2775 /var/run/postgresql
        _rope_pg_root pg_ctlcluster "$version" main start
    fi
    _rope_pg_wait "$port" "/var/log/postgresql/postgresql-$version-main.log"
    ROPE_PG_SOCKET_DIR=/var/run/postgresql
}

# Elsewhere: a data directory of our own, started with pg_ctl as the postgres user.
_rope_pg_start_pg_ctl() {
    local port="$1" bindir data
    bindir="$(_rope_pg_bindir)"
    data="${ROPE_PG_DATA:-/var/lib/postgresql/rope-ci}"
    ROPE_PG_SOCKET_DIR=/var/run/postgresql
    if ! id postgres >/dev/null 2>&1; then
        _rope_pg_root useradd --system --home-dir /var/lib/postgresql --create-home postgres
    fi
    _rope_pg_root install -d -o postgres -g postgres -m 2775 "$ROPE_PG_SOCKET_DIR"
    if [[ ! -s "$data/PG_VERSION" ]]; then
        _rope_pg_log "initialising $data"
        _rope_pg_root install -d -o postgres -g postgres -m 700 "$data"
        _rope_pg_as_postgres "$bindir/initdb" -D "$data" -U postgres -E UTF8 \
            --auth-local=peer --auth-host=scram-sha-256 >&2
    fi
    if _rope_pg_as_postgres "$bindir/pg_ctl" -D "$data" status >/dev/null 2>&1; then
        _rope_pg_log "the server in $data is already running"
    else
        _rope_pg_log "starting the server in $data"
        _rope_pg_as_postgres "$bindir/pg_ctl" -D "$data" -l "$data/server.log" -w -t 60 start \
            -o "-c port=$port -c listen_addresses=127.0.0.1 -c unix_socket_directories=$ROPE_PG_SOCKET_DIR" >&2
    fi
    _rope_pg_wait "$port" "$data/server.log"
}

_rope_pg_main() {
    local port="${ROPE_PG_PORT:-5432}" user="${ROPE_PG_USER:-rope}" db="${ROPE_PG_DB:-rope_test}"
    local password="${ROPE_PG_PASSWORD:-rope_test_pw}"
    _rope_pg_install
    if [[ -z "${ROPE_PG_USE_PG_CTL:-}" ]] && command -v pg_ctlcluster >/dev/null \
        && [[ -d /usr/lib/postgresql ]]; then
        _rope_pg_start_debian "$port"
    else
        _rope_pg_start_pg_ctl "$port"
    fi
    _rope_pg_log "ensuring role $user and database $db"
    _rope_pg_as_postgres psql -X -q -v ON_ERROR_STOP=1 -h "$ROPE_PG_SOCKET_DIR" -p "$port" -d postgres \
        -v user="$user" -v password="$password" -v db="$db" <<'SQL'
SELECT format('CREATE ROLE %I LOGIN', :'user')
 WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'user') \gexec
ALTER ROLE :"user" WITH LOGIN PASSWORD :'password';
SELECT format('CREATE DATABASE %I OWNER %I', :'db', :'user')
 WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = :'db') \gexec
SQL
    export ROPE_ADAPTER_TEST_POSTGRES_URL="postgresql+psycopg2://$user:$password@127.0.0.1:$port/$db"
    _rope_pg_log "ready: ROPE_ADAPTER_TEST_POSTGRES_URL=$ROPE_ADAPTER_TEST_POSTGRES_URL"
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
    set -euo pipefail
    _rope_pg_main
    echo "export ROPE_ADAPTER_TEST_POSTGRES_URL='$ROPE_ADAPTER_TEST_POSTGRES_URL'"
else
    _rope_pg_main
fi
