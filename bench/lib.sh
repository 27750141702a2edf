# shellcheck shell=bash disable=SC2034 # the variables it sets are for the sourcing script
# bench/lib.sh: shared helpers for the cluster benchmarks (bench/cluster, bench/scale,
# bench/deployments). Sourced, never run. Sets `set -euo pipefail`, cds to the repository root
# and provides:
#   bench_init NAME          tools (jq, GNU time), the certgen binary ($certgen), $work, traps
#   cluster_up               starts a control plane with tests/testenv/up; stopped at exit
#   machine_header           machine, date, binary, load: printed at the top of every report
#   fresh_ns PREFIX          creates a new namespace and prints its name
#   now_ms                   a monotonic-enough wall clock in milliseconds
#   median N...              the median of numbers (mean of the middle two for an even count)
#   verdict VALUE OP TARGET  PASS or MISS (OP is <= or >=), with the margin of a miss
#   cg_run OUTFILE ARGS...   runs certgen with --output json, records wall ms and the exit code
#   kubectl_requests LOG     counts the API requests a `kubectl -v=6` run logged
# Environment: CERTGEN=path benchmarks another binary (default: target/release/certgen, built
# with `cargo build --release` first so the current source is measured); BENCH_KEEP=1 keeps the
# work directory and leaves the control plane's state directory for inspection (it is still
# stopped).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
bench_name=bench

say() { printf '%s\n' "$*" >&2; }
die() {
  say "$bench_name: $*"
  exit 1
}

apt_updated=
need() { # need COMMAND DEBIAN-PACKAGE
  command -v "$1" >/dev/null 2>&1 && return 0
  say "installing $2 (apt-get)"
  if ! apt-get install -y -qq "$2" >/dev/null 2>&1; then
    if [[ -z $apt_updated ]]; then
      apt-get update -qq >/dev/null 2>&1 || true
      apt_updated=1
    fi
    apt-get install -y -qq "$2" >/dev/null || die "could not install $2"
  fi
  command -v "$1" >/dev/null 2>&1 || die "$1 still missing after installing $2"
}

# Cleanup runs on every exit path: the control plane first, then the work directory.
testenv_state=
work=
bench_cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [[ -n $testenv_state ]]; then
    "$root/tests/testenv/down" "$testenv_state" >/dev/null 2>&1 ||
      say "$bench_name: tests/testenv/down $testenv_state failed; stop it by hand"
  fi
  if [[ -n $work ]]; then
    if [[ ${BENCH_KEEP:-} == 1 ]]; then say "kept $work"; else rm -rf -- "$work"; fi
  fi
  exit "$rc"
}

bench_init() { # bench_init NAME
  bench_name=$1
  need jq jq
  [[ -x /usr/bin/time ]] || need /usr/bin/time time
  /usr/bin/time -f '%e %M' true 2>/dev/null >/dev/null || die "/usr/bin/time is not GNU time"
  certgen=${CERTGEN:-}
  if [[ -z $certgen ]]; then
    say "building target/release/certgen (cargo build --release; waits if another build holds the lock)"
    cargo build --release --quiet || die "cargo build --release failed"
    certgen=${CARGO_TARGET_DIR:-$root/target}/release/certgen
  fi
  [[ -x $certgen ]] || die "$certgen is not an executable"
  work=$(mktemp -d "${TMPDIR:-/tmp}/certgen-$bench_name.XXXXXX")
  trap bench_cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
}

cluster_up() {
  local exports
  say "starting a control plane (tests/testenv/up, ~10 s)"
  exports=$("$root/tests/testenv/up") || die "tests/testenv/up failed"
  eval "$exports"
  testenv_state=$TESTENV_DIR
  kubectl="$("$root/tests/testenv/build" </dev/null 2>/dev/null | tail -n 1)/kubectl"
  [[ -x $kubectl ]] || die "no kubectl at $kubectl"
  say "control plane up: $KUBECONFIG"
}

# Cores in use over 1 s, from /proc/stat: "1.83 of 2".
busy_cores() {
  local a b
  read -r _ a1 a2 a3 a4 a5 a6 a7 a8 _ </proc/stat
  sleep 1
  read -r _ b1 b2 b3 b4 b5 b6 b7 b8 _ </proc/stat
  a=$(((b1 + b2 + b3 + b6 + b7 + b8) - (a1 + a2 + a3 + a6 + a7 + a8)))
  b=$(((b1 + b2 + b3 + b4 + b5 + b6 + b7 + b8) - (a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8)))
  awk -v busy="$a" -v all="$b" -v n="$(nproc)" 'BEGIN { printf "%.2f of %d", (all ? busy / all * n : 0), n }'
}

machine_header() {
  local cpu built rev
  cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
  built=$(date -u -r "$certgen" '+%Y-%m-%d %H:%M UTC')
  rev=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
  if [[ -n $(git -C "$root" status --porcelain -- src Cargo.toml Cargo.lock 2>/dev/null) ]]; then
    rev="$rev + uncommitted changes in src/"
  fi
  # The tree is where the bench runs, not necessarily what the binary was built from: say so
  # when the binary predates the last commit that changed the sources.
  local changed
  changed=$(git -C "$root" log -1 --format=%ct -- src Cargo.toml Cargo.lock 2>/dev/null || echo 0)
  if [[ -n $changed && $(date -r "$certgen" +%s) -lt $changed ]]; then
    rev="$rev; the binary is older than the tree's last source change, so it may be built from an earlier tree"
  fi
  echo "machine: $(nproc) cores, ${cpu:-unknown CPU}, $(awk '/^MemTotal:/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo) RAM"
  echo "date:    $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "certgen: $certgen (built $built; tree at $rev)"
  echo "load:    loadavg $(cut -d' ' -f1-3 /proc/loadavg); $(busy_cores) cores in use just before the timing"
}

# Just the load line, for the end of a run (how busy the machine was while timing).
load_line() {
  echo "load:    loadavg $(cut -d' ' -f1-3 /proc/loadavg); $(busy_cores) cores in use just after the timing"
}

# kc ARGS...: the matching kubectl on the bench's control plane. Its discovery cache lives in
# the work dir, not ~/.kube, so every run starts alike.
kc() { "$kubectl" --kubeconfig "$KUBECONFIG" --cache-dir "$work/kube-cache" "$@"; }

ns_seq=0
fresh_ns() { # fresh_ns PREFIX
  ns_seq=$((ns_seq + 1))
  local ns="$1-$ns_seq-$RANDOM"
  kc create namespace "$ns" >/dev/null
  echo "$ns"
}

now_ms() { echo $(($(date +%s%N) / 1000000)); }

median() {
  printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END {
    if (NR == 0) { print "nan"; exit }
    if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

verdict() { # verdict VALUE OP TARGET -> "PASS" or "MISS (+X, Y.Yx the target)"
  awk -v v="$1" -v op="$2" -v t="$3" 'BEGIN {
    ok = (op == "<=") ? (v <= t) : (v >= t)
    if (ok) { print "PASS"; exit }
    d = v - t; r = (t != 0) ? sprintf(", %.2fx the target", v / t) : ""
    printf "MISS (%s%g%s)\n", (d > 0 ? "+" : ""), d, r }'
}

# cg_run OUT ARGS...: certgen ARGS --output json -q > OUT.json, stderr > OUT.err; sets
# cg_ms (wall ms, process start to exit), cg_t0_ms (start, epoch ms) and cg_rc. Exit codes
# are checked by the caller.
# cg_log=(-v --log-format json) instead of the default (-q) keeps timestamped logs in OUT.err.
cg_log=(-q)
cg_run() {
  local out=$1 t0
  shift
  t0=$(now_ms)
  cg_t0_ms=$t0
  set +e
  "$certgen" "$@" --output json "${cg_log[@]}" >"$out.json" 2>"$out.err"
  cg_rc=$?
  set -e
  cg_ms=$(($(now_ms) - t0))
}

# cg_ok OUT: dies with certgen's stderr when the last cg_run did not exit 0.
cg_ok() {
  [[ $cg_rc == 0 ]] || die "certgen exited $cg_rc ($1):"$'\n'"$(tail -n 20 "$1.err")"
}

# field OUT JQ: one value from a report.
field() { jq -r "$2" "$1.json"; }

# kubectl_requests LOG: the API requests a `kubectl -v=6` run made, one log line each
# (klog's round_trippers "Response" line), split into "total discovery" (discovery is
# /api, /apis and /openapi; served from the cache dir once warm).
kubectl_requests() {
  awk '/round_trippers.go/ && /(Response|verb=|[0-9]{3} [A-Za-z ]+ in [0-9]+ milliseconds)/ {
         n++
         if ($0 ~ /url="?https?:\/\/[^\/ ]+\/(api|apis|openapi\/[^" ]*)(\?[^" ]*)?"? /) d++
       }
       END { printf "%d %d\n", n, d }' "$1"
}
