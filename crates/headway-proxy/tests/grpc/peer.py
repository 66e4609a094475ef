#!/usr/bin/env python3
"""A real gRPC peer for Headway's tests: grpcio (Debian's python3-grpcio) as server and client,
its messages encoded by hand (no generated code: the proxy does not read them).

  peer.py serve NAME PORT_FILE   serve on 127.0.0.1 (a free port, written to PORT_FILE) until
                                 stdin closes:
      /test.Echo/Unary     the request back; b"fail" aborts with NOT_FOUND; trailing metadata
                           x-served-by: NAME and the request's x-client metadata as x-seen-client
      /test.Echo/Stream    request b"N": N messages of 1,000 bytes, each byte the message's index
      /test.Echo/Collect   a stream of requests: one answer, the total of their lengths as text
      /grpc.health.v1.Health/Check  SERVING (b"\\x08\\x01"), NOT_SERVING for service "down"
  peer.py call TARGET            run the calls through TARGET (host:port) and print one JSON
                                 object with what came back
"""
import json
import sys
import threading
from concurrent import futures

import grpc


def serve(name, port_file):
    def unary(request, context):
        if request == b"fail":
            context.abort(grpc.StatusCode.NOT_FOUND, "no such thing")
        seen = dict(context.invocation_metadata()).get("x-client", "")
        context.set_trailing_metadata((("x-served-by", name), ("x-seen-client", seen)))
        return request

    def stream(request, context):
        for i in range(int(request.decode())):
            yield bytes([i % 256]) * 1000

    def collect(requests, context):
        return str(sum(len(r) for r in requests)).encode()

    def check(request, context):
        # HealthCheckRequest: field 1 (service), a string.
        service = request[2:].decode() if request[:1] == b"\x0a" else ""
        return b"\x08\x02" if service == "down" else b"\x08\x01"

    handlers = [
        grpc.method_handlers_generic_handler(
            "test.Echo",
            {
                "Unary": grpc.unary_unary_rpc_method_handler(unary),
                "Stream": grpc.unary_stream_rpc_method_handler(stream),
                "Collect": grpc.stream_unary_rpc_method_handler(collect),
            },
        ),
        grpc.method_handlers_generic_handler(
            "grpc.health.v1.Health",
            {"Check": grpc.unary_unary_rpc_method_handler(check)},
        ),
    ]
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8), handlers=handlers)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    with open(port_file + ".tmp", "w") as f:
        f.write(str(port))
    import os

    os.rename(port_file + ".tmp", port_file)
    # Until the test that started it goes away.
    sys.stdin.read()
    server.stop(0)


def call(target):
    out = {}
    with grpc.insecure_channel(target) as ch:
        unary = ch.unary_unary("/test.Echo/Unary")
        resp, c = unary.with_call(b"hello", metadata=(("x-client", "t1"),), timeout=10)
        out["unary"] = resp.decode()
        out["unary_code"] = c.code().name
        out["unary_trailers"] = dict(c.trailing_metadata())
        try:
            unary(b"fail", timeout=10)
            out["fail"] = "no error"
        except grpc.RpcError as e:
            out["fail"] = [e.code().name, e.details()]
        msgs = list(ch.unary_stream("/test.Echo/Stream")(b"500", timeout=20))
        out["stream_count"] = len(msgs)
        out["stream_ok"] = all(m == bytes([i % 256]) * 1000 for i, m in enumerate(msgs))
        total = ch.stream_unary("/test.Echo/Collect")(
            iter([b"x" * 5000] * 200), timeout=20
        )
        out["collect"] = total.decode()
        # Many calls at once on the one channel (one HTTP/2 connection, many streams).
        with futures.ThreadPoolExecutor(max_workers=16) as pool:
            got = list(pool.map(lambda i: unary(str(i).encode(), timeout=10), range(100)))
        out["parallel_ok"] = got == [str(i).encode() for i in range(100)]
        health = ch.unary_unary("/grpc.health.v1.Health/Check")
        out["health"] = health(b"", timeout=10).hex()
    print(json.dumps(out))


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2], sys.argv[3])
    else:
        call(sys.argv[2])
