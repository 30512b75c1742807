/* The floor under any in-process sampler on this machine: what one sample costs the
 * sampled thread before the profiler does any work of its own.
 *
 * One thread does fixed work in windows (a floating-point loop of WORK iterations);
 * sampling is switched on and off between adjacent windows, in alternating order, so that
 * each pair runs under the same machine conditions (this VM's speed drifts by tens of per
 * cent over seconds). A window's cost is its thread CPU time (CLOCK_THREAD_CPUTIME_ID);
 * the cost of one sample is (on - off) / samples, per pair, and pooled.
 *
 * Triggers (argv[1]):
 *   event-nosignal  a task-clock perf event with sample_period PERIOD, no signal: the
 *                   kernel's timer interrupt and overflow alone
 *   event           the same event delivering SIGPROF to the thread (F_SETOWN_EX TID,
 *                   O_ASYNC), as pyigprof's helper process sets it up; empty handler
 *   event-clock     the same; the handler reads the thread's CPU clock (one system call,
 *                   as pyigprof's handler does to weigh each sample)
 *   timer           a POSIX CPU timer (timer_create CLOCK_THREAD_CPUTIME_ID,
 *                   SIGEV_THREAD_ID) of interval PERIOD; empty handler. The kernel checks
 *                   these timers on its scheduler tick, so they fire at most at HZ.
 *
 * Usage: floor TRIGGER PERIOD_NS WINDOWS WORK
 * Output: one line of key=value pairs (parsed by run.py). Exit 2 on bad arguments, 1 when
 * the kernel refuses the event or timer.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/perf_event.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static volatile long signals;
static int read_clock;

static void handler(int sig, siginfo_t *info, void *uc) {
    (void)sig, (void)info, (void)uc;
    signals++;
    if (read_clock) {
        struct timespec ts;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    }
}

static long thread_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int fd = -1;
static timer_t timer;
static int use_timer;
static long period;

static void sampling(int on) {
    if (use_timer) {
        struct itimerspec it = {0};
        if (on) {
            it.it_value.tv_sec = it.it_interval.tv_sec = period / 1000000000L;
            it.it_value.tv_nsec = it.it_interval.tv_nsec = period % 1000000000L;
        }
        timer_settime(timer, 0, &it, NULL);
    } else {
        ioctl(fd, on ? PERF_EVENT_IOC_ENABLE : PERF_EVENT_IOC_DISABLE, 0);
    }
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: floor event-nosignal|event|event-clock|timer PERIOD_NS WINDOWS WORK\n");
        return 2;
    }
    const char *trigger = argv[1];
    period = atol(argv[2]);
    int windows = atoi(argv[3]);
    long work = atol(argv[4]);
    int signal_on = strcmp(trigger, "event-nosignal") != 0;
    use_timer = strcmp(trigger, "timer") == 0;
    read_clock = strcmp(trigger, "event-clock") == 0;
    if (period <= 0 || windows < 2 || work <= 0 ||
        (!use_timer && !read_clock && strcmp(trigger, "event") && signal_on)) {
        fprintf(stderr, "floor: bad arguments (see the usage in floor.c)\n");
        return 2;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = handler;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigaction(SIGPROF, &sa, NULL);
    pid_t tid = syscall(SYS_gettid);
    if (use_timer) {
        struct sigevent ev;
        memset(&ev, 0, sizeof ev);
        ev.sigev_notify = SIGEV_THREAD_ID;
        ev.sigev_signo = SIGPROF;
        ev._sigev_un._tid = tid;
        if (timer_create(CLOCK_THREAD_CPUTIME_ID, &ev, &timer) != 0) {
            perror("floor: timer_create");
            return 1;
        }
    } else {
        struct perf_event_attr a;
        memset(&a, 0, sizeof a);
        a.type = PERF_TYPE_SOFTWARE;
        a.size = sizeof a;
        a.config = PERF_COUNT_SW_TASK_CLOCK;
        a.sample_period = period;
        a.exclude_kernel = 1;
        a.exclude_hv = 1;
        a.disabled = 1;
        fd = syscall(SYS_perf_event_open, &a, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
        if (fd < 0) {
            perror("floor: perf_event_open");
            return 1;
        }
        if (signal_on) {
            struct f_owner_ex owner = {F_OWNER_TID, tid};
            fcntl(fd, F_SETSIG, SIGPROF);
            fcntl(fd, F_SETOWN_EX, &owner);
            fcntl(fd, F_SETFL, O_ASYNC);
        }
    }
    double *per = malloc(sizeof(double) * windows);
    volatile double x = 0;
    long on_ns = 0, off_ns = 0, samples = 0;
    for (int w = 0; w < windows; w++) {
        long ns[2] = {0, 0}, got = 0;
        for (int k = 0; k < 2; k++) {
            int on = k ^ (w & 1);
            sampling(on);
            long before = signals, t0 = thread_ns();
            for (long i = 0; i < work; i++) x += i * 0.5;
            ns[on] = thread_ns() - t0;
            if (on) got = signals - before;
        }
        sampling(0);
        /* without a signal, count the overflows the event would have sent: its period */
        if (!signal_on) got = ns[1] / period;
        per[w] = got ? (double)(ns[1] - ns[0]) / got : 0;
        on_ns += ns[1];
        off_ns += ns[0];
        samples += got;
    }
    qsort(per, windows, sizeof(double), by_value);
    printf("trigger=%s period_ns=%ld windows=%d samples=%ld on_s=%.4f off_s=%.4f ratio=%.4f "
           "pooled_us=%.3f median_us=%.3f q25_us=%.3f q75_us=%.3f\n",
           trigger, period, windows, samples, on_ns / 1e9, off_ns / 1e9,
           (double)on_ns / off_ns, samples ? (on_ns - off_ns) / 1e3 / samples : 0.0,
           per[windows / 2] / 1e3, per[windows / 4] / 1e3, per[3 * windows / 4] / 1e3);
    return 0;
}
