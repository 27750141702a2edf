# certgen's container image: a static certgen (musl) on an empty base, running as the non-root
# user 65532, with no shell and no libc.
#
#   docker build -t registry.example.com/platform/certgen:0.1.0 .
#   docker push registry.example.com/platform/certgen:0.1.0
#
# Any OCI builder works (docker/BuildKit, podman, buildah, kaniko). `image/build` builds the same
# final stage without a daemon from a host build of the binary (it reads USER, ENV and
# ENTRYPOINT from the last stage below and lays out the files with the same image/rootfs), which
# is how certgen's tests build the image they run on a real kubelet.

# The builder: any Rust >= 1.89 image with the musl target and a C compiler (AWS-LC is C).
ARG RUST_IMAGE=docker.io/library/rust:1-alpine
FROM ${RUST_IMAGE} AS build
ARG RUST_TARGET=x86_64-unknown-linux-musl
RUN apk add --no-cache musl-dev && rustup target add "${RUST_TARGET}"
WORKDIR /src
COPY . .
ENV CARGO_PROFILE_RELEASE_STRIP=symbols
RUN cargo build --release --locked --target "${RUST_TARGET}" \
 && sh image/rootfs /out "target/${RUST_TARGET}/release/certgen" certgen

FROM scratch
COPY --from=build /out/ /
ENV PATH=/usr/local/bin
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/certgen"]
