#!/usr/bin/env python3
"""Does continuous profiling keep the profiler's memory flat? A day of windows simulated:
bench/overhead's many_stacks.py (3,000 generated functions in 4,000 random chains of depth
1-24: distinct deep stacks) profiled with 0.2 s windows for --windows windows; prints, from
the windows' own statistics (`#pyigprof window … tree_nodes=… readings_bytes=…`), the
trace trees' nodes and the writer's readings after window 2 and after the last, and the
process's resident memory (VmRSS) read from outside at those two times.

    python3 bench/windows/run.py [--python 3.12] [--windows 300] [--out FILE]

Standard library only; the library from target/release (cargo build --release first).
"""
import argparse, glob, gzip, os, re, subprocess, sys, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def window_facts(path):
    with gzip.open(path, "rt", errors="replace") as f:
        for line in f:
            m = re.search(r"#pyigprof window number=(\d+) .*tree_nodes=(\d+) (?:trees_forgotten=(\d+) )?readings_bytes=(\d+)", line)
            if m:
                number, nodes, forgotten, readings = m.groups()
                return (int(number), int(nodes), int(readings), int(forgotten or 0))
    return None


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default="3.12")
    parser.add_argument("--windows", type=int, default=300)
    parser.add_argument("--out")
    args = parser.parse_args()
    python = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/%s*/bin/python" % args.python)))[-1]
    lib = os.path.join(REPO, "target", "release", "libpyigprof.so")
    program = os.path.join(REPO, "bench", "overhead", "programs", "many_stacks.py")
    with tempfile.TemporaryDirectory(prefix="pyigprof-windows-") as tmp:
        env = dict(os.environ, LD_PRELOAD=lib, PYIGPROF_WINDOW="0.2", PYIGPROF_HZ="1000",
                   PYIGPROF_QUIET="1", PYIGPROF_OUTPUT=os.path.join(tmp, "w.%p.%n.gz"))
        seconds = args.windows * 0.2
        # many_stacks.py LOOPS: run it long enough (a loop is ~0.05 s here), stopped at the end.
        proc = subprocess.Popen([python, program, "1000000"], env=env, stdout=subprocess.DEVNULL)
        rss = {}
        start = time.time()
        while time.time() - start < seconds + 0.3:
            n = len(glob.glob(os.path.join(tmp, "w.%d.*.gz" % proc.pid)))
            if n >= 3 and "early" not in rss:
                rss["early"] = (n, rss_kib(proc.pid))
            if n >= args.windows // 2 and "middle" not in rss:
                rss["middle"] = (n, rss_kib(proc.pid))
            time.sleep(0.1)
        n = len(glob.glob(os.path.join(tmp, "w.%d.*.gz" % proc.pid)))
        rss["late"] = (n, rss_kib(proc.pid))
        proc.terminate()
        proc.wait()
        facts = sorted(filter(None, (window_facts(p) for p in glob.glob(os.path.join(tmp, "w.%d.*.gz" % proc.pid)))))
        # The program alone, as long: its own memory, for comparison.
        plain_env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
        plain = subprocess.Popen([python, program, "1000000"], env=plain_env, stdout=subprocess.DEVNULL)
        time.sleep(seconds + 0.3)
        plain_rss = rss_kib(plain.pid)
        plain.terminate()
        plain.wait()
    early = next(f for f in facts if f[0] == 2)
    late = facts[-2] if len(facts) > 2 else facts[-1]
    lines = ["| after window | tree nodes | times the trees were forgotten | readings (bytes) | process RSS (KiB), windows written then |",
             "|---|---|---|---|---|",
             "| %d | %d | %d | %d | %d (%d) |" % (early[0], early[1], early[3], early[2], rss["early"][1], rss["early"][0]),
             "| %d | %d | %d | %d | %d (%d) |" % (late[0], late[1], late[3], late[2], rss["late"][1], rss["late"][0])]
    lines.append("")
    lines.append("Process RSS after %d windows (half the run): %d KiB; the program alone, as long: %d KiB." % (
        rss["middle"][0], rss["middle"][1], plain_rss))
    text = "`python3 bench/windows/run.py %s` (%s, many_stacks.py, 0.2 s windows, 1 kHz)\n\n%s\n" % (
        " ".join(sys.argv[1:]), python, "\n".join(lines))
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
