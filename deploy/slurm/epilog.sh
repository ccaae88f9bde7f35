#!/bin/sh
# gpuwarden Slurm epilog: forget the GPUs of a finished job.
#
# Removes the files in $GPUWARDEN_JOB_MAP_DIR (default /run/gpuwarden/jobs) that name this
# job (SLURM_JOB_ID), and only those: every file is checked, so a GPU list missing from the
# epilog's environment still cleans up, and another job's files are never touched.
#
# A failing epilog drains the node, so this script exits 0 whatever happens and only
# complains on stderr (slurmd logs it).

set -eu
PATH=/usr/sbin:/usr/bin:/sbin:/bin  # slurmd runs prologs without a search path
export PATH

log() { echo "gpuwarden epilog: $*" >&2; }
# shellcheck disable=SC2317  # run by the EXIT trap, which shellcheck 0.9 cannot see
on_exit() {
  rc=$?
  [ "$rc" -eq 0 ] || log "failed (status $rc)"
  exit 0
}
trap on_exit EXIT

dir="${GPUWARDEN_JOB_MAP_DIR:-/run/gpuwarden/jobs}"
job="${SLURM_JOB_ID:-}"

case "$job" in
  '' | *[!0-9_+]*) log "no usable SLURM_JOB_ID ('$job')"; exit 0 ;;
esac
[ -d "$dir" ] || exit 0

for file in "$dir"/*; do
  [ -f "$file" ] || continue
  case "${file##*/}" in
    *[!0-9]*) continue ;;  # not a GPU index file
  esac
  holder=$(cat "$file" 2>/dev/null) || continue
  if [ "$holder" = "$job" ]; then
    rm -f "$file" || log "could not remove $file"
  fi
done
exit 0
