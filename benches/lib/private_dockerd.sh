# shellcheck shell=bash
# Sourced by the Docker benchmarks: a private dockerd and a busybox image
# root, torn down on exit. Nothing of the host's Docker is touched.
#
#   start_private_dockerd DIR   dockerd as pid 1 of its own pid, mount and
#                               network namespaces (its containers, mounts
#                               and interfaces go with it), on DIR/d.sock;
#                               sets DOCKER_HOST, engine_sock, unshare_pid
#                               and engine_pid; DIR/dockerd.log is its log
#   busybox_root DIR            DIR/bin with the static busybox as sh,
#                               sleep and true, for `docker import`
#   stop_private_dockerd        kills it (call from the caller's EXIT trap)
#   everything_policy FILE SOCK LOCK  writes a policy that removes every
#                               unused object at any age (what `docker
#                               system prune -a -f --volumes` removes)
#   engine_ticks                CPU clock ticks used so far by every process
#                               in the engine's pid namespace
#   remove_dir DIR              removes DIR once the engine has let go

start_private_dockerd() {
  local dir=$1
  engine_sock="$dir/d.sock"
  # shellcheck disable=SC2016 # $1 and $2 are the inner shell's arguments
  unshare --pid --fork --kill-child --mount --mount-proc --net --propagation private \
    sh -c 'ip link set lo up; mount -n -t tmpfs sp-run /run && exec dockerd --data-root "$1/data" \
      --exec-root "$1/exec" --host "unix://$2" --pidfile "$1/pid" --bridge=none --iptables=false' \
    sh "$dir" "$engine_sock" >"$dir/dockerd.log" 2>&1 &
  unshare_pid=$!
  export DOCKER_HOST="unix://$engine_sock"
  for _ in $(seq 1 150); do docker info >/dev/null 2>&1 && break; sleep 0.2; done
  docker info >/dev/null || { echo "dockerd did not start; log: $dir/dockerd.log" >&2; return 1; }
  # shellcheck disable=SC2034 # for the sourcing script
  engine_pid=$(cut -d' ' -f1 "/proc/$unshare_pid/task/$unshare_pid/children")
}

stop_private_dockerd() {
  # unshare blocks SIGTERM while its child runs; SIGKILL with --kill-child
  # kills dockerd, pid 1 of the namespace, and with it all inside.
  if [ -n "${unshare_pid:-}" ]; then
    kill -KILL "$unshare_pid" 2>/dev/null || true
    wait "$unshare_pid" 2>/dev/null || true
  fi
  unshare_pid=""
}

# Removes DIR, retrying briefly: the killed namespace's last processes may
# still be letting go of files in it.
remove_dir() {
  for _ in $(seq 1 50); do rm -rf "$1" 2>/dev/null && return; sleep 0.1; done
  rm -rf "$1"
}

busybox_root() {
  mkdir -p "$1/bin"
  cp /bin/busybox "$1/bin/busybox"
  for applet in sh sleep true; do ln -sf busybox "$1/bin/$applet"; done
}

# CPU seconds (in clock ticks) of every process in the engine's pid
# namespace, with what their reaped children used.
engine_ticks() {
  local total=0 pid stat ns
  ns=$(readlink "/proc/$engine_pid/ns/pid")
  for pid in /proc/[0-9]*; do
    [ "$(readlink "$pid/ns/pid" 2>/dev/null)" = "$ns" ] || continue
    stat=$(cut -d')' -f2- "$pid/stat" 2>/dev/null) || continue
    # Fields after "(comm)": utime, stime, cutime, cstime are the 12th-15th.
    total=$((total + $(awk '{print $12 + $13 + $14 + $15}' <<<"$stat")))
  done
  echo "$total"
}

everything_policy() {
  cat >"$1" <<YAML
runtime: { kind: docker, docker: { endpoint: unix://$2 } }
containers: { min_age: "0" }
images: { min_age: "0", keep_unpullable: false }  # imported: none can come back
volumes: { enabled: true, anonymous_only: false, min_age: "0" }
networks: { min_age: "0" }
build_cache: { min_age: "0" }
safety: { max_deletions: 1000000 }
lock_file: $3
YAML
}
