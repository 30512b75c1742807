#!/bin/sh
# Benchmark of pyigprof-analyse on large generated dumps (bench/analyse/README.md).
#
#   bench/analyse/run.sh [SIZE_MB]     # default 500; --smoke: 5 MB, to check the script
#
# Generates, in $BENCH_DIR (default /tmp/pyigprof-bench), a realistic pyigprof dump of
# SIZE_MB megabytes (igprof-analyse/examples/gen_dump.rs: 100000 distinct stacks of
# Python and native frames, one call tree per thread), the same dump gzip-compressed, and
# one a fifth of the size with the same stacks; then runs `--top` and `--text` on each
# and prints, per run, the elapsed time, the throughput in MB/s of uncompressed dump, and
# the peak memory (maximum resident set size, from GNU time's %M). Symbol resolution is
# off (--no-resolve): the generated libraries are not the ones on this machine.
set -eu
cd "$(dirname "$0")/../.."
size=${1:-500}
[ "$size" = --smoke ] && size=5
dir=${BENCH_DIR:-/tmp/pyigprof-bench}
mkdir -p "$dir"
[ -x /usr/bin/time ] || { echo "run.sh: needs GNU time (/usr/bin/time; Debian package 'time')" >&2; exit 2; }

cargo build --release --quiet -p pyigprof-analyse --bin pyigprof-analyse --example gen_dump
gen=target/release/examples/gen_dump
analyse=target/release/pyigprof-analyse
small=$((size / 5))
[ "$small" -ge 1 ] || small=1

"$gen" "$dir/dump-$size.txt" "$size"
"$gen" "$dir/dump-$size.gz" "$size"
"$gen" "$dir/dump-$small.txt" "$small"

echo
echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GB", $2 / 1048576}' /proc/meminfo), $(sed -n 's/^model name\t*: //p' /proc/cpuinfo | head -1)"
printf '%-22s %-7s %12s %10s %8s %12s\n' file report "file MB" seconds "MB/s" "peak RSS MB"
for file in "dump-$small.txt" "dump-$size.txt" "dump-$size.gz"; do
    # Throughput counts the uncompressed bytes, the same for .txt and .gz of one size.
    case $file in
        *.gz) bytes=$(stat -c %s "$dir/dump-$size.txt") ;;
        *) bytes=$(stat -c %s "$dir/$file") ;;
    esac
    for report in --top --text; do
        /usr/bin/time -f '%e %M' -o "$dir/time.out" "$analyse" --no-resolve "$report" "$dir/$file" >/dev/null
        read -r seconds kb < "$dir/time.out"
        awk -v f="$file" -v r="$report" -v b="$bytes" -v s="$seconds" -v k="$kb" -v c="$(stat -c %s "$dir/$file")" \
            'BEGIN { printf "%-22s %-7s %12.1f %10.2f %8.1f %12.0f\n", f, r, c / 1e6, s, b / 1e6 / s, k / 1024 }'
    done
done
