#!/usr/bin/env python3
"""The engine's own list calls, timed: what `plan` is measured against.

    lists.py SOCKET [RUNS]

Calls GET /containers/json?all=1, /images/json, /volumes and /networks one
after the other on the Docker Engine at SOCKET, RUNS times (default 3), and
prints the median of their summed time in seconds.
"""

import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from fixture import call  # noqa: E402  (benches/lib/fixture.py)

PATHS = ["/containers/json?all=1", "/images/json", "/volumes", "/networks"]


def main():
    sock = sys.argv[1]
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    took = []
    for _ in range(runs):
        start = time.perf_counter()
        for path in PATHS:
            call(sock, "GET", path)
        took.append(time.perf_counter() - start)
    print(f"{statistics.median(took):.3f}")


if __name__ == "__main__":
    main()
