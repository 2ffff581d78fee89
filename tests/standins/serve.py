"""Start a plugin's gRPC server the way the engine expects: on loopback, port on stdout's first line.

The engine starts a plugin, reads one line with the port it listens on, then dials it
(sdk/go/common/resource/plugin/plugin.go, `execPlugin` and `newPlugin`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from concurrent import futures

import grpc

MAX_MESSAGE = 400 * 1024 * 1024  # the engine's own limit (rpcutil.MaxRPCMessageSize)


def serve(register: Callable[[grpc.Server], None]) -> None:
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=8),
        options=[("grpc.max_receive_message_length", MAX_MESSAGE), ("grpc.max_send_message_length", MAX_MESSAGE)],
    )
    register(server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(port, flush=True)
    # The engine kills its plugins when it is done with them.
    server.wait_for_termination()


def plugin_main(register: Callable[[grpc.Server], None]) -> None:
    try:
        serve(register)
    except KeyboardInterrupt:
        sys.exit(0)
