#!/bin/bash
# Run the node agent against a real NVIDIA GPU and keep everything it saw (docs/nodeagent.md,
# "Validating on a real GPU"). Needs root (it makes a Slurm-like cgroup v2 job directory),
# python3 with torch (CUDA) and the agent's dependencies.
#
#   PY=.venv/bin/python scripts/validate-gpu.sh OUTDIR
#
# Phases: (1) one load as job 4242 (environ mapping; it reports progress through
# SLURM_EXT_PROGRESS_FILE): `slurm-ext-agent show`;
# (2) co-location: the agent runs with a guaranteed job 4242, then an opportunistic job
# 4343 starts in a cgroup named like Slurm's -> the agent should pause it (cgroup.freeze)
# when job 4242 slows, and resume it when 4242 ends; (3) memory rule only (slow_fraction 0):
# an opportunistic job holding most of the GPU's memory (SIGSTOP path, environ mapping)
# is paused and then resumed when the agent stops.
set -u
OUTDIR=${1:?usage: validate-gpu.sh OUTDIR}
PY=${PY:-python3}
HERE=$(cd "$(dirname "$0")/.." && pwd)
LOAD="python3 $HERE/scripts/gpu_load.py"
mkdir -p "$OUTDIR"
WORK=$(mktemp -d)
CG=/sys/fs/cgroup/system.slice/slurmstepd.scope/job_4343
STARTED=()
mark() { echo "$(date +%s.%N) $*" | tee -a "$OUTDIR/timeline.txt"; }
agent() { (cd "$HERE" && exec "$PY" -m nodeagent.cli "$@"); }
usage() { ps -o pid=,etimes=,times=,rss= -p "$1" | awk -v what="$2" '{print what, "pid", $1, "elapsed_s", $2, "cpu_s", $3, "rss_kib", $4}' >>"$OUTDIR/agent-usage.txt"; }
cleanup() {
    [ -w "$CG/cgroup.freeze" ] && echo 0 >"$CG/cgroup.freeze"
    for p in "${STARTED[@]}"; do kill -CONT "$p" 2>/dev/null; kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    rmdir "$CG/step_0/user/task_0" "$CG/step_0/user" "$CG/step_0" "$CG" 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT

config() {  # $1 file, $2 state file, $3 slow_fraction, $4 port
    cat >"$1" <<TOML
node_name = "gpu-check"
interval_s = 1.0
state_file = "$2"
[gpu]
backend = "nvml"
[exporter]
enabled = true
listen = "127.0.0.1"
port = $4
[report]
enabled = false
[jobs]
source = "environ"
[colocation]
enabled = true
slow_fraction = $3
TOML
}
scrape() { "$PY" -c "import urllib.request,sys; sys.stdout.write(urllib.request.urlopen('http://127.0.0.1:$1/metrics').read().decode())"; }

{
    nvidia-smi --query-gpu=name,driver_version,power.limit,memory.total --format=csv
    echo "cgroup fs: $(stat -fc %T /sys/fs/cgroup)"
    echo "powercap: $(ls /sys/class/powercap 2>&1 | tr '\n' ' ')"
    "$PY" -c "import pynvml; print('nvidia-ml-py', pynvml.__version__ if hasattr(pynvml, '__version__') else '?')" 2>&1
} >"$OUTDIR/facts.txt"
nvidia-smi --query-gpu=timestamp,power.draw,utilization.gpu,memory.used --format=csv,noheader -lms 500 \
    >"$OUTDIR/nvidia-smi.csv" &
STARTED+=($!)

# (1) one load, environ mapping
config "$WORK/show.toml" "" 0.7 9817
mark "phase1 start job 4242"
SLURM_JOB_ID=4242 SLURM_EXT_PROGRESS_FILE="$OUTDIR/progress-4242.log" $LOAD --progress "$OUTDIR/progress-4242.log" --seconds 170 &
G=$!
STARTED+=($G)
sleep 20
mark "phase1 show"
agent show --config "$WORK/show.toml" --backend nvml --json --wait 10 >"$OUTDIR/show-solo.json"
mark "phase1 done"

# (2) co-location with the slowdown rule, cgroup v2 freeze
config "$WORK/coloc.toml" "$WORK/state-coloc.json" 0.7 9818
(cd "$HERE" && exec "$PY" -m nodeagent.cli run --config "$WORK/coloc.toml") 2>"$OUTDIR/agent-coloc.log" &  # $! is the agent
A=$!
STARTED+=($A)
sleep 15
CGOK=0
if mkdir -p "$CG/step_0/user/task_0" 2>>"$OUTDIR/timeline.txt"; then CGOK=1; fi
mark "phase2 start job 4343 (opportunistic) cgroup=$CGOK"
if [ $CGOK = 1 ]; then
    sh -c "echo \$\$ >$CG/step_0/user/task_0/cgroup.procs && exec env SLURM_JOB_ID=4343 SLURM_JOB_QOS=opportunistic $LOAD --progress $OUTDIR/progress-4343.log --seconds 120" &
else
    SLURM_JOB_ID=4343 SLURM_JOB_QOS=opportunistic $LOAD --progress "$OUTDIR/progress-4343.log" --seconds 120 &
fi
O=$!
STARTED+=($O)
sleep 25
mark "phase2 scrape"
scrape 9818 >"$OUTDIR/metrics-coloc.txt"
cp "$WORK/state-coloc.json" "$OUTDIR/state-coloc.json"  # solo utilisation and progress rate learnt
mark "phase2 show"
agent show --config "$WORK/show.toml" --backend nvml --json --wait 5 >"$OUTDIR/show-two.json"
cat "$CG"/step_0/user/cgroup.{freeze,events} >"$OUTDIR/cgroup-4343-while-paused.txt" 2>&1  # the agent freezes step_*/user
mark "phase2 stop job 4242"
kill $G
wait $G 2>/dev/null
sleep 12
mark "phase2 stop agent"
usage $A "coloc agent (interval 1 s)"
kill -TERM $A
wait $A
cat "$CG"/step_0/user/cgroup.{freeze,events} >"$OUTDIR/cgroup-4343-after.txt" 2>&1
sleep 5
kill $O 2>/dev/null
wait $O 2>/dev/null
mark "phase2 done"

# (3) memory rule only; SIGSTOP path; resume on agent shutdown
config "$WORK/mem.toml" "$WORK/state-mem.json" 0.0 9819
(cd "$HERE" && exec "$PY" -m nodeagent.cli run --config "$WORK/mem.toml") 2>"$OUTDIR/agent-mem.log" &  # $! is the agent
A=$!
STARTED+=($A)
SLURM_JOB_ID=5151 $LOAD --progress "$OUTDIR/progress-5151.log" --seconds 60 &
G=$!
STARTED+=($G)
sleep 10
TOTAL=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
HOLD=$(( TOTAL * 97 / 100 / 1024 - 3 ))
mark "phase3 start job 5252 (opportunistic) holding ${HOLD} GiB of ${TOTAL} MiB"
SLURM_JOB_ID=5252 SLURM_JOB_QOS=opportunistic $LOAD --progress "$OUTDIR/progress-5252.log" \
    --hold-gib "$HOLD" --seconds 60 &
O=$!
STARTED+=($O)
sleep 20
grep State /proc/$O/status >"$OUTDIR/proc-5252-while-paused.txt" 2>&1
mark "phase3 stop agent (job 5252 still paused, job 5151 still running)"
usage $A "memory-rule agent (interval 1 s)"
kill -TERM $A
wait $A
grep State /proc/$O/status >"$OUTDIR/proc-5252-after.txt" 2>&1
sleep 6
mark "phase3 done"
kill $G $O 2>/dev/null
wait $G $O 2>/dev/null
