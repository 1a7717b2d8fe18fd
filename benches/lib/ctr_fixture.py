#!/usr/bin/env python3
"""Builds a benchmark fixture on a private containerd, through `ctr`.

    ctr_fixture.py CTR SOCKET NAMESPACE ROOTFS C I [--prefix P]
                   [--write-kib K] [--image-kib K]

With CTR (the `ctr` of the engine's release) on the containerd at SOCKET,
in NAMESPACE, makes:
  - the image bench.local/P-base:1 from the directory ROOTFS (a busybox
    root), and I unused images bench.local/P-img<k>:1, each ROOTFS plus a
    file `extra` of K KiB (--image-kib, default 12288) of random bytes:
    distinct layers, imported in one `ctr images import` of an OCI layout
    streamed from here (there is no registry), and unpacked;
  - C containers P-c<k> from the base image, never started, and one more,
    P-kept, labelled io.kubernetes.container.name=istio-init (the default
    policy protects it); each container's writable snapshot then gets a
    file `w` of K KiB (--write-kib, default 2048) of random bytes, written
    into the snapshot's upper directory (what `ctr snapshots mounts` names
    as upperdir=), which is where a process of the container writing to
    its root file system puts them. Nothing runs: no runc, no cgroups.

Several `ctr` at once (the fixture's cost is mostly ctr starting itself).
Prints nothing; exits non-zero with ctr's answer on the first failure.
"""

import argparse
import hashlib
import io
import json
import os
import platform
import subprocess
import tarfile
from concurrent.futures import ThreadPoolExecutor

from fixture import image_tar  # benches/lib/fixture.py: ROOTFS as a tar, plus `extra`

WORKERS = 4
PROTECTED = "io.kubernetes.container.name=istio-init"


def ctr(args, base, data=None):
    """Runs `ctr` with ARGS after BASE; returns its stdout."""
    done = subprocess.run(base + args, input=data, capture_output=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"ctr {' '.join(args)}: {done.stderr.decode(errors='replace')}")
    return done.stdout.decode()


def digest(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def arch():
    machine = platform.machine()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


def add(tar, path, data):
    info = tarfile.TarInfo(path)
    info.size = len(data)
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


def import_images(images, rootfs, base):
    """Streams an OCI layout of IMAGES ((name, extra bytes), ...) into
    `ctr images import -`: blobs first, index.json last, each image's
    random layer made only as it is written."""
    proc = subprocess.Popen(base + ["images", "import", "-"], stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    descriptors = []
    with tarfile.open(fileobj=proc.stdin, mode="w|") as tar:
        add(tar, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        for name, extra in images:
            layer = image_tar(rootfs, extra)
            config = json.dumps({
                "architecture": arch(),
                "os": "linux",
                "config": {"Entrypoint": ["sh"], "Env": ["PATH=/bin"]},
                "rootfs": {"type": "layers", "diff_ids": [digest(layer)]},
            }).encode()
            manifest = json.dumps({
                "schemaVersion": 2,
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                           "digest": digest(config), "size": len(config)},
                "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                            "digest": digest(layer), "size": len(layer)}],
            }).encode()
            for blob in (layer, config, manifest):
                add(tar, "blobs/sha256/" + digest(blob)[len("sha256:"):], blob)
            descriptors.append({
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": digest(manifest),
                "size": len(manifest),
                "platform": {"architecture": arch(), "os": "linux"},
                "annotations": {"io.containerd.image.name": name},
            })
        add(tar, "index.json", json.dumps({"schemaVersion": 2, "manifests": descriptors}).encode())
    proc.stdin.close()
    err = proc.stderr.read()
    if proc.wait() != 0:
        raise SystemExit(f"ctr images import: {err.decode(errors='replace')}")


def create_container(base, image, cid, labels, write_kib):
    """Container CID from IMAGE, never started, its snapshot holding
    WRITE_KIB KiB of random bytes."""
    args = ["containers", "create"]
    for label in labels:
        args += ["--label", label]
    ctr(args + [image, cid], base)
    mount = ctr(["snapshots", "mounts", "/nonexistent", cid], base)
    upper = next(opt.split("=", 1)[1] for opt in mount.replace(" ", ",").split(",")
                 if opt.startswith("upperdir="))
    with open(os.path.join(upper, "w"), "wb") as f:
        for _ in range(write_kib // 1024):
            f.write(os.urandom(1 << 20))
        f.write(os.urandom((write_kib % 1024) * 1024))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("ctr")
    parser.add_argument("sock")
    parser.add_argument("namespace")
    parser.add_argument("rootfs")
    parser.add_argument("containers", type=int)
    parser.add_argument("images", type=int)
    parser.add_argument("--prefix", default="b")
    parser.add_argument("--write-kib", type=int, default=2048)
    parser.add_argument("--image-kib", type=int, default=12288)
    args = parser.parse_args()
    p = args.prefix
    base = [args.ctr, "--address", args.sock, "--namespace", args.namespace]

    base_image = f"bench.local/{p}-base:1"
    import_images([(base_image, 0)]
                  + [(f"bench.local/{p}-img{k}:1", args.image_kib * 1024)
                     for k in range(args.images)], args.rootfs, base)
    with ThreadPoolExecutor(WORKERS) as pool:
        jobs = [pool.submit(create_container, base, base_image, f"{p}-kept", [PROTECTED],
                            args.write_kib)]
        jobs += [pool.submit(create_container, base, base_image, f"{p}-c{k}", [], args.write_kib)
                 for k in range(args.containers)]
        for job in jobs:
            job.result()


if __name__ == "__main__":
    main()
