#!/usr/bin/env bash
# Several hosts on one emulated array, for real (issue 23, part 2).
#
# As root, builds a tiny network on this machine: one server network namespace running
# `nvarray serve --listen tcp:10.77.0.1:PORT`, and N client namespaces (default 3), each joined
# to the server by its own veth pair on its own /30 subnet (10.77.I.0/30). Then:
#   1. every client runs a real NBD client at the same time, on its own range of the export:
#      fio's nbd engine, qemu-io, nbdcopy (through nbdkit's offset filter, as nbdcopy has no
#      offset option), cycling through the three for more than 3 clients;
#   2. it prints per-host results (table, and JSON with --json FILE);
#   3. it proves the clients share one device: client 1 writes a pattern with qemu-io and
#      flushes, client 2 (a qemu-io connection opened *before* the write) reads it back and
#      checks it, client 3 reads it with nbdcopy and compares bytes, and a wrong pattern must
#      be detected (the checks can fail);
#   4. it stops the server with SIGTERM and summarises the report it prints at exit;
#   5. it removes every namespace, veth and process it made (also on error or Ctrl-C) and
#      checks that none is left.
# Link delay: `tc qdisc ... netem` is tried (--delay); where the kernel has no netem, the server
# models it with the fabric stage instead (a TCP fabric at 10 Gb/s, one hop of --delay each
# way), unless --set gives a fabric of its own.
#
# Run (as root; it does not depend on the current directory):
#   scripts/multihost.sh                       # 3 clients, 10 s of traffic
#   scripts/multihost.sh --quick --json out.json --nvarray target/release/nvarray
# Exit status: 0 all passed, 1 a check failed, 2 bad usage, 77 skipped (not root, no network
# namespaces, or fio / qemu-io / nbdcopy / nbdkit / nbdinfo missing: it prints "SKIPPED: why").
set -euo pipefail

SELF="$(readlink -f "${BASH_SOURCE[0]}")"
PORT_DEFAULT=10809
EXPORT=nvarray
SERVER_IP=10.77.0.1

usage() {
    cat <<EOF
Usage: $(basename "$SELF") [OPTIONS]

Runs nvarray serve in one network namespace and real NBD clients (fio's nbd engine, qemu-io,
nbdcopy) in N others, each over its own veth pair; shows per-host results, checks that a write
flushed by one host is read back by the others, and cleans up every namespace it made.
Needs root; prints "SKIPPED: reason" and exits 77 when it cannot run.

Options:
  --clients N        client namespaces (hosts), 3..60 (default 3); tools cycle
                     fio, qemu-io, nbdcopy
  --runtime SECS     seconds of concurrent traffic (default 10; 3 with --quick)
  --quick            short run: 3 s of traffic, a 128 MiB device (under 10 s in all)
  --preset NAME      device preset for nvarray serve (default dram)
  --size SIZE        device size, as nvarray serve --size takes it (default 256M; 128M quick)
  --set KEY=VALUE    passed to nvarray serve (repeatable); a fabric.* setting here replaces
                     the fabric the script adds where netem is missing
  --delay TIME       link delay, e.g. 50us, or 0 for none (default 50us): netem on every veth
                     end where netem exists, else the server's fabric stage (fabric.kind=tcp,
                     10 Gb/s, one hop of TIME each way)
  --port PORT        TCP port in the server namespace (default $PORT_DEFAULT)
  --json FILE        also write the results as JSON to FILE
  --nvarray PATH     the nvarray binary (default: \$NVARRAY, else nvarray on PATH)
  -h, --help         this help
EOF
}

log() { echo "multihost: $*" >&2; }
die() { log "error: $*"; exit 1; }
skip() { echo "SKIPPED: $*"; exit 77; }
now_ns() { date +%s%N; }

# ---------------------------------------------------------------------------------------------
# Client side: `multihost.sh __client TOOL ...` runs inside a client namespace (started by the
# main script through `ip netns exec`), so every process it starts lives in that namespace.
# It writes key=value results to RESULT.
# ---------------------------------------------------------------------------------------------
client_main() {
    local tool=$1 host=$2 uri=$3 off=$4 len=$5 runtime=$6 result=$7 work=$8 pattern=$9
    local start end ops=0 rbytes=0 wbytes=0 errors=0 note=""
    start=$(now_ns)
    local deadline=$((start + runtime * 1000000000))
    case $tool in
        fio)
            local out="$work/$host.fio.json"
            if fio --name="$host" --ioengine=nbd --uri="$uri" --offset="$off" --size="$len" \
                --rw=randrw --bs=4k --iodepth=16 --runtime="$runtime" --time_based \
                --output-format=json --output="$out" >"$work/$host.fio.log" 2>&1; then
                # fio's JSON lists the job's read block, then write, then trim.
                first() { grep -oE "\"$1\" : [0-9.]+" "$out" | sed -n "$2p" | grep -oE '[0-9.]+$'; }
                rbytes=$(first io_bytes 1); wbytes=$(first io_bytes 2)
                ops=$(($(first total_ios 1) + $(first total_ios 2)))
                local bw=$(($(first bw_bytes 1) + $(first bw_bytes 2)))
                local ms; ms=$(first runtime 1)
                end=$((start + ms * 1000000))
                note="fio randrw 4k iodepth 16; MB/s is fio's bw"
                mbps=$(awk -v b="$bw" 'BEGIN { printf "%.1f", b / 1e6 }')
            else
                errors=1; note="fio failed: $(tail -n 2 "$work/$host.fio.log" | tr '\n' ' ')"
            fi
            ;;
        qemu-io)
            # Batches of 64 KiB writes of this host's pattern, each read back and checked
            # (read -P), walking through the range; one qemu-io connection per batch.
            local chunk=65536 cursor=0 batch=256 i args out="$work/$host.qemu-io.log"
            : >"$out"
            while [ "$(now_ns)" -lt "$deadline" ]; do
                args=()
                for ((i = 0; i < batch / 2; i++)); do
                    local o=$((off + cursor))
                    args+=(-c "write -P $pattern $o $chunk" -c "read -P $pattern $o $chunk")
                    cursor=$(((cursor + chunk) % len))
                done
                if ! qemu-io -f raw "$uri" "${args[@]}" >"$out.batch" 2>&1; then
                    errors=$((errors + 1))
                fi
                local w r bad
                w=$(grep -cE '^wrote [0-9]+/[0-9]+ bytes' "$out.batch" || true)
                r=$(grep -cE '^read [0-9]+/[0-9]+ bytes' "$out.batch" || true)
                bad=$(grep -c 'verification failed\|failed:' "$out.batch" || true)
                [ "$bad" -eq 0 ] || { errors=$((errors + bad)); cat "$out.batch" >>"$out"; }
                ops=$((ops + w + r)); wbytes=$((wbytes + w * chunk)); rbytes=$((rbytes + r * chunk))
                [ "$errors" -eq 0 ] || break
            done
            rm -f "$out.batch"
            end=$(now_ns)
            note="qemu-io write -P + read -P 64k, batches of $batch; MB/s over wall time"
            [ "$errors" -eq 0 ] || note="qemu-io errors: $(head -n 2 "$out" | tr '\n' ' ')"
            ;;
        nbdcopy)
            # nbdcopy has no offset option: nbdkit's offset filter (started by nbdcopy, in
            # this namespace) narrows the export to this host's range. Alternates a write of
            # nbdkit's pattern plugin into the range and a read of the range to null:.
            local copies=0 out="$work/$host.nbdcopy.log"
            local range=(nbdkit --exit-with-parent nbd uri="$uri" --filter=offset offset="$off" range="$len")
            : >"$out"
            while [ "$(now_ns)" -lt "$deadline" ]; do
                if [ $((copies % 2)) -eq 0 ]; then
                    nbdcopy -- [ nbdkit --exit-with-parent pattern size="$len" ] [ "${range[@]}" ] \
                        >>"$out" 2>&1 || { errors=$((errors + 1)); break; }
                    wbytes=$((wbytes + len))
                else
                    nbdcopy -- [ "${range[@]}" ] null: >>"$out" 2>&1 || { errors=$((errors + 1)); break; }
                    rbytes=$((rbytes + len))
                fi
                copies=$((copies + 1))
            done
            ops=$copies
            end=$(now_ns)
            note="nbdcopy whole-range copies (ops = copies), alternating write/read; MB/s over wall time"
            [ "$errors" -eq 0 ] || note="nbdcopy failed: $(tail -n 2 "$out" | tr '\n' ' ')"
            ;;
        *) echo "unknown tool $tool" >&2; return 2 ;;
    esac
    end=${end:-$(now_ns)}
    local secs; secs=$(awk -v ns=$((end - start)) 'BEGIN { printf "%.3f", ns / 1e9 }')
    if [ -z "${mbps:-}" ]; then
        mbps=$(awk -v b=$((rbytes + wbytes)) -v ns=$((end - start)) \
            'BEGIN { printf "%.1f", (ns > 0 ? b / (ns / 1e9) / 1e6 : 0) }')
    fi
    {
        echo "ops=$ops"
        echo "read_bytes=$rbytes"
        echo "write_bytes=$wbytes"
        echo "seconds=$secs"
        echo "mb_per_s=$mbps"
        echo "errors=$errors"
        echo "note=$note"
    } >"$result"
    [ "$errors" -eq 0 ]
}

if [ "${1:-}" = __client ]; then
    shift
    client_main "$@"
    exit $?
fi

# ---------------------------------------------------------------------------------------------
# Options.
# ---------------------------------------------------------------------------------------------
CLIENTS=3 RUNTIME="" QUICK=0 PRESET=dram SIZE="" DELAY=50us PORT=$PORT_DEFAULT JSON="" BIN=""
SETS=()
need_arg() { [ $# -ge 2 ] || { log "$1 needs a value"; usage >&2; exit 2; }; }
while [ $# -gt 0 ]; do
    case $1 in
        --clients) need_arg "$@"; CLIENTS=$2; shift 2 ;;
        --runtime) need_arg "$@"; RUNTIME=$2; shift 2 ;;
        --quick) QUICK=1; shift ;;
        --preset) need_arg "$@"; PRESET=$2; shift 2 ;;
        --size) need_arg "$@"; SIZE=$2; shift 2 ;;
        --set) need_arg "$@"; SETS+=(--set "$2"); shift 2 ;;
        --delay) need_arg "$@"; DELAY=$2; shift 2 ;;
        --port) need_arg "$@"; PORT=$2; shift 2 ;;
        --json) need_arg "$@"; JSON=$2; shift 2 ;;
        --nvarray) need_arg "$@"; BIN=$2; shift 2 ;;
        -h | --help) usage; exit 0 ;;
        *) log "unknown option $1"; usage >&2; exit 2 ;;
    esac
done
[[ $CLIENTS =~ ^[0-9]+$ ]] && [ "$CLIENTS" -ge 3 ] && [ "$CLIENTS" -le 60 ] ||
    { log "--clients must be 3..60 (the sharing check needs three hosts)"; exit 2; }
[[ $PORT =~ ^[0-9]+$ ]] && [ "$PORT" -ge 1 ] && [ "$PORT" -le 65535 ] || { log "bad --port $PORT"; exit 2; }
if [ -z "$RUNTIME" ]; then
    if [ $QUICK = 1 ]; then RUNTIME=3; else RUNTIME=10; fi
fi
[[ $RUNTIME =~ ^[0-9]+$ ]] && [ "$RUNTIME" -ge 1 ] || { log "--runtime must be whole seconds >= 1"; exit 2; }
if [ -z "$SIZE" ]; then
    if [ $QUICK = 1 ]; then SIZE=128M; else SIZE=256M; fi
fi
# JSON path made absolute now: nothing below depends on the current directory.
if [ -n "$JSON" ]; then
    [ -d "$(dirname "$JSON")" ] || { log "--json $JSON: no such directory"; exit 2; }
    JSON="$(cd "$(dirname "$JSON")" && pwd)/$(basename "$JSON")"
fi

BIN=${BIN:-${NVARRAY:-}}
if [ -z "$BIN" ]; then
    BIN=$(command -v nvarray || true)
    [ -n "$BIN" ] || { log "no nvarray binary: pass --nvarray PATH, set NVARRAY, or put nvarray on PATH"; exit 2; }
fi
[ -x "$BIN" ] || { log "nvarray binary $BIN is not executable"; exit 2; }
BIN=$(readlink -f "$BIN")

# ---------------------------------------------------------------------------------------------
# Can it run here?
# ---------------------------------------------------------------------------------------------
[ "$(id -u)" -eq 0 ] || skip "multihost.sh needs root (network namespaces, veth pairs)"
for tool in ip fio qemu-io nbdcopy nbdkit nbdinfo timeout mkfifo cmp; do
    command -v "$tool" >/dev/null 2>&1 || skip "$tool is not installed (scripts/setup.sh installs the NBD clients)"
done
fio --enghelp=nbd >/dev/null 2>&1 || skip "this fio has no nbd engine"
HAVE_SS=1
command -v ss >/dev/null 2>&1 || HAVE_SS=0

# ---------------------------------------------------------------------------------------------
# State and cleanup.
# ---------------------------------------------------------------------------------------------
TAG="nvmh$$"                 # names carry the PID so two runs do not collide
SRV_NS="$TAG-srv"
NAMESPACES=()                # every namespace made, in order
CLIENT_PIDS=()               # background processes started from here (clients, qemu-io)
SERVER_PID=""
WORK=$(mktemp -d "${TMPDIR:-/tmp}/nvarray-multihost.XXXXXX")
CLEANED=0
C2_FD=""

client_ns() { echo "$TAG-c$1"; }
srv_if() { echo "${TAG}s$1"; }   # server end of client I's veth (<= 15 chars)
cli_if() { echo "${TAG}c$1"; }   # client end

kill_tree_in_ns() {          # TERM, then KILL, every process in namespace $1
    local ns=$1 pids i
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [ -n "$pids" ] || return 0
    kill -TERM $pids 2>/dev/null || true
    for ((i = 0; i < 30; i++)); do
        pids=$(ip netns pids "$ns" 2>/dev/null || true)
        [ -n "$pids" ] || return 0
        sleep 0.1
    done
    kill -KILL $pids 2>/dev/null || true
    sleep 0.1
}

stop_server() {              # SIGTERM, up to 20 s for the report and flush, then SIGKILL
    [ -n "$SERVER_PID" ] || return 0
    local i
    if kill -0 "$SERVER_PID" 2>/dev/null; then
        kill -TERM "$SERVER_PID" 2>/dev/null || true
        for ((i = 0; i < 200; i++)); do
            kill -0 "$SERVER_PID" 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 "$SERVER_PID" 2>/dev/null; then
            log "server did not stop within 20 s of SIGTERM: SIGKILL"
            kill -KILL "$SERVER_PID" 2>/dev/null || true
        fi
    fi
    SERVER_STATUS=0
    wait "$SERVER_PID" 2>/dev/null || SERVER_STATUS=$?
    SERVER_PID=""
}

cleanup() {
    [ $CLEANED = 0 ] || return 0
    CLEANED=1
    set +e
    if [ -n "$C2_FD" ]; then eval "exec $C2_FD>&-"; C2_FD=""; fi
    local pid ns i
    for pid in "${CLIENT_PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
    for ns in "${NAMESPACES[@]}"; do
        [ "$ns" = "$SRV_NS" ] || kill_tree_in_ns "$ns"
    done
    for pid in "${CLIENT_PIDS[@]}"; do wait "$pid" 2>/dev/null; done
    CLIENT_PIDS=()
    stop_server
    kill_tree_in_ns "$SRV_NS"
    for ((i = 1; i <= CLIENTS; i++)); do   # veths die with their namespace; be explicit anyway
        ip -n "$SRV_NS" link del "$(srv_if "$i")" 2>/dev/null
        ip link del "$(srv_if "$i")" 2>/dev/null
        ip link del "$(cli_if "$i")" 2>/dev/null
    done
    for ns in "${NAMESPACES[@]}"; do ip netns del "$ns" 2>/dev/null; done
    rm -rf "$WORK"
    set -e
}

leftovers() {                # what of this run is still there, one per line
    ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$TAG-" | sed 's/^/namespace /' || true
    ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' | grep -E "^$TAG[sc][0-9]+$" |
        sed 's/^/link /' || true
    local pid
    for pid in "${CLIENT_PIDS[@]}" ${SERVER_PID:+"$SERVER_PID"}; do
        kill -0 "$pid" 2>/dev/null && echo "process $pid"
    done
    true
}

on_exit() {
    local rc=$?
    trap - EXIT
    trap '' INT TERM             # cleanup runs to the end
    cleanup
    local left; left=$(leftovers)
    if [ -n "$left" ]; then
        log "cleanup left behind: $(echo "$left" | tr '\n' ' ')"
        [ "$rc" -ne 0 ] || rc=1
    elif [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ]; then
        log "cleaned up: no namespace, veth or process of this run is left"
    fi
    exit "$rc"
}
on_signal() {
    log "interrupted by SIG$1: cleaning up"
    exit $((128 + $2))
}
trap on_exit EXIT
trap 'on_signal INT 2' INT
trap 'on_signal TERM 15' TERM

# ---------------------------------------------------------------------------------------------
# The network: server namespace with 10.77.0.1 on its loopback; client I at 10.77.I.2, server
# end 10.77.I.1, route to 10.77.0.1 through its own veth.
# ---------------------------------------------------------------------------------------------
if ! ip netns add "$SRV_NS" 2>"$WORK/netns.err"; then
    skip "ip netns add failed: $(tr '\n' ' ' <"$WORK/netns.err")"
fi
NAMESPACES+=("$SRV_NS")
ip -n "$SRV_NS" link set lo up
ip -n "$SRV_NS" addr add "$SERVER_IP/32" dev lo
for ((i = 1; i <= CLIENTS; i++)); do
    ns=$(client_ns "$i")
    ip netns add "$ns"
    NAMESPACES+=("$ns")
    ip -n "$ns" link set lo up
    ip link add "$(srv_if "$i")" netns "$SRV_NS" type veth peer name "$(cli_if "$i")" netns "$ns"
    ip -n "$SRV_NS" addr add "10.77.$i.1/30" dev "$(srv_if "$i")"
    ip -n "$ns" addr add "10.77.$i.2/30" dev "$(cli_if "$i")"
    ip -n "$SRV_NS" link set "$(srv_if "$i")" up
    ip -n "$ns" link set "$(cli_if "$i")" up
    ip -n "$ns" route add "$SERVER_IP/32" via "10.77.$i.1" dev "$(cli_if "$i")"
done

NETEM=0
if [ "$DELAY" != 0 ] && [ "$DELAY" != none ]; then
    if command -v tc >/dev/null 2>&1 &&
        ip netns exec "$SRV_NS" tc qdisc add dev "$(srv_if 1)" root netem delay "$DELAY" 2>/dev/null; then
        NETEM=1
        for ((i = 1; i <= CLIENTS; i++)); do
            [ "$i" = 1 ] || ip netns exec "$SRV_NS" tc qdisc add dev "$(srv_if "$i")" root netem delay "$DELAY"
            ip netns exec "$(client_ns "$i")" tc qdisc add dev "$(cli_if "$i")" root netem delay "$DELAY"
        done
        log "netem: $DELAY on each veth end"
    else
        log "no netem here: link delay is left to the model's fabric stage"
        # The model adds the delay instead: a TCP fabric at 10 Gb/s with one hop of DELAY each
        # way, unless the caller set a fabric of their own.
        if [[ " ${SETS[*]+${SETS[*]}} " != *" fabric."* ]]; then
            SETS+=(--set fabric.kind=tcp --set fabric.bandwidth_bytes_per_s=1250000000
                --set "fabric.hop_latency_ns=$DELAY")
            log "fabric: ${SETS[*]}"
        fi
    fi
fi

# ---------------------------------------------------------------------------------------------
# The server.
# ---------------------------------------------------------------------------------------------
URI="nbd://$SERVER_IP:$PORT/$EXPORT"
SERVER_CMD=("$BIN" serve --preset "$PRESET" --size "$SIZE" --listen "tcp:$SERVER_IP:$PORT"
    --export-name "$EXPORT" --connections $((CLIENTS * 6 + 4)) ${SETS[@]+"${SETS[@]}"} --json)
ip netns exec "$SRV_NS" "${SERVER_CMD[@]}" >"$WORK/server.out" 2>"$WORK/server.err" &
SERVER_PID=$!
log "server: ${SERVER_CMD[*]} (namespace $SRV_NS, pid $SERVER_PID)"

# Ready when it says it listens and every client namespace gets the export's size over NBD.
READY_TIMEOUT=30
deadline=$((SECONDS + READY_TIMEOUT))
EXPORT_SIZE=""
while :; do
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
        wait "$SERVER_PID" 2>/dev/null && st=0 || st=$?
        SERVER_PID=""
        die "nvarray serve exited (status $st) before accepting connections: $(tail -n 5 "$WORK/server.err" | tr '\n' ' ')"
    fi
    if grep -q '^listening on' "$WORK/server.out" 2>/dev/null &&
        EXPORT_SIZE=$(ip netns exec "$(client_ns 1)" timeout 5 nbdinfo --size "$URI" 2>/dev/null); then
        break
    fi
    [ $SECONDS -lt $deadline ] || die "nvarray serve did not accept NBD connections on $SERVER_IP:$PORT within ${READY_TIMEOUT} s"
    sleep 0.1
done
for ((i = 2; i <= CLIENTS; i++)); do
    ip netns exec "$(client_ns "$i")" timeout 5 nbdinfo --size "$URI" >/dev/null 2>&1 ||
        die "client namespace $(client_ns "$i") cannot reach $URI"
done
log "server ready: export $EXPORT of $EXPORT_SIZE bytes at $URI"

# Ranges: N equal MiB-aligned ranges, then a 4 MiB region for the sharing checks.
MIB=1048576
SHARE_LEN=$((4 * MIB))
RANGE=$(((EXPORT_SIZE - SHARE_LEN) / CLIENTS / MIB * MIB))
[ "$RANGE" -ge "$MIB" ] || die "device of $EXPORT_SIZE bytes is too small for $CLIENTS clients: give --size"
SHARE_OFF=$((CLIENTS * RANGE))

TOOLS=(fio qemu-io nbdcopy)
tool_of() { echo "${TOOLS[$((($1 - 1) % 3))]}"; }

# ---------------------------------------------------------------------------------------------
# Phase 1: all clients at once, each on its own range.
# ---------------------------------------------------------------------------------------------
log "phase 1: $CLIENTS clients for ${RUNTIME} s, each on its own $((RANGE / MIB)) MiB range"
declare -A PID_OF
for ((i = 1; i <= CLIENTS; i++)); do
    ip netns exec "$(client_ns "$i")" timeout -s TERM $((RUNTIME + 60)) bash "$SELF" __client \
        "$(tool_of "$i")" "$(client_ns "$i")" "$URI" $(((i - 1) * RANGE)) "$RANGE" "$RUNTIME" \
        "$WORK/result.$i" "$WORK" "$(printf '0x%02x' $((16 + i)))" \
        >"$WORK/client.$i.log" 2>&1 &
    PID_OF[$i]=$!
    CLIENT_PIDS+=("$!")
done

# While they run: established connections to the server, per peer address (ss).
declare -A PEAK_CONNS
PEAK_TOTAL=0
sample_connections() {
    [ $HAVE_SS = 1 ] || return 0
    local lines total=0 ip n
    lines=$(ip netns exec "$SRV_NS" ss -Htn state established "( sport = :$PORT )" 2>/dev/null |
        awk '{ p = $4; sub(/:[0-9]+$/, "", p); print p }' | sort | uniq -c) || return 0
    while read -r n ip; do
        [ -n "$ip" ] || continue
        total=$((total + n))
        [ "${PEAK_CONNS[$ip]:-0}" -ge "$n" ] || PEAK_CONNS[$ip]=$n
    done <<<"$lines"
    [ "$PEAK_TOTAL" -ge "$total" ] || PEAK_TOTAL=$total
}
phase_deadline=$((SECONDS + RUNTIME + 90))
while :; do
    running=0
    for ((i = 1; i <= CLIENTS; i++)); do
        kill -0 "${PID_OF[$i]}" 2>/dev/null && running=$((running + 1))
    done
    [ $running -gt 0 ] || break
    [ $SECONDS -lt $phase_deadline ] || die "clients still running $((RUNTIME + 90)) s after they started"
    kill -0 "$SERVER_PID" 2>/dev/null || die "nvarray serve exited during phase 1: $(tail -n 5 "$WORK/server.err" | tr '\n' ' ')"
    sample_connections
    sleep 0.3
done
declare -A STATUS_OF
for ((i = 1; i <= CLIENTS; i++)); do
    st=0
    wait "${PID_OF[$i]}" || st=$?
    STATUS_OF[$i]=$st
done
CLIENT_PIDS=()

# Bytes each client's veth carried (server end: rx + tx), to show the traffic took its own link.
link_bytes() {
    local d="/sys/class/net/$(srv_if "$1")/statistics"
    ip netns exec "$SRV_NS" sh -c "echo \$((\$(cat $d/rx_bytes) + \$(cat $d/tx_bytes)))"
}

get() { sed -n "s/^$2=//p" "$1" 2>/dev/null | head -n 1; }

json_str() {                 # a JSON string literal of $1
    local s=${1//\\/\\\\}
    s=${s//\"/\\\"}
    s=$(printf '%s' "$s" | tr -d '\000-\037')
    printf '"%s"' "$s"
}

HOSTS_OK=1
HOST_ROWS=()
HOSTS_JSON=()
for ((i = 1; i <= CLIENTS; i++)); do
    f="$WORK/result.$i"
    ops=$(get "$f" ops); rb=$(get "$f" read_bytes); wb=$(get "$f" write_bytes)
    secs=$(get "$f" seconds); mbps=$(get "$f" mb_per_s); errs=$(get "$f" errors); note=$(get "$f" note)
    ops=${ops:-0} rb=${rb:-0} wb=${wb:-0} secs=${secs:-0} mbps=${mbps:-0} errs=${errs:-1}
    [ -n "$note" ] || note="no result: $(tail -n 3 "$WORK/client.$i.log" | tr '\n' ' ')"
    lb=$(link_bytes "$i")
    bytes=$((rb + wb))
    ok=true
    if [ "${STATUS_OF[$i]}" -ne 0 ] || [ "$errs" -ne 0 ] || [ "$bytes" -le 0 ]; then
        ok=false; HOSTS_OK=0
        log "host $(client_ns "$i") ($(tool_of "$i")) failed (status ${STATUS_OF[$i]}): $note"
    fi
    conns=${PEAK_CONNS[10.77.$i.2]:-0}
    HOST_ROWS+=("$(printf '%-14s %-10s %-8s %5d+%-4d %6s %9s %9s %9.1f %9.1f %9.1f %5s %s' \
        "$(client_ns "$i")" "10.77.$i.2" "$(tool_of "$i")" $(((i - 1) * RANGE / MIB)) $((RANGE / MIB)) \
        "$secs" "$ops" "$mbps" "$(awk -v b="$rb" 'BEGIN{print b/1e6}')" \
        "$(awk -v b="$wb" 'BEGIN{print b/1e6}')" "$(awk -v b="$lb" 'BEGIN{print b/1e6}')" \
        "$conns" "$([ $ok = true ] && echo ok || echo FAIL)")")
    HOSTS_JSON+=("{\"host\": $(json_str "$(client_ns "$i")"), \"address\": \"10.77.$i.2\", \"tool\": \"$(tool_of "$i")\", \"offset\": $(((i - 1) * RANGE)), \"length\": $RANGE, \"seconds\": $secs, \"ops\": $ops, \"mb_per_s\": $mbps, \"read_bytes\": $rb, \"write_bytes\": $wb, \"bytes\": $bytes, \"link_bytes\": $lb, \"peak_connections\": $conns, \"ok\": $ok, \"note\": $(json_str "$note")}")
done

# ---------------------------------------------------------------------------------------------
# Phase 2: sharing. Client 2 opens a qemu-io connection first (and reads zeros); client 1
# writes 0x5a and flushes; client 2 reads it back on its old connection (CAN_MULTI_CONN: the
# flush on one connection covers the others); client 3 reads it with nbdcopy and compares; a
# wrong pattern must be reported as a mismatch (the check can fail).
# ---------------------------------------------------------------------------------------------
log "phase 2: sharing checks on $((SHARE_LEN / MIB)) MiB at offset $SHARE_OFF"
CHECK_NAMES=() CHECK_HOSTS=() CHECK_TOOLS=() CHECK_PASSED=() CHECK_DETAILS=()
record() {                   # name host tool passed detail
    CHECK_NAMES+=("$1"); CHECK_HOSTS+=("$2"); CHECK_TOOLS+=("$3"); CHECK_PASSED+=("$4"); CHECK_DETAILS+=("$5")
}
C1=$(client_ns 1) C2=$(client_ns 2) C3=$(client_ns 3)
FIFO="$WORK/c2.fifo"
mkfifo "$FIFO"
ip netns exec "$C2" timeout -s TERM 60 qemu-io -f raw "$URI" <"$FIFO" >"$WORK/c2.qemu-io.log" 2>&1 &
C2_PID=$!
CLIENT_PIDS+=("$C2_PID")
exec {C2_FD}>"$FIFO"
c2_reads() { grep -cE '(^|> )(read [0-9]+/[0-9]+ bytes|read failed)' "$WORK/c2.qemu-io.log" || true; }
c2_wait_reads() {            # wait until client 2's qemu-io has answered $1 reads
    local until=$((SECONDS + 20))
    while [ "$(c2_reads)" -lt "$1" ]; do
        kill -0 "$C2_PID" 2>/dev/null || return 1
        [ $SECONDS -lt $until ] || return 1
        sleep 0.05
    done
}
c2_segment() {               # client 2's output for its command number $1
    awk -v k="$1" 'BEGIN { RS = "qemu-io> " } NR == k + 1' "$WORK/c2.qemu-io.log"
}
c2_send() { (echo "$1" >&"$C2_FD") 2>/dev/null || true; }   # a subshell takes any SIGPIPE
c2_send "read -P 0 $SHARE_OFF $SHARE_LEN"
if c2_wait_reads 1; then
    before=$(c2_segment 1 | grep -q 'verification failed' && echo "not zeros" || echo "zeros")
else
    before="no answer"
fi

# Check 1: client 1 writes and flushes.
w_out=$(ip netns exec "$C1" timeout 30 qemu-io -f raw "$URI" \
    -c "write -P 0x5a $SHARE_OFF $SHARE_LEN" -c flush 2>&1) && w_st=0 || w_st=$?
if [ $w_st -eq 0 ] && grep -q "^wrote $SHARE_LEN/$SHARE_LEN bytes" <<<"$w_out"; then
    record write-flush "$C1" qemu-io true "write -P 0x5a $SHARE_OFF $SHARE_LEN, flush: ok"
else
    record write-flush "$C1" qemu-io false "qemu-io status $w_st: $(tr '\n' ' ' <<<"$w_out")"
fi

# Check 2 (and the control): client 2, on the connection it opened before the write.
c2_send "read -P 0x5a $SHARE_OFF $SHARE_LEN"
c2_send "read -P 0xa5 $SHARE_OFF $SHARE_LEN"
c2_send quit
c2_wait_reads 3 || true
eval "exec $C2_FD>&-"; C2_FD=""
wait "$C2_PID" 2>/dev/null || true
CLIENT_PIDS=()
seg2=$(c2_segment 2) seg3=$(c2_segment 3)
if grep -q "read $SHARE_LEN/$SHARE_LEN bytes" <<<"$seg2" && ! grep -q 'verification failed' <<<"$seg2"; then
    record read-back-other-connection "$C2" qemu-io true \
        "read -P 0x5a on a connection opened before the write (it read $before then): match"
else
    record read-back-other-connection "$C2" qemu-io false \
        "read -P 0x5a: $(tr '\n' ' ' <<<"${seg2:-no answer}") (before the write: $before)"
fi
if grep -q 'verification failed' <<<"$seg3"; then
    record mismatch-detected "$C2" qemu-io true "read -P 0xa5 (wrong pattern) reported a mismatch, as it must"
else
    record mismatch-detected "$C2" qemu-io false "read -P 0xa5 (wrong pattern) was not reported: $(tr '\n' ' ' <<<"${seg3:-no answer}")"
fi

# Check 3: client 3 copies the region out with nbdcopy and compares bytes.
head -c "$SHARE_LEN" /dev/zero | tr '\0' '\132' >"$WORK/expected.bin"    # \132 = 0x5a
if ip netns exec "$C3" timeout 30 nbdcopy -- [ nbdkit --exit-with-parent nbd uri="$URI" \
    --filter=offset offset="$SHARE_OFF" range="$SHARE_LEN" ] "$WORK/got.bin" >"$WORK/c3.log" 2>&1; then
    if cmp -s "$WORK/expected.bin" "$WORK/got.bin"; then
        record nbdcopy-compare "$C3" nbdcopy true "nbdcopy read $SHARE_LEN bytes, all 0x5a (cmp)"
    else
        record nbdcopy-compare "$C3" nbdcopy false \
            "bytes differ: $(cmp "$WORK/expected.bin" "$WORK/got.bin" 2>&1 | head -n 1)"
    fi
else
    record nbdcopy-compare "$C3" nbdcopy false "nbdcopy failed: $(tail -n 2 "$WORK/c3.log" | tr '\n' ' ')"
fi
SHARING_OK=1
for p in "${CHECK_PASSED[@]}"; do [ "$p" = true ] || SHARING_OK=0; done

# ---------------------------------------------------------------------------------------------
# Stop the server: it prints its JSON report at exit.
# ---------------------------------------------------------------------------------------------
SERVER_STATUS=""
stop_server
report="$WORK/server.report.json"
sed -n '/^{/,$p' "$WORK/server.out" >"$report"
top() { sed -nE "s/^  \"$1\": ([0-9.]+),?$/\1/p" "$report" | head -n 1; }
S_REQ=$(top requests) S_RREQ=$(top read_requests) S_WREQ=$(top write_requests)
S_RB=$(top read_bytes) S_WB=$(top write_bytes) S_IOPS=$(top iops)
S_MEAN=$(sed -nE 's/^    "mean": ([0-9.]+),?$/\1/p' "$report" | head -n 1)   # latency_ns.mean
# The server's own view, one stream per client host (its address), each host's rates over its
# own active time (its connections, first request to close).
S_HOSTS_JSON=$(python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
print(json.dumps([{"host": s["name"], "requests": s["requests"], "read_bytes": s["read_bytes"],
                   "write_bytes": s["write_bytes"], "mean_latency_ns": s["latency_ns"]["mean"],
                   "iops": s["iops"],
                   "mb_per_s": (s["read_bandwidth_bytes_per_s"] + s["write_bandwidth_bytes_per_s"]) / 1e6}
                  for s in r.get("streams", [])]))' "$report" 2>/dev/null || echo '[]')
SERVER_OK=1
[ "${S_REQ:-0}" -gt 0 ] 2>/dev/null || SERVER_OK=0
[ "$SERVER_STATUS" = 0 ] || SERVER_OK=0
SERVER_NOTES=$(grep -v 'stopping (in-flight' "$WORK/server.err" | head -n 5 | tr '\n' ' ' || true)

# ---------------------------------------------------------------------------------------------
# Clean up now (the EXIT trap would too) and check nothing is left.
# ---------------------------------------------------------------------------------------------
cleanup
LEFT=$(leftovers)
CLEAN_OK=1
[ -z "$LEFT" ] || CLEAN_OK=0

# ---------------------------------------------------------------------------------------------
# Report.
# ---------------------------------------------------------------------------------------------
PASSED=true
[ $HOSTS_OK = 1 ] && [ $SHARING_OK = 1 ] && [ $SERVER_OK = 1 ] && [ $CLEAN_OK = 1 ] || PASSED=false
echo
echo "nvarray multihost: $CLIENTS client hosts -> $URI ($PRESET, $EXPORT_SIZE bytes), ${RUNTIME} s," \
    "$([ $NETEM = 1 ] && echo "netem $DELAY per veth end" || echo "no netem")${SETS[*]+, server ${SETS[*]}}"
printf '%-14s %-10s %-8s %10s %6s %9s %9s %9s %9s %9s %5s\n' host address tool 'range MiB' \
    secs ops 'MB/s' 'read MB' 'write MB' 'link MB' conns
for row in "${HOST_ROWS[@]}"; do echo "$row"; done
echo
echo "sharing ($((SHARE_LEN / MIB)) MiB at offset $SHARE_OFF, pattern 0x5a):"
for ((k = 0; k < ${#CHECK_NAMES[@]}; k++)); do
    printf '  %-4s %-27s %-14s %-8s %s\n' "$([ "${CHECK_PASSED[$k]}" = true ] && echo PASS || echo FAIL)" \
        "${CHECK_NAMES[$k]}" "${CHECK_HOSTS[$k]}" "${CHECK_TOOLS[$k]}" "${CHECK_DETAILS[$k]}"
done
echo
echo "server: ${S_REQ:-?} requests (${S_RREQ:-?} reads, ${S_WREQ:-?} writes)," \
    "$(awk -v b="${S_RB:-0}" 'BEGIN{printf "%.1f", b/1e6}') MB read," \
    "$(awk -v b="${S_WB:-0}" 'BEGIN{printf "%.1f", b/1e6}') MB written," \
    "mean latency $(awk -v ns="${S_MEAN:-0}" 'BEGIN{printf "%.1f", ns/1e3}') us; exit status ${SERVER_STATUS:-?};" \
    "peak $PEAK_TOTAL connections from ${#PEAK_CONNS[@]} hosts (ss)"
python3 -c '
import json, sys
for h in json.loads(sys.argv[1]):
    print("  server sees %-12s %9d requests %9.1f MB read %9.1f MB written  mean %.1f us  %.0f IOPS %.1f MB/s over its active time" % (
        h["host"], h["requests"], h["read_bytes"] / 1e6, h["write_bytes"] / 1e6,
        h["mean_latency_ns"] / 1e3, h["iops"], h["mb_per_s"]))' "$S_HOSTS_JSON" || true
[ -z "$SERVER_NOTES" ] || echo "server stderr: $SERVER_NOTES"
if [ $CLEAN_OK = 1 ]; then
    echo "cleanup: ${#NAMESPACES[@]} namespaces, $CLIENTS veth pairs and every process removed"
else
    echo "cleanup: LEFT BEHIND: $(echo "$LEFT" | tr '\n' ' ')"
fi
echo "result: $([ $PASSED = true ] && echo PASSED || echo FAILED)"

if [ -n "$JSON" ]; then
    checks=() nsj=()
    for ((k = 0; k < ${#CHECK_NAMES[@]}; k++)); do
        checks+=("{\"name\": \"${CHECK_NAMES[$k]}\", \"host\": $(json_str "${CHECK_HOSTS[$k]}"), \"tool\": \"${CHECK_TOOLS[$k]}\", \"passed\": ${CHECK_PASSED[$k]}, \"detail\": $(json_str "${CHECK_DETAILS[$k]}")}")
    done
    for ns in "${NAMESPACES[@]}"; do nsj+=("$(json_str "$ns")"); done
    peers=()
    for ip in "${!PEAK_CONNS[@]}"; do peers+=("\"$ip\": ${PEAK_CONNS[$ip]}"); done
    join() { local IFS=,; echo "$*"; }
    {
        echo "{"
        echo "  \"date\": \"$(date -u +%Y-%m-%dT%H:%M:%SZ)\","
        echo "  \"clients\": $CLIENTS, \"runtime_s\": $RUNTIME, \"quick\": $([ $QUICK = 1 ] && echo true || echo false),"
        echo "  \"preset\": $(json_str "$PRESET"), \"size_bytes\": $EXPORT_SIZE, \"uri\": $(json_str "$URI"),"
        echo "  \"delay\": $(json_str "$DELAY"), \"netem\": $([ $NETEM = 1 ] && echo true || echo false), \"server_sets\": $(json_str "${SETS[*]+${SETS[*]}}"),"
        echo "  \"namespaces\": [$(join "${nsj[@]}")],"
        echo "  \"hosts\": ["
        for ((k = 0; k < ${#HOSTS_JSON[@]}; k++)); do
            echo "    ${HOSTS_JSON[$k]}$([ $k -lt $((${#HOSTS_JSON[@]} - 1)) ] && echo ,)"
        done
        echo "  ],"
        echo "  \"sharing\": {\"offset\": $SHARE_OFF, \"length\": $SHARE_LEN, \"pattern\": \"0x5a\", \"passed\": $([ $SHARING_OK = 1 ] && echo true || echo false),"
        echo "    \"checks\": [$(join "${checks[@]}")]},"
        echo "  \"server\": {\"requests\": ${S_REQ:-0}, \"read_requests\": ${S_RREQ:-0}, \"write_requests\": ${S_WREQ:-0}, \"read_bytes\": ${S_RB:-0}, \"write_bytes\": ${S_WB:-0}, \"iops\": ${S_IOPS:-0}, \"mean_latency_ns\": ${S_MEAN:-0}, \"exit_status\": ${SERVER_STATUS:-null}, \"hosts\": $S_HOSTS_JSON, \"peak_connections\": $PEAK_TOTAL, \"peak_connections_by_peer\": {$(join "${peers[@]}")}, \"stderr\": $(json_str "$SERVER_NOTES")},"
        echo "  \"cleanup\": {\"clean\": $([ $CLEAN_OK = 1 ] && echo true || echo false), \"left\": $(json_str "$(printf '%s' "$LEFT" | tr '\n' ' ')")},"
        echo "  \"passed\": $PASSED"
        echo "}"
    } >"$JSON"
fi

[ $PASSED = true ]
