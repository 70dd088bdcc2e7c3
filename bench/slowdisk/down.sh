#!/bin/sh
# Undo up.sh: unmount the ext4, detach the loop device, unmount slowfs, remove the backing file.
D=${1:-/tmp/reef-slowdisk}
umount "$D/ext4" 2>/dev/null
losetup -d "$(cat "$D/loop.dev" 2>/dev/null)" 2>/dev/null
umount "$D/fuse" 2>/dev/null
kill "$(cat "$D/fuse.pid" 2>/dev/null)" 2>/dev/null
rm -f "$D/real/disk.img"
true
