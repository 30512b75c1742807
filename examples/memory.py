"""A program that keeps memory it does not need: a cache that is never pruned, filled
among temporaries. `remember` keeps a compressed copy of every record (about 24 MiB in
all); `load` parses JSON into objects that are dropped. Its last line says what the cache
holds, to compare with the memory profile:

    PYIGPROF_PROFILE=mem LD_PRELOAD=.../libpyigprof.so python3 examples/memory.py
    pyigprof-analyse -r MEM_LIVE --tree pyigprof.<pid>.gz
"""
import json
import sys
import zlib

cache = {}


def load(i):
    """Temporaries: a JSON text made and parsed, the record returned."""
    text = json.dumps({"id": i, "values": [i * k for k in range(300)]})
    return json.loads(text)


def remember(i, record):
    """The leak: every record, compressed (zlib allocates its state natively), kept."""
    cache[i] = zlib.compress(json.dumps(record).encode(), 1)


def main():
    for i in range(20000):
        remember(i, load(i))
    kept = sum(sys.getsizeof(v) for v in cache.values())
    print(json.dumps({"cache_entries": len(cache), "cache_bytes": kept}))


main()
