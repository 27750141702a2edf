# Helpers shared by ./down and ./cert-manager-down: stop exactly the processes a state
# directory's pids file recorded, never anything by name. Sourced; uses $state.

# ours NAME PID: PID is alive (not a zombie), is program NAME, and its command
# line mentions the state directory.
ours() {
  local name=$1 pid=$2 st exe argv0 cmdline
  st=$(awk '{ print $3 }' "/proc/$pid/stat" 2>/dev/null) || return 1
  [ "$st" != Z ] || return 1
  exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || exe=
  exe=${exe% (deleted)}
  IFS= read -r -d '' argv0 2>/dev/null <"/proc/$pid/cmdline" || argv0=
  [ "${exe##*/}" = "$name" ] || [ "${argv0##*/}" = "$name" ] || return 1
  cmdline=$(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline") || return 1
  [[ $cmdline == *"$state"* ]]
}

# gone NAME PID TENTHS: wait up to TENTHS/10 s for the process to go away.
gone() {
  local i
  for ((i = 0; i < $3; i++)); do
    ours "$1" "$2" || return 0
    sleep 0.1
  done
  ! ours "$1" "$2"
}

# stop_recorded STATE PREFIX: stops the recorded processes whose name starts with PREFIX (all
# when empty), in reverse start order: SIGTERM (and SIGCONT, for one that was stopped), up to
# 10 s, then SIGKILL to that PID alone.
# Returns the number that survived.
stop_recorded() {
  local state=$1 only=$2 survivors=0
  local lines=() i name pid
  if [ -f "$state/pids" ]; then
    mapfile -t lines <"$state/pids"
  fi
  for ((i = ${#lines[@]} - 1; i >= 0; i--)); do
    read -r name pid _ <<<"${lines[i]}" || continue
    [[ ${pid:-} =~ ^[0-9]+$ ]] || continue
    [ -z "$only" ] || [[ $name == $only* ]] || continue
    ours "$name" "$pid" || continue
    echo "testenv/down: stopping $name (pid $pid)" >&2
    kill -TERM "$pid" 2>/dev/null || true
    # A process a test stopped (SIGSTOP: the set tests pause an API server) acts on SIGTERM
    # only once continued; a test killed before its guard resumed it leaves it stopped.
    kill -CONT "$pid" 2>/dev/null || true
    gone "$name" "$pid" 100 && continue
    echo "testenv/down: $name (pid $pid) ignored SIGTERM for 10s; sending SIGKILL" >&2
    kill -KILL "$pid" 2>/dev/null || true
    gone "$name" "$pid" 50 && continue
    echo "testenv/down: $name (pid $pid) is still running" >&2
    survivors=$((survivors + 1))
  done
  return "$survivors"
}
