#!/usr/bin/env python3
"""The abuse mix against one host, with a well-behaved client beside it (run on demand, not in CI).

Starts `consort dev` on a fresh data folder with one quick agent and one gated agent, then for
DURATION seconds runs, all at once:

  - half-open connections: 300 requests from 127.0.0.1 that never finish their headers, reopened
    as the host closes them;
  - a reader that never reads: a `GET /jobs?follow=1` stream nobody reads from;
  - long waits: 40 `GET /runs/{id}?wait_ms=600000` on a blocked run, re-sent as they end;
  - a run flood: one caller starting runs with 64 KiB inputs as fast as the host answers;
  - stream hoarding: 70 `follow=1` streams from one caller;

while a well-behaved client (another token, on 127.0.0.2) starts runs and lists the agents, one
request at a time. Every abuser acts as the token `eve`.
It prints the well-behaved client's request latencies (p50, p99, max), how its requests were
answered, and the host's resident memory at idle, at the end, and at its peak (VmHWM).

Usage: scripts/abuse-load.py [--binary target/release/consort] [--duration 30]
Targets (docs/SECURITY.md): the well-behaved client's p99 <= 100 ms, host memory <= 256 MB
above idle.
"""

import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

QUICK = 'name: echo\nmodel: {script: [{answer: "echo {input}"}]}\n'
GATED = """name: payer
model:
  script:
    - tool: {name: pay, input: "SELECT 'paid ' || :input"}
    - answer: "done"
tools:
  - {name: pay, kind: sql, database: ledger.db, description: pays, approval: required}
"""


def start_host(binary, root):
    agents = os.path.join(root, "agents")
    for name, yaml in (("echo", QUICK), ("payer", GATED)):
        os.makedirs(os.path.join(agents, name))
        with open(os.path.join(agents, name, "agent.yaml"), "w") as f:
            f.write(yaml)
    import sqlite3

    sqlite3.connect(os.path.join(agents, "payer", "ledger.db")).close()
    auth = os.path.join(root, "host-auth.yaml")
    with open(auth, "w") as f:
        f.write("tokens:\n  - {name: eve, token: tok-eve}\n  - {name: bob, token: tok-bob}\n")
    proc = subprocess.Popen(
        [binary, "dev", agents, "--data", os.path.join(root, "data"), "--listen", "127.0.0.1:0",
         "--auth", auth],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    for line in proc.stderr:
        if "consort: serving" in line:
            url = next(w for w in line.split() if w.startswith("http://"))
            threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
            return proc, url[len("http://"):].rstrip("/")
    raise SystemExit("consort dev did not start")


def target(addr):
    host, port = addr.rsplit(":", 1)
    return host, int(port)


def request(addr, method, path, body=None, source="127.0.0.1", timeout=30, token="tok-eve"):
    host, port = target(addr)
    conn = http.client.HTTPConnection(host, port, timeout=timeout, source_address=(source, 0))
    headers = {"Host": addr, "Authorization": f"Bearer {token}"}
    data = None
    if body is not None:
        data = json.dumps(body)
        headers["Content-Type"] = "application/json"
    conn.request(method, path, body=data, headers=headers)
    resp = conn.getresponse()
    payload = resp.read()
    conn.close()
    return resp.status, payload


def memory_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", default="target/release/consort")
    parser.add_argument("--duration", type=float, default=30.0)
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="consort-abuse-")
    proc, addr = start_host(args.binary, root)
    stop = threading.Event()
    try:
        status, body = request(addr, "POST", "/runs", {"agent": "payer", "input": "acme"})
        blocked = json.loads(body)["id"]
        for _ in range(5):
            request(addr, "POST", "/runs", {"agent": "echo", "input": "warm"})
        time.sleep(1)
        idle = memory_kib(proc.pid, "VmRSS")

        def half_open():
            held = []
            while not stop.is_set():
                while len(held) < 300 and not stop.is_set():
                    try:
                        s = socket.create_connection(target(addr), timeout=2)
                        s.sendall(b"GET /jobs HTTP/1.1\r\nHost: " + addr.encode() + b"\r\n")
                        held.append(s)
                    except OSError:
                        break
                time.sleep(0.5)
                alive = []
                for s in held:
                    try:
                        s.setblocking(False)
                        if s.recv(1) == b"":
                            s.close()
                            continue
                    except BlockingIOError:
                        pass
                    except OSError:
                        s.close()
                        continue
                    alive.append(s)
                held = alive
            for s in held:
                s.close()

        def never_reads():
            s = socket.create_connection(target(addr))
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.sendall(f"GET /jobs?follow=1 HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer tok-eve\r\n\r\n".encode())
            stop.wait()
            s.close()

        def waits():
            while not stop.is_set():
                try:
                    status, _ = request(addr, "GET", f"/runs/{blocked}?wait_ms=600000", timeout=120)
                    if status == 429:
                        time.sleep(0.05)
                except OSError:
                    time.sleep(0.1)

        def flood():
            big = "x" * (64 * 1024)
            while not stop.is_set():
                try:
                    status, _ = request(addr, "POST", "/runs", {"agent": "echo", "input": big})
                    if status == 429:
                        time.sleep(0.01)
                except OSError:
                    time.sleep(0.1)

        def hoard_streams():
            held = []
            for _ in range(70):
                try:
                    s = socket.create_connection(target(addr))
                    s.sendall(f"GET /jobs?follow=1 HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer tok-eve\r\n\r\n".encode())
                    held.append(s)
                except OSError:
                    break
            stop.wait()
            for s in held:
                s.close()

        workers = [threading.Thread(target=half_open), threading.Thread(target=never_reads),
                   threading.Thread(target=flood), threading.Thread(target=hoard_streams)]
        workers += [threading.Thread(target=waits) for _ in range(40)]
        for w in workers:
            w.daemon = True
            w.start()
        time.sleep(2)

        latencies, answers = [], {}
        deadline = time.monotonic() + args.duration
        turn, mine = 0, None
        while time.monotonic() < deadline:
            # A client that behaves: about ten runs a second, and reads in between.
            turn += 1
            time.sleep(0.02)
            asks = [("GET", "/agents", None)]
            if mine:
                asks.append(("GET", f"/runs/{mine}", None))
            if turn % 5 == 0:
                asks.append(("POST", "/runs", {"agent": "echo", "input": "hello"}))
            for method, path, body in asks:
                began = time.monotonic()
                try:
                    status, payload = request(addr, method, path, body, source="127.0.0.2",
                                              timeout=30, token="tok-bob")
                    if status == 201:
                        mine = json.loads(payload)["id"]
                except OSError as e:
                    status = type(e).__name__
                latencies.append(time.monotonic() - began)
                answers[status] = answers.get(status, 0) + 1
        end_rss = memory_kib(proc.pid, "VmRSS")
        peak = memory_kib(proc.pid, "VmHWM")
        latencies.sort()
        p = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000
        print(f"well-behaved requests: {len(latencies)}; answers: {answers}")
        print(f"latency ms: p50 {p(0.50):.1f}  p99 {p(0.99):.1f}  max {latencies[-1] * 1000:.1f}")
        print(f"host memory MiB: idle {idle / 1024:.1f}  end {end_rss / 1024:.1f}  peak {peak / 1024:.1f}  peak above idle {(peak - idle) / 1024:.1f}")
    finally:
        stop.set()
        proc.kill()
        proc.wait()


if __name__ == "__main__":
    sys.exit(main())
