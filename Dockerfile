# Multi-stage build: a release binary on a slim Debian runtime. The image runs the server
# (with the postgres service of docker-compose.yml) or the GPU worker.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked && strip target/release/gpu-triage

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates python3 bubblewrap \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --create-home --home-dir /var/lib/gpu-triage gpu-triage
COPY --from=build /src/target/release/gpu-triage /usr/local/bin/gpu-triage
USER gpu-triage
WORKDIR /var/lib/gpu-triage
EXPOSE 8080
ENTRYPOINT ["gpu-triage"]
CMD ["serve", "--listen", "0.0.0.0:8080"]
