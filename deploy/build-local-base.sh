#!/usr/bin/env bash
# Builds the base images deploy/Dockerfile needs where no container registry is reachable, from
# Debian's own packages: a bookworm root with Python 3.11 (BASE_IMAGE, for the longrun image) and
# one with redis-server (REDIS_IMAGE, for the stack's Redis), imported with `docker import`.
#
#   deploy/build-local-base.sh            # reuse the images if they exist
#   deploy/build-local-base.sh --force    # rebuild them
#
# Environment: BASE_IMAGE (default longrun-base:bookworm), REDIS_IMAGE (default
# longrun-redis:bookworm), DEBIAN_MIRROR (default: the machine's apt configuration, else
# deb.debian.org). The machine's extra certificate authorities (/usr/local/share/ca-certificates)
# are trusted inside the images too, so pip in the build reaches what pip reaches here.
set -euo pipefail

BASE_IMAGE="${BASE_IMAGE:-longrun-base:bookworm}"
REDIS_IMAGE="${REDIS_IMAGE:-longrun-redis:bookworm}"
SUITE=bookworm
force=0
[ "${1:-}" = "--force" ] && force=1

have_image() { docker image inspect "$1" >/dev/null 2>&1; }

if [ "$force" = 0 ] && have_image "$BASE_IMAGE" && have_image "$REDIS_IMAGE"; then
  echo "reusing $BASE_IMAGE and $REDIS_IMAGE"
  exit 0
fi

# The first bookworm (not -security, not -updates) mirror apt uses here, in either format.
apt_mirror() {
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk -v suite="$SUITE" '
      /^$/ { if (uri && ok) exit; uri = ""; ok = 0 }
      /^URIs:/ { uri = $2 }
      /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == suite) ok = 1 }
      END { if (uri && ok) print uri }' "$f"
  done
  cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
    | awk -v suite="$SUITE" '$1 == "deb" && $0 !~ /\[/ && $3 == suite { print $2 }' || true
}
MIRROR="${DEBIAN_MIRROR:-$(apt_mirror | head -n 1 || true)}"
MIRROR="${MIRROR:-http://deb.debian.org/debian}"

command -v debootstrap >/dev/null || { echo "debootstrap not found: apt-get install debootstrap" >&2; exit 1; }

ROOT="$(mktemp -d)"
trap 'rm -rf "$ROOT"' EXIT

echo "debootstrap $SUITE from $MIRROR"
debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates,passwd,bubblewrap \
  "$SUITE" "$ROOT" "$MIRROR" >"$ROOT.log" 2>&1 || { tail -n 30 "$ROOT.log" >&2; exit 1; }
rm -f "$ROOT.log"

if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  cp /usr/local/share/ca-certificates/*.crt "$ROOT/usr/local/share/ca-certificates/"
  chroot "$ROOT" update-ca-certificates >/dev/null
fi

slim() {  # what a container never reads: package lists, caches, documentation
  rm -rf "$ROOT"/var/lib/apt/lists/* "$ROOT"/var/cache/apt/*.bin "$ROOT"/var/cache/apt/archives/*.deb \
    "$ROOT"/usr/share/doc/* "$ROOT"/usr/share/man/* "$ROOT"/usr/share/info/* "$ROOT"/var/log/*.log
}

import() {  # root dir -> image, with the environment a base image of this kind declares
  tar -C "$ROOT" -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change "CMD [\"$2\"]" - "$1" >/dev/null
  echo "imported $1 ($(docker image inspect -f '{{.Size}}' "$1" | numfmt --to=iec))"
}

slim
import "$BASE_IMAGE" python3

# Redis from bookworm (7.0) on the same root; its packages are fetched again since slim()
# dropped the lists.
chroot "$ROOT" apt-get update -qq >/dev/null
DEBIAN_FRONTEND=noninteractive chroot "$ROOT" apt-get install -y -qq --no-install-recommends \
  redis-server >/dev/null
slim
import "$REDIS_IMAGE" redis-server
