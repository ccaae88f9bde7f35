#!/bin/sh
# Build the Containerfile for real, without pulling a base image: `make image-test`.
#
# 1. mmdebstrap makes a Debian bookworm minbase root file system (the content of
#    debian:bookworm-slim) from the Debian mirror apt uses, and podman imports it under the
#    name the Containerfile's FROM gives, so `--pull=never` finds it;
# 2. podman builds the Containerfile unchanged (chroot isolation, vfs storage: it runs inside
#    an unprivileged container too), pip's index settings passed as the documented build args;
# 3. the image's file system is mounted and its entry points run in a chroot as uid 65532
#    (starting containers needs a runtime this machine may refuse: crun's setrlimit).
# Needs root, network to the Debian mirror and pip's index; takes a few minutes.
set -eu
cd "$(dirname "$0")/../.."
work=${IMAGE_TEST_DIR:-$(mktemp -d /tmp/gpuwarden-image-XXXXXX)}
image=ghcr.io/gpuwarden/gpuwarden:$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
pm() { podman --storage-driver=vfs --root "$work/storage" --runroot "$work/run" "$@"; }
cleanup() { pm image unmount --all >/dev/null 2>&1 || true; [ -n "${IMAGE_TEST_DIR:-}" ] || rm -rf "$work"; }
trap cleanup EXIT

[ -f "$work/rootfs.tar" ] || mmdebstrap --quiet --variant=minbase bookworm "$work/rootfs.tar"
pm import "$work/rootfs.tar" docker.io/library/debian:bookworm-slim >/dev/null

set -- --pull=never --network=host --isolation=chroot --cgroup-manager=cgroupfs
# pip's own settings on this machine, as build args (PIP_CERT: a proxy's CA)
for var in PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_FIND_LINKS PIP_CERT; do
  value=$(printenv "$var" || pip config get "global.$(echo "${var#PIP_}" | tr 'A-Z_' 'a-z-')" 2>/dev/null || true)
  [ -n "$value" ] || continue
  if [ "$var" = PIP_CERT ]; then  # not over the image's own CA bundle, which apt rewrites
    set -- "$@" -v "$value:/run/pip-cert.pem:ro" --build-arg PIP_CERT=/run/pip-cert.pem
    continue
  fi
  for path in $value; do
    path=${path#file://}
    path=${path%/simple}  # a file:// index links to its files beside simple/
    path=${path%/simple/}
    case "$path" in /*) [ -e "$path" ] && set -- "$@" -v "$path:$path:ro" ;; esac
  done
  set -- "$@" --build-arg "$var=$value"
done
pm build "$@" -t "$image" -f Containerfile .

mnt=$(pm image mount "$image")
# shellcheck disable=SC2016  # expanded by the shell inside the chroot
chroot --userspec=65532:65532 "$mnt" /usr/bin/env -i PATH=/opt/gpuwarden/bin:/usr/bin:/bin HOME=/tmp sh -c '
  set -e
  test "$(id -u)" = 65532
  gpuwarden-exporter --help >/dev/null
  gpuwarden-analyzer --help >/dev/null
  cd /tmp && gpuwarden-remediation --check --allow-unauthenticated --state-db /tmp/check.db
  rm -f /tmp/check.db*'
echo "image-test: $image built from Containerfile and its entry points ran"
