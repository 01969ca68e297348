# syntax=docker/dockerfile:1
# weft's images (`make image`):
#
#   --target weft          gcr.io/distroless/static, nonroot: every binary
#                          (weft, weft-watcher, weft-renderer, weft-validator,
#                          weft-deployer, weft-puller, weft-noop) in
#                          /usr/local/bin; ENTRYPOINT weft. No shell, no libc.
#   --target weft-haproxy  the same binaries on the official haproxy image,
#                          for what runs `haproxy -c`: weft-validator (its
#                          haproxy kind) and `weft up`.
#
# Every binary is static (CGO_ENABLED=0): weft-noop runs inside any image a
# pull Job pulls, distroless and scratch included, and the others run on
# either base. The default target is weft.
ARG GO_VERSION=1.26
ARG HAPROXY_VERSION=3.2

FROM golang:${GO_VERSION} AS build
WORKDIR /src
COPY . .
ARG VERSION=dev
ENV CGO_ENABLED=0 GOFLAGS=-trimpath GOTOOLCHAIN=local
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    set -e; mkdir -p /out; \
    go build -ldflags "-s -w -X main.version=${VERSION}" -o /out/weft ./cmd/weft; \
    for p in services/watcher/cmd/weft-watcher services/renderer/cmd/weft-renderer \
             services/validator/cmd/weft-validator services/deployer/cmd/weft-deployer \
             services/puller/cmd/weft-puller services/puller/cmd/weft-noop; do \
        go build -ldflags "-s -w" -o /out/$(basename $p) ./$p; \
    done

FROM haproxy:${HAPROXY_VERSION} AS weft-haproxy
COPY --from=build /out/ /usr/local/bin/
# numeric, so Kubernetes can check runAsNonRoot
USER 65532:65532
ENV WEFT_HAPROXY=/usr/local/sbin/haproxy
ENTRYPOINT ["/usr/local/bin/weft-validator"]

FROM gcr.io/distroless/static-debian12:nonroot AS weft
COPY --from=build /out/ /usr/local/bin/
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/weft"]
