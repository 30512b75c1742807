/* The floor under a helper that re-arms a sampled thread's perf event with random
 * intervals (issue 57: "the helper's CPU <= 0.5 % of the program's at 1 kHz"): what the
 * helper's own CPU time is when it does nothing but wake up every LOOK_NS and, for the one
 * busy thread, draw a new interval and arm it (PERF_EVENT_IOC_PERIOD, a cross-CPU call to
 * the CPU the thread runs on), with no profiler around it.
 *
 * The main thread runs a floating-point loop for SECONDS of its CPU time, sampled by a
 * task-clock perf event (mean period PERIOD_NS, SIGPROF to the thread, empty handler)
 * that a helper thread opened. Modes (argv[1]):
 *   sleep   the helper wakes every LOOK_NS and goes back to sleep
 *   rearm   the helper wakes every LOOK_NS and arms a new interval drawn uniformly between
 *           half and one and a half of PERIOD_NS (as pyigprof's helper does for every
 *           thread sampled since its last look)
 *   none    no helper and no event: the program alone (to be run under pyigprof, which
 *           then samples it and whose summary line gives its own helper's CPU time)
 *
 * Usage: rearm sleep|rearm|none PERIOD_NS LOOK_NS SECONDS
 * Output: key=value pairs: program_s (the main thread's CPU time), helper_s (the helper
 * thread's), looks, signals. Exit 2 on bad arguments, 1 when the kernel refuses the event.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "event.h"

static volatile int done;
static volatile double sink;
static int rearm, fd = -1;
static long period, look;
static long looks;
static pid_t main_tid;

static double cpu_of(clockid_t clock) {
    struct timespec t;
    clock_gettime(clock, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void *helper(void *arg) {
    (void)arg;
    fd = open_task_clock("rearm", main_tid, period);
    if (fd < 0) {
        fprintf(stderr, "rearm: the main thread is gone\n");
        exit(1);
    }
    uint64_t state = 0x9E3779B97F4A7C15ull;
    struct timespec wait = {look / 1000000000L, look % 1000000000L};
    while (!done) {
        nanosleep(&wait, NULL);
        looks++;
        if (rearm) {
            state ^= state << 13, state ^= state >> 7, state ^= state << 17;
            uint64_t next = (uint64_t)period / 2 + state % (uint64_t)period;
            ioctl(fd, PERF_EVENT_IOC_PERIOD, &next);
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 5 || (strcmp(argv[1], "sleep") && strcmp(argv[1], "rearm") && strcmp(argv[1], "none"))) {
        fprintf(stderr, "usage: rearm sleep|rearm|none PERIOD_NS LOOK_NS SECONDS\n");
        return 2;
    }
    rearm = !strcmp(argv[1], "rearm");
    int alone = !strcmp(argv[1], "none");
    period = atol(argv[2]);
    look = atol(argv[3]);
    double seconds = atof(argv[4]);
    if (period <= 0 || look <= 0 || seconds <= 0) {
        fprintf(stderr, "rearm: bad arguments\n");
        return 2;
    }
    main_tid = (pid_t)syscall(SYS_gettid);
    pthread_t help;
    clockid_t helper_clock = CLOCK_THREAD_CPUTIME_ID;
    if (!alone) {
        count_signal_on(SIGPROF);
        pthread_create(&help, NULL, helper, NULL);
        pthread_getcpuclockid(help, &helper_clock);
    }
    double x = 1.0;
    while (cpu_of(CLOCK_THREAD_CPUTIME_ID) < seconds) {
        for (int i = 0; i < 100000; i++)
            x = x * 1.0000001 + 1e-9;
    }
    sink = x;
    double program = cpu_of(CLOCK_THREAD_CPUTIME_ID);
    double helper_s = alone ? 0 : cpu_of(helper_clock);
    done = 1;
    if (!alone)
        pthread_join(help, NULL);
    printf("program_s=%.6f helper_s=%.6f looks=%ld signals=%ld\n", program, helper_s, looks, signals);
    return 0;
}
