#!/usr/bin/env bash
# Runs an nvarray sweep on a Slurm cluster: one array task per shard (`--shard I/N`, with
# $SLURM_ARRAY_TASK_ID as I), then `nvarray sweep merge` as a job that depends on all of them.
#
#   scripts/slurm-sweep.sh --shards 16 --dir results/latency -- \
#       sim sweep --preset moneta --param memory.latency_ns=4ns,64ns,1us --param bs=4k,64k \
#       --param iodepth=1,8,32 --rw randread --runtime 10ms
#
# writes DIR/shards/shard-I.jsonl (one JSON line per point), DIR/sweep.json, DIR/sweep.svg and
# the merged table in DIR/logs/merge.out. DIR must be on storage every node sees. Each task
# simulates its points on the CPUs Slurm gives it (--cpus-per-task, passed on as --jobs).
# Everything after `--` is the sweep's command line without `--shard`, `--jobs` and `--out`.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: slurm-sweep.sh [options] -- (sim sweep|bench sweep --engine sim) ARGS...

  --shards N         array tasks, one shard each (default 4)
  --dir DIR          where shards, logs and the merged sweep go (default ./slurm-sweep);
                     must be visible from every node
  --cpus-per-task C  CPUs per task, used as the sweep's --jobs (default 1)
  --nvarray PATH     the nvarray binary on the nodes (default: $NVARRAY, else `nvarray` on PATH)
  --sbatch ARG       an extra sbatch argument for every job (repeatable: --partition=X, ...)
  --wait             return when the merge job has finished, with its exit status
  -h, --help         this help
EOF
}

shards=4
dir=slurm-sweep
cpus=1
nvarray=${NVARRAY:-nvarray}
extra=()
wait=()
while [ $# -gt 0 ]; do
  case "$1" in
    --shards) shards=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    --cpus-per-task) cpus=$2; shift 2 ;;
    --nvarray) nvarray=$2; shift 2 ;;
    --sbatch) extra+=("$2"); shift 2 ;;
    --wait) wait=(--wait); shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    *) echo "slurm-sweep: unknown option $1 (the sweep's own flags go after --)" >&2; usage >&2; exit 2 ;;
  esac
done
[ $# -gt 0 ] || { echo "slurm-sweep: no sweep given after --" >&2; usage >&2; exit 2; }
case "$shards$cpus" in
  *[!0-9]*) echo "slurm-sweep: --shards and --cpus-per-task take whole numbers" >&2; exit 2 ;;
esac
[ "$shards" -ge 1 ] && [ "$cpus" -ge 1 ] || { echo "slurm-sweep: --shards and --cpus-per-task must be at least 1" >&2; exit 2; }
for a in "$@"; do
  case "$a" in
    --shard|--shard=*|--jobs|--jobs=*|--out|--out=*)
      echo "slurm-sweep: leave $a out of the sweep's flags: the script sets it per task" >&2; exit 2 ;;
  esac
done
command -v sbatch >/dev/null || { echo "slurm-sweep: sbatch not found (Slurm's client)" >&2; exit 2; }
nvarray=$(command -v "$nvarray" || true)
[ -z "$nvarray" ] || nvarray=$(realpath "$nvarray")
[ -n "$nvarray" ] || { echo "slurm-sweep: nvarray not found: give --nvarray PATH" >&2; exit 2; }

mkdir -p "$dir/shards" "$dir/logs"
dir=$(cd "$dir" && pwd)

sweep=$(printf '%q ' "$nvarray" "$@")
cat >"$dir/shard.sbatch" <<EOF
#!/usr/bin/env bash
#SBATCH --job-name=nvarray-sweep
#SBATCH --array=0-$((shards - 1))
#SBATCH --cpus-per-task=$cpus
#SBATCH --output=$dir/logs/shard-%a.out
set -euo pipefail
exec $sweep--shard "\$SLURM_ARRAY_TASK_ID/$shards" --jobs "\${SLURM_CPUS_PER_TASK:-$cpus}" \\
    --out "$dir/shards/shard-\$SLURM_ARRAY_TASK_ID"
EOF
cat >"$dir/merge.sbatch" <<EOF
#!/usr/bin/env bash
#SBATCH --job-name=nvarray-sweep-merge
#SBATCH --output=$dir/logs/merge.out
set -euo pipefail
exec $(printf '%q' "$nvarray") sweep merge "$dir/shards" --out "$dir/sweep"
EOF

array=$(sbatch --parsable "${extra[@]}" "$dir/shard.sbatch")
array=${array%%;*}
echo "submitted array job $array: $shards shards of the sweep (logs in $dir/logs)"
merge_args=(--parsable --dependency="afterok:$array" --kill-on-invalid-dep=yes "${extra[@]}" "${wait[@]}")
if merge=$(sbatch "${merge_args[@]}" "$dir/merge.sbatch"); then
  echo "merge job ${merge%%;*}: $dir/sweep.json, $dir/sweep.svg; table in $dir/logs/merge.out"
else
  status=$?
  echo "slurm-sweep: the merge job failed (status $status): see $dir/logs/merge.out and $dir/logs/shard-*.out" >&2
  exit "$status"
fi
