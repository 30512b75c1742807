#!/usr/bin/env python3
"""Is `pyigprof-analyse --diff` calibrated? How often does it flag a regression between two
runs of the same program (false alarms, which must be at most 5 %), and how often does it
find a function made 60 % heavier (power, which must be at least 95 %)?

    python3 bench/diff-calibration/run.py [--builds before=DIR,after=DIR] [--rates 250,1000]
        [--programs two,periodic] [--runs 12] [--seconds 6] [--sets 3] [--seed 1]
        [--profiles DIR] [--out results.md]

For each build (a directory holding `pyigprof-analyse` and, to record, `libpyigprof.so`: a
checkout's `target/release`), rate and program of programs.py, it profiles --runs runs of
the program and as many with one function doing 60 % more work
(`PYIGPROF_BENCH_HEAVY=1.6`: compute_hot in `two`, phase_a in `periodic`), then compares
with `pyigprof-analyse --diff BASE NEW --fail-on-regression 0`:

- false alarms: the first 40 pairs of two base runs (of runs·(runs−1)/2), each flagged
  when the analyser says REGRESSION (some function grew significantly, by any amount:
  exit status 1); also with `--fail-on-regression 3`, as the issue's CI used it;
- power: the first 40 pairs (base i, heavy j), each a hit when the heavy function is
  among the regressions the result line names.

and the same with several runs per side, `--diff B1 B2 B3 -- N1 N2 N3` (--sets runs per
side, 3 by default): false alarms over 40 pairs of disjoint sets of base runs, power over
40 pairs (a set of base runs, a set of heavy runs), each set drawn at random (seeded by
--seed, the program and the rate: every build compares the same sets). An analyser that
takes one profile per side (before December 2026) has `n/a` there.

With --profiles DIR nothing is recorded: the profiles of an earlier run (the directory it
printed, holding `<build>-<program>-<rate>/base-<i>.gz` and `heavy-<i>.gz`) are compared
again, by every build given, e.g. the analyser as it was and as it is on the same runs.

The machine's load is what it is (the programs stop on their own CPU time, so load changes
their wall time, not their samples). Standard library only; writes a markdown table and
the raw comparisons as JSON beside it.
"""
import argparse
import datetime
import itertools
import json
import math
import os
import platform
import random
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PROGRAMS = os.path.join(HERE, "programs.py")
HEAVY_FUNCTION = {"two": "compute_hot", "periodic": "phase_a"}
PAIRS = 40


class Unsupported(Exception):
    """The analyser does not take several profiles per side."""


def profile(build, python, program, seconds, rate, heavy, out):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYIGPROF")}
    env.update(LD_PRELOAD=os.path.join(build, "libpyigprof.so"), PYIGPROF_HZ=str(rate),
               PYIGPROF_OUTPUT=out, PYIGPROF_QUIET="1",
               PYIGPROF_BENCH_HEAVY="1.6" if heavy else "1")
    subprocess.run([python, PROGRAMS, program, str(seconds)], env=env, check=True,
                   stdout=subprocess.DEVNULL, timeout=600)
    return out


def compare(build, base, new, threshold, options=()):
    """Compares the runs `base` with the runs `new` (lists of profiles; one each:
    `--diff BASE NEW`, else `--diff B1 B2 -- N1 N2`) with `options` more: whether the
    analyser says REGRESSION, its result line, its test line and the z of every test
    whose shares are at least 1 % on both sides (the table's z and cum z)."""
    sides = base + new if len(base) == 1 and len(new) == 1 else base + ["--"] + new
    r = subprocess.run([os.path.join(build, "pyigprof-analyse"), "--diff"] + sides +
                       ["--fail-on-regression", str(threshold), "--top=0"] + list(options),
                       capture_output=True, text=True, timeout=600)
    if r.returncode == 2 and len(sides) > 2 and r.stderr.startswith("error:"):
        raise Unsupported(r.stderr.splitlines()[0])
    if r.returncode not in (0, 1):
        sys.exit("diff-calibration: the analyser failed: %s" % r.stderr[-400:])
    lines = r.stdout.splitlines()
    line = lambda prefix: next((l for l in lines if l.startswith(prefix)), "")
    z = []
    header = next((i for i, l in enumerate(lines) if l.lstrip().startswith("base %")), None)
    for row in lines[header + 1:] if header is not None else []:
        cells = row.split()
        if row.startswith(("(", "result:")) or len(cells) < 15:
            break
        # base %, new %, z (self); base cum %, new cum %, cum z.
        for base_share, new_share, value in ((0, 1, 5), (7, 8, 12)):
            if cells[value] != "-" and min(float(cells[base_share]), float(cells[new_share])) >= 1.0:
                z.append(float(cells[value]))
    return r.returncode == 1, line("result:"), line("test:"), z


def recorded(profiles, build_name, program, rate):
    """The directory of the profiles of `program` at `rate` under `profiles`:
    `<build>-<program>-<rate>` if there is one, else the one `*-<program>-<rate>`."""
    own = os.path.join(profiles, "%s-%s-%d" % (build_name, program, rate))
    if os.path.isdir(own):
        return own
    found = [os.path.join(profiles, d) for d in sorted(os.listdir(profiles))
             if d.endswith("-%s-%d" % (program, rate)) or d == "%s-%d" % (program, rate)]
    if len(found) != 1:
        sys.exit("diff-calibration: %s: expected one directory of %s at %d Hz "
                 "(<build>-%s-%d), found %s" % (profiles, program, rate, program, rate,
                                               found or "none"))
    return found[0]


def set_pairs(runs, size, seed, program, rate, count=PAIRS):
    """`count` pairs of disjoint sets of `size` base runs (false alarms) and `count`
    pairs (a set of base runs, a set of heavy runs) (power), drawn from `runs` runs of
    each, the same for every build."""
    rng = random.Random("%d-%s-%d" % (seed, program, rate))
    null, power = [], []
    for _ in range(count):
        drawn = rng.sample(range(runs), 2 * size)
        null.append((sorted(drawn[:size]), sorted(drawn[size:])))
    for _ in range(count):
        power.append((sorted(rng.sample(range(runs), size)), sorted(rng.sample(range(runs), size))))
    return null, power


# Two-sided tails of the standard normal that the sweep compares the z with.
TAILS = (2.5, 3.0, 3.5)


def sweep(build, paths, runs, sets, seed, program, rate, weights, count):
    """For each prior weight of `weights`: false alarms and power over `count` pairs of
    sets of runs each (as the main comparisons), and how often the z of the same-vs-same
    tests (shares of at least 1 %) exceed each of TAILS, over how often a standard normal
    does (1: calibrated; above: the z's tails are too heavy)."""
    null, power = set_pairs(runs, sets, seed, program, rate, count)
    fn = HEAVY_FUNCTION[program]
    out = []
    for weight in weights:
        options = ["--prior-weight", str(weight)]
        flagged, z = 0, []
        for a, b in null:
            regression, _, _, scores = compare(build, [paths[(False, i)] for i in a],
                                               [paths[(False, i)] for i in b], 0, options)
            flagged += regression
            z += scores
        found = 0
        for a, b in power:
            regression, line, _, _ = compare(build, [paths[(False, i)] for i in a],
                                             [paths[(True, i)] for i in b], 0, options)
            found += regression and (fn + " ") in line
        excess = {str(t): (sum(abs(v) > t for v in z) / max(len(z), 1)) /
                  math.erfc(t / math.sqrt(2)) for t in TAILS}
        out.append({"prior_weight": weight, "pairs": count, "flagged": flagged,
                    "found": found, "tests": len(z),
                    "variance": sum(v * v for v in z) / max(len(z), 1),
                    "tail_over_normal": excess})
    return out


def cell(build_name, build, python, program, rate, runs, seconds, tmp, profiles, sets, seed,
         weights, sweep_pairs):
    if profiles:
        d = recorded(profiles, build_name, program, rate)
        count = lambda kind: len([f for f in os.listdir(d) if f.startswith(kind + "-")])
        runs = min(count("base"), count("heavy"))
        paths = {(heavy, i): os.path.join(d, "%s-%d.gz" % ("heavy" if heavy else "base", i))
                 for i in range(runs) for heavy in (False, True)}
    else:
        d = os.path.join(tmp, "%s-%s-%d" % (build_name, program, rate))
        os.makedirs(d)
        jobs = [(heavy, i) for i in range(runs) for heavy in (False, True)]
        paths = {}
        for heavy, i in jobs:
            paths[(heavy, i)] = profile(build, python, program, seconds, rate, heavy,
                                        os.path.join(d, "%s-%d.gz" % ("heavy" if heavy else "base", i)))
    null_pairs = list(itertools.combinations(range(runs), 2))[:PAIRS]
    power_pairs = list(itertools.product(range(runs), range(runs)))
    # Spread over the runs: (0,0), (1,1), …, then (0,1), (1,2), …
    power_pairs.sort(key=lambda p: ((p[1] - p[0]) % runs, p[0]))
    power_pairs = power_pairs[:PAIRS]
    out = {"build": build_name, "program": program, "rate": rate, "runs": runs,
           "seconds": seconds, "profiles": d, "sets": sets, "null": [], "power": [],
           "set_null": [], "set_power": []}
    fn = HEAVY_FUNCTION[program]

    def null(base, new):
        flagged, line, test, _ = compare(build, base, new, 0)
        flagged3, _, _, _ = compare(build, base, new, 3)
        return {"flagged": flagged, "flagged_3_points": flagged3, "result": line, "test": test}

    def power(base, new):
        flagged, line, test, _ = compare(build, base, new, 0)
        return {"found": flagged and (fn + " ") in line, "result": line, "test": test}

    for a, b in null_pairs:
        out["null"].append(dict(pair=[a, b], **null([paths[(False, a)]], [paths[(False, b)]])))
    for a, b in power_pairs:
        out["power"].append(dict(pair=[a, b], **power([paths[(False, a)]], [paths[(True, b)]])))
    set_null, set_power = set_pairs(runs, sets, seed, program, rate)
    try:
        for a, b in set_null:
            out["set_null"].append(dict(pair=[a, b], **null(
                [paths[(False, i)] for i in a], [paths[(False, i)] for i in b])))
        for a, b in set_power:
            out["set_power"].append(dict(pair=[a, b], **power(
                [paths[(False, i)] for i in a], [paths[(True, i)] for i in b])))
        if weights:
            out["sweep"] = sweep(build, paths, runs, sets, seed, program, rate, weights,
                                 sweep_pairs)
    except Unsupported as refused:
        out["set_null"], out["set_power"] = None, None
        out["sets_refused"] = str(refused)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--builds", default="after=" + os.path.join(REPO, "target", "release"))
    parser.add_argument("--python", default="/root/.pyenv/versions/3.12.1/bin/python")
    parser.add_argument("--programs", default="two,periodic")
    parser.add_argument("--rates", default="250,1000")
    parser.add_argument("--runs", type=int, default=12)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--sets", type=int, default=3,
                        help="runs per side of the comparisons of several runs")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--profiles", help="compare the profiles under this directory "
                        "(an earlier run's) instead of recording")
    parser.add_argument("--prior-weights", default="",
                        help="also compare the sets of runs with each of these "
                        "--prior-weight values (e.g. 0,2,5,10,20,1000000): false alarms, "
                        "power and the tails of the z (analysers that have the option)")
    parser.add_argument("--sweep-pairs", type=int, default=100,
                        help="pairs of each kind per prior weight")
    parser.add_argument("--out", default=os.path.join(HERE, "results.md"))
    args = parser.parse_args()
    builds = [b.split("=", 1) for b in args.builds.split(",")]
    tmp = None if args.profiles else tempfile.mkdtemp(prefix="diff-calibration-")
    weights = [float(w) for w in args.prior_weights.split(",") if w]
    cells = [(name, path, program, int(rate)) for name, path in builds
             for program in args.programs.split(",") for rate in args.rates.split(",")]
    started = datetime.datetime.now()
    with ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(lambda c: cell(c[0], c[1], args.python, c[2], c[3], args.runs,
                                               args.seconds, tmp, args.profiles, args.sets,
                                               args.seed, weights, args.sweep_pairs), cells))
    took = (datetime.datetime.now() - started).total_seconds()
    with open(os.path.splitext(args.out)[0] + ".json", "w") as f:
        json.dump(results, f, indent=1)
    lines = ["# `--diff` calibration: false alarms and power", "",
             "- command: `%s`" % " ".join(["python3", "bench/diff-calibration/run.py"] + sys.argv[1:]),
             "- date: %s; host: %s, %d CPUs; load average after: %s; took %.0f s" % (
                 started.isoformat(timespec="seconds"), platform.node(), os.cpu_count(),
                 " ".join("%.2f" % x for x in os.getloadavg()), took),
             "- builds: %s" % ", ".join("%s = `%s`" % (n, p) for n, p in builds),
             "- profiles: %s" % ("`%s` (recorded earlier)" % args.profiles if args.profiles
                                 else "recorded under `%s`" % tmp),
             "- %d runs of %.0f CPU s per program and variant; heavy: one function doing 60 %% more work "
             "(compute_hot in `two`, phase_a in `periodic`); single runs: the first %d pairs of each "
             "kind; %d runs per side: %d random pairs of each kind (seed %d)" % (
                 min(r["runs"] for r in results), args.seconds, PAIRS, args.sets, PAIRS,
                 args.seed), "",
             "| build | program | rate | false alarms (any growth) | false alarms (> 3 points) "
             "| power (60 %% heavier found) | %d runs per side: false alarms (any growth) "
             "| false alarms (> 3 points) | power |" % args.sets,
             "|---|---|---|---|---|---|---|---|---|"]

    def rate(items, key):
        if items is None:
            return "n/a"
        hits = sum(p[key] for p in items)
        return "%d/%d (%.0f %%)" % (hits, len(items), 100.0 * hits / len(items))

    for r in results:
        lines.append("| %s | %s | %d Hz | %s | %s | %s | %s | %s | %s |" % (
            r["build"], r["program"], r["rate"], rate(r["null"], "flagged"),
            rate(r["null"], "flagged_3_points"), rate(r["power"], "found"),
            rate(r["set_null"], "flagged"), rate(r["set_null"], "flagged_3_points"),
            rate(r["set_power"], "found")))
    swept = [r for r in results if r.get("sweep")]
    if swept:
        lines += ["", "Prior weight d0 (`--prior-weight`) with %d runs per side, %d pairs of each "
                  "kind per program and rate: false alarms, power, and how often the z of the "
                  "same-vs-same tests (shares of at least 1 %% on both sides) exceed 2.5, 3 and "
                  "3.5 over how often a standard normal does (1: calibrated)." % (
                      args.sets, args.sweep_pairs), "",
                  "| build | program | rate | d0 | false alarms | power | z tests | var(z) "
                  "| P(\\|z\\|>2.5) / normal | P(\\|z\\|>3) / normal | P(\\|z\\|>3.5) / normal |",
                  "|---|---|---|--:|---|---|--:|--:|--:|--:|--:|"]
        for r in swept:
            for w in r["sweep"]:
                tails = w["tail_over_normal"]
                lines.append("| %s | %s | %d Hz | %g | %d/%d | %d/%d | %d | %.2f | %.2f | %.2f | %.2f |" % (
                    r["build"], r["program"], r["rate"], w["prior_weight"], w["flagged"],
                    w["pairs"], w["found"], w["pairs"], w["tests"], w["variance"],
                    tails["2.5"], tails["3.0"], tails["3.5"]))
    text = "\n".join(lines) + "\n"
    with open(args.out, "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
