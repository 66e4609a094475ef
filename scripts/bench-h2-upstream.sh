#!/usr/bin/env bash
# HTTP/2 end to end, as gRPC runs: h2load (h2c, 16 connections x 8 streams) -> proxy -> HTTP/2
# to one `headway origin` (h2c). HAProxy (`proto h2` on the server line), NGINX (`grpc_pass`,
# its only HTTP/2 upstream) and Headway (`protocol = "h2"`), two workers/threads each, taking
# turns, three rounds of 60,000 requests per cell: GET 128 B, GET 8 KiB, and a POST of 64 bytes
# to `/trailers` (answered with gRPC-style trailers). Prints requests/s, 2xx and the proxy's
# CPU-seconds per 100,000 requests (utime+stime from /proc). Loopback only; bounded by the
# request counts; everything it starts is stopped on exit.
#   cargo build --release -p headway && bash scripts/bench-h2-upstream.sh
set -u
cd "$(dirname "$0")/.."
HW=${HEADWAY:-$PWD/target/release/headway}
D=$(mktemp -d)
cd "$D"
cat > haproxy.cfg <<C
global
    nbthread 2
    maxconn 4096
defaults
    timeout connect 5s
    timeout client 30s
    timeout server 30s
frontend h2
    mode http
    bind 127.0.0.1:18002 proto h2
    default_backend origin
backend origin
    mode http
    http-reuse always
    server origin 127.0.0.1:18080 proto h2
C
cat > nginx.conf <<C
worker_processes 2;
pid $D/nginx.pid;
error_log $D/nginx-error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    keepalive_requests 1000000;
    http2_max_requests 1000000;
    client_body_temp_path $D/nb; proxy_temp_path $D/np; fastcgi_temp_path $D/nf; uwsgi_temp_path $D/nu; scgi_temp_path $D/ns;
    upstream origin { server 127.0.0.1:18080; keepalive 64; keepalive_requests 1000000; }
    server {
        listen 127.0.0.1:18003 http2;
        location / { grpc_pass grpc://origin; }
    }
}
C
cat > headway.toml <<C
[runtime]
workers = 2
[[server_group]]
name = "origin"
protocol = "h2"
[[server_group.server]]
address = "127.0.0.1:18080"
[[virtual_server]]
name = "h2"
kind = "http"
listen = "127.0.0.1:18001"
group = "origin"
C
head -c 64 /dev/urandom > body.bin
$HW origin --listen 127.0.0.1:18080 >/dev/null 2>&1 & OP=$!
haproxy -f haproxy.cfg -db >/dev/null 2>&1 & HP=$!
nginx -c $D/nginx.conf -g 'daemon off;' >/dev/null 2>&1 & NP=$!
$HW run -c headway.toml >/dev/null 2>&1 & WP=$!
trap 'kill $OP $HP $NP $WP 2>/dev/null; rm -rf "$D"' EXIT
sleep 2
cpu() { # total utime+stime ticks of a process and its children threads (nginx: master + workers)
  local t=0
  for p in "$@"; do for q in $p $(pgrep -P $p); do
    [ -r /proc/$q/stat ] && t=$((t + $(awk '{print $14+$15}' /proc/$q/stat)))
  done; done; echo $t; }
run() { # name port pids... ; uses $ARGS
  local name=$1 port=$2; shift 2
  local c0=$(cpu "$@")
  local out=$(h2load $ARGS http://127.0.0.1:$port$PATHQ 2>&1)
  local c1=$(cpu "$@")
  local rps=$(echo "$out" | awk '/^finished in/ {print $4}')
  local ok=$(echo "$out" | awk '/^status codes:/ {print $3}')
  local n=$(echo "$out" | awk '/^requests:/ {print $2}')
  local per=$(awk -v c=$((c1-c0)) -v n=$n 'BEGIN{ if (n>0) printf "%.2f", c/100/n*100000; else print "n/a"}')
  echo "$name req/s=$rps 2xx=$ok/$n cpu-s/100k=$per"
}
for cell in "GET /corpus/random/128" "GET /corpus/random/8KiB" "POST /trailers"; do
  set -- $cell
  PATHQ=$2
  if [ "$1" = POST ]; then ARGS="-n 60000 -c 16 -m 8 -t 2 -d $D/body.bin -H content-type:application/grpc -H te:trailers"; else ARGS="-n 60000 -c 16 -m 8 -t 2"; fi
  for round in 1 2 3; do
    echo "== $cell round $round"
    run haproxy 18002 $HP
    run nginx 18003 $NP
    run headway 18001 $WP
  done
done
