#!/bin/sh
# netns_rsh.sh: OpenMPI's rsh agent for the test hosts (plm_rsh_agent).
# Called like ssh, `netns_rsh.sh [options] HOST COMMAND...`, it runs the
# remote daemon's COMMAND (one shell line) in the namespace of HOST (hostI,
# or its address 10.a.b.I+1, of hosts.sh), with that host's own hostname,
# instead of logging in anywhere. BS_HOSTS_PREFIX and BS_HOSTS_NET3 come from
# hosts.sh through mpirun's environment.
set -eu
while [ $# -gt 0 ]; do
    case "$1" in -*) shift ;; *) break ;; esac # ssh-style options OpenMPI may add
done
address=$1
shift
case "$address" in
    host[0-9]*) i=${address#host} ;;
    "$BS_HOSTS_NET3".*) i=$((${address##*.} - 1)) ;;
    *) echo "netns_rsh.sh: $address is not a test host (host0.. or $BS_HOSTS_NET3.0/24)" >&2; exit 1 ;;
esac
exec ip netns exec "$BS_HOSTS_PREFIX$i" unshare --uts sh -c 'hostname "$0" && eval "$1"' "host$i" "$*"
