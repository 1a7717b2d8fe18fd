# safeprune's container image, for users with a registry. The image holds
# the same files as scripts/image.sh's offline build: this Dockerfile runs
# that script to assemble them. It is not built in this repository's CI:
# building needs the Rust image from a registry, and none is reachable
# there (scripts/image.sh builds the image offline; docs/install.md, "The
# container image").
#
#   docker build -t <registry>/safeprune:<tag> .
#
# RUST_IMAGE may name a mirror of the official Rust image. Pass
# --build-arg SOURCE_DATE_EPOCH=... for file times other than 0 (the
# offline build reads the same variable).
ARG RUST_IMAGE=docker.io/library/rust:1.89-bookworm

FROM ${RUST_IMAGE} AS build
ARG SOURCE_DATE_EPOCH
# containerd-client and k8s-cri compile their protobuf files with protoc.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends protobuf-compiler \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --locked \
 && scripts/image.sh --binary target/release/safeprune --out /out

# Nothing but what scripts/image.sh put in the root: the binary, the
# shared libraries it links and the loader, /etc/passwd and /etc/group.
FROM scratch
COPY --from=build /out/rootfs/ /
# Root, for the runtime's socket (root's, mode 0660); the DaemonSet drops
# every capability, so root gains nothing more.
USER 0:0
ENTRYPOINT ["/usr/sbin/safeprune"]
CMD ["daemon"]
