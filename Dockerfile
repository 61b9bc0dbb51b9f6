# Tollgate's image: built on Debian 12 with Debian's packages, run from a slim stage that holds only
# the runtime libraries, the three binaries and the shipped configurations.
#   docker build -t tollgate:local .      (docker-compose.yml builds it once for every service)
# Tested by tests/compose/run.sh (the last stage of scripts/test.sh).

# The version (CMakeLists.txt's project version; a unit test keeps the two equal) and the commit
# the image is built from (there is no .git in the build context):
#   docker build --build-arg TOLLGATE_COMMIT=$(git rev-parse --short=12 HEAD) -t tollgate:local .
ARG TOLLGATE_VERSION=0.9.0
ARG TOLLGATE_COMMIT=unknown

# --- build: the compiler and the -dev packages, never shipped -----------------------------------
FROM debian:12 AS build
ARG TOLLGATE_COMMIT
RUN apt-get -o Acquire::Retries=3 update \
    && DEBIAN_FRONTEND=noninteractive apt-get -o Acquire::Retries=3 install -y --no-install-recommends \
       cmake g++ make pkg-config libboost-dev nlohmann-json3-dev libmysqlcppconn-dev libhiredis-dev \
       libjemalloc-dev libspdlog-dev prometheus-cpp-dev libssl-dev libc-ares-dev \
    && apt-get clean && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# Only what the binaries are built from (tests, benchmarks and docs stay out of the image).
COPY CMakeLists.txt ./
COPY cmake cmake
COPY include include
COPY src src
COPY tools tools
RUN cmake -S . -B /build -DCMAKE_BUILD_TYPE=Release -DTOLLGATE_BUILD_TESTS=OFF -DTOLLGATE_COMMIT="${TOLLGATE_COMMIT}" \
    && cmake --build /build -j"$(nproc)" --target tollgate tollgate-mock-upstream tollgate-sim \
    && install -d /out \
    && install -s /build/tollgate /build/tollgate-mock-upstream /build/tollgate-sim /out/

# --- runtime ----------------------------------------------------------------------------------
FROM debian:12
ARG TOLLGATE_VERSION
ARG TOLLGATE_COMMIT
# What `tollgate --version` says, on the image (OCI annotations).
LABEL org.opencontainers.image.title="tollgate" \
      org.opencontainers.image.description="A throttling HTTP gateway in front of rate-limited upstream APIs" \
      org.opencontainers.image.version="${TOLLGATE_VERSION}" \
      org.opencontainers.image.revision="${TOLLGATE_COMMIT}" \
      org.opencontainers.image.base.name="debian:12"
# The shared libraries the binaries link (ldd build/tollgate), and the system's trust store that
# https:// upstreams are verified against when their tls.ca_file is not set.
RUN apt-get -o Acquire::Retries=3 update \
    && DEBIAN_FRONTEND=noninteractive apt-get -o Acquire::Retries=3 install -y --no-install-recommends \
       libjemalloc2 libspdlog1.10 libprometheus-cpp-core1.0 libhiredis0.14 libmysqlcppconn7v5 libssl3 libc-ares2 ca-certificates \
    && apt-get clean && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --user-group --home-dir /nonexistent --no-create-home \
       --shell /usr/sbin/nologin tollgate
COPY --from=build /out/ /usr/local/bin/
COPY scripts/healthcheck.sh /usr/local/bin/tollgate-healthcheck
# conf/ as shipped: gateway.json (the embedded default: rules from the file, in-process buckets)
# and the MySQL/Redis variants. Mount your own over /etc/tollgate/gateway.json.
COPY conf/ /etc/tollgate/
# Readable and runnable by the tollgate user whatever the checkout's umask was (COPY keeps modes).
RUN chmod -R a+rX /etc/tollgate /usr/local/bin/tollgate-healthcheck
USER tollgate:tollgate
WORKDIR /etc/tollgate
# 8080: the proxy; 9901: the admin listener (the image's default config binds it to the
# container's loopback only; conf/compose/gateway.json opens it for the host's loopback).
EXPOSE 8080 9901
# /readyz answers 503 while draining, so an orchestrator stops sending before the gateway exits.
HEALTHCHECK --interval=5s --timeout=3s --start-period=20s --retries=3 CMD ["tollgate-healthcheck"]
# SIGTERM drains: no new connections, held and in-flight requests finish for up to
# proxy.drain_timeout_ms (30 s by default), then exit 0. Give it that long: docker stop -t 35,
# stop_grace_period: 35s in compose (docker's default 10 s would SIGKILL a long drain).
STOPSIGNAL SIGTERM
CMD ["tollgate", "--config", "/etc/tollgate/gateway.json"]
