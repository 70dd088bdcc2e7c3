#!/bin/sh
# A disk with slow flushes, for bench/ledger_bench.py --dir: ext4 on a loop device whose backing file lives on
# slowfs.py (a FUSE passthrough whose fsync waits DELAY_MS more, one at a time). Needs root, loop devices, FUSE,
# libfuse2 (apt-get install libfuse2) and fusepy in a scratch venv: python3 -m venv /tmp/fusevenv &&
# /tmp/fusevenv/bin/pip install fusepy. Not part of the test suite. Usage: up.sh DELAY_MS [DIR]; down.sh [DIR].
set -eu
DELAY=${1:?usage: up.sh DELAY_MS [DIR]}
D=${2:-/tmp/reef-slowdisk}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$D/real" "$D/fuse" "$D/ext4"
/tmp/fusevenv/bin/python "$HERE/slowfs.py" "$D/real" "$D/fuse" "$DELAY" > "$D/fuse.log" 2>&1 &
echo $! > "$D/fuse.pid"
for _ in 1 2 3 4 5 6 7 8 9 10; do mountpoint -q "$D/fuse" && break; sleep 0.3; done
truncate -s 512M "$D/fuse/disk.img"
losetup -f --show "$D/fuse/disk.img" > "$D/loop.dev"
mkfs.ext4 -q "$(cat "$D/loop.dev")"
mount "$(cat "$D/loop.dev")" "$D/ext4"
echo "ext4 on $(cat "$D/loop.dev") over slowfs (+$DELAY ms per flush): $D/ext4"
