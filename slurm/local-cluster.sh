#!/usr/bin/env bash
# A real single-node SLURM cluster on this machine, for tests and demos.
#
#   slurm/local-cluster.sh up              install (apt), configure and start everything,
#                                          then wait until the node is idle and sacct answers
#   slurm/local-cluster.sh down [--purge]  stop the daemons; --purge also cancels all jobs and
#                                          deletes the job state, logs and accounting database
#   slurm/local-cluster.sh status          which daemons run, the node, the queue
#
# Debian 12 (bookworm), as root, with or without an init system: apt is kept from starting
# services, the daemons are started here and stopped through their pid files. Both `up` and
# `down` are idempotent; `up` on a running cluster only checks it (well under a second).
#
# Layout: configs in /etc/slurm (where Debian's slurm tools look, so sbatch/sacct/submitit
# need no environment), rendered from slurm/local/*.conf.in; job state, the MariaDB data
# and the logs under /var/lib/vitscale-slurm; pid files and the DB socket in
# /run/vitscale-slurm.
set -euo pipefail
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

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

install_packages() {
  local p missing=()
  for p in "${PACKAGES[@]}"; do
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

# render TEMPLATE DEST MODE OWNER: write DEST from TEMPLATE if it differs; returns 0 when
# it wrote something.
render() {
  local mem_mib margin real cpus tmp
  cpus=$(nproc)
  mem_mib=$(awk '/^MemTotal:/ {print int($2 / 1024)}' /proc/meminfo)
  # Leave the OS and the daemons 10 % (at least 512 MiB): slurmd drains a node whose
  # RealMemory is more than it finds.
  margin=$((mem_mib / 10 > 512 ? mem_mib / 10 : 512))
  real=$((mem_mib - margin))
  tmp=$(mktemp)
  sed -e "s|@CLUSTER@|$CLUSTER|g" -e "s|@PARTITION@|$PARTITION|g" \
    -e "s|@HOST@|$(hostname -s)|g" -e "s|@CPUS@|$cpus|g" -e "s|@REAL_MEMORY@|$real|g" \
    -e "s|@DEF_MEM_PER_CPU@|$((real / cpus))|g" -e "s|@STATE@|$STATE|g" \
    -e "s|@LOGS@|$LOGS|g" -e "s|@RUN@|$RUN|g" -e "s|@DBD_PORT@|$DBD_PORT|g" \
    -e "s|@DB_PORT@|$DB_PORT|g" -e "s|@DB_PASS@|$(cat "$DB_PASS_FILE")|g" \
    "$TEMPLATES/$1" >"$tmp"
  if cmp -s "$tmp" "$2" && [[ $(stat -c '%a %U' "$2") == "$3 $4" ]]; then
    rm -f "$tmp"
    return 1
  fi
  install -m "$3" -o "$4" -g "$4" "$tmp" "$2"
  rm -f "$tmp"
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

# stop NAME PIDFILE: SIGTERM (daemons save their state), SIGKILL after 30 s.
stop() {
  local pid
  pid=$(running_pid "$2" "$1") || return 0
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + 30))
  while alive "$pid" && ((SECONDS < deadline)); do sleep 0.1; done
  if alive "$pid"; then
    say "$1 ($pid) ignored SIGTERM for 30 s; killing it"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$2"
  say "stopped $1 ($pid)"
}

stop_slurm() {
  stop slurmd "$RUN/slurmd.pid"
  stop slurmctld "$RUN/slurmctld.pid"
  stop slurmdbd "$RUN/slurmdbd.pid"
}

cmd_up() {
  need_root up
  local started=$SECONDS
  install -d -m 755 "$RUN" "$STATE" "$LOGS"
  # Concurrent `up`s (make, pytest) take turns. The daemons must not inherit fd 9 (hence
  # the `9>&-` where they start), or the lock would outlive this script.
  exec 9>"$RUN/lock"
  flock --wait 600 9 || die "another 'up' has held $RUN/lock for 10 minutes"
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
  say "cluster '$CLUSTER' $how: node $(hostname -s) ($(nproc) CPUs)," \
    "partition '$PARTITION'; logs in $LOGS"
}

cmd_down() {
  need_root down
  local purge=0
  case ${1:-} in
  '') ;;
  --purge) purge=1 ;;
  *) die "unknown option '$1' for down; valid: --purge" ;;
  esac
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
    rm -rf "$STATE" "$ETC/slurm.conf" "$ETC/slurmdbd.conf"
    say "removed $STATE and the configs in $ETC"
  fi
}

cmd_status() {
  local name file all=0 pid
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
  printf '\nlogs: %s\n' "$LOGS"
  return $all
}

case ${1:-} in
up) cmd_up ;;
down) cmd_down "${@:2}" ;;
status) cmd_status ;;
*)
  echo "usage: $0 up | down [--purge] | status" >&2
  exit 2
  ;;
esac
