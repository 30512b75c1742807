#!/usr/bin/env python3
"""What a process that does nothing pays for the profiler: `python -c pass` with and
without the library, alternating run by run.

    python3 bench/startup/run.py [--runs 60] [--pythons 3.12] [--lib NAME=PATH ...]
                                 [--set NAME:KEY=VALUE ...] [--out bench/startup/results.md]

Builds pyigprof (cargo build --release) unless --lib is given, then runs each interpreter
--runs times in rounds: once plainly, once under each library (LD_PRELOAD, default
settings). Each run's CPU time (user+sys, wait4, plus pyigprof's helper process, which the
program never waits for, reaped here as an orphan: bench/measure.py) and peak RSS are
measured, and its wall time from start to the parent's `wait4`; the table gives
the plain run's medians and, per library, the median of the paired differences (library
run minus the plain run of the same round) with its 95 % interval (order statistics of the
differences, distribution-free). Issues 17 and 39 ask for at most +1 ms CPU (the helper
process's included) and +1 MB RSS.

Standard library only.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from measure import add_lib_option, libraries, median_interval, run_once  # noqa: E402  (bench/measure.py)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PYENV_VERSIONS = "/root/.pyenv/versions"


def interpreter(version):
    """The pyenv interpreter of `version` (3.12 → /root/.pyenv/versions/3.12.*/bin/python)."""
    if os.path.sep in version:
        return version
    for name in sorted(os.listdir(PYENV_VERSIONS)):
        if name == version or name.startswith(version + "."):
            return os.path.join(PYENV_VERSIONS, name, "bin", "python")
    sys.exit("bench/startup: no interpreter %s under %s" % (version, PYENV_VERSIONS))


def symbol_cache():
    """Where the library keeps its symbol cache under this environment, as it decides it
    (preload/src/config.rs: PYIGPROF_SYMBOL_CACHE, else $XDG_CACHE_HOME or ~/.cache when that
    directory exists), and how many objects it holds the symbols and the names of: without
    it every run reads and sorts the symbol tables of the objects its samples touched (0.3
    ms more here); with an object's names (capture/symbols/names.rs) a run whose samples
    there were all named before does not open its symbols (0.1-0.2 ms less)."""
    given = os.environ.get("PYIGPROF_SYMBOL_CACHE")
    if given is not None:
        if given in ("", "0"):
            return "symbol cache: off (PYIGPROF_SYMBOL_CACHE=%r)" % given
        top = given
    else:
        xdg = os.environ.get("XDG_CACHE_HOME", "")
        base = xdg if os.path.isabs(xdg) else os.path.join(os.environ.get("HOME", ""), ".cache")
        if not os.path.isdir(base):
            return "symbol cache: none (%s does not exist)" % base
        top = os.path.join(base, "pyigprof", "symbols")
    files = os.listdir(top) if os.path.isdir(top) else []
    names = sum(f.endswith(".names") for f in files)
    return ("symbol cache: %s (before the runs: %d objects' symbols, %d objects' names kept "
            "between runs)" % (top, sum(f.endswith(".symbols") for f in files), names))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--pythons", default="3.12")
    add_lib_option(parser)
    parser.add_argument("--set", action="append", default=[], metavar="NAME:KEY=VALUE",
                        help="a setting for the runs under library NAME (repeatable), e.g. "
                        "--lib timers=target/release/libpyigprof.so --set "
                        "timers:PYIGPROF_PERF_EVENTS=0")
    parser.add_argument("--program", default="pass", help="the -c program (default: pass)")
    parser.add_argument("--out", help="write the table here as well")
    args = parser.parse_args()

    libs = libraries(args.lib, "bench/startup")
    settings = {}
    for spec in args.set:
        name, _, setting = spec.partition(":")
        key, eq, value = setting.partition("=")
        if not eq or name not in dict(libs):
            sys.exit("bench/startup: --set %r: expected NAME:KEY=VALUE for a NAME of --lib" % spec)
        settings.setdefault(name, {})[key] = value
    if not libs:
        subprocess.run(["cargo", "build", "--release", "-p", "pyigprof-preload"], cwd=REPO,
                       check=True)
        libs.append(("pyigprof", os.path.join(REPO, "target", "release", "libpyigprof.so")))

    cache = symbol_cache()
    lines = ["| python | run | CPU ms (median) | wall ms (median) | peak RSS MiB (median) |",
             "|---|---|---|---|---|"]
    for version in args.pythons.split(","):
        python = interpreter(version)
        results = {"plain": []}
        results.update({name: [] for name, _ in libs})
        with tempfile.TemporaryDirectory(prefix="pyigprof-startup-") as rundir:
            for _ in range(args.runs):
                for name, path in [("plain", None)] + libs:
                    env = dict(os.environ)
                    env.pop("LD_PRELOAD", None)
                    if path:
                        env["LD_PRELOAD"] = path
                        env["PYIGPROF_OUTPUT"] = os.path.join(rundir, "profile.%p.gz")
                        env.update(settings.get(name, {}))
                    r = run_once([python, "-c", args.program], env, rundir, 60)
                    if not r["ok"]:
                        sys.exit("bench/startup: %s under %s: %s" % (python, name, r["error"]))
                    results[name].append(r)
        plain = results["plain"]
        cpu0 = statistics.median(r["cpu_s"] * 1e3 for r in plain)
        wall0 = statistics.median(r["wall_s"] * 1e3 for r in plain)
        rss0 = statistics.median(r["maxrss_kib"] / 1024 for r in plain)
        lines.append("| %s | plain | %.2f | %.2f | %.2f |" % (version, cpu0, wall0, rss0))
        for name, _ in libs:
            runs = results[name]
            dcpu = median_interval([(a["cpu_s"] - b["cpu_s"]) * 1e3 for a, b in zip(runs, plain)])
            dwall = median_interval([(a["wall_s"] - b["wall_s"]) * 1e3
                                     for a, b in zip(runs, plain)])
            drss = median_interval([(a["maxrss_kib"] - b["maxrss_kib"]) / 1024
                                    for a, b in zip(runs, plain)])
            lines.append("| %s | %s | %+.2f [%+.2f, %+.2f] | %+.2f [%+.2f, %+.2f] "
                         "| %+.2f [%+.2f, %+.2f] |" % ((version, name) + dcpu + dwall + drss))
    table = "\n".join(lines)
    print("`python -c %r`, %d rounds, differences against the plain run of the same round "
          "(median [95 %% interval]); %s\n" % (args.program, args.runs, cache))
    print(table)
    if args.out:
        with open(args.out, "w") as f:
            f.write("`python -c %r`, %d rounds; library minus plain, median [95 %% interval]; %s"
                    "\n\n%s\n" % (args.program, args.runs, cache, table))


if __name__ == "__main__":
    main()
