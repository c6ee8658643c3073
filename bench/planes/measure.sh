# Sourced by the benchmarks here: measure NAME COMMAND... runs COMMAND with
# its output in $work/out and prints its wall seconds and peak RSS.
measure() {
  local name=$1; shift
  /usr/bin/time -f "%e %M" -o "$work/time" "$@" >"$work/out" 2>&1
  read -r secs kb <"$work/time"
  printf "%-28s %8.2f s %8d MiB\n" "$name" "$secs" $((kb / 1024))
}
