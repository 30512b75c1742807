#!/usr/bin/env python3
"""Memory-profiler benchmark: pyigprof's memory profiler against memray, Scalene and tracemalloc.

    python3 bench/memory/run.py [--quick] [--rounds 3] [--python 3.12] [--accuracy-runs 10]
                                [--out FILE.md]

Builds pyigprof (cargo build --release), makes a venv under
~/.cache/pyigprof/bench-venvs/ with numpy, memray and Scalene, writes three small
deterministic programs (churn: pymalloc-heavy object churn; numpy: 8 MiB arrays created
and combined; leak: ~82 MiB kept by a function `leak` among temporaries) and runs every
program under every tool (plain, pyigprof mem at the default rate, in exact mode and with
cpu,mem, memray three ways, Scalene, tracemalloc), alternating the tools round by round.
Measures the CPU time (user+sys, from wait4, plus pyigprof's helper process reaped as an
orphan: bench/measure.py) and peak RSS of each run and the size of
what the tool wrote, then pyigprof's start-up cost and the accuracy of its default-rate
estimate of the leak against the truth (tracemalloc's exact count of the same program).
Prints Markdown tables (and writes them to --out, with the raw data as JSON beside it).
See bench/memory/README.md.

Standard library only; runs with any Python 3.7+.
"""
import argparse
import datetime
import glob
import gzip
import hashlib
import json
import math
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from measure import run_once  # noqa: E402  (bench/measure.py)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PYENV_VERSIONS = "/root/.pyenv/versions"
DEFAULT_PYTHON = os.path.join(PYENV_VERSIONS, "3.12.1", "bin", "python")
CACHE_DIR = os.path.join(os.path.expanduser("~"), ".cache", "pyigprof", "bench-venvs")
ANALYSE = os.path.join(REPO, "target", "release", "pyigprof-analyse")
PACKAGES = ["numpy", "memray", "scalene"]
DEFAULT_RATE = 512 * 1024          # pyigprof's default mean bytes between samples
ALWAYS_SAMPLED = 4 << 20           # pyigprof samples allocations this large always, weight 1
MIB = 1048576.0

# --------------------------------------------------------------------------- programs
#
# Each program is written into the run's temporary directory with its sizes filled in
# (full or --quick) and run as `python PROGRAM.py`, without arguments, so that every
# tool's command line is the same. All are deterministic (fixed seeds, PYTHONHASHSEED=0).

CHURN = r'''
# Python object churn: small dicts, lists, tuples and strings made and dropped at once;
# almost every allocation is a small block from pymalloc.
N = {n}

def churn(n):
    total = 0
    for i in range(n):
        d = {{"id": i, "name": "item%d" % i, "tags": [i, i + 1, i + 2]}}
        s = ",".join([d["name"], str(d["id"])])
        l = [x * 2 for x in d["tags"]]
        t = (s, l, {{"k": s[:4]}})
        total += len(t[0]) + len(l)
    return total

print(churn(N))
'''

NUMPY = r'''
# numpy: arrays of 1 Mi float64 (8 MiB) created and combined; few, large allocations.
import numpy as np
ROUNDS = {rounds}

def combine(rounds):
    rng = np.random.default_rng(12345)
    n = 1 << 20
    acc = np.zeros(n)
    for r in range(rounds):
        a = rng.standard_normal(n)
        b = np.arange(n, dtype=np.float64) * (r + 1)
        c = a * b + np.sqrt(np.abs(a))
        d = np.concatenate([c[: n // 2], a[n // 2:]])
        acc += np.sort(d[: n // 8]).sum() + d
    return float(acc.sum())

print(combine(ROUNDS))
'''

LEAK = r'''
# A leak of known bytes: `leak` keeps bytearrays of 700 B to 48 KB and small dicts in a
# global list (~82 MiB), while `temporaries` makes and drops smaller bytearrays, tuples
# and strings between calls. The temporaries make no dicts: a dict that `leak` took from
# CPython's dict free list would be an allocation of `temporaries` to an allocation
# profiler (pyigprof, memray) but `leak`'s to tracemalloc, which re-attributes objects
# reused from free lists; so the truth would depend on the tool's point of view.
import os
CALLS = {calls}
TEMPORARIES = {temporaries}
SIZES = (700, 3000, 12000, 48000)
SMALL = (100, 300, 900, 2700)
kept = []

def leak(i):
    for j in range(64):
        kept.append(bytearray(SIZES[j % 4]))
    for j in range(250):
        kept.append({{"i": i, "j": j}})

def temporaries(i):
    n = 0
    for j in range(TEMPORARIES):
        t = [bytearray(SMALL[(i + j + k) % 4]) for k in range(8)]
        d = [(j, k, "x%d" % k) for k in range(40)]
        n += len(t) + len(d)
    return n

def main():
    n = 0
    for i in range(CALLS):
        leak(i)
        n += temporaries(i)
    return n

print(main(), len(kept))

# The truth (only when the harness asks, under -X tracemalloc=N): the bytes still
# allocated by `leak` (any traceback frame on one of its lines), and their sizes.
out = os.environ.get("BENCH_TRUTH_OUT")
if out:
    import json, tracemalloc
    code = leak.__code__
    lo = code.co_firstlineno
    try:
        hi = max(l for _, _, l in code.co_lines() if l is not None)
    except AttributeError:   # before 3.10
        import dis
        hi = max(l for _, l in dis.findlinestarts(code))
    sizes = {{}}
    for t in tracemalloc.take_snapshot().traces:
        if any(f.filename == __file__ and lo <= f.lineno <= hi for f in t.traceback):
            sizes[t.size] = sizes.get(t.size, 0) + 1
    with open(out, "w") as f:
        json.dump({{"bytes": sum(s * c for s, c in sizes.items()), "sizes": sizes}}, f)
'''

PROGRAMS = ["churn", "numpy", "leak"]
SIZES = {   # program -> (template, full sizes, --quick sizes)
    "churn": (CHURN, {"n": 1100000}, {"n": 110000}),
    "numpy": (NUMPY, {"rounds": 40}, {"rounds": 4}),
    "leak": (LEAK, {"calls": 80, "temporaries": 1800}, {"calls": 80, "temporaries": 180}),
}
LEAK_FUNCTION = "leak"
DRIVERS = ("<module>", "main")   # the leak program's callers of everything

# ---------------------------------------------------------------------------- tools

TOOLS = [
    {"name": "plain", "kind": "plain"},
    {"name": "pyigprof mem (512 KiB)", "kind": "pyigprof", "profile": "mem", "rate": None},
    {"name": "pyigprof mem exact (RATE=1)", "kind": "pyigprof", "profile": "mem", "rate": 1},
    {"name": "pyigprof cpu,mem", "kind": "pyigprof", "profile": "cpu,mem", "rate": None},
    {"name": "memray", "kind": "memray", "flags": []},
    {"name": "memray --native", "kind": "memray", "flags": ["--native"]},
    {"name": "memray --trace-python-allocators", "kind": "memray", "flags": ["--trace-python-allocators"]},
    {"name": "Scalene --memory", "kind": "scalene"},
    {"name": "tracemalloc (-X tracemalloc)", "kind": "tracemalloc"},
    {"name": "IgProf -mp", "kind": "igprof"},
]
BASELINE = "plain"
PYIGPROF_DEFAULT = "pyigprof mem (512 KiB)"
IGPROF_REASON = "not available: IgProf is not installed here (no Debian or PyPI package; this benchmark does not build it)"


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------- setup

def find_interpreter(spec):
    """'3.12' -> the newest pyenv 3.12.x; a path is taken as it is. Returns (version, path)."""
    if "/" in spec:
        path = spec
    else:
        pattern = spec if re.fullmatch(r"\d+\.\d+\.\d+", spec) else spec + ".*"
        cands = [p for p in glob.glob(os.path.join(PYENV_VERSIONS, pattern, "bin", "python"))
                 if re.fullmatch(r"\d+\.\d+\.\d+", p.split(os.sep)[-3])]
        cands.sort(key=lambda p: tuple(int(x) for x in p.split(os.sep)[-3].split(".")))
        if not cands:
            sys.exit("bench: no interpreter for %s under %s" % (spec, PYENV_VERSIONS))
        path = cands[-1]
    out = subprocess.run([path, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit("bench: %s does not run" % path)
    return out.stdout.strip(), path


def build_pyigprof(args):
    if args.no_build:
        log("bench: --no-build: using %s as it is" % args.preload)
    else:
        log("bench: cargo build --release (in %s)" % REPO)
        r = subprocess.run(["cargo", "build", "--release"], cwd=REPO)
        if r.returncode != 0:
            sys.exit("bench: cargo build --release failed (status %d)" % r.returncode)
    for path in (args.preload, ANALYSE):
        if not os.path.exists(path):
            sys.exit("bench: no %s (cargo build --release makes it)" % path)


def setup_venv(version, interp, args):
    """Make (or reuse) the venv; returns {python, notes, numpy, memray, scalene, reasons}."""
    name = "mem-" + version
    if not interp.startswith(PYENV_VERSIONS + "/"):
        name += "-" + hashlib.sha1(os.path.realpath(interp).encode()).hexdigest()[:8]
    venv = os.path.join(args.cache_dir, name)
    py = os.path.join(venv, "bin", "python")
    env = {"python": py, "venv": venv, "notes": [], "reasons": {}}
    if not os.path.exists(py):
        if args.no_install:
            env["notes"].append("--no-install and no venv %s: the bare interpreter" % venv)
            env["python"] = interp
        else:
            log("bench: creating venv %s" % venv)
            os.makedirs(args.cache_dir, exist_ok=True)
            r = subprocess.run([interp, "-m", "venv", venv], capture_output=True, text=True)
            if r.returncode != 0:
                shutil.rmtree(venv, ignore_errors=True)
                env["notes"].append("python -m venv failed (%s): the bare interpreter"
                                    % last_line(r.stderr))
                env["python"] = interp
    have = probe(env["python"])
    missing = [p for p in PACKAGES if not have.get(p)]
    if missing and not args.no_install and env["python"] == py:
        log("bench: pip install %s into %s" % (" ".join(missing), venv))
        r = subprocess.run([py, "-m", "pip", "install", "-q"] + missing, capture_output=True, text=True)
        if r.returncode != 0:   # one at a time, so that one failure only loses its own tool
            for pkg in missing:
                r = subprocess.run([py, "-m", "pip", "install", "-q", pkg], capture_output=True, text=True)
                if r.returncode != 0:
                    env["reasons"][pkg] = "pip install %s failed: %s" % (pkg, last_line(r.stderr))
        have = probe(env["python"])
    for pkg in PACKAGES:
        env[pkg] = have.get(pkg)
        if not env[pkg] and pkg not in env["reasons"]:
            env["reasons"][pkg] = ("%s not installed (--no-install)" % pkg if args.no_install
                                   else "%s does not import in %s" % (pkg, env["python"]))
    log("bench: Python %s (%s): %s" % (version, env["python"], ", ".join(
        "%s %s" % (p, env[p] or "missing") for p in PACKAGES)))
    return env


def probe(py):
    code = ("import json, importlib\nr = {}\n"
            "for m in %r:\n"
            " try:\n  mod = importlib.import_module(m)\n"
            "  r[m] = getattr(mod, '__version__', None) or 'yes'\n"
            " except Exception: r[m] = None\n"
            "print(json.dumps(r))\n" % (PACKAGES,))
    out = subprocess.run([py, "-c", code], capture_output=True, text=True)
    if out.returncode != 0:
        return {}
    have = json.loads(out.stdout)
    if have.get("scalene") == "yes":
        v = subprocess.run([py, "-m", "scalene", "--version"], capture_output=True, text=True)
        m = re.search(r"version\s+([0-9][^\s]*)", v.stdout + v.stderr)
        have["scalene"] = m.group(1) if m else "yes"
    return have


def last_line(text):
    lines = [l for l in (text or "").splitlines() if l.strip()]
    return (lines[-1] if lines else "")[:200]


def write_programs(tmp, quick):
    paths = {}
    os.makedirs(os.path.join(tmp, "programs"))
    for name in PROGRAMS:
        template, full, small = SIZES[name]
        # Not numpy.py, which would shadow numpy.
        path = os.path.join(tmp, "programs", "bench_%s.py" % name)
        with open(path, "w") as f:
            f.write(template.format(**(small if quick else full)))
        paths[name] = path
    return paths


def clean_env():
    """Our environment without any profiler or Python settings, BLAS on one thread, a
    fixed hash seed."""
    env = {k: v for k, v in os.environ.items()
           if k != "LD_PRELOAD" and not k.startswith("PYIGPROF_") and not k.startswith("PYTHON")
           and not k.startswith("SCALENE") and not k.startswith("MEMRAY")}
    env.update({"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                "PYTHONHASHSEED": "0"})
    return env


def unavailable(tool, prog, venv_env):
    """Why `tool` cannot run `prog`, or None."""
    if prog == "numpy" and not venv_env["numpy"]:
        return "not available: " + venv_env["reasons"]["numpy"]
    if tool["kind"] == "igprof":
        return IGPROF_REASON
    if tool["kind"] in ("memray", "scalene") and not venv_env[tool["kind"]]:
        return "not available: " + venv_env["reasons"][tool["kind"]]
    return None


def tool_command(tool, py, script, preload, rundir):
    """(argv, env) of one run of `script` (a path, or ['-c', code]) under `tool`."""
    env = clean_env()
    target = script if isinstance(script, list) else [script]
    kind = tool["kind"]
    if kind == "plain":
        return [py] + target, env
    if kind == "pyigprof":
        env["LD_PRELOAD"] = preload
        env["PYIGPROF_PROFILE"] = tool["profile"]
        env["PYIGPROF_OUTPUT"] = os.path.join(rundir, "pyigprof.%p.gz")
        env["PYIGPROF_QUIET"] = "1"
        if tool["rate"]:
            env["PYIGPROF_MEM_RATE"] = str(tool["rate"])
        return [py] + target, env
    if kind == "memray":
        return [py, "-m", "memray", "run", "-q", "-o", os.path.join(rundir, "memray.bin"), "--force"] \
            + tool["flags"] + target, env
    if kind == "scalene":
        # Scalene 2.x: `scalene run` profiles CPU and memory by default and writes JSON;
        # --memory asks for memory profiling explicitly (it is not --cpu-only).
        return [py, "-m", "scalene", "run", "--memory", "-o", os.path.join(rundir, "scalene.json")] \
            + target, env
    if kind == "tracemalloc":
        return [py, "-X", "tracemalloc"] + target, env
    raise ValueError(kind)


# ------------------------------------------------------------------------ measuring

def output_bytes(rundir):
    """Bytes the tool wrote into the run's directory (all but our stderr capture)."""
    total = 0
    for name in os.listdir(rundir):
        if name != "stderr.txt":
            total += os.path.getsize(os.path.join(rundir, name))
    return total


STATS_RE = re.compile(r"#pyigprof memory ([^)]*)\)")


def pyigprof_stats(path):
    """The profile's `#pyigprof memory key=value ...` statistics, as a dict of numbers."""
    with gzip.open(path, "rt", encoding="utf-8", errors="replace") as f:
        for line in f:
            m = STATS_RE.search(line)
            if m:
                return {k: float(v) for k, v in (w.split("=", 1) for w in m.group(1).split() if "=" in w)}
    return None


def analyse_leak(profile, script):
    """From `pyigprof-analyse -r MEM_LIVE --json --order cumulative`: the leak function's
    cumulative live bytes, and whether it is the first Python function by cumulative
    live bytes once the program's drivers (<module>, main) are left out."""
    out = subprocess.run([ANALYSE, "-r", "MEM_LIVE", "--json", "--order", "cumulative", profile],
                         capture_output=True, text=True)
    if out.returncode != 0:
        return {"error": "pyigprof-analyse failed: " + last_line(out.stderr)}
    doc = json.loads(out.stdout)
    leak_bytes = None
    top = None
    for f in doc["functions"]:
        if not f.get("python"):
            continue
        mine = f.get("file") == script
        if mine and f["name"] == LEAK_FUNCTION:
            leak_bytes = f["cumulative"]["amount"]
        if top is None and not (mine and f["name"] in DRIVERS):
            top = f["name"] if mine else "%s (%s)" % (f["name"], f.get("file"))
    return {"leak_live": leak_bytes or 0, "leak_top": top == LEAK_FUNCTION, "top_function": top,
            "live_total": doc["total"]["amount"]}


MEMRAY_LEAK = r'''
import json, sys, memray
path, script, func = sys.argv[1:4]
total = 0
with memray.FileReader(path) as r:
    for rec in r.get_leaked_allocation_records(merge_threads=True):
        if any(fn == func and fname == script for fn, fname, _ in rec.stack_trace()):
            total += rec.size
print(json.dumps({"leak_live": total}))
'''


def memray_leak(py, path, script, timeout_s):
    """memray's own figure for the leak: bytes of the allocations still live at the end
    of tracking (memray's 'leaks') with `leak` on their Python stack."""
    try:
        out = subprocess.run([py, "-c", MEMRAY_LEAK, path, script, LEAK_FUNCTION], capture_output=True,
                             text=True, timeout=timeout_s, env=clean_env())
    except subprocess.TimeoutExpired:
        return {"error": "reading memray's file timed out"}
    if out.returncode != 0:
        return {"error": "reading memray's file failed: " + last_line(out.stderr)}
    return json.loads(out.stdout)


def check_output(tool, rundir, res, prog, script, py, args):
    """After a successful run: the tool's output must exist; collect what we report."""
    kind = tool["kind"]
    res["output_bytes"] = output_bytes(rundir)
    if kind == "pyigprof":
        profiles = glob.glob(os.path.join(rundir, "pyigprof.*.gz"))
        if len(profiles) != 1:
            res.update(ok=False, error="%d pyigprof profiles written (1 expected)" % len(profiles))
            return
        stats = pyigprof_stats(profiles[0])
        if stats is None:
            res.update(ok=False, error="profile without a `#pyigprof memory` line")
            return
        res["stats"] = stats
        if prog == "leak":
            res["leak"] = analyse_leak(profiles[0], script)
            if "error" in res["leak"]:
                res.update(ok=False, error=res["leak"]["error"])
    elif kind == "memray":
        path = os.path.join(rundir, "memray.bin")
        if not os.path.exists(path) or os.path.getsize(path) == 0:
            res.update(ok=False, error="memray wrote no capture file")
            return
        if prog == "leak" and not args.no_memray_leak:
            res["leak"] = memray_leak(py, path, script, args.timeout)
    elif kind == "scalene":
        path = os.path.join(rundir, "scalene.json")
        try:
            with open(path) as f:
                doc = json.load(f)
            res["scalene_files"] = len(doc.get("files", {}))
        except (OSError, ValueError) as e:
            res.update(ok=False, error="Scalene wrote no readable JSON profile (%s)" % e)
            return
        if prog == "leak":
            # Scalene has no live-at-end view; its per-function n_malloc_mb (MiB allocated,
            # sampled) is the leak's size here, since `leak` frees nothing it allocates.
            for f in doc.get("files", {}).get(script, {}).get("functions", []):
                if f.get("line") == LEAK_FUNCTION and "n_malloc_mb" in f:
                    res["leak"] = {"leak_live": f["n_malloc_mb"] * MIB}


def measure(tool, prog, script, py, args, tmp):
    rundir = os.path.join(tmp, "run")
    shutil.rmtree(rundir, ignore_errors=True)
    os.makedirs(rundir)
    argv, env = tool_command(tool, py, script, args.preload, rundir)
    res = run_once(argv, env, rundir, args.timeout)
    res["command"] = " ".join(["%s=%s" % (k, env[k]) for k in sorted(env)
                               if k == "LD_PRELOAD" or k.startswith("PYIGPROF_")] + argv)
    if res.get("ok"):
        check_output(tool, rundir, res, prog, script, py, args)
    return res


def leak_truth(py, script, tmp, timeout_s):
    """The leak program's truth: `leak`'s bytes still allocated at the end, exactly, from
    tracemalloc (every allocation of the Python allocators, 8 frames), and their sizes."""
    rundir = os.path.join(tmp, "truth")
    shutil.rmtree(rundir, ignore_errors=True)
    os.makedirs(rundir)
    env = clean_env()
    env["BENCH_TRUTH_OUT"] = os.path.join(rundir, "truth.json")
    res = run_once([py, "-X", "tracemalloc=8", script], env, rundir, timeout_s)
    if not res.get("ok"):
        return {"error": res.get("error")}
    with open(env["BENCH_TRUTH_OUT"]) as f:
        doc = json.load(f)
    sizes = {int(s): c for s, c in doc["sizes"].items()}
    # The standard deviation of pyigprof's estimate at the default rate: an allocation of
    # s bytes is sampled with p = 1 - exp(-s/R) and weighted s/p, adding s^2 (1-p)/p.
    var = 0.0
    for s, c in sizes.items():
        if s >= ALWAYS_SAMPLED:
            continue
        p = -math.expm1(-s / DEFAULT_RATE)
        var += c * s * s * (1 - p) / p
    return {"bytes": doc["bytes"], "blocks": sum(sizes.values()), "sigma": math.sqrt(var)}


# -------------------------------------------------------------------------- report

def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def percentile(values, q):
    """Nearest-rank percentile."""
    values = sorted(values)
    if not values:
        return None
    return values[max(0, min(len(values) - 1, int(math.ceil(q / 100.0 * len(values))) - 1))]


def fmt(v, spec, none="n/a"):
    return none if v is None else format(v, spec)


def fmt_bytes(n):
    if n is None:
        return "n/a"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return "%.1f %s" % (n / size, unit)
    return "%d B" % n


def run_tools(meta):
    return [t for t in TOOLS if t["name"] in meta["tools"]]


def summarise(results):
    """cells[(tool, prog)] = {cpu_s, ratio, maxrss_kib, output_bytes, n_ok, n, error, ...}."""
    cells = {}
    programs = results["meta"]["programs"]
    for tool in run_tools(results["meta"]):
        for prog in programs:
            runs = results["runs"].get("%s|%s" % (tool["name"], prog), [])
            ok = [r for r in runs if r.get("ok")]
            errors = sorted({r["error"] for r in runs if not r.get("ok") and r.get("error")})
            cell = {"n_ok": len(ok), "n": len(runs), "error": "; ".join(errors),
                    "cpu_s": median(r["cpu_s"] for r in ok), "wall_s": median(r["wall_s"] for r in ok),
                    "maxrss_kib": median(r["maxrss_kib"] for r in ok),
                    "output_bytes": median(r.get("output_bytes") for r in ok)}
            if tool["kind"] == "pyigprof":
                for k in ("sampled", "unrecorded", "allocated_bytes", "live_bytes", "peak_live_bytes"):
                    cell[k] = median(r.get("stats", {}).get(k) for r in ok)
            leaks = [r["leak"] for r in ok if isinstance(r.get("leak"), dict) and "leak_live" in r["leak"]]
            if leaks:
                cell["leak_live"] = median(l["leak_live"] for l in leaks)
                cell["leak_top"] = sum(1 for l in leaks if l.get("leak_top"))
                cell["leak_runs"] = len(leaks)
            cells[(tool["name"], prog)] = cell
    for prog in programs:
        base = cells[(BASELINE, prog)]
        base_runs = [r["cpu_s"] for r in results["runs"].get("%s|%s" % (BASELINE, prog), []) if r.get("ok")]
        base["spread"] = ((max(base_runs) - min(base_runs)) / statistics.median(base_runs)
                          if len(base_runs) > 1 else None)
        for tool in run_tools(results["meta"]):
            c = cells[(tool["name"], prog)]
            c["ratio"] = c["cpu_s"] / base["cpu_s"] if c["cpu_s"] and base["cpu_s"] else None
            c["rss_added_mib"] = ((c["maxrss_kib"] - base["maxrss_kib"]) / 1024.0
                                  if c["maxrss_kib"] is not None and base["maxrss_kib"] is not None else None)
    return cells


def cell_text(c, value, notes=None):
    if c["n"] == 0:
        return "n/a"
    if c.get("unavailable"):
        if notes is None:
            return c["unavailable"]
        if c["unavailable"] not in notes:
            notes.append(c["unavailable"])
        return "not available (%d)" % (notes.index(c["unavailable"]) + 1)
    if c["n_ok"] == 0:
        return "FAILED: " + c["error"]
    text = value
    if c["n_ok"] < c["n"]:
        text += " (%d/%d ok: %s)" % (c["n_ok"], c["n"], c["error"])
    return text


def render(results, cells):
    meta = results["meta"]
    programs = meta["programs"]
    tools = run_tools(meta)
    out = []
    out.append("# pyigprof memory-profiler benchmark%s" % (" (QUICK RUN: small programs, 1 round; not a measurement)"
                                                          if meta["quick"] else ""))
    out.append("")
    out.append("- command: `%s`" % meta["command"])
    out.append("- date: %s; host: %s, %s CPUs, kernel %s; load average before: %s, after: %s; %.0f s"
               % (meta["date"], meta["host"], meta["cpus"], meta["kernel"], meta["load_before"],
                  meta.get("load_after", "n/a"), meta.get("elapsed_s", 0)))
    out.append("- Python %s (%s), venv %s; numpy %s, memray %s, Scalene %s" % (
        meta["version"], meta["interpreter"], meta["venv"], meta["numpy"] or "missing",
        meta["memray"] or "missing", meta["scalene"] or "missing"))
    out.append("- pyigprof: %s (commit %s); rounds: %d, tools alternating; programs: %s" % (
        meta["preload"], meta["commit"], meta["rounds"], ", ".join(
            "%s %s" % (p, " ".join("%s=%s" % kv for kv in meta["sizes"][p].items())) for p in programs)))
    for n in meta["notes"]:
        out.append("- note: " + n)
    out.append("")
    out.append("CPU time (user+sys of the process and its children, from wait4, and of "
               "pyigprof's helper process, reaped as an orphan), median of the "
               "rounds; tools as a ratio to the plain run's median in this invocation.")
    out.append("")
    out.append("| tool | " + " | ".join(programs) + " |")
    out.append("|---|" + "---|" * len(programs))
    notes = []
    for tool in tools:
        row = []
        for prog in programs:
            c = cells[(tool["name"], prog)]
            if tool["name"] == BASELINE:
                row.append(cell_text(c, "%.2f s" % c["cpu_s"] if c["cpu_s"] is not None else "n/a", notes))
            else:
                row.append(cell_text(c, "×%.2f" % c["ratio"] if c["ratio"] is not None else "n/a", notes))
        out.append("| %s | %s |" % (tool["name"], " | ".join(r.replace("|", "\\|") for r in row)))
    if notes:
        out.append("")
        for i, n in enumerate(notes):
            out.append("(%d) %s" % (i + 1, n[len("not available: "):] if n.startswith("not available: ") else n))
    spreads = ["%s %s" % (p, fmt(cells[(BASELINE, p)].get("spread") and 100 * cells[(BASELINE, p)]["spread"],
                                 ".1f") + " %" if cells[(BASELINE, p)].get("spread") is not None else "n/a")
               for p in programs]
    out.append("")
    out.append("Noise: the plain runs' spread ((max - min) / median CPU time): " + ", ".join(spreads) + ".")
    out.append("")
    out.append("Peak RSS (ru_maxrss) added to the plain run's, MiB (plain: absolute), and the size of "
               "what the tool wrote (profile / capture file), medians:")
    out.append("")
    out.append("| tool | " + " | ".join("%s RSS" % p for p in programs) + " | "
               + " | ".join("%s output" % p for p in programs) + " |")
    out.append("|---|" + "---|" * (2 * len(programs)))
    for tool in tools:
        c0 = [cells[(tool["name"], p)] for p in programs]
        if all(c.get("unavailable") for c in c0):
            continue
        rss = []
        size = []
        for c in c0:
            if not c["n_ok"]:
                rss.append("n/a")
                size.append("n/a")
                continue
            if tool["name"] == BASELINE:
                rss.append("%.1f MiB" % (c["maxrss_kib"] / 1024.0))
                size.append("-")
            else:
                rss.append("%+.1f" % c["rss_added_mib"])
                size.append(fmt_bytes(c["output_bytes"]) if c["output_bytes"] else "none")
        out.append("| %s | %s | %s |" % (tool["name"], " | ".join(rss), " | ".join(size)))
    out.append("")
    if any(t["kind"] == "pyigprof" for t in tools):
        out.append("pyigprof's own statistics (`#pyigprof memory`), medians: allocations recorded "
                   "(unrecorded), bytes allocated, live when the program's code ended, peak live:")
        out.append("")
        out.append("| tool | program | recorded | unrecorded | allocated | live at end | peak live |")
        out.append("|---|---|---|---|---|---|---|")
    for tool in tools:
        if tool["kind"] != "pyigprof":
            continue
        for prog in programs:
            c = cells[(tool["name"], prog)]
            if not c["n_ok"]:
                continue
            out.append("| %s | %s | %s | %s | %s | %s | %s |" % (
                tool["name"], prog, fmt(c.get("sampled"), ",.0f"), fmt(c.get("unrecorded"), ",.0f"),
                fmt_bytes(c.get("allocated_bytes")), fmt_bytes(c.get("live_bytes")),
                fmt_bytes(c.get("peak_live_bytes"))))
    if any(t["kind"] == "pyigprof" for t in tools):
        out.append("")
    st = results.get("startup")
    if st:
        out.append("Start-up: `python -c pass`, CPU time, median of %d alternating runs:" % st["runs"])
        out.append("")
        out.append("| tool | CPU ms | added ms | ratio |")
        out.append("|---|---|---|---|")
        base = st["median_s"].get(BASELINE)
        for name, m in st["median_s"].items():
            if m is None:
                out.append("| %s | FAILED: %s | | |" % (name, st["errors"].get(name, "")))
                continue
            out.append("| %s | %.1f | %s | %s |" % (
                name, 1000 * m, "-" if name == BASELINE else "%+.1f" % (1000 * (m - base)),
                "-" if name == BASELINE else "×%.2f" % (m / base)))
        out.append("")
    acc = results.get("accuracy")
    if acc:
        out.append(render_accuracy(acc, cells, tools))
    out.append("")
    return "\n".join(out) + "\n"


def render_accuracy(acc, cells, tools):
    out = []
    truth = acc.get("truth", {})
    if "error" in truth:
        return "Accuracy: no truth (%s)\n" % truth["error"]
    t = truth["bytes"]
    out.append("Accuracy on `leak`: the function `leak`'s live bytes at the end (cumulative MEM_LIVE, "
               "from `pyigprof-analyse -r MEM_LIVE --json`) against the truth, %s (%d blocks; "
               "tracemalloc's exact count of the same program). At the default rate the "
               "expected standard deviation of the estimate is %s (%.1f %%). Error = estimate / "
               "truth - 1; 'top': `leak` is the first Python function by cumulative MEM_LIVE "
               "(the program's `<module>` and `main` left out)."
               % ("%s (%s bytes)" % (fmt_bytes(t), format(t, ",")), truth["blocks"],
                  fmt_bytes(truth["sigma"]), 100 * truth["sigma"] / t))
    out.append("")
    out.append("| tool | runs | median error | p95 abs error | mean error (bias) | std of errors | top |")
    out.append("|---|---|---|---|---|---|---|")
    errs = acc.get("default_errors") or []
    if errs:
        out.append("| %s, dedicated runs | %d | %+.2f %% | %.2f %% | %+.2f %% | %s | %d/%d |" % (
            PYIGPROF_DEFAULT, len(errs), 100 * statistics.median(errs),
            100 * percentile([abs(e) for e in errs], 95), 100 * statistics.mean(errs),
            "%.2f %%" % (100 * statistics.stdev(errs)) if len(errs) > 1 else "n/a",
            acc["default_top"], len(errs)))
    elif acc.get("default_error"):
        out.append("| %s | 0 | FAILED: %s | | | | |" % (PYIGPROF_DEFAULT, acc["default_error"]))
    for tool in tools:
        if tool["kind"] not in ("pyigprof", "memray", "scalene"):
            continue
        c = cells[(tool["name"], "leak")]
        if not c.get("leak_runs"):
            continue
        e = c["leak_live"] / t - 1
        out.append("| %s (the timed runs) | %d | %+.2f %% | | | | %s |" % (
            tool["name"], c["leak_runs"], 100 * e,
            "%d/%d" % (c["leak_top"], c["leak_runs"]) if tool["kind"] == "pyigprof" else "n/a"))
    out.append("| tracemalloc | | exact (the truth's source) | | | | |")
    out.append("")
    out.append("memray: bytes of its leaked allocations (live at the end of tracking) with `leak` on "
               "their Python stack; without --trace-python-allocators it sees pymalloc's arenas, "
               "not the objects in them. Scalene: `leak`'s `n_malloc_mb` in its JSON, MiB "
               "allocated (sampled), not live bytes: the same here, as `leak` frees nothing.")
    return "\n".join(out)


# ----------------------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 1 round, programs ~10x smaller (the leak keeps its size), "
                         "3 accuracy runs, 5 start-up runs")
    ap.add_argument("--rounds", type=int, help="rounds of every tool on every program (default 3; quick 1)")
    ap.add_argument("--python", default=DEFAULT_PYTHON,
                    help="the interpreter: a path, or a pyenv version (3.13 = newest 3.13.x) "
                         "(default %(default)s)")
    ap.add_argument("--programs", help="comma-separated subset of: " + ",".join(PROGRAMS))
    ap.add_argument("--tools", help="comma-separated kinds of tool besides plain: pyigprof, memray, "
                                    "scalene, tracemalloc (default: all)")
    ap.add_argument("--accuracy-runs", type=int, help="pyigprof runs of the leak program at the default "
                                                      "rate for the accuracy (default 10; quick 3; 0: none)")
    ap.add_argument("--startup-runs", type=int, help="runs of `python -c pass` per tool (default 20; quick 5; "
                                                     "0: none)")
    ap.add_argument("--timeout", type=float, default=600.0, help="per run, s (default %(default)s)")
    ap.add_argument("--no-memray-leak", action="store_true",
                    help="do not read memray's capture files for the leak's bytes")
    ap.add_argument("--out", help="also write the markdown here, and the raw data as JSON beside it")
    ap.add_argument("--cache-dir", default=CACHE_DIR, help="where the venvs live (default %(default)s)")
    ap.add_argument("--no-build", action="store_true", help="do not run cargo build --release")
    ap.add_argument("--no-install", action="store_true", help="do not create the venv or pip install")
    ap.add_argument("--preload", default=os.path.join(REPO, "target", "release", "libpyigprof.so"),
                    help="the pyigprof library (default %(default)s)")
    args = ap.parse_args()

    rounds = args.rounds or (1 if args.quick else 3)
    acc_runs = args.accuracy_runs if args.accuracy_runs is not None else (3 if args.quick else 10)
    startup_runs = args.startup_runs if args.startup_runs is not None else (5 if args.quick else 20)
    programs = PROGRAMS
    if args.programs:
        programs = [p.strip() for p in args.programs.split(",") if p.strip()]
        bad = [p for p in programs if p not in PROGRAMS]
        if bad:
            sys.exit("bench: unknown program(s): " + ", ".join(bad))
    tools = TOOLS
    if args.tools:
        kinds = {k.strip() for k in args.tools.split(",") if k.strip()}
        bad = kinds - {t["kind"] for t in TOOLS}
        if bad:
            sys.exit("bench: unknown tool kind(s): " + ", ".join(sorted(bad)))
        tools = [t for t in TOOLS if t["kind"] == "plain" or t["kind"] in kinds]

    version, interp = find_interpreter(args.python)
    log("bench: Python %s (%s)" % (version, interp))
    build_pyigprof(args)
    venv_env = setup_venv(version, interp, args)
    py = venv_env["python"]

    commit = subprocess.run(["git", "-C", REPO, "describe", "--always", "--dirty"],
                            capture_output=True, text=True).stdout.strip() or "unknown"
    meta = {"command": " ".join(["python3", os.path.relpath(os.path.abspath(__file__), REPO)] + sys.argv[1:]),
            "quick": args.quick, "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "host": platform.node(), "cpus": os.cpu_count(), "kernel": platform.release(),
            "load_before": "%.2f %.2f %.2f" % os.getloadavg(), "preload": args.preload, "commit": commit,
            "rounds": rounds, "version": version, "interpreter": interp, "venv": venv_env["venv"],
            "numpy": venv_env["numpy"], "memray": venv_env["memray"], "scalene": venv_env["scalene"],
            "notes": list(venv_env["notes"]),
            "sizes": {p: SIZES[p][2 if args.quick else 1] for p in PROGRAMS},
            "programs": programs, "tools": [t["name"] for t in tools]}
    results = {"meta": meta, "runs": {}}
    failures = []
    tmp = tempfile.mkdtemp(prefix="pyigprof-membench-")
    started = time.monotonic()
    cells = None
    try:
        scripts = write_programs(tmp, args.quick)
        # Warm-up: one plain run of each program (page cache, .pyc of numpy).
        for prog in programs:
            if prog == "numpy" and not venv_env["numpy"]:
                continue
            r = measure(TOOLS[0], prog, scripts[prog], py, args, tmp)
            if not r.get("ok"):
                sys.exit("bench: the plain run of %s fails: %s" % (prog, r.get("error")))
        for prog in programs:
            for tool in tools:
                results["runs"]["%s|%s" % (tool["name"], prog)] = []
            runnable = []
            for tool in tools:
                why = unavailable(tool, prog, venv_env)
                if why:
                    results["runs"]["%s|%s" % (tool["name"], prog)].append({"ok": False, "unavailable": why})
                else:
                    runnable.append(tool)
            for i in range(rounds):
                order = runnable[i % len(runnable):] + runnable[:i % len(runnable)]
                for tool in order:
                    res = measure(tool, prog, scripts[prog], py, args, tmp)
                    res["round"] = i + 1
                    results["runs"]["%s|%s" % (tool["name"], prog)].append(res)
                    if not res.get("ok"):
                        failures.append("%s on %s: %s (%s)" % (tool["name"], prog, res["error"], res.get("command")))
                    log("bench: %s round %d %-34s %s" % (
                        prog, i + 1, tool["name"],
                        "cpu %.2f s rss %.0f MiB out %s%s" % (
                            res["cpu_s"], res["maxrss_kib"] / 1024.0, fmt_bytes(res.get("output_bytes")),
                            "; leak %s" % fmt_bytes(res["leak"].get("leak_live"))
                            if isinstance(res.get("leak"), dict) and "leak_live" in res["leak"] else "")
                        if res.get("ok") else "FAILED: " + res.get("error", "")))

        # Start-up: `python -c pass`, alternating.
        if startup_runs:
            st_tools = [t for t in TOOLS if t["name"] in (BASELINE, PYIGPROF_DEFAULT)
                        or (t["name"] in ("memray", "tracemalloc (-X tracemalloc)") and t in tools
                            and not unavailable(t, "churn", venv_env))]
            times = {t["name"]: [] for t in st_tools}
            errors = {}
            for i in range(startup_runs):
                for t in st_tools[i % len(st_tools):] + st_tools[:i % len(st_tools)]:
                    res = measure(t, "startup", ["-c", "pass"], py, args, tmp)
                    if res.get("ok"):
                        times[t["name"]].append(res["cpu_s"])
                    else:
                        errors[t["name"]] = res.get("error")
                        failures.append("%s on python -c pass: %s" % (t["name"], res.get("error")))
            results["startup"] = {"runs": startup_runs, "errors": errors,
                                  "median_s": {k: median(v) for k, v in times.items()}, "times_s": times}
            log("bench: start-up medians: " + ", ".join(
                "%s %s ms" % (k, fmt(v and 1000 * v, ".1f")) for k, v in results["startup"]["median_s"].items()))

        # Accuracy on the leak program.
        if acc_runs and "leak" in programs:
            acc = {"truth": leak_truth(py, scripts["leak"], tmp, args.timeout)}
            if "error" in acc["truth"]:
                failures.append("truth run of leak: " + acc["truth"]["error"])
            else:
                log("bench: leak truth %s bytes (%d blocks), sigma at the default rate %s" % (
                    format(acc["truth"]["bytes"], ","), acc["truth"]["blocks"], fmt_bytes(acc["truth"]["sigma"])))
                errs = []
                top = 0
                estimates = []
                for i in range(acc_runs):
                    res = measure(TOOLS[1], "leak", scripts["leak"], py, args, tmp)
                    if not res.get("ok"):
                        acc["default_error"] = res.get("error")
                        failures.append("accuracy run %d: %s" % (i + 1, res.get("error")))
                        continue
                    est = res["leak"]["leak_live"]
                    estimates.append(est)
                    errs.append(est / acc["truth"]["bytes"] - 1)
                    top += 1 if res["leak"]["leak_top"] else 0
                    log("bench: accuracy run %d: leak %s bytes (%+.2f %%), top function %s" % (
                        i + 1, format(est, ","), 100 * errs[-1], res["leak"]["top_function"]))
                acc.update(default_errors=errs, default_top=top, default_estimates=estimates)
            results["accuracy"] = acc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        meta["load_after"] = "%.2f %.2f %.2f" % os.getloadavg()
        meta["elapsed_s"] = round(time.monotonic() - started, 1)
        if results["runs"]:
            cells = summarise(results)
            for (name, prog), c in cells.items():
                runs = results["runs"].get("%s|%s" % (name, prog), [])
                why = [r["unavailable"] for r in runs if r.get("unavailable")]
                if why:
                    c["unavailable"] = why[0]
            text = render(results, cells)
            print(text)
            if args.out:
                with open(args.out, "w") as f:
                    f.write(text)
                with open(os.path.splitext(args.out)[0] + ".json", "w") as f:
                    json.dump({"results": results,
                               "cells": {"%s|%s" % k: v for k, v in cells.items()}}, f, indent=1)
                log("bench: wrote %s and its .json" % args.out)
        log("bench: %.0f s" % meta["elapsed_s"])
    if failures:
        log("bench: %d failed run(s):" % len(failures))
        for f in failures:
            log("  " + f)
        sys.exit(1)


if __name__ == "__main__":
    main()
