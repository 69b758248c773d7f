"""An emulated wide-area link on 127.0.0.1, for the remote rows of scripts/bench (scripts/bench_link.py): a TCP
proxy in front of a server that delays every request by DELAY (the data a client sends waits that long before it
goes on) and caps each connection's answers at RATE bytes a second (a token bucket per connection). Python 3
standard library only.

    python scripts/slow_link.py UPSTREAM_PORT [--delay-ms 20] [--rate-mb 100]   (prints its port, serves until killed)
"""
import argparse
import socket
import sys
import threading
import time

CHUNK = 256 << 10


def pump_requests(src, dst, delay):
    """Client to server: each piece of request bytes waits `delay` seconds (one round trip's worth of latency)."""
    try:
        while True:
            data = src.recv(CHUNK)
            if not data:
                break
            time.sleep(delay)
            dst.sendall(data)
    except OSError:
        pass
    finally:
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def pump_answers(src, dst, rate):
    """Server to client at most `rate` bytes a second on this connection."""
    sent, start = 0, time.perf_counter()
    try:
        while True:
            data = src.recv(CHUNK)
            if not data:
                break
            dst.sendall(data)
            sent += len(data)
            ahead = sent / rate - (time.perf_counter() - start)
            if ahead > 0:
                time.sleep(ahead)
            elif ahead < -0.05:  # idle since: the bucket does not fill past 50 ms
                sent, start = 0, time.perf_counter()
    except OSError:
        pass
    finally:
        for s in (dst, src):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def serve(upstream_port, delay, rate, ready=None):
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(256)
    port = listener.getsockname()[1]
    if ready is not None:
        ready(port)
    while True:
        client, _ = listener.accept()
        try:
            server = socket.create_connection(("127.0.0.1", upstream_port))
        except OSError:
            client.close()
            continue
        for s in (client, server):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=pump_requests, args=(client, server, delay), daemon=True).start()
        threading.Thread(target=pump_answers, args=(server, client, rate), daemon=True).start()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("upstream_port", type=int)
    parser.add_argument("--delay-ms", type=float, default=20)
    parser.add_argument("--rate-mb", type=float, default=100, help="MB/s per connection (10^6 bytes)")
    args = parser.parse_args()
    serve(args.upstream_port, args.delay_ms / 1000, args.rate_mb * 1e6,
          ready=lambda port: print(port, flush=True))


if __name__ == "__main__":
    sys.exit(main())
