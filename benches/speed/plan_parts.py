#!/usr/bin/env python3
"""Where `plan`'s engine time goes on Docker: each call it makes, timed alone.

    plan_parts.py SOCKET

On the Docker Engine at SOCKET (a fixture already made, e.g. by
benches/lib/fixture.py), times one after the other, each once: the four list
calls that benches/speed/lists.py sums (what `plan` is measured against), the
full `/system/df`, then the per-object calls the inventory adds beside the
lists: an inspect with `?size=1` of every exited or dead container (its
exit time and the size of its writable layer), the same without the size,
and an inspect of every top-level image (its last tag time). Prints each
figure in milliseconds.
"""

import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from fixture import call  # noqa: E402  (benches/lib/fixture.py)


def timed(f):
    start = time.perf_counter()
    result = f()
    return (time.perf_counter() - start) * 1000, result


def main():
    sock = sys.argv[1]
    for path in ["/containers/json?all=1", "/images/json", "/volumes", "/networks", "/system/df"]:
        took, _ = timed(lambda: call(sock, "GET", path))
        print(f"{path}: {took:.1f} ms")
    containers = json.loads(call(sock, "GET", "/containers/json?all=1"))
    ended = [c["Id"] for c in containers if c["State"] in ("exited", "dead")]
    for query, what in [("?size=1", "sized"), ("", "plain")]:
        took, _ = timed(lambda: [call(sock, "GET", f"/containers/{i}/json{query}") for i in ended])
        print(f"{len(ended)} {what} container inspects: {took:.1f} ms")
    images = json.loads(call(sock, "GET", "/images/json"))
    took, _ = timed(lambda: [call(sock, "GET", f"/images/{i['Id']}/json") for i in images])
    print(f"{len(images)} image inspects: {took:.1f} ms")


if __name__ == "__main__":
    main()
