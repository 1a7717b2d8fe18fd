#!/usr/bin/env python3
"""Builds a benchmark fixture on a Docker Engine, through its API.

    fixture.py SOCKET ROOTFS C I V [--started N] [--prefix P]
               [--write-kib K] [--image-kib K]

On the engine at the unix socket SOCKET, makes:
  - the image P/base:1 from the directory ROOTFS (a busybox root);
  - C containers from it, never started (a third with an anonymous
    volume), of which the first N (--started) are run to their exit
    first, so that they are `exited` with an exit time; with
    --write-kib K each of those writes K KiB of random bytes into its
    writable layer (and K/2 into its anonymous volume, when it has one),
    so that removing it is I/O;
  - I images P/imgK:1, each ROOTFS plus a file `extra` of a varied size
    (16 KiB to 1.8 MiB of random bytes; exactly K KiB with --image-kib);
  - V named volumes P-vol-K and three networks P-net-K.

It talks to the API with several connections at once: the Docker CLI
spends most of a `docker create` starting itself, which made a fixture of
2,000 containers take many minutes. Prints nothing; exits non-zero with
the engine's answer on the first failure.
"""

import argparse
import http.client
import io
import json
import os
import socket
import tarfile
import threading
from concurrent.futures import ThreadPoolExecutor

WORKERS = 8


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost", timeout=600)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.path)


_local = threading.local()


def call(sock, method, path, body=None, content_type="application/json"):
    """One API call on this thread's connection; returns the parsed body."""
    conn = getattr(_local, "conn", None)
    if conn is None:
        conn = _local.conn = UnixConnection(sock)
    headers = {}
    if body is not None:
        if not isinstance(body, bytes):
            body = json.dumps(body).encode()
        headers["Content-Type"] = content_type
    conn.request(method, path, body=body, headers=headers)
    response = conn.getresponse()
    data = response.read()
    if response.status >= 300:
        raise SystemExit(f"{method} {path}: {response.status} {data.decode(errors='replace')}")
    return data


def image_tar(rootfs, extra):
    """ROOTFS as a tar, plus `extra` holding EXTRA bytes when EXTRA > 0."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        tar.add(rootfs, arcname=".")
        if extra:
            info = tarfile.TarInfo("extra")
            info.size = extra
            tar.addfile(info, io.BytesIO(os.urandom(extra)))
    return out.getvalue()


def import_image(sock, rootfs, repo, tag, extra):
    data = call(
        sock,
        "POST",
        f"/images/create?fromSrc=-&repo={repo}&tag={tag}",
        image_tar(rootfs, extra),
        "application/x-tar",
    )
    if b'"error"' in data:
        raise SystemExit(f"import {repo}:{tag}: {data.decode(errors='replace')}")


def create_container(sock, image, k, started, write_kib=0):
    config = {"Image": image, "Cmd": ["true"], "Labels": {"bench": "1"}}
    if k % 3 == 0:
        config["Volumes"] = {"/data": {}}
    if started and write_kib:
        script = f"busybox dd if=/dev/urandom of=/w bs=1024 count={write_kib} 2>/dev/null"
        if k % 3 == 0:
            script += f"; busybox dd if=/dev/urandom of=/data/w bs=1024 count={write_kib // 2} 2>/dev/null"
        config["Cmd"] = ["/bin/sh", "-c", script]
    created = json.loads(call(sock, "POST", "/containers/create", config))
    if started:
        cid = created["Id"]
        call(sock, "POST", f"/containers/{cid}/start")
        call(sock, "POST", f"/containers/{cid}/wait")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("sock")
    parser.add_argument("rootfs")
    parser.add_argument("containers", type=int)
    parser.add_argument("images", type=int)
    parser.add_argument("volumes", type=int)
    parser.add_argument("--started", type=int, default=0)
    parser.add_argument("--prefix", default="bench")
    parser.add_argument("--write-kib", type=int, default=0)
    parser.add_argument("--image-kib", type=int, default=0)
    args = parser.parse_args()
    p, sock = args.prefix, args.sock

    import_image(sock, args.rootfs, f"{p}/base", "1", 1024)
    with ThreadPoolExecutor(WORKERS) as pool:
        jobs = [
            pool.submit(create_container, sock, f"{p}/base:1", k, k < args.started, args.write_kib)
            for k in range(args.containers)
        ]
        jobs += [
            pool.submit(
                import_image,
                sock,
                args.rootfs,
                f"{p}/img{k}",
                "1",
                args.image_kib * 1024 or (k % 8) * 256 * 1024 + 16 * 1024,
            )
            for k in range(args.images)
        ]
        jobs += [
            pool.submit(call, sock, "POST", "/volumes/create", {"Name": f"{p}-vol-{k}"})
            for k in range(args.volumes)
        ]
        jobs += [
            pool.submit(call, sock, "POST", "/networks/create", {"Name": f"{p}-net-{k}"})
            for k in range(3)
        ]
        for job in jobs:
            job.result()


if __name__ == "__main__":
    main()
