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
# simulates its points on the CPUs Slurm gives it (--cpus-per-task, passed on as --jobs); a
# request no node of the partition can hold is refused before anything is submitted (Slurm
# would leave it pending for ever). Everything after `--` is the sweep's command line without
# `--shard`, `--jobs` and `--out`. A shard rerun into the same DIR resumes its points.
#
# With --wait the script returns when the shards and the merge have ended: 0 when the merge
# wrote the sweep, 1 naming every failed task (and the end of its log) otherwise.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: slurm-sweep.sh [options] -- (sim sweep|bench sweep --engine sim) ARGS...

  --shards N         array tasks, one shard each (default 4)
  --dir DIR          where shards, logs and the merged sweep go (default ./slurm-sweep);
                     must be visible from every node
  --cpus-per-task C  CPUs per task, used as the sweep's --jobs (default 1); at most the CPUs
                     of one node of the partition
  --nvarray PATH     the nvarray binary on the nodes (default: $NVARRAY, else `nvarray` on PATH)
  --sbatch ARG       an extra sbatch argument for every job (repeatable: --partition=X, ...)
  --wait             return when the shards and the merge have ended: status 0 when the
                     sweep was merged, 1 naming the tasks that failed
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

# Ask Slurm whether the array can ever run as requested: a task that needs more CPUs (or
# memory, or features) than any node of its partition has stays pending for ever with the
# reason PartitionConfig, and --wait would wait for ever.
if ! probe=$(sbatch --test-only "${extra[@]}" "$dir/shard.sbatch" 2>&1); then
  node_cpus=$(sinfo -h -N -o '%c' 2>/dev/null | sort -n | tail -1 || true)
  echo "slurm-sweep: Slurm cannot run the shards as requested (--cpus-per-task $cpus${extra[*]:+, ${extra[*]}}): ${probe##*error: }" >&2
  if [ -n "$node_cpus" ] && [ "$cpus" -gt "$node_cpus" ]; then
    echo "slurm-sweep: the largest node has $node_cpus CPUs (sinfo); give --cpus-per-task $node_cpus or less" >&2
  fi
  exit 2
fi

array=$(sbatch --parsable "${extra[@]}" "$dir/shard.sbatch")
array=${array%%;*}
echo "submitted array job $array: $shards shards of the sweep (logs in $dir/logs)"
merge=$(sbatch --parsable --dependency="afterok:$array" --kill-on-invalid-dep=yes "${extra[@]}" "$dir/merge.sbatch")
merge=${merge%%;*}
if [ ${#wait[@]} -eq 0 ]; then
  echo "merge job $merge: $dir/sweep.json, $dir/sweep.svg; table in $dir/logs/merge.out (after every shard succeeds)"
  exit 0
fi

# A job's field (JobState=..., ExitCode=...) from one line of `scontrol show job -o`.
field() { [[ " $1 " =~ \ $2=([^ ]*)\  ]] && echo "${BASH_REMATCH[1]}" || true; }

# Waits until neither job is queued or running: Slurm has no call that blocks until another
# job ends, so this polls (once a second), and says once if a job waits for a reason that will
# not pass by itself.
warned=
while queued=$(squeue -h -j "$array,$merge" -o '%i %T %r' 2>/dev/null) && [ -n "$queued" ]; do
  if [ -z "$warned" ]; then
    stuck=$(echo "$queued" | grep -E 'PartitionConfig|BadConstraints|PartitionNodeLimit|PartitionTimeLimit|ReqNodeNotAvail|InvalidAccount|InvalidQOS' | head -1 || true)
    if [ -n "$stuck" ]; then
      echo "slurm-sweep: job ${stuck%% *} is pending (${stuck##* }), which will not change by itself; cancel with: scancel $array $merge" >&2
      warned=1
    fi
  fi
  sleep 1
done

# Every task that did not complete, with its state, exit code and the end of its log.
failed=()
tasks=$(scontrol show job -o "$array" 2>/dev/null || true)
for task in $(seq 0 $((shards - 1))); do
  line=$(grep -E " ArrayTaskId=$task " <<<"$tasks" || true)
  [ -n "$line" ] || continue
  state=$(field "$line" JobState)
  [ "$state" = COMPLETED ] && continue
  failed+=("$task")
  echo "slurm-sweep: shard task ${array}_$task: $state (exit $(field "$line" ExitCode)); $dir/logs/shard-$task.out ends:" >&2
  tail -n 3 "$dir/logs/shard-$task.out" 2>/dev/null | sed 's/^/    /' >&2 || true
done
merge_line=$(scontrol show job -o "$merge" 2>/dev/null || true)
merge_state=$(field "$merge_line" JobState)
if [ ${#failed[@]} -gt 0 ]; then
  echo "slurm-sweep: ${#failed[@]} of $shards shard tasks failed (tasks ${failed[*]} of array job $array); the merge job $merge was ${merge_state:-not run} ($(field "$merge_line" Reason)). Fix the cause and run the same command again: the shards that finished are kept" >&2
  exit 1
fi
if [ -z "$tasks" ] || [ -z "$merge_state" ]; then
  echo "slurm-sweep: Slurm no longer knows jobs $array and $merge, so their outcome is unknown: see $dir/logs" >&2
  exit 1
fi
if [ "$merge_state" != COMPLETED ]; then
  echo "slurm-sweep: the merge job $merge ended $merge_state (exit $(field "$merge_line" ExitCode)): see $dir/logs/merge.out" >&2
  tail -n 5 "$dir/logs/merge.out" 2>/dev/null | sed 's/^/    /' >&2 || true
  exit 1
fi
echo "merged: $dir/sweep.json, $dir/sweep.svg; table in $dir/logs/merge.out"
