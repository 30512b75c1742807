#!/usr/bin/env python3
"""What asyncio task stacks cost: an asyncio program with 240 tasks three deep
(bench/asyncio/tasks_program.py) run plainly and under pyigprof with task stacks on and
off (`PYIGPROF_ASYNCIO=0`), in cpu mode at 1 kHz and in wall mode at 250 Hz, in rounds
(one run of each configuration per round, the order rotated each round).

    python3 bench/asyncio/run.py [--python PATH] [--rounds 9] [--loops 200]
                                 [--out bench/asyncio/results.md]

Each run's CPU time counts the program and pyigprof's helper process (a CLONE_VM clone the
program never waits for, reaped here as an orphan: bench/measure.py), start-up and exit
included. The table gives per configuration the median CPU time, the median of the paired
ratios to the plain run of the same round and to the same mode with task stacks off, each
with a 95 % interval (order statistics of the ratios, distribution-free), the handler's
median time per sample and the samples that carried task frames or were suspended tasks',
from the profiles' statistics. The default interpreter is Debian's 3.15 as
scripts/install-debian-pythons.sh installs it; task stacks work from 3.11 (3.14+ from
asyncio's published offsets, 3.11-3.13 from its module's own dict and sets: compare with
--python ~/.pyenv/versions/3.12.1/bin/python).

Standard library only.
"""
import argparse
import glob
import gzip
import os
import re
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from measure import median_interval, run_once  # noqa: E402  (bench/measure.py)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PROGRAM = os.path.join(HERE, "tasks_program.py")
DEFAULT_PYTHON = os.path.expanduser(
    "~/.cache/pyigprof/pythons/debian-sid-3.15/usr/bin/python3.15")

# (name, settings or None for the plain run)
CONFIGS = [
    ("plain", None),
    ("cpu 1 kHz, task stacks", {"PYIGPROF_HZ": "1000"}),
    ("cpu 1 kHz, no task stacks", {"PYIGPROF_HZ": "1000", "PYIGPROF_ASYNCIO": "0"}),
    ("wall 250 Hz, task stacks", {"PYIGPROF_CLOCK": "wall"}),
    ("wall 250 Hz, no task stacks", {"PYIGPROF_CLOCK": "wall", "PYIGPROF_ASYNCIO": "0"}),
]
# The configuration each one's task stacks are compared with.
OFF = {"cpu 1 kHz, task stacks": "cpu 1 kHz, no task stacks",
       "wall 250 Hz, task stacks": "wall 250 Hz, no task stacks"}


def profile_stats(directory):
    """The `#pyigprof stats` and `#pyigprof handler` key=value pairs of the one profile in
    `directory`."""
    paths = glob.glob(os.path.join(directory, "*.gz"))
    if len(paths) != 1:
        raise SystemExit("bench/asyncio: expected one profile in %s, found %d" % (directory, len(paths)))
    with gzip.open(paths[0], "rt", errors="replace") as f:
        text = f.read()
    stats = {}
    for section in ("stats", "handler", "cost"):
        m = re.search(r"#pyigprof %s ([^)]*)\)" % section, text)
        if m:
            for word in m.group(1).split():
                key, _, value = word.partition("=")
                stats["%s.%s" % (section, key)] = value
    stats["task_frames"] = text.count("N=(<task ")
    return stats


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=DEFAULT_PYTHON)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--loops", type=int, default=200)
    parser.add_argument("--lib", default=os.path.join(REPO, "target", "release", "libpyigprof.so"))
    parser.add_argument("--no-build", action="store_true")
    parser.add_argument("--out", help="write the table here as well")
    args = parser.parse_args()
    if not os.access(args.python, os.X_OK):
        raise SystemExit("bench/asyncio: %s: no such interpreter (scripts/install-debian-pythons.sh "
                         "installs Debian's 3.14 and 3.15)" % args.python)
    if not args.no_build:
        subprocess.run(["cargo", "build", "--release", "-q"], cwd=REPO, check=True)
    version = subprocess.run([args.python, "-c", "import sys; print(sys.version.split()[0])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    base_env = {k: v for k, v in os.environ.items()
                if not k.startswith(("PYIGPROF_", "PYTHON")) and k != "LD_PRELOAD"}
    cpu = {name: [] for name, _ in CONFIGS}
    stats = {name: [] for name, _ in CONFIGS}
    for round_ in range(args.rounds):
        order = CONFIGS[round_ % len(CONFIGS):] + CONFIGS[:round_ % len(CONFIGS)]
        for name, settings in order:
            with tempfile.TemporaryDirectory() as rundir:
                env = dict(base_env)
                if settings is not None:
                    env.update(settings, LD_PRELOAD=args.lib, PYIGPROF_QUIET="1",
                               PYIGPROF_OUTPUT=os.path.join(rundir, "p.%p.gz"))
                res = run_once([args.python, PROGRAM, str(args.loops)], env, rundir, 300)
                if not res["ok"]:
                    raise SystemExit("bench/asyncio: %s: %s" % (name, res["error"]))
                cpu[name].append(res["cpu_s"])
                if settings is not None:
                    stats[name].append(profile_stats(rundir))
        print("round %d/%d done" % (round_ + 1, args.rounds), file=sys.stderr)

    def ratio_cell(name, other):
        m, lo, hi = median_interval([a / b for a, b in zip(cpu[name], cpu[other])])
        return "×%.3f [%.3f, %.3f]" % (m, lo, hi)

    lines = [
        "# asyncio task stacks: cost (%s, %d rounds, LOOPS=%d)" % (version, args.rounds, args.loops),
        "",
        "`python3 bench/asyncio/run.py --python %s --rounds %d --loops %d`" % (
            args.python, args.rounds, args.loops),
        "",
        "| configuration | CPU s (median) | ÷ plain, same round | ÷ no task stacks, same round "
        "| handler median µs | helper process CPU ms | samples | `<task …>` functions "
        "| suspended-task samples |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, settings in CONFIGS:
        row = [name, "%.3f" % statistics.median(cpu[name])]
        if settings is None:
            row += ["", "", "", "", "", "", ""]
        else:
            row.append(ratio_cell(name, "plain"))
            row.append(ratio_cell(name, OFF[name]) if name in OFF else "")
            s = stats[name]
            med = lambda key: statistics.median(float(x.get(key, 0) or 0) for x in s)
            row.append("%.1f" % (med("handler.median_ns") / 1000))
            row.append("%.1f" % (med("cost.helper_cpu_ns") / 1e6))
            row.append("%.0f" % med("stats.samples"))
            row.append("%.0f" % med("task_frames"))
            row.append("%.0f" % med("stats.task_samples"))
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", "CPU time: the program's and the helper process's (bench/measure.py), start-up "
              "and exit included. Intervals: 95 %, order statistics of the per-round ratios."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
