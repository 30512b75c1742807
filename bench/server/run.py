#!/usr/bin/env python3
"""What a thread-per-request server pays for pyigprof, per request: a
`ThreadingHTTPServer` (a thread per request, as `http.server`, `socketserver` and many
small services are) whose handler encodes and decodes JSON, loaded by a client in another
process; the server's CPU time per request, plain and under each variant of pyigprof, the
helper process's included (issue 57 asks: within +3 % of plain at the default 250 Hz).

    python3 bench/server/run.py [--rounds 6] [--requests 1500] [--python PATH]
                                [--lib PATH] [--out FILE]

Each round runs every variant once, in an order that rotates from round to round; each
variant's cost is its CPU per request over plain's in the same round (a paired ratio), the
table gives the median over the rounds with a 95 % interval (order statistics), and the
plain CPU per request. CPU time counts the server process (every thread, from `wait4`) and
every process it left for this one to reap (pyigprof's helper process, a `CLONE_VM` clone
that `wait4` of the server leaves out: bench/measure.py), start-up and exit included: the
start-up's share is what a run of `--requests` spreads over them (bench/startup measures it
alone). What it leaves out: the client's CPU time (another process), and the kernel's work
for the server's sockets that is done in softirq context on the client's CPU."""

import argparse
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from measure import (become_subreaper, build_floor_shim, machine_line, median_interval,  # noqa: E402
                     one_library, reap_orphans)

SERVER = r'''
import json, sys, threading
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler
DOC = {"items": [{"id": i, "name": "item%d" % i, "tags": ["a", "b"], "v": i * 1.5} for i in range(300)]}
class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        for _ in range(3):
            json.loads(json.dumps(DOC))
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")
    def log_message(self, *args):
        pass
server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
serving = threading.Thread(target=server.serve_forever)
serving.start()
sys.stdin.readline()
server.shutdown()
serving.join()
'''

CLIENT = r'''
import socket, sys, threading
port, requests, clients = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
failed = []
def client(n):
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"GET / HTTP/1.0\r\nHost: localhost\r\n\r\n")
        answer = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            answer += chunk
        s.close()
        if not answer.startswith(b"HTTP/1.0 200"):
            failed.append(answer[:40])
threads = [threading.Thread(target=client, args=(requests // clients,)) for _ in range(clients)]
for t in threads:
    t.start()
for t in threads:
    t.join()
if failed:
    sys.exit("bench/server: %d requests failed: %r" % (len(failed), failed[0]))
'''

# (name, the library preloaded: pyigprof's or bench/floor/shim.c's, its environment, what
# it is)
VARIANTS = [
    ("pyigprof", "pyigprof", {}, "cpu mode, perf events, 250 Hz: the defaults"),
    ("pyigprof 1 kHz", "pyigprof", {"PYIGPROF_HZ": "1000"}, "the same at 1 kHz"),
    ("pyigprof timers", "pyigprof", {"PYIGPROF_PERF_EVENTS": "0"},
     "`PYIGPROF_PERF_EVENTS=0`: POSIX CPU timers, no perf event per thread"),
    ("pyigprof wall", "pyigprof", {"PYIGPROF_CLOCK": "wall"}, "wall mode, 250 Hz"),
    ("floor: event", "shim", {"FLOOR_TRIGGER": "event"},
     "no profiler: each thread opens its own task-clock perf event at 250 Hz as it starts and "
     "closes it as it ends, SIGPROF to an empty handler (bench/floor/shim.c): what any "
     "profiler that samples on per-thread perf events pays here before doing any work"),
    ("floor: timer", "shim", {"FLOOR_TRIGGER": "timer"},
     "no profiler: each thread creates a POSIX CPU timer at 250 Hz, empty handler"),
]


CLIENTS = [4]


def serve_once(python, env, requests, tmp):
    """Runs the server under `env` with `requests` requests from the client; returns the
    server's CPU time, s (its own and its orphans'), or exits with a message."""
    reap_orphans(0)
    server_path = os.path.join(tmp, "server.py")
    with open(server_path, "w") as f:
        f.write(SERVER)
    proc = subprocess.Popen([python, server_path], env=env, cwd=tmp, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    port = proc.stdout.readline().strip()
    if not port.isdigit():
        proc.kill()
        sys.exit("bench/server: the server did not print its port: %s" % proc.stderr.read().decode()[-300:])
    client = subprocess.run([python, "-c", CLIENT, port.decode(), str(requests), str(CLIENTS[0])],
                            capture_output=True, text=True, timeout=600)
    if client.returncode != 0:
        proc.kill()
        sys.exit("bench/server: client: %s" % client.stderr.strip()[-300:])
    proc.stdin.write(b"\n")
    proc.stdin.close()
    _, status, ru = os.wait4(proc.pid, 0)
    err = proc.stderr.read().decode()
    if status != 0:
        sys.exit("bench/server: the server ended with status %d: %s" % (status, err[-300:]))
    orphans, _ = reap_orphans()
    return ru.ru_utime + ru.ru_stime + orphans


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--requests", type=int, default=1500, help="requests per run (default 1500)")
    ap.add_argument("--python", default=sys.executable, help="the interpreter (default: this one)")
    ap.add_argument("--lib", help="libpyigprof.so (default: this checkout's release build)")
    ap.add_argument("--out", help="write the table here as well")
    ap.add_argument("--clients", type=int, default=4,
                    help="client threads, each sending its requests one after another (default 4)")
    args = ap.parse_args()
    CLIENTS[0] = args.clients
    if args.rounds < 1 or args.clients < 1 or args.requests < args.clients:
        sys.exit("bench/server: --rounds and --clients must be at least 1, --requests at least --clients")
    lib = one_library(args.lib, "bench/server")
    become_subreaper()
    runs = [("plain", None, None)] + [(name, kind, extra) for name, kind, extra, _ in VARIANTS]
    cpu = {name: [] for name, _, _ in runs}
    machine = machine_line()
    with tempfile.TemporaryDirectory(prefix="pyigprof-bench-server-") as tmp:
        shim = build_floor_shim(tmp)
        for r in range(args.rounds):
            order = runs[r % len(runs):] + runs[:r % len(runs)]
            for name, kind, extra in order:
                env = dict(os.environ)
                env.pop("LD_PRELOAD", None)
                if kind == "pyigprof":
                    env.update(LD_PRELOAD=lib, PYIGPROF_OUTPUT=os.path.join(tmp, "p.%p.gz"),
                               PYIGPROF_QUIET="1", **extra)
                elif kind == "shim":
                    env.update(LD_PRELOAD=shim, **extra)
                cpu[name].append(serve_once(args.python, env, args.requests, tmp))
            time.sleep(0.2)
    plain = cpu["plain"]
    per_request = median_interval([c / args.requests * 1e3 for c in plain])
    lines = [
        "- command: `python3 bench/server/run.py %s`" % " ".join(sys.argv[1:]),
        machine,
        "- python: `%s`; %d rounds of %d requests from %d client threads in another process" % (
            args.python, args.rounds, args.requests, args.clients),
        "",
        "| run | server CPU per request, ms | against plain, median [95 % interval] |",
        "|---|---|---|",
        "| plain | %.3f [%.3f, %.3f] | |" % per_request,
    ]
    for name, _, _, _ in VARIANTS:
        ms = median_interval([c / args.requests * 1e3 for c in cpu[name]])
        ratio = median_interval([(a / b - 1) * 100 for a, b in zip(cpu[name], plain)])
        lines.append("| %s | %.3f | %+.1f %% [%+.1f, %+.1f] |" % ((name, ms[0]) + ratio))
    lines += ["", "Runs:", ""] + ["- `%s`: %s" % (n, d) for n, _, _, d in VARIANTS]
    print("\n".join(lines))
    if args.out:
        with open(args.out, "w") as f:
            f.write("# A thread-per-request server: CPU per request\n\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
