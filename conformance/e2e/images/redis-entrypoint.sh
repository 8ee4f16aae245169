#!/bin/sh
# Entrypoint of the sluice/redis image, compatible with the official one
# for what tests use: a command of options only (or a .conf file first)
# runs redis-server with them, and protected mode is switched off unless a
# config file sets it, because clients reach the server through a
# published port, not loopback.
set -e
case "$1" in
-*|*.conf) set -- redis-server "$@" ;;
esac
if [ "$1" = redis-server ]; then
	shift
	conf=
	if [ -f "${1:-}" ]; then
		conf=$1
		shift
	fi
	if [ -n "$conf" ] && grep -q '^protected-mode' "$conf"; then
		set -- redis-server "$conf" "$@"
	elif [ -n "$conf" ]; then
		set -- redis-server "$conf" --protected-mode no "$@"
	else
		set -- redis-server --protected-mode no "$@"
	fi
fi
exec "$@"
