"""A passthrough FUSE filesystem whose fsync waits DELAY ms longer, one at a time: a device with slow flushes.
Backs the loop device of bench/slowdisk/up.sh (ext4 on top keeps its own journal batching). Not part of reef.

    python slowfs.py BACKING_DIR MOUNTPOINT DELAY_MS      (needs fusepy and libfuse2)
"""

import os
import sys
import threading
import time

from fuse import FUSE, Operations

_STAT = ("st_atime", "st_ctime", "st_gid", "st_mode", "st_mtime", "st_nlink", "st_size", "st_uid")
_STATVFS = ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree", "f_files", "f_flag", "f_frsize",
            "f_namemax")


class SlowFlushes(Operations):
    def __init__(self, root: str, delay_ms: float):
        self.root, self.delay = root, delay_ms / 1000
        self.device = threading.Lock()  # one flush at a time, as a disk's write cache is flushed

    def _path(self, path: str) -> str:
        return os.path.join(self.root, path.lstrip("/"))

    def getattr(self, path, fh=None):
        st = os.lstat(self._path(path))
        return {key: getattr(st, key) for key in _STAT}

    def readdir(self, path, fh):
        return [".", ".."] + os.listdir(self._path(path))

    def open(self, path, flags):
        return os.open(self._path(path), flags)

    def create(self, path, mode, fi=None):
        return os.open(self._path(path), os.O_RDWR | os.O_CREAT, mode)

    def read(self, path, size, offset, fh):
        return os.pread(fh, size, offset)

    def write(self, path, data, offset, fh):
        return os.pwrite(fh, data, offset)

    def truncate(self, path, length, fh=None):
        os.truncate(self._path(path), length)

    def flush(self, path, fh):
        return 0

    def release(self, path, fh):
        os.close(fh)
        return 0

    def fsync(self, path, datasync, fh):
        with self.device:
            (os.fdatasync if datasync else os.fsync)(fh)
            time.sleep(self.delay)
        return 0

    def unlink(self, path):
        os.unlink(self._path(path))

    def statfs(self, path):
        st = os.statvfs(self._path(path))
        return {key: getattr(st, key) for key in _STATVFS}


if __name__ == "__main__":
    FUSE(SlowFlushes(sys.argv[1], float(sys.argv[3])), sys.argv[2], foreground=True, nothreads=False)
