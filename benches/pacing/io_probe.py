#!/usr/bin/env python3
"""A latency probe: what a workload beside safeprune feels of its I/O.

    io_probe.py DIR OUT [--rate N] [--file-mib M] [--write-kib K]

In DIR (on the file system of the engine's data), keeps a file of M MiB
(default 64) and, N times a second (default 100), reads 4 KiB at a random
aligned offset and writes K KiB (default 4) at another, both with
O_DIRECT, then fsyncs: one operation, timed from its start to the
fsync's return. Each operation appends "<unix start seconds> <latency
ms>" to OUT, flushed as it goes, until SIGTERM or SIGINT. Operations are
scheduled on a fixed grid, so a slow one is followed at once by the next
that was due.
"""

import argparse
import mmap
import os
import random
import signal
import time

BLOCK = 4096


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("dir")
    parser.add_argument("out")
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--file-mib", type=int, default=64)
    parser.add_argument("--write-kib", type=int, default=4)
    args = parser.parse_args()

    path = os.path.join(args.dir, "probe.dat")
    size = args.file_mib << 20
    with open(path, "wb") as f:
        chunk = os.urandom(1 << 20)
        for _ in range(args.file_mib):
            f.write(chunk)
        f.flush()
        os.fsync(f.fileno())
    fd = os.open(path, os.O_RDWR | os.O_DIRECT)
    buf = mmap.mmap(-1, BLOCK)  # page-aligned, as O_DIRECT wants
    buf.write(os.urandom(BLOCK))
    wsize = args.write_kib * 1024 // BLOCK * BLOCK or BLOCK
    wbuf = mmap.mmap(-1, wsize)
    wbuf.write(os.urandom(wsize))
    blocks = size // BLOCK

    stop = False

    def on_signal(_signum, _frame):
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    period = 1.0 / args.rate
    with open(args.out, "a", buffering=1) as out:
        due = time.monotonic()
        while not stop:
            now = time.monotonic()
            if now < due:
                time.sleep(due - now)
            start_wall = time.time()
            start = time.perf_counter()
            os.preadv(fd, [buf], random.randrange(blocks) * BLOCK)
            os.pwritev(fd, [wbuf], random.randrange(blocks - wsize // BLOCK + 1) * BLOCK)
            os.fsync(fd)
            took = (time.perf_counter() - start) * 1000.0
            out.write(f"{start_wall:.6f} {took:.4f}\n")
            due += period
    os.close(fd)
    os.unlink(path)


if __name__ == "__main__":
    main()
