#!/bin/sh
# Entrypoint of the sluice/postgres image (runs as user postgres),
# compatible with the official one for what tests use. On the first start
# it initialises $PGDATA from POSTGRES_USER, POSTGRES_PASSWORD, POSTGRES_DB,
# POSTGRES_INITDB_ARGS and POSTGRES_HOST_AUTH_METHOD, runs the *.sql and
# *.sh files of /docker-entrypoint-initdb.d against a temporary server bound
# to the Unix socket only, stops it and then starts the real server, so the
# log shows "ready to accept connections" twice, as testcontainers'
# postgres wait strategy expects.
set -e
case "$1" in
-*) set -- postgres "$@" ;;
esac
if [ "$1" = postgres ] && [ ! -s "$PGDATA/PG_VERSION" ]; then
	user=${POSTGRES_USER:-postgres}
	db=${POSTGRES_DB:-$user}
	auth=${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256}
	if [ -z "${POSTGRES_PASSWORD:-}" ] && [ "$auth" != trust ]; then
		echo 'postgres-entrypoint: set POSTGRES_PASSWORD, or POSTGRES_HOST_AUTH_METHOD=trust' >&2
		exit 1
	fi
	mkdir -p "$PGDATA"
	chmod 700 "$PGDATA"
	pw=$(mktemp)
	printf '%s\n' "${POSTGRES_PASSWORD:-}" >"$pw"
	# shellcheck disable=SC2086 # POSTGRES_INITDB_ARGS is a list of words
	initdb --username="$user" --pwfile="$pw" --encoding=UTF8 --locale=C.UTF-8 \
		--auth-local=trust --auth-host="$auth" ${POSTGRES_INITDB_ARGS:-} >/dev/null
	rm -f "$pw"
	echo "listen_addresses = '*'" >>"$PGDATA/postgresql.conf"
	echo "host all all all $auth" >>"$PGDATA/pg_hba.conf"
	pg_ctl -D "$PGDATA" -o "-c listen_addresses='' -p 5432" -w start
	export PGUSER="$user" PGPASSWORD="${POSTGRES_PASSWORD:-}"
	if [ "$db" != postgres ]; then
		psql -v ON_ERROR_STOP=1 -q -d postgres -c "CREATE DATABASE \"$db\""
	fi
	for f in /docker-entrypoint-initdb.d/*; do
		case "$f" in
		*.sh) echo "postgres-entrypoint: running $f"; . "$f" ;;
		*.sql) echo "postgres-entrypoint: running $f"; psql -v ON_ERROR_STOP=1 -q -d "$db" -f "$f" ;;
		esac
	done
	pg_ctl -D "$PGDATA" -m fast -w stop
	unset PGPASSWORD
	echo 'postgres-entrypoint: initialisation complete'
fi
exec "$@"
