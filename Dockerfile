# syntax=docker/dockerfile:1
#
# meilistream: a static binary in a distroless image, running as non-root.
#
#   docker build --build-arg VERSION=v1.0.0 -t meilistream .
#   docker run --rm -e MEILISTREAM_MONGODB_URI=... -e MEILISTREAM_MEILI_URL=... \
#     -v "$PWD/transforms:/etc/meilistream/transforms:ro" -p 8080:8080 meilistream
#
# HEALTHCHECK runs "meilistream probe", which needs no shell or curl (the
# distroless image has neither): it asks the sidecar's own /healthz.
# Kubernetes ignores it and probes the HTTP endpoints itself
# (examples/kubernetes/).

ARG GO_VERSION=1.26

FROM golang:${GO_VERSION} AS build
WORKDIR /src
# Modules first, so a source change does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=devel
# CGO off: a static binary that runs on distroless/static (no libc).
RUN CGO_ENABLED=0 go build -trimpath -buildvcs=false \
      -ldflags "-s -w -X main.version=${VERSION}" \
      -o /out/meilistream . \
 && mkdir -p /out/transforms

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/meilistream /usr/local/bin/meilistream
# The transforms folder (MEILISTREAM_TRANSFORMS default). Empty: mount your
# transforms here (a ConfigMap volume, a bind mount); jobs are never baked in.
COPY --from=build --chown=65532:65532 /out/transforms /etc/meilistream/transforms
# distroless "nonroot" is uid/gid 65532.
USER 65532:65532
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=5s --start-period=10s --retries=3 \
  CMD ["/usr/local/bin/meilistream", "probe"]
ENTRYPOINT ["/usr/local/bin/meilistream"]
CMD ["run"]
