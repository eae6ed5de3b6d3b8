#!/usr/bin/env python3
"""One TCP stream between two network namespaces: the link's payload rate, measured.

    scale_link.py server HOST PORT
    scale_link.py client HOST PORT BYTES
    scale_link.py rtt HOST PORT COUNT     (against a server started with "echo HOST PORT")
    scale_link.py echo HOST PORT

The server takes one connection, reads until end of stream and answers one byte; the client
sends BYTES in 1 MiB writes, half-closes, waits for that byte (so the time covers delivery,
not just the local socket buffer) and prints one line: "<bytes> <seconds> <Gbit/s>". rtt sends
COUNT one-byte pings over one connection (TCP_NODELAY) and prints the median round trip in us.
bench/scale.sh runs it across a shaped link so that the cost model's bandwidth is a measured
value (tc counts Ethernet frames; TCP payload is ~95.6% of them at MTU 1500).
"""
import socket
import statistics
import sys
import time


def retried(make, what):
    """make() until it succeeds, for up to 5 s: a freshly configured namespace may refuse a bind
    for a moment, and the client may start before the server listens."""
    deadline = time.monotonic() + 5
    while True:
        try:
            return make()
        except OSError as e:
            if time.monotonic() > deadline:
                sys.exit(f"scale_link: {what}: {e}")
            time.sleep(0.05)


def listen(host, port):
    return retried(lambda: socket.create_server((host, port)), f"cannot listen on {host}:{port}")


def connect(host, port):
    return retried(lambda: socket.create_connection((host, port), timeout=60),
                   f"cannot connect to {host}:{port}")


def serve(host, port):
    with listen(host, port) as server:
        conn, _ = server.accept()
        with conn:
            buf = bytearray(1 << 20)
            while conn.recv_into(buf):
                pass
            conn.sendall(b"x")


def send(host, port, total):
    data = b"\0" * (1 << 20)
    with connect(host, port) as conn:
        start = time.perf_counter()
        sent = 0
        while sent < total:
            conn.sendall(data)
            sent += len(data)
        conn.shutdown(socket.SHUT_WR)
        if conn.recv(1) != b"x":
            sys.exit("scale_link: the server closed without acknowledging")
        seconds = time.perf_counter() - start
    print(f"{sent} {seconds:.4f} {sent * 8 / seconds / 1e9:.4f}")


def echo(host, port):
    with listen(host, port) as server:
        conn, _ = server.accept()
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            while byte := conn.recv(1):
                conn.sendall(byte)


def rtt(host, port, count):
    times = []
    with connect(host, port) as conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(count):
            start = time.perf_counter()
            conn.sendall(b"p")
            if conn.recv(1) != b"p":
                sys.exit("scale_link: the echo server closed early")
            times.append(time.perf_counter() - start)
    print(f"{statistics.median(times) * 1e6:.1f}")


def main(argv):
    if len(argv) == 4 and argv[1] == "server":
        serve(argv[2], int(argv[3]))
    elif len(argv) == 4 and argv[1] == "echo":
        echo(argv[2], int(argv[3]))
    elif len(argv) == 5 and argv[1] == "rtt":
        rtt(argv[2], int(argv[3]), int(argv[4]))
    elif len(argv) == 5 and argv[1] == "client":
        send(argv[2], int(argv[3]), int(argv[4]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
