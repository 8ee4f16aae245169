#!/usr/bin/env bash
# release.sh VERSION prepares a release of every importable module at
# VERSION, locally: it requires every sibling at VERSION in every go.mod,
# tidies and builds each module alone, commits that if anything changed,
# and creates one annotated tag per released module in Go's scheme for
# nested modules (VERSION for the root, backends/redisstore/VERSION, …).
# It never pushes; it prints the command that would.
#
# Released modules are the ones a dependent imports. The others are not
# tagged: conformance/e2e holds only tests against real servers, examples
# holds commands (`go install …@VERSION` refuses a module with replace
# lines anyway), bench compares Sluice with other limiters, and tools pins
# the linters. No released module may require an unreleased one.
set -euo pipefail

released=(. backends/redisstore backends/pgstore cluster conformance)
unreleased=(conformance/e2e examples bench tools)

die() { echo "release: $*" >&2; exit 1; }

[ $# -eq 1 ] || die "usage: scripts/release.sh VERSION (for example v0.1.0)"
version=$1
# Semantic version with an optional pre-release, as Go accepts it for a
# tag; module paths carry no /vN suffix, so the major version is 0 or 1.
semver='^v(0|1)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$'
[[ $version =~ $semver ]] || die "$version is not vMAJOR.MINOR.PATCH[-PRERELEASE] with major 0 or 1"

repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
[ -z "$(git status --porcelain)" ] || { git status --short; die "the work tree is not clean"; }

# Every module must be either released or unreleased, so that a new module
# forces the decision.
mapfile -t modules < <(git ls-files '*go.mod' | xargs -n1 dirname | sort)
for m in "${modules[@]}"; do
	[[ " ${released[*]} ${unreleased[*]} " == *" $m "* ]] || die "module $m is in neither list of scripts/release.sh"
done

module_path() { awk '$1 == "module" { print $2; exit }' "$1/go.mod"; }
tag_of() { if [ "$1" = . ]; then echo "$version"; else echo "$1/$version"; fi; }

for m in "${released[@]}"; do
	tag=$(tag_of "$m")
	! git rev-parse -q --verify "refs/tags/$tag" >/dev/null || die "tag $tag exists already"
done

# sibling_requirements prints the Sluice modules that the go.mod in $1
# requires, one per line.
sibling_requirements() {
	awk '/^require \($/ { block = 1; next }
		block && /^\)/ { block = 0; next }
		block { print $1 }
		$1 == "require" && $2 != "(" { print $2 }' "$1/go.mod" |
		grep -E '^github\.com/sluicehq/sluice(/|$)' || true
}

released_paths=()
for m in "${released[@]}"; do released_paths+=("$(module_path "$m")"); done

for m in "${modules[@]}"; do
	args=()
	while read -r dep; do
		[ -n "$dep" ] || continue
		args+=("-require=$dep@$version")
		if [[ " ${released[*]} " == *" $m "* && " ${released_paths[*]} " != *" $dep "* ]]; then
			die "released module $m requires $dep, which is not released"
		fi
	done < <(sibling_requirements "$m")
	[ ${#args[@]} -eq 0 ] && continue
	echo "== $m: siblings at $version"
	(cd "$m" && go mod edit "${args[@]}")
done

# Each module alone, as a dependent's build sees it (the replace lines
# stand in for the tags until they are pushed).
for m in "${modules[@]}"; do
	echo "== $m: tidy and build"
	(cd "$m" && GOWORK=off go mod tidy && GOWORK=off go build ./...)
done

if [ -n "$(git status --porcelain)" ]; then
	git add -A
	git commit -q -m "Release $version" -m "Every module requires its siblings at $version."
	echo "committed: $(git log -1 --format='%h %s')"
else
	echo "every sibling requirement is $version already; tagging $(git log -1 --format='%h %s')"
fi

tags=()
for m in "${released[@]}"; do
	tag=$(tag_of "$m")
	git tag -a "$tag" -m "$(module_path "$m") $version"
	tags+=("$tag")
done
echo "tagged: ${tags[*]}"
echo "nothing was pushed; to publish: git push origin HEAD ${tags[*]}"
