#!/usr/bin/env bash
# A real single-node SLURM cluster on this machine, for tests and demos; and beside it, on
# request, a real two-node one.
#
#   slurm/local-cluster.sh up              install (apt), configure and start everything,
#                                          then wait until the node is idle and sacct answers
#   slurm/local-cluster.sh up --nodes 2    the same, then the two-node cluster beside it
#   slurm/local-cluster.sh down [--purge]  stop the daemons (the two-node cluster's too);
#                                          --purge also cancels all jobs and deletes the job
#                                          state, logs and accounting database
#   slurm/local-cluster.sh down --nodes 2 [--purge]
#                                          only the two-node cluster: its daemons, every
#                                          process left in its nodes, its namespaces and links
#   slurm/local-cluster.sh status          which daemons run, the nodes, the queue
#
# Debian 12 (bookworm), as root, with or without an init system: apt is kept from starting
# services, the daemons are started here and stopped through their pid files. Both `up` and
# `down` are idempotent; `up` on a running cluster only checks it (well under a second).
#
# Layout: configs in /etc/slurm (where Debian's slurm tools look, so sbatch/sacct/submitit
# need no environment), rendered from slurm/local/*.conf.in; job state, the MariaDB data
# and the logs under /var/lib/vitscale-slurm; pid files and the DB socket in
# /run/vitscale-slurm.
#
# The two-node cluster (`--nodes 2`): cluster `vitscale2`, partition `two`, nodes n1 and n2.
# Each node is a slurmd in a network namespace of its own (`vitscale-n1`, `vitscale-n2`),
# with its own address (10.231.0.11, .12), hostname and /etc/hosts, linked by a veth pair
# to a bridge on the host (`vitscale-br0`, 10.231.0.1) where its own slurmctld listens
# (port 6827). It shares munge, slurmdbd and the filesystem with the single-node cluster,
# whose configuration and daemons it never touches; clients reach it with
# SLURM_CONF=/etc/slurm/two/slurm.conf. Its state, pid files and logs are in `two/` under
# the directories above.
set -euo pipefail
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# SLURM's commands here speak to the single-node cluster unless told (`two` below), also
# when the caller's environment points them at the two-node one.
unset SLURM_CONF

readonly CLUSTER=vitscale
readonly PARTITION=debug
readonly PACKAGES=(munge slurmctld slurmd slurm-client slurmdbd mariadb-server)
readonly STATE=/var/lib/vitscale-slurm
readonly LOGS=$STATE/log
readonly RUN=/run/vitscale-slurm
readonly ETC=/etc/slurm
readonly DBD_PORT=6819
# Not MariaDB's default 3306, so a MariaDB the machine already runs is left alone.
readonly DB_PORT=3307
readonly DB_SOCKET=$RUN/mariadb/mariadb.sock
readonly DB_PASS_FILE=$STATE/db-password
readonly TEMPLATES="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/local"
readonly MUNGE_PID=/run/munge/munged.pid
readonly WAIT_S=60
launched=0 # set when `up` starts a daemon
# The machine's CPUs as the node offers them. Not plain nproc: it answers OMP_NUM_THREADS
# (make test sets it for its two pytest processes), and a node rendered with fewer CPUs
# than the last `up` gave it is restarted under the running tests.
cpus() { env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc; }

# The two-node cluster (header). Only addresses of its own subnet and loopback are used.
readonly TWO_CLUSTER=vitscale2
readonly TWO_PARTITION=two
readonly TWO_NODES=(n1 n2)
readonly TWO_STATE=$STATE/two
readonly TWO_LOGS=$LOGS/two
readonly TWO_RUN=$RUN/two
readonly TWO_ETC=$ETC/two
readonly TWO_CONF=$TWO_ETC/slurm.conf
readonly TWO_CTLD_PORT=6827
readonly TWO_FIRST_JOB_ID=1000000
# Seconds without an answer from a node's slurmd before slurmctld marks it DOWN.
readonly TWO_SLURMD_TIMEOUT=10
readonly SUBNET=10.231.0
readonly BRIDGE=vitscale-br0
readonly BRIDGE_ADDR=$SUBNET.1

say() { printf 'local-cluster: %s\n' "$*"; }

die() {
  printf 'local-cluster: error: %s\n' "$1" >&2
  if [[ -n ${2:-} && -s $2 ]]; then
    printf -- '--- last lines of %s ---\n' "$2" >&2
    tail -n 25 "$2" >&2
  fi
  printf 'local-cluster: logs are in %s (munge: /var/log/munge)\n' "$LOGS" >&2
  exit 1
}

need_root() {
  [[ $EUID -eq 0 ]] || die "'$1' needs root (it installs packages and runs daemons)"
}

# The pid in $1 if that process is alive and its name is $2 (a stale pid file whose pid
# was reused by another process does not count).
running_pid() {
  local pid
  [[ -r $1 ]] && read -r pid <"$1" 2>/dev/null || return 1
  [[ $pid =~ ^[0-9]+$ && $(cat "/proc/$pid/comm" 2>/dev/null) == "$2" ]] || return 1
  echo "$pid"
}

# wait_for SECONDS COMMAND...: poll COMMAND (quietly) until it succeeds or time runs out.
wait_for() {
  local deadline=$((SECONDS + $1))
  shift
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || return 1
    sleep 0.3
  done
}

# install_packages [PACKAGE...]: those missing of the given (default: PACKAGES).
install_packages() {
  local p missing=() wanted=("${PACKAGES[@]}")
  (($#)) && wanted=("$@")
  for p in "${wanted[@]}"; do
    [[ $(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null) == installed ]] || missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  command -v apt-get >/dev/null || die "missing packages ${missing[*]} and no apt-get"
  local apt_log=$LOGS/apt.log started=$SECONDS
  say "installing ${missing[*]} (log: $apt_log)"
  export DEBIAN_FRONTEND=noninteractive
  # Keep apt from starting the packaged services with their default configs; we start
  # our own below. (Without an init system they would not start anyway.)
  local policy=/usr/sbin/policy-rc.d own_policy=0
  if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy" && own_policy=1
  fi
  local ok=1
  if ! apt-cache show "${missing[@]}" >/dev/null 2>&1; then
    apt-get update -qq >>"$apt_log" 2>&1 || ok=0
  fi
  ((ok)) && { apt-get install -y -qq --no-install-recommends -o Dpkg::Use-Pty=0 \
    "${missing[@]}" >>"$apt_log" 2>&1 || ok=0; }
  ((own_policy)) && rm -f "$policy"
  ((ok)) || die "apt-get could not install ${missing[*]}" "$apt_log"
  say "installed in $((SECONDS - started)) s"
}

make_dirs() {
  id slurm >/dev/null 2>&1 || die "user 'slurm' is missing (Debian's slurm packages create it)"
  id mysql >/dev/null 2>&1 || die "user 'mysql' is missing (mariadb-server creates it)"
  install -d -m 755 "$STATE" "$STATE/slurmd" "$ETC"
  install -d -m 755 -o slurm -g slurm "$LOGS" "$STATE/slurmctld" "$RUN"
  install -d -m 700 -o mysql -g mysql "$STATE/mariadb"
  install -d -m 755 -o mysql -g mysql "$RUN/mariadb"
  install -d -m 755 -o munge -g munge /run/munge
  local f
  for f in slurmctld slurmdbd; do
    [[ -e $LOGS/$f.log ]] || install -m 640 -o slurm -g slurm /dev/null "$LOGS/$f.log"
  done
  [[ -e $LOGS/mariadb.log ]] || install -m 640 -o mysql -g mysql /dev/null "$LOGS/mariadb.log"
  if [[ ! -s /etc/munge/munge.key ]]; then # Debian's munge creates one; just in case
    (umask 077 && head -c 1024 /dev/urandom >/etc/munge/munge.key)
    chown munge:munge /etc/munge/munge.key
  fi
  if [[ ! -s $DB_PASS_FILE ]]; then
    (umask 077 && head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$DB_PASS_FILE")
  fi
}

# install_if_changed TMP DEST MODE OWNER: move TMP to DEST (with that mode and owner)
# unless DEST already is that; returns 0 when it wrote something.
install_if_changed() {
  if cmp -s "$1" "$2" && [[ $(stat -c '%a %U' "$2") == "$3 $4" ]]; then
    rm -f "$1"
    return 1
  fi
  install -m "$3" -o "$4" -g "$4" "$1" "$2"
  rm -f "$1"
}

# Memory slurmd may hand out, in MiB: leave the OS and the daemons 10 % (at least 512 MiB),
# since slurmd drains a node whose RealMemory is more than it finds.
real_memory_mib() {
  local mem_mib margin
  mem_mib=$(awk '/^MemTotal:/ {print int($2 / 1024)}' /proc/meminfo)
  margin=$((mem_mib / 10 > 512 ? mem_mib / 10 : 512))
  echo $((mem_mib - margin))
}

# render TEMPLATE DEST MODE OWNER: write DEST from TEMPLATE if it differs; returns 0 when
# it wrote something.
render() {
  local real cpus tmp
  cpus=$(cpus)
  real=$(real_memory_mib)
  tmp=$(mktemp)
  sed -e "s|@CLUSTER@|$CLUSTER|g" -e "s|@PARTITION@|$PARTITION|g" \
    -e "s|@HOST@|$(hostname -s)|g" -e "s|@CPUS@|$cpus|g" -e "s|@REAL_MEMORY@|$real|g" \
    -e "s|@DEF_MEM_PER_CPU@|$((real / cpus))|g" -e "s|@STATE@|$STATE|g" \
    -e "s|@LOGS@|$LOGS|g" -e "s|@RUN@|$RUN|g" -e "s|@DBD_PORT@|$DBD_PORT|g" \
    -e "s|@DB_PORT@|$DB_PORT|g" -e "s|@DB_PASS@|$(cat "$DB_PASS_FILE")|g" \
    "$TEMPLATES/$1" >"$tmp"
  install_if_changed "$tmp" "$2" "$3" "$4"
}

write_configs() {
  local changed=1
  render slurm.conf.in "$ETC/slurm.conf" 644 root && changed=0
  render slurmdbd.conf.in "$ETC/slurmdbd.conf" 600 slurm && changed=0
  return $changed
}

start_munge() {
  running_pid "$MUNGE_PID" munged >/dev/null && return 0
  launched=1
  runuser -u munge -- /usr/sbin/munged </dev/null >/dev/null 2>&1 9>&- ||
    die "munged did not start" /var/log/munge/munged.log
  wait_for "$WAIT_S" munge -n || die "munge does not answer" /var/log/munge/munged.log
}

db_sql() {
  mariadb --no-defaults --socket="$DB_SOCKET" --user=root --batch "$@"
}

start_mariadb() {
  running_pid "$RUN/mariadb/mariadb.pid" mariadbd >/dev/null && return 0
  if [[ ! -d $STATE/mariadb/mysql ]]; then
    mariadb-install-db --no-defaults --user=mysql --datadir="$STATE/mariadb" \
      --auth-root-authentication-method=socket --skip-test-db >>"$LOGS/mariadb.log" 2>&1 ||
      die "mariadb-install-db failed" "$LOGS/mariadb.log"
  fi
  launched=1
  # slurmdbd logs an error for settings below half its advice (a 1 GiB InnoDB buffer pool,
  # a 900 s lock wait timeout); the pool is only touched as the small database grows.
  setsid mariadbd --no-defaults --user=mysql --datadir="$STATE/mariadb" \
    --pid-file="$RUN/mariadb/mariadb.pid" --socket="$DB_SOCKET" --port="$DB_PORT" \
    --bind-address=127.0.0.1 --skip-name-resolve --innodb-buffer-pool-size=512M \
    --innodb-lock-wait-timeout=900 \
    --log-error="$LOGS/mariadb.log" </dev/null >>"$LOGS/mariadb.log" 2>&1 9>&- &
  wait_for "$WAIT_S" db_sql -e 'SELECT 1' || die "MariaDB does not answer" "$LOGS/mariadb.log"
  local pass
  pass=$(cat "$DB_PASS_FILE")
  db_sql <<SQL || die "could not create the database user 'slurm'" "$LOGS/mariadb.log"
CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '$pass';
ALTER USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$pass';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
SQL
}

start_slurmdbd() {
  if ! running_pid "$RUN/slurmdbd.pid" slurmdbd >/dev/null; then
    launched=1
    /usr/sbin/slurmdbd </dev/null >/dev/null 2>&1 9>&- ||
      die "slurmdbd did not start" "$LOGS/slurmdbd.log"
  fi
  wait_for "$WAIT_S" sacctmgr --noheader list cluster ||
    die "slurmdbd does not answer" "$LOGS/slurmdbd.log"
  if ! sacctmgr --noheader --parsable2 list cluster format=cluster | grep -qx "$CLUSTER"; then
    sacctmgr --immediate add cluster "$CLUSTER" >/dev/null ||
      die "could not register cluster $CLUSTER with slurmdbd" "$LOGS/slurmdbd.log"
  fi
}

ctld_up() { scontrol ping 2>/dev/null | grep -q 'is UP'; }

start_slurmctld() {
  if ! running_pid "$RUN/slurmctld.pid" slurmctld >/dev/null; then
    launched=1
    /usr/sbin/slurmctld </dev/null >/dev/null 2>&1 9>&- ||
      die "slurmctld did not start" "$LOGS/slurmctld.log"
  fi
  wait_for "$WAIT_S" ctld_up || die "slurmctld does not answer" "$LOGS/slurmctld.log"
}

node_state() { sinfo --noheader --nodes="$(hostname -s)" --format=%T 2>/dev/null; }

node_ready() { [[ $(node_state) =~ ^(idle|mixed|allocated|completing)$ ]]; }

start_slurmd() {
  if ! running_pid "$RUN/slurmd.pid" slurmd >/dev/null; then
    launched=1
    /usr/sbin/slurmd </dev/null >/dev/null 2>&1 9>&- || die "slurmd did not start" "$LOGS/slurmd.log"
  fi
  wait_for 10 node_ready && return 0
  # slurmctld keeps a drain (e.g. from an earlier bad config, or a job it could not kill)
  # across restarts; a local cluster should come back usable, so resume the node once.
  say "node $(hostname -s) is '$(node_state)'" \
    "(reason: $(sinfo --noheader --list-reasons --format=%E 2>/dev/null)); resuming it"
  scontrol update NodeName="$(hostname -s)" State=RESUME >/dev/null 2>&1 || true
  wait_for "$WAIT_S" node_ready || die "node $(hostname -s) is '$(node_state)', not idle \
(reason: $(sinfo --noheader --list-reasons --format=%E 2>/dev/null))" "$LOGS/slurmd.log"
}

sacct_ready() { sacct --noheader --allocations --starttime=now >/dev/null; }

# Whether process $1 exists and is not a zombie (PID 1 of a container may reap late).
alive() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  [[ ${stat##*) } != Z* ]]
}

# stop NAME PIDFILE [LABEL]: SIGTERM (daemons save their state), SIGKILL after 30 s.
stop() {
  local pid label=${3:-$1}
  pid=$(running_pid "$2" "$1") || return 0
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + 30))
  while alive "$pid" && ((SECONDS < deadline)); do sleep 0.1; done
  if alive "$pid"; then
    say "$label ($pid) ignored SIGTERM for 30 s; killing it"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$2"
  say "stopped $label ($pid)"
}

stop_slurm() {
  stop slurmd "$RUN/slurmd.pid"
  stop slurmctld "$RUN/slurmctld.pid"
  stop slurmdbd "$RUN/slurmdbd.pid"
}

# ---------------------------------------------------------------- the two-node cluster

node_addr() { echo "$SUBNET.$((10 + ${1#n}))"; } # n1 -> 10.231.0.11
netns_of() { echo "vitscale-$1"; }               # its network namespace, and its veth on the host
two() { SLURM_CONF=$TWO_CONF "$@"; }             # a SLURM command for the two-node cluster

render_two() {
  local cpus real tmp
  cpus=$(cpus)
  # The nodes share the machine: each offers every CPU (as the host node does) and its
  # share of the memory.
  real=$(($(real_memory_mib) / ${#TWO_NODES[@]}))
  tmp=$(mktemp)
  sed -e "s|@CLUSTER@|$TWO_CLUSTER|g" -e "s|@PARTITION@|$TWO_PARTITION|g" \
    -e "s|@HOST@|$(hostname -s)|g" -e "s|@BRIDGE_ADDR@|$BRIDGE_ADDR|g" \
    -e "s|@CTLD_PORT@|$TWO_CTLD_PORT|g" -e "s|@FIRST_JOB_ID@|$TWO_FIRST_JOB_ID|g" \
    -e "s|@SLURMD_TIMEOUT@|$TWO_SLURMD_TIMEOUT|g" -e "s|@CONF@|$TWO_CONF|g" \
    -e "s|@CPUS@|$cpus|g" -e "s|@REAL_MEMORY@|$real|g" \
    -e "s|@DEF_MEM_PER_CPU@|$((real / cpus))|g" -e "s|@STATE@|$TWO_STATE|g" \
    -e "s|@LOGS@|$TWO_LOGS|g" -e "s|@RUN@|$TWO_RUN|g" -e "s|@DBD_PORT@|$DBD_PORT|g" \
    -e "s|@N1_ADDR@|$(node_addr n1)|g" -e "s|@N2_ADDR@|$(node_addr n2)|g" \
    "$TEMPLATES/two.conf.in" >"$tmp"
  install_if_changed "$tmp" "$TWO_CONF" 644 root
}

# The subnet must be the two-node cluster's alone: refuse it when an interface other than
# the bridge has an address in it or a route to it.
check_subnet() {
  local used
  used=$( {
    ip -4 -o addr show to "$SUBNET.0/24" | awk '{print $2}'
    ip -4 route show to match "$(node_addr n1)" | awk '$1 != "default" {for (i = 1; i < NF; i++) if ($i == "dev") print $(i + 1)}'
  } | { grep -vx -e "$BRIDGE" -e lo || true; } | sort -u | tr '\n' ' ')
  [[ -z $used ]] || die "$SUBNET.0/24 is already in use on this machine (by: $used);" \
    "the two-node cluster needs that subnet for itself"
}

net_up() {
  check_subnet
  ip link show "$BRIDGE" >/dev/null 2>&1 || ip link add "$BRIDGE" type bridge
  ip -4 -o addr show dev "$BRIDGE" | grep -q " $BRIDGE_ADDR/24 " ||
    ip addr add "$BRIDGE_ADDR/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  local node ns addr
  for node in "${TWO_NODES[@]}"; do
    ns=$(netns_of "$node")
    addr=$(node_addr "$node")
    [[ -e /run/netns/$ns ]] || ip netns add "$ns"
    # A veth pair: one end on the bridge, the other the node's eth0.
    ip link show "$ns" >/dev/null 2>&1 || ip link add "$ns" type veth peer name eth0 netns "$ns"
    ip link set "$ns" master "$BRIDGE" up
    # `nsenter --net`, not `ip netns exec`: the latter remounts /sys, which hides the cgroup
    # filesystem from what it starts (slurmd exits over that).
    nsenter --net="/run/netns/$ns" sh -ec "
      ip link set lo up
      ip -4 -o addr show dev eth0 | grep -q ' $addr/24 ' || ip addr add $addr/24 dev eth0
      ip link set eth0 up"
  done
}

# Every process in a node's network namespace (its slurmd, job steps, tasks): SIGTERM,
# SIGKILL after 10 s; returns once none is left.
end_processes_in() {
  local node=$1 ns pids pid left
  ns=$(netns_of "$node")
  [[ -e /run/netns/$ns ]] || return 0
  pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')
  [[ -n ${pids// /} ]] || return 0
  # shellcheck disable=SC2086
  kill -TERM $pids 2>/dev/null || true
  local deadline=$((SECONDS + 10))
  while ((SECONDS < deadline)); do
    left=()
    for pid in $pids; do alive "$pid" && left+=("$pid"); done
    ((${#left[@]})) || break
    sleep 0.1
  done
  for pid in $pids; do alive "$pid" && kill -KILL "$pid" 2>/dev/null; done
  deadline=$((SECONDS + 10))
  for pid in $pids; do
    while alive "$pid" && ((SECONDS < deadline)); do sleep 0.1; done
  done
  say "ended $(wc -w <<<"$pids") process(es) left on $node"
}

net_down() {
  local node ns
  for node in "${TWO_NODES[@]}"; do
    ns=$(netns_of "$node")
    end_processes_in "$node"
    ! ip link show "$ns" >/dev/null 2>&1 || ip link del "$ns"
    [[ ! -e /run/netns/$ns ]] || ip netns del "$ns"
  done
  ! ip link show "$BRIDGE" >/dev/null 2>&1 || ip link del "$BRIDGE"
}

# A node's view of the machine: its own /etc/hosts (names resolve to the bridge's
# addresses: gloo resolves a node's hostname to find its own address) and a resolver on
# loopback (the host's DNS is out of reach from the namespace: lookups fail at once
# instead of after a 10 s timeout).
node_files() {
  local dir=$TWO_RUN/$1 n
  install -d -m 755 "$dir"
  {
    echo "127.0.0.1 localhost"
    echo "$BRIDGE_ADDR $(hostname -s)"
    for n in "${TWO_NODES[@]}"; do echo "$(node_addr "$n") $n"; done
  } >"$dir/hosts"
  echo "nameserver 127.0.0.1" >"$dir/resolv.conf"
}

two_ctld_up() { two scontrol ping 2>/dev/null | grep -q 'is UP'; }

start_two_ctld() {
  if ! sacctmgr --noheader --parsable2 list cluster format=cluster | grep -qx "$TWO_CLUSTER"; then
    sacctmgr --immediate add cluster "$TWO_CLUSTER" >/dev/null ||
      die "could not register cluster $TWO_CLUSTER with slurmdbd" "$LOGS/slurmdbd.log"
  fi
  if ! running_pid "$TWO_RUN/slurmctld.pid" slurmctld >/dev/null; then
    launched=1
    /usr/sbin/slurmctld -f "$TWO_CONF" </dev/null >/dev/null 2>&1 9>&- ||
      die "slurmctld of $TWO_CLUSTER did not start" "$TWO_LOGS/slurmctld.log"
  fi
  wait_for "$WAIT_S" two_ctld_up ||
    die "slurmctld of $TWO_CLUSTER does not answer" "$TWO_LOGS/slurmctld.log"
}

# A node's slurmd: in the node's network namespace (nsenter --net) and in a UTS and mount
# namespace of its own (its hostname, its /etc/hosts and resolv.conf), which every job
# step it starts inherits.
start_node() {
  local node=$1 pidfile=$TWO_RUN/slurmd-$1.pid
  running_pid "$pidfile" slurmd >/dev/null && return 0
  rm -f "$pidfile" # a SIGKILLed slurmd leaves its pid file behind
  node_files "$node"
  launched=1
  nsenter --net="/run/netns/$(netns_of "$node")" \
    unshare --uts --mount --propagation slave -- sh -ec "
      hostname $node
      mount --bind $TWO_RUN/$node/hosts /etc/hosts
      mount --bind $TWO_RUN/$node/resolv.conf /etc/resolv.conf
      exec /usr/sbin/slurmd -f $TWO_CONF -N $node" </dev/null >/dev/null 2>&1 9>&- ||
    die "slurmd of $node did not start" "$TWO_LOGS/slurmd-$node.log"
}

two_node_state() { two sinfo --noheader --nodes="$1" --format=%T 2>/dev/null; }

two_nodes_ready() {
  local node
  for node in "${TWO_NODES[@]}"; do
    [[ $(two_node_state "$node") =~ ^(idle|mixed|allocated|completing)$ ]] || return 1
  done
}

stop_two() {
  local node
  for node in "${TWO_NODES[@]}"; do
    stop slurmd "$TWO_RUN/slurmd-$node.pid" "slurmd of $node"
  done
  stop slurmctld "$TWO_RUN/slurmctld.pid" "slurmctld of $TWO_CLUSTER"
}

two_up() {
  local started=$SECONDS node
  launched=0
  install_packages iproute2 util-linux
  install -d -m 755 "$TWO_ETC" "$TWO_STATE"
  install -d -m 755 -o slurm -g slurm "$TWO_LOGS" "$TWO_STATE/slurmctld" "$TWO_RUN"
  [[ -e $TWO_LOGS/slurmctld.log ]] || install -m 640 -o slurm -g slurm /dev/null "$TWO_LOGS/slurmctld.log"
  if render_two; then
    say "configuration written to $TWO_CONF"
    stop_two
  fi
  net_up
  start_two_ctld
  for node in "${TWO_NODES[@]}"; do start_node "$node"; done
  if ! wait_for 10 two_nodes_ready; then
    for node in "${TWO_NODES[@]}"; do
      [[ $(two_node_state "$node") =~ ^(idle|mixed|allocated|completing)$ ]] && continue
      say "node $node is '$(two_node_state "$node")'; resuming it"
      two scontrol update NodeName="$node" State=RESUME >/dev/null 2>&1 || true
    done
    wait_for "$WAIT_S" two_nodes_ready || die "nodes of $TWO_CLUSTER: $(two sinfo --noheader \
--Node --format='%N %T %E' | tr '\n' ';')" "$TWO_LOGS/slurmd-n1.log"
  fi
  local how="already up"
  ((launched)) && how="up in $((SECONDS - started)) s"
  say "cluster '$TWO_CLUSTER' $how: nodes n1 ($(node_addr n1)) and n2 ($(node_addr n2))," \
    "partition '$TWO_PARTITION'; use it with SLURM_CONF=$TWO_CONF"
}

two_down() {
  local purge=$1
  if ((purge)) && two_ctld_up; then
    two scancel --partition="$TWO_PARTITION" 2>/dev/null || true
    wait_for 60 test -z "$(two squeue --noheader 2>/dev/null)" ||
      say "jobs still in the queue of $TWO_CLUSTER after 60 s: $(two squeue --noheader | wc -l)"
  fi
  stop_two
  net_down
  if ((purge)); then
    rm -rf "$TWO_STATE" "$TWO_ETC" "$TWO_LOGS" "$TWO_RUN"
    say "removed the state, configuration and logs of $TWO_CLUSTER"
  fi
}

# Whether anything of the two-node cluster is there: a daemon or a namespace.
two_present() {
  local node
  running_pid "$TWO_RUN/slurmctld.pid" slurmctld >/dev/null && return 0
  ip link show "$BRIDGE" >/dev/null 2>&1 && return 0
  for node in "${TWO_NODES[@]}"; do
    [[ -e /run/netns/$(netns_of "$node") ]] && return 0
    running_pid "$TWO_RUN/slurmd-$node.pid" slurmd >/dev/null && return 0
  done
  return 1
}

# parse_options COMMAND ARGS...: sets `nodes` (--nodes N: 1 or 2) and `purge` (--purge, for
# down only).
parse_options() {
  local command=$1 valid="--nodes 2"
  shift
  [[ $command == down ]] && valid+=", --purge"
  nodes=1 purge=0
  while (($#)); do
    case $1 in
    --nodes)
      [[ ${2:-} =~ ^[12]$ ]] || die "--nodes takes 1 (the single-node cluster) or 2 (the" \
        "two-node cluster beside it), got '${2:-}'"
      nodes=$2
      shift 2
      ;;
    --purge)
      [[ $command == down ]] || die "unknown option '$1' for $command; valid: $valid"
      purge=1
      shift
      ;;
    *) die "unknown option '$1' for $command; valid: $valid" ;;
    esac
  done
}

# Concurrent `up`s and `down`s (make, pytest) take turns. The daemons must not inherit fd
# 9 (hence the `9>&-` where they start), or the lock would outlive this script.
take_lock() {
  install -d -m 755 "$RUN"
  exec 9>"$RUN/lock"
  flock --wait 600 9 || die "another 'up' or 'down' has held $RUN/lock for 10 minutes"
}

cmd_up() {
  need_root up
  local nodes purge started=$SECONDS
  parse_options up "$@"
  install -d -m 755 "$RUN" "$STATE" "$LOGS"
  take_lock
  install_packages
  make_dirs
  if write_configs; then
    say "configuration written to $ETC"
    stop_slurm # running daemons must read the new configuration
  fi
  start_munge
  start_mariadb
  start_slurmdbd
  start_slurmctld
  start_slurmd
  wait_for "$WAIT_S" sacct_ready || die "sacct does not answer" "$LOGS/slurmdbd.log"
  local how="already up"
  ((launched)) && how="up in $((SECONDS - started)) s"
  say "cluster '$CLUSTER' $how: node $(hostname -s) ($(cpus) CPUs)," \
    "partition '$PARTITION'; logs in $LOGS"
  ((nodes == 1)) || two_up
}

cmd_down() {
  need_root down
  local nodes purge
  parse_options down "$@"
  take_lock
  if two_present || ((nodes == 2 && purge)); then
    two_down "$purge"
  fi
  ((nodes == 1)) || return 0
  if ((purge)) && ctld_up; then
    scancel --partition="$PARTITION" 2>/dev/null || true
    wait_for 60 test -z "$(squeue --noheader 2>/dev/null)" ||
      say "jobs still in the queue after 60 s: $(squeue --noheader | wc -l)"
  elif ctld_up && [[ -n $(squeue --noheader 2>/dev/null) ]]; then
    say "$(squeue --noheader | wc -l) job(s) left in the queue: running ones keep running," \
      "all are SLURM's again after the next 'up' ('down --purge' cancels them)"
  fi
  stop_slurm
  stop mariadbd "$RUN/mariadb/mariadb.pid"
  stop munged "$MUNGE_PID"
  if ((purge)); then
    rm -rf "$STATE" "$ETC/slurm.conf" "$ETC/slurmdbd.conf" "$TWO_ETC"
    say "removed $STATE and the configs in $ETC"
  fi
}

cmd_status() {
  local name file all=0 pid node
  for name in munged:$MUNGE_PID mariadbd:$RUN/mariadb/mariadb.pid \
    slurmdbd:$RUN/slurmdbd.pid slurmctld:$RUN/slurmctld.pid slurmd:$RUN/slurmd.pid; do
    file=${name#*:}
    name=${name%%:*}
    if pid=$(running_pid "$file" "$name"); then
      printf '%-10s running (pid %s)\n' "$name" "$pid"
    else
      printf '%-10s stopped\n' "$name"
      all=3
    fi
  done
  if ctld_up; then
    echo
    sinfo --Node --long
    echo
    squeue
  fi
  if two_present; then
    printf '\ncluster %s (SLURM_CONF=%s):\n' "$TWO_CLUSTER" "$TWO_CONF"
    for name in "slurmctld:$TWO_RUN/slurmctld.pid:" "slurmd:$TWO_RUN/slurmd-n1.pid:n1" \
      "slurmd:$TWO_RUN/slurmd-n2.pid:n2"; do
      IFS=: read -r name file node <<<"$name"
      if pid=$(running_pid "$file" "$name"); then
        printf '%-10s %-3s running (pid %s)\n' "$name" "$node" "$pid"
      else
        printf '%-10s %-3s stopped\n' "$name" "$node"
        all=3
      fi
    done
    for node in "${TWO_NODES[@]}"; do
      if [[ -e /run/netns/$(netns_of "$node") ]]; then
        printf 'namespace  %-3s %s, %s\n' "$node" "$(netns_of "$node")" "$(node_addr "$node")"
      else
        printf 'namespace  %-3s missing\n' "$node"
        all=3
      fi
    done
    if two_ctld_up; then
      echo
      two sinfo --Node --long
      echo
      two squeue
    fi
  fi
  printf '\nlogs: %s\n' "$LOGS"
  return $all
}

case ${1:-} in
up) cmd_up "${@:2}" ;;
down) cmd_down "${@:2}" ;;
status) cmd_status ;;
*)
  echo "usage: $0 up [--nodes 2] | down [--nodes 2] [--purge] | status" >&2
  exit 2
  ;;
esac
