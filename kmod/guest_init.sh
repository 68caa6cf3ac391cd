#!/bin/busybox sh
# /init of the kmod check's QEMU guest (busybox sh). Runs every case of /plan.txt through a
# netem bottleneck, writes each case's files under /out/<case>/ (a 9p share of the host's
# output directory), then powers the guest off.
#
# /plan.txt, one case a line:  ID KIND ORDER SECONDS CCA [DAEMON FLAGS...]
#   KIND  kernel     the kernel's own CCA (reno, cubic, bbr), FLAGS to the iperf3 client; ORDER "-"
#         ccp        ccp-algorithms CCA --ipc netlink FLAGS beside ccp-cong.ko (a flag
#                    CCPLAB_NAME=VALUE goes to the daemon's environment instead)
#         ccp-dies   the same, and the daemon is killed (SIGKILL) halfway through the flow
#   ORDER module-first (insmod, then the daemon) or daemon-first (the daemon waits for the module)
# /plan.env: RATE DELAY LIMIT (netem on the bottleneck), PORT.
# Per case (written to /tmp/case/<case>, copied to /out at its end): iperf.json (client, -J), ss.txt (ss -tin every 0.2 s with "t <uptime>" lines),
# daemon.log, dmesg.txt, and status (written last: "ok" or what failed).
#
# Programs from the host live in /host/bin and are called by path: busybox sh runs its own
# applets before anything on PATH.

export PATH=/bin:/sbin:/usr/bin:/usr/sbin
/bin/busybox mkdir -p /proc /sys /dev /run /tmp /out /bin /sbin /usr/bin /usr/sbin
/bin/busybox --install -s 2>/dev/null
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev 2>/dev/null
mount -t tmpfs run /run
mount -t tmpfs tmp /tmp

H=/host/bin
for m in $(cat /modules.list); do
    insmod "/modules/$m" || echo "kmod-guest: insmod $m failed"
done
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 out /out || { echo "kmod-guest: no 9p share"; poweroff -f; }

. /plan.env

log() { echo "kmod-guest: $*"; }

# Poll until "$@" succeeds, every 20 ms, at most $1 tries (first argument); 1 if it never does.
wait_for() {
    n=$1; shift
    while [ "$n" -gt 0 ]; do
        "$@" && return 0
        n=$((n - 1))
        usleep 20000
    done
    return 1
}

setup_net() {
    $H/ip link set lo up
    $H/ip netns add snd
    $H/ip netns add rcv
    $H/ip link add s0 netns snd type veth peer name r0
    $H/ip link add v0 netns rcv type veth peer name r1
    $H/ip addr add 10.0.1.2/24 dev r0
    $H/ip addr add 10.0.2.1/24 dev r1
    $H/ip link set r0 up
    $H/ip link set r1 up
    $H/ip -n snd addr add 10.0.1.1/24 dev s0
    $H/ip -n rcv addr add 10.0.2.2/24 dev v0
    for ns in snd rcv; do $H/ip -n $ns link set lo up; done
    $H/ip -n snd link set s0 up
    $H/ip -n rcv link set v0 up
    $H/ip -n snd route add default via 10.0.1.2
    $H/ip -n rcv route add default via 10.0.2.1
    echo 1 > /proc/sys/net/ipv4/ip_forward
    # Offloads off: segments of one MSS, so netem's queue limit counts packets.
    for d in r0 r1; do $H/ethtool -K $d tso off gso off gro off 2>/dev/null; done
    $H/ip netns exec snd $H/ethtool -K s0 tso off gso off gro off 2>/dev/null
    $H/ip netns exec rcv $H/ethtool -K v0 tso off gso off gro off 2>/dev/null
    # The bottleneck: the receiver side's egress (netem on the sender's own veth gives local CWR, no losses).
    $H/tc qdisc add dev r1 root netem delay "$DELAY" rate "$RATE" limit "$LIMIT"
}

ccp_loaded() { grep -q '^ccp_cong ' /proc/modules; }

load_ccp() {
    insmod /ccp-cong.ko || return 1
    allowed=$(cat /proc/sys/net/ipv4/tcp_allowed_congestion_control)
    echo "$allowed ccp" > /proc/sys/net/ipv4/tcp_allowed_congestion_control
}

unload_ccp() {
    wait_for 100 rmmod ccp_cong 2>/dev/null || log "rmmod ccp_cong failed"
}

start_daemon() {  # $1 = case dir, $2 = algorithm, rest = flags (CCPLAB_*=VALUE: environment)
    d=$1; alg=$2; shift 2
    envs=; flags=
    for f in "$@"; do
        case "$f" in
            CCPLAB_*=*) envs="$envs $f" ;;
            *) flags="$flags $f" ;;
        esac
    done
    # shellcheck disable=SC2086
    env RUST_LOG=info $envs $H/ccp-algorithms "$alg" --ipc netlink $flags > "$d/daemon.log" 2>&1 &
    DAEMON=$!
    wait_for 500 grep -q "ready alg=" "$d/daemon.log"
}

stop_daemon() {
    [ -n "$DAEMON" ] || return 0
    kill -INT "$DAEMON" 2>/dev/null
    wait "$DAEMON"
    echo "exit $?" >> "$1/daemon.exit"
    DAEMON=
}

listening() { $H/ip netns exec rcv $H/ss -Hltn "sport = :$PORT" | grep -q LISTEN; }

sample_ss() {  # $1 = case dir; until $1/.stop exists
    # One `ip netns exec` for the whole loop (each one remounts /sys) and no fork for the
    # time stamp: the guest's software CPU is what the flows run on.
    $H/ip netns exec snd /bin/sh -c "
        while [ ! -e '$1/.stop' ]; do
            read -r up rest < /proc/uptime; echo \"t \$up\"
            $H/ss -tinH state established 'dport = :$PORT'
            usleep 200000
        done" > "$1/ss.txt"
}

run_case() {  # ID KIND ORDER SECONDS CCA [FLAGS...]
    id=$1; kind=$2; order=$3; secs=$4; cca=$5; shift 5
    # The case writes to tmpfs and is copied to the share at its end: a 9p write per log line
    # (the daemon logs every report) costs the software CPU more than the flow itself.
    d=/tmp/case/$id
    mkdir -p "$d"
    echo "$kind $order $secs $cca $*" > "$d/case"
    dmesg -c > /dev/null
    status=ok
    cc=$cca
    DAEMON=
    if [ "$kind" != kernel ]; then
        cc=ccp
        if [ "$order" = daemon-first ]; then
            start_daemon "$d" "$cca" "$@" || status="daemon not ready"
            load_ccp || status="insmod failed"
        else
            load_ccp || status="insmod failed"
            start_daemon "$d" "$cca" "$@" || status="daemon not ready"
        fi
    fi
    $H/ip netns exec rcv $H/iperf3 -s -1 -p "$PORT" > "$d/server.log" 2>&1 &
    server=$!
    wait_for 250 listening || status="iperf3 server not listening"
    sample_ss "$d" &
    sampler=$!
    t0=$(cut -d' ' -f1 /proc/uptime)
    if [ "$kind" = ccp-dies ]; then
        ( sleep $((secs / 2)); kill -KILL "$DAEMON"; echo "t $(cut -d' ' -f1 /proc/uptime)" > "$d/killed" ) &
    fi
    # A kernel case's FLAGS go to the iperf3 client (e.g. --fq-rate=1G: SO_MAX_PACING_RATE,
    # which turns TCP-internal pacing on for the kernel's CCA too).
    extra=
    [ "$kind" = kernel ] && extra="$*"
    # shellcheck disable=SC2086
    $H/ip netns exec snd $H/iperf3 -c 10.0.2.2 -p "$PORT" -t "$secs" -C "$cc" -J $extra > "$d/iperf.json" 2> "$d/iperf.err" \
        || status="iperf3 client failed"
    echo "t0 $t0" > "$d/times"
    touch "$d/.stop"
    wait "$sampler"
    wait "$server" 2>/dev/null
    if [ "$kind" != kernel ]; then
        stop_daemon "$d"
        unload_ccp
    fi
    dmesg -c > "$d/dmesg.txt"
    rm -f "$d/.stop"
    echo "$status" > "$d/status"
    cp -r "$d" /out/ || log "copying $d to the share failed"
    rm -rf "$d"
    log "case $id ($kind $cca $order): $status"
}

main() {
    log "kernel $(uname -r), $(grep -c ^processor /proc/cpuinfo) CPUs"
    setup_net
    # The plan on descriptor 3: nothing a case runs may read it from stdin.
    while read -r line <&3; do
        [ -n "$line" ] || continue
        # shellcheck disable=SC2086
        run_case $line
    done 3< /plan.txt
    log "all cases done"
    echo done > /out/all-done
}

main 2>&1 | tee /out/guest.log
sync
poweroff -f
