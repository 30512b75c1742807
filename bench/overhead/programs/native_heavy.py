"""Native-heavy workload: most CPU time in C code called from a thin Python
layer: zlib compression/decompression, SHA-256/BLAKE2 hashing (OpenSSL or
CPython's own), list.sort on integers and strings, bytes.translate.

Usage: python native_heavy.py LOOPS    (one loop is a fixed unit of work)
"""
import hashlib
import random
import sys
import zlib

rng = random.Random(42)
# ~256 KiB of compressible text-like data (a fixed seed: every run is the same).
WORDS = [("".join(rng.choice("abcdefghij") for _ in range(rng.randint(2, 9)))).encode()
         for _ in range(500)]
DATA = b" ".join(rng.choice(WORDS) for _ in range(50000))[: 256 * 1024]
INTS = [rng.randrange(1 << 30) for _ in range(20000)]
STRS = [w.decode() for w in WORDS] * 8
TABLE = bytes.maketrans(b"abcde", b"edcba")


def unit():
    packed = zlib.compress(DATA, 6)
    assert zlib.decompress(packed) == DATA
    h = hashlib.sha256(DATA).digest() + hashlib.blake2b(DATA).digest()
    ordered = sorted(INTS)
    words = sorted(STRS)
    swapped = DATA.translate(TABLE)
    return len(packed) + h[0] + ordered[0] + len(words[0]) + swapped[0]


def main(loops):
    total = 0
    for _ in range(loops):
        total += unit()
    return total


if __name__ == "__main__":
    main(int(sys.argv[1]))
