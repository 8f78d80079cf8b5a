#!/usr/bin/env bash
# A command longer than one call to the lent GPU machine (10 minutes), run across back-to-back calls: `start` runs it
# in its own process session (which outlives the call while the machine stays warm, ~30 s between calls) with its
# output in DIR/log; `wait` waits for it up to SECONDS and packs DIR (logs, JSON, each run's metrics.jsonl; no
# checkpoints) into OUT/DIR's-name.tgz every 15 s and once it ends, so a call cut at its limit still brings back what
# ran so far.
# Exit status of `wait`: 0 once the command ended (DIR/rc holds its status), 3 while it still runs.
#   bash bench/gpu_background.sh start DIR CMD [ARG ...]
#   bash bench/gpu_background.sh wait DIR SECONDS OUT
set -euo pipefail
verb=${1:?start or wait} dir=${2:?DIR}
pack() {
  (cd "$dir/.." && find "$(basename "$dir")" -maxdepth 3 \( -name '*.log' -o -name log -o -name rc -o -name '*.json' \
    -o -name metrics.jsonl \) -print0 | tar czf "$1/$(basename "$dir").tgz.new" --null -T - \
    && mv "$1/$(basename "$dir").tgz.new" "$1/$(basename "$dir").tgz")
}
case $verb in
  start)
    shift 2
    mkdir -p "$dir"
    # stdio detached too: a caller reading this script's output (a device call, a test) must not wait on the command
    setsid bash -c '"$@" >"$0/log" 2>&1; echo $? >"$0/rc"' "$dir" "$@" </dev/null >/dev/null 2>&1 &
    echo "gpu_background: started in $dir (pid $!)"
    ;;
  wait)
    seconds=${3:?SECONDS} out=${4:?OUT}
    SECONDS=0 packed=-15
    while [ ! -f "$dir/rc" ] && [ $SECONDS -lt "$seconds" ]; do  # back within a second of the end: device time
      if [ $((SECONDS - packed)) -ge 15 ]; then pack "$out" && packed=$SECONDS; fi
      sleep 1
    done
    pack "$out"
    tail -n 20 "$dir/log"
    [ -f "$dir/rc" ] && echo "gpu_background: ended, rc $(cat "$dir/rc")" && exit 0
    echo "gpu_background: still running after ${SECONDS} s" && exit 3
    ;;
  *) echo "gpu_background: unknown verb $verb (start or wait)" >&2 && exit 2 ;;
esac
