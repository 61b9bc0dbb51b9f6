# Builds Tollgate on Debian 12 with Debian's packages (used by docker-compose.yml; untested here).
FROM debian:12
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      cmake g++ make pkg-config libboost-dev nlohmann-json3-dev libmysqlcppconn-dev libhiredis-dev libjemalloc-dev \
      libspdlog-dev prometheus-cpp-dev \
      ca-certificates \
    && rm -rf /var/lib/apt/lists/*
COPY . /src
RUN cmake -S /src -B /build -DCMAKE_BUILD_TYPE=Release -DTOLLGATE_BUILD_TESTS=OFF \
    && cmake --build /build -j"$(nproc)" \
    && install /build/tollgate /build/tollgate-mock-upstream /build/tollgate-sim /usr/local/bin/
EXPOSE 8080 9901
