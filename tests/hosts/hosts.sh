#!/bin/sh
# hosts.sh: test hosts on this machine as network namespaces (issue 20).
#
#   hosts.sh up ID N         make N hosts host0..host<N-1>: namespaces bs<ID>h0.., each
#                            with lo up and an eth0 (one end of a veth pair)
#                            at 10.<a>.<b>.<i+1>/24, the other ends on a
#                            bridge inside a switch namespace bs<ID>sw; prints
#                            the hosts' addresses, one a line
#   hosts.sh down ID         remove everything of ID (idempotent)
#   hosts.sh sweep           remove the hosts of IDs whose process is gone
#                            (a test killed before its own cleanup)
#   hosts.sh exec ID I CMD   run CMD on host I (its own hostname: host<I>)
#   hosts.sh shape ID I SPEC tc on host I's link, both directions: "rate
#                            100mbit" (tbf), or netem's "delay 5ms loss 1%"
#                            (exits 77 where the kernel has no netem)
#   hosts.sh link ID I up|down   the switch port of host I
#   hosts.sh mpirun ID ARGS  OpenMPI's mpirun started on host 0 across the
#                            hosts: remote daemons through netns_rsh.sh (ip
#                            netns exec instead of ssh), TCP only, on the
#                            hosts' subnet only (see MPI_ARGS below)
#
# ID is a number (the test's process id): names and the subnet derive from
# it, so tests running at once do not meet. Every address is inside these
# namespaces; nothing is routed to or from the machine's own network. All
# waits are bounded. Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN); `up` exits 77
# with the reason on stderr where namespaces cannot be made.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)

names() { # ID -> NS_PREFIX SWITCH SUBNET
    id=$1
    NS_PREFIX="bs${id}h"
    SWITCH="bs${id}sw"
    SUBNET="10.$((100 + id / 250 % 150)).$((id % 250)).0"
    NET3=${SUBNET%.0}
}

host_ns() { echo "${NS_PREFIX}$1"; }

up() {
    names "$1"
    n=$2
    if ! ip netns add "$SWITCH" 2>/tmp/bs-hosts-$1.err; then
        echo "test hosts: cannot create a network namespace ($(cat /tmp/bs-hosts-$1.err)); needs root with CAP_SYS_ADMIN" >&2
        rm -f /tmp/bs-hosts-$1.err
        exit 77
    fi
    rm -f /tmp/bs-hosts-$1.err
    ip -n "$SWITCH" link add br0 type bridge
    ip -n "$SWITCH" link set br0 up
    ip -n "$SWITCH" link set lo up
    i=0
    while [ "$i" -lt "$n" ]; do
        ns=$(host_ns "$i")
        ip netns add "$ns"
        ip -n "$SWITCH" link add "port$i" type veth peer name eth0 netns "$ns"
        ip -n "$SWITCH" link set "port$i" master br0 up
        ip -n "$ns" link set lo up
        ip -n "$ns" addr add "$NET3.$((i + 1))/24" dev eth0
        ip -n "$ns" link set eth0 up
        echo "$NET3.$((i + 1))"
        i=$((i + 1))
    done
    # host names: `ip netns exec` mounts /etc/netns/NS/hosts over /etc/hosts inside NS
    i=0
    while [ "$i" -lt "$n" ]; do
        mkdir -p "/etc/netns/$(host_ns "$i")"
        { echo "127.0.0.1 localhost"; j=0; while [ "$j" -lt "$n" ]; do echo "$NET3.$((j + 1)) host$j"; j=$((j + 1)); done; } \
            > "/etc/netns/$(host_ns "$i")/hosts"
        i=$((i + 1))
    done
    # bounded wait until host 0 reaches the last host (the bridge forwards once its ports are up):
    # a TCP connection to a closed port refused is an answer from that host
    last="$NET3.$n"
    ip netns exec "$(host_ns 0)" timeout 10 /usr/bin/python3 -c "
import socket, sys, time
for attempt in range(50):
    try:
        socket.create_connection(('$last', 9), timeout=0.2).close()
        sys.exit(0)
    except ConnectionRefusedError:
        sys.exit(0)
    except OSError:
        time.sleep(0.1)
sys.exit(1)" || { echo "test hosts: host 0 cannot reach $last" >&2; down "$1"; exit 1; }
}

down() { # processes first (deleting a namespace does not end them), then the namespaces
    names "$1"
    for ns in $(ip netns list | awk '{print $1}'); do
        case "$ns" in "$SWITCH" | "$NS_PREFIX"[0-9]*)
            pids=$(ip netns pids "$ns" 2>/dev/null || true)
            [ -z "$pids" ] || kill -9 $pids 2>/dev/null || true
            ip netns del "$ns" 2>/dev/null || true
            rm -rf "/etc/netns/$ns" ;;
        esac
    done
}

sweep() {
    for ns in $(ip netns list | awk '{print $1}'); do
        case "$ns" in bs[0-9]*sw)
            id=${ns#bs}; id=${id%sw}
            kill -0 "$id" 2>/dev/null || down "$id" ;;
        esac
    done
}

on_host() { # ID I CMD...: CMD in host I's namespace with its own hostname
    names "$1"
    i=$2
    shift 2
    exec ip netns exec "$(host_ns "$i")" unshare --uts sh -c 'hostname "$0" && exec "$@"' "host$i" "$@"
}

shape() { # "rate R" alone: tbf; anything else (delay, loss): netem, which some kernels lack
    names "$1"
    ns=$(host_ns "$2")
    case "$3" in
        rate\ *[!\ ]) set -- "$1" "$2" "$3" "tbf $3 burst 32kbit latency 400ms" ;;
        *) set -- "$1" "$2" "$3" "netem $3" ;;
    esac
    if ! tc -n "$ns" qdisc replace dev eth0 root $4 2>/dev/null; then
        echo "test hosts: tc cannot shape '$3' here (qdisc ${4%% *} not in this kernel)" >&2
        exit 77
    fi
    tc -n "$SWITCH" qdisc replace dev "port$2" root $4
}

link() {
    names "$1"
    ip -n "$SWITCH" link set "port$2" "$3"
}

# --mca btl self,tcp: OpenMPI's shared-memory transport (vader) makes ranks
# segfault in MPI_Comm_split_type when they run in different network
# namespaces of one machine (measured: they share /dev/shm and the machine,
# but not the network identity vader expects); real hosts share no memory
# either, so TCP is the honest transport. The *_if_include flags keep both
# the runtime (oob) and MPI traffic on the hosts' subnet.
mpirun_hosts() {
    names "$1"
    shift
    count=$(ip netns list | awk '{print $1}' | grep -c "^${NS_PREFIX}[0-9]")
    hostlist="" i=0
    while [ "$i" -lt "$count" ]; do
        hostlist="$hostlist${hostlist:+,}host$i:${BS_SLOTS:-2}"
        i=$((i + 1))
    done
    export BS_HOSTS_ID="$ID" BS_HOSTS_PREFIX="$NS_PREFIX" BS_HOSTS_NET3="$NET3"
    # BS_OVERSUBSCRIBE= (empty) holds mpirun to the hosts' slots: a lost host's ranks then cannot start elsewhere
    # shellcheck disable=SC2086
    on_host "$ID" 0 mpirun --allow-run-as-root ${BS_OVERSUBSCRIBE---oversubscribe} --bind-to none \
        --mca plm_rsh_agent "$HERE/netns_rsh.sh" --mca btl self,tcp \
        --mca btl_tcp_if_include "$SUBNET/24" --mca oob_tcp_if_include "$SUBNET/24" \
        --host "$hostlist" "$@"
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
    up) up "$1" "$2" ;;
    down) down "$1" ;;
    sweep) sweep ;;
    exec) on_host "$@" ;;
    shape) shape "$1" "$2" "$3" ;;
    link) link "$1" "$2" "$3" ;;
    mpirun) ID=$1; mpirun_hosts "$@" ;;
    *) echo "usage: hosts.sh up ID N | down ID | sweep | exec ID I CMD... | shape ID I SPEC | link ID I up|down | mpirun ID ARGS..." >&2; exit 2 ;;
esac
