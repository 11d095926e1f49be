#!/usr/bin/env bash
# Builds Slipstream's CPU images from deploy/docker/Dockerfile (docs/kubernetes.md), run from anywhere:
#   deploy/docker/build.sh     # base made here with debootstrap; slipstream:<version> (target cpu, the
#                              # stage workers) and slipstream:<version>-control (the planner and tuner)
#   BASE=python:3.11-slim-bookworm deploy/docker/build.sh   # a public base instead (needs a registry)
#   TARGETS=cpu deploy/docker/build.sh                      # one target only
# Without BASE the base image slipstream-base:bookworm is made once from Debian's packages (debootstrap
# bookworm, minbase, python3 and venv) and reused while it exists; the host's locally added CA
# certificates (/usr/local/share/ca-certificates) go into it so pip inside the build trusts the same
# TLS proxies as the host. Needs root (debootstrap) and a docker engine. Every step prints its time;
# any failure exits non-zero with the step named.
set -euo pipefail
cd "$(dirname "$0")/../.."
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
TARGETS=${TARGETS:-cpu control}
BASE_TAG=slipstream-base:bookworm
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

STEP_WHAT=image
. deploy/step.sh  # step NAME CMD...: runs CMD, prints its duration, names the step when it fails

make_base() {
  local root rc=0; root=$(mktemp -d /tmp/slipstream-rootfs.XXXXXX)
  make_base_in "$root" || rc=$?
  rm -rf "$root" "$root.log"
  return $rc
}

make_base_in() {
  local root=$1
  debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm "$root" "$MIRROR" \
    >"$root.log" 2>&1 || { tail -n 30 "$root.log"; return 1; }
  if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/" || return 1
    chroot "$root" update-ca-certificates >/dev/null 2>&1 || return 1
  fi
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* || return 1
  tar -C "$root" -c . | docker import -c 'ENV LANG=C.UTF-8' - "$BASE_TAG" >/dev/null
}

docker version --format 'engine {{.Server.Version}}' || { echo "image build FAILED: no docker engine answers" >&2; exit 1; }
if [ -z "${BASE:-}" ]; then
  BASE=$BASE_TAG
  if docker image inspect "$BASE_TAG" >/dev/null 2>&1; then echo "== image: base $BASE_TAG present, reused"
  else step "base $BASE_TAG (debootstrap bookworm minbase)" make_base; fi
fi
# The classic builder: no BuildKit frontend image to pull (no registry needed); layers are cached. The
# host network: pip reaches the package index however the host does (dockerd runs with --bridge=none).
for target in $TARGETS; do
  tag=slipstream:$VERSION; [ "$target" = cpu ] || tag=$tag-$target
  step "build $tag (target $target, base $BASE)" env DOCKER_BUILDKIT=0 docker build -q --network host \
    -f deploy/docker/Dockerfile --target "$target" --build-arg "BASE=$BASE" -t "$tag" .
  docker image ls "$tag" --format 'image {{.Repository}}:{{.Tag}} {{.Size}}'
done
# A rebuild leaves the previous build's images untagged (about 3 GB for both targets): 44 GB of them
# once filled this host's disk and tainted the local cluster's node with disk-pressure. The layers of
# the images just built are their parents, not dangling, so the build cache stays.
docker image prune -f >/dev/null || echo "== image: pruning untagged images failed (left as they are)"
