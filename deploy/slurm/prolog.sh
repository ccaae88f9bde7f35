#!/bin/sh
# gpuwarden Slurm prolog: record which job holds which GPU on this node.
#
# Writes one file per GPU of the job into $GPUWARDEN_JOB_MAP_DIR (default
# /run/gpuwarden/jobs): the file name is the GPU index, the content the job id. The exporter
# (--job-map-dir) turns it into gpuwarden_gpu_allocation_info. Each file is written to a temp
# name and renamed, so the exporter never reads half a file.
#
# GPUs come from SLURM_JOB_GPUS (set for Prolog/Epilog), else CUDA_VISIBLE_DEVICES, else
# GPU_DEVICE_ORDINAL. Entries that are not plain indices (UUIDs, MIG ids) are skipped.
#
# A failing prolog drains the node and requeues the job, so this script exits 0 whatever
# happens and only complains on stderr (slurmd logs it).

set -eu
PATH=/usr/sbin:/usr/bin:/sbin:/bin  # slurmd runs prologs without a search path
export PATH
umask 022  # the exporter may run as another user: it must be able to read the files

log() { echo "gpuwarden prolog: $*" >&2; }
# shellcheck disable=SC2317  # run by the EXIT trap, which shellcheck 0.9 cannot see
on_exit() {
  rc=$?
  [ "$rc" -eq 0 ] || log "failed (status $rc); job not recorded"
  exit 0
}
trap on_exit EXIT

dir="${GPUWARDEN_JOB_MAP_DIR:-/run/gpuwarden/jobs}"
job="${SLURM_JOB_ID:-}"
gpus="${SLURM_JOB_GPUS:-${CUDA_VISIBLE_DEVICES:-${GPU_DEVICE_ORDINAL:-}}}"

case "$job" in
  '' | *[!0-9_+]*) log "no usable SLURM_JOB_ID ('$job')"; exit 0 ;;
esac
[ -n "$gpus" ] || exit 0  # a CPU-only job: nothing to record

mkdir -p "$dir"
set -f  # split the list on commas without globbing its entries
old_ifs=$IFS
IFS=,
for gpu in $gpus; do
  IFS=$old_ifs
  case "$gpu" in
    '' | *[!0-9]*) log "skipping GPU '$gpu': not an index"; continue ;;
  esac
  tmp="$dir/.$gpu.$job.$$"
  if printf '%s\n' "$job" >"$tmp" && mv -f "$tmp" "$dir/$gpu"; then
    :
  else
    log "could not record GPU $gpu for job $job in $dir"
    rm -f "$tmp" || true
  fi
done
exit 0
