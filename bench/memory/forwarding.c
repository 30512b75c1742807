/* malloc and free in a loop: what a malloc-free pair costs a program (ns), for
 * bench/memory/forwarding.py to compare plainly and under LD_PRELOAD=libpyigprof.so, whose
 * allocator functions stand in front of the C library's in every process it is loaded
 * into, the memory profiler on or off.
 *
 * Usage: forwarding PAIRS   (prints the ns per pair, from CLOCK_MONOTONIC) */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) / 16 : 1000000;
    void *volatile blocks[16];
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < rounds; i++) {
        /* 64 to 784 bytes: glibc's tcache serves them, as it does most of a program's. */
        for (int j = 0; j < 16; j++) blocks[j] = malloc(64 + j * 48);
        for (int j = 0; j < 16; j++) free(blocks[j]);
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    double ns = (b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec);
    printf("%.3f\n", ns / (rounds * 16.0));
    return 0;
}
