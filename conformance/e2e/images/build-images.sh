#!/usr/bin/env bash
# build-images.sh builds Docker images for Redis and PostgreSQL without any
# container registry: each image is FROM scratch plus a root file system
# copied from this machine's own Debian packages (redis-server,
# postgresql-15, busybox-static). Tests point testcontainers-go at them with
# SLUICE_REDIS_IMAGE and SLUICE_POSTGRES_IMAGE.
#
# Usage (as root, with a running Docker engine):
#   conformance/e2e/images/build-images.sh
# Environment (all optional):
#   REDIS_TAG     image tag for Redis      (default sluice/redis:7)
#   POSTGRES_TAG  image tag for PostgreSQL (default sluice/postgres:15)
#   PG_VERSION    PostgreSQL major version (default 15)
#
# The images behave like the official ones for what testcontainers-go's
# redis and postgres modules use: the same ports, an entrypoint that turns
# option-only commands into server commands, POSTGRES_USER / _PASSWORD /
# _DB / _INITDB_ARGS / _HOST_AUTH_METHOD, /docker-entrypoint-initdb.d, and
# the "ready to accept connections" log line twice on first start.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
redis_tag=${REDIS_TAG:-sluice/redis:7}
postgres_tag=${POSTGRES_TAG:-sluice/postgres:15}
pg_version=${PG_VERSION:-15}
pg_bin=/usr/lib/postgresql/$pg_version/bin
pg_lib=/usr/lib/postgresql/$pg_version/lib

die() { echo "build-images: $*" >&2; exit 1; }

command -v docker >/dev/null || die "docker CLI not found (apt-get install docker.io)"
docker info >/dev/null 2>&1 || die "the Docker engine does not answer (start dockerd)"
[ -x /usr/bin/redis-server ] || die "/usr/bin/redis-server missing (apt-get install redis-server)"
[ -x "$pg_bin/postgres" ] || die "$pg_bin/postgres missing (apt-get install postgresql-$pg_version)"
busybox=$(command -v busybox || true)
[ -n "$busybox" ] || die "busybox missing (apt-get install busybox-static)"
if ldd "$busybox" >/dev/null 2>&1; then
	die "$busybox is dynamically linked; install busybox-static"
fi

work=$(mktemp -d /tmp/sluice-images.XXXXXX)
trap 'rm -rf "$work"' EXIT

# copy PATH... copies files into the root file system $root at the same
# path, following symbolic links.
copy() {
	local f
	for f in "$@"; do
		mkdir -p "$root$(dirname "$f")"
		cp -L "$f" "$root$f"
	done
}

# copy_elf BINARY... copies executables or shared objects and every shared
# library ldd lists for them, including the dynamic loader.
copy_elf() {
	local bin lib
	for bin in "$@"; do
		copy "$bin"
		while read -r lib; do
			[ -e "$root$lib" ] || copy "$lib"
		done < <(ldd "$bin" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}')
	done
}

# new_root NAME starts an empty root file system with busybox as /bin/sh
# and friends: the entrypoints need a shell, and testcontainers' port wait
# runs "sh -c 'cat /proc/net/tcp* | awk ... | grep ...'" in the container.
new_root() {
	root=$work/$1/rootfs
	mkdir -p "$root"/{bin,etc,tmp,usr/bin,usr/local/bin}
	chmod 1777 "$root/tmp"
	cp "$busybox" "$root/bin/busybox"
	local applet
	for applet in $("$root/bin/busybox" --list); do
		[ -e "$root/bin/$applet" ] || ln -s busybox "$root/bin/$applet"
	done
	echo 'root:x:0:0:root:/root:/bin/sh' >"$root/etc/passwd"
	echo 'root:x:0:' >"$root/etc/group"
	echo 'hosts: files dns' >"$root/etc/nsswitch.conf"
}

# build NAME TAG packs the root file system as a tar (which keeps owners;
# a Dockerfile COPY would not) and builds the image from it.
build() {
	tar -C "$work/$1/rootfs" -cf "$work/$1/rootfs.tar" .
	rm -rf "$work/$1/rootfs"
	docker build --quiet --tag "$2" "$work/$1" >/dev/null
	echo "build-images: built $2 ($(docker image inspect --format '{{.Size}}' "$2" | awk '{printf "%.1f MB", $1/1e6}'))"
}

# ---- Redis ----
new_root redis
copy_elf /usr/bin/redis-server
mkdir -p "$root/data"
install -m 755 "$here/redis-entrypoint.sh" "$root/usr/local/bin/docker-entrypoint.sh"
cat >"$work/redis/Dockerfile" <<'DOCKERFILE'
FROM scratch
ADD rootfs.tar /
ENV PATH=/usr/local/bin:/usr/bin:/bin
WORKDIR /data
EXPOSE 6379
ENTRYPOINT ["docker-entrypoint.sh"]
CMD ["redis-server"]
DOCKERFILE
build redis "$redis_tag"

# ---- PostgreSQL ----
new_root postgres
copy_elf "$pg_bin"/{postgres,initdb,pg_ctl,psql,pg_isready}
ln -s postgres "$root$pg_bin/postmaster"
mkdir -p "$root$pg_lib"
for so in "$pg_lib"/*.so; do
	case $so in */llvmjit*) continue ;; esac # JIT stays off without it
	copy_elf "$so"
done
mkdir -p "$root/usr/share/postgresql" "$root/usr/share/zoneinfo" "$root/usr/lib/locale"
cp -a "/usr/share/postgresql/$pg_version" "$root/usr/share/postgresql/"
cp -a /usr/share/zoneinfo/. "$root/usr/share/zoneinfo/"
cp -a /usr/lib/locale/C.utf8 "$root/usr/lib/locale/"
# initdb asks "locale -a" for collations to import.
printf '#!/bin/sh\n[ "$1" = -a ] && printf "C\\nC.utf8\\nPOSIX\\n"\nexit 0\n' >"$root/usr/bin/locale"
chmod 755 "$root/usr/bin/locale"
echo 'postgres:x:999:999:PostgreSQL:/var/lib/postgresql:/bin/sh' >>"$root/etc/passwd"
echo 'postgres:x:999:' >>"$root/etc/group"
mkdir -p "$root/var/lib/postgresql/data" "$root/var/run/postgresql" "$root/docker-entrypoint-initdb.d"
chown -R 999:999 "$root/var/lib/postgresql" "$root/var/run/postgresql"
chmod 700 "$root/var/lib/postgresql/data"
chmod 2777 "$root/var/run/postgresql"
install -m 755 "$here/postgres-entrypoint.sh" "$root/usr/local/bin/docker-entrypoint.sh"
cat >"$work/postgres/Dockerfile" <<DOCKERFILE
FROM scratch
ADD rootfs.tar /
ENV PATH=/usr/local/bin:$pg_bin:/usr/bin:/bin PGDATA=/var/lib/postgresql/data LANG=C.UTF-8
USER postgres
EXPOSE 5432
STOPSIGNAL SIGINT
ENTRYPOINT ["docker-entrypoint.sh"]
CMD ["postgres"]
DOCKERFILE
build postgres "$postgres_tag"
