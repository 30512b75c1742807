/* The floor under a per-thread sampler's thread start and end on this machine: what
 * starting and joining a short thread costs when each thread gets its own sampling
 * trigger, with no profiler around it (issue 57: "a thread's start and end cost <= +10 us").
 *
 * The main thread starts THREADS threads one after another, each joined before the next,
 * each doing WORK iterations of a floating-point loop. Triggers (argv[1]):
 *   none          no trigger: the plain cost
 *   timer         the thread creates a POSIX CPU timer on its own CPU clock
 *                 (CLOCK_THREAD_CPUTIME_ID, SIGEV_THREAD_ID, SIGPROF, PERIOD_NS) as it
 *                 starts and deletes it as it ends (pyigprof's PYIGPROF_PERF_EVENTS=0)
 *   event-self    the thread opens its own task-clock perf event (pid 0, sample period
 *                 PERIOD_NS, SIGPROF to the thread: F_SETSIG, F_SETOWN_EX, O_ASYNC) as it
 *                 starts and closes it as it ends: the least a perf event per thread costs
 *   event-helper  a helper thread opens the event for the new thread's id when the thread
 *                 asks, while the thread goes on (the kernel installs the event on the CPU
 *                 the thread runs on: a cross-CPU call), and closes it after the thread has
 *                 ended: pyigprof's scheme, whose helper process holds the descriptors
 *   event-wait    the same, the thread waiting until its event is open (the kernel then
 *                 installs it without a cross-CPU call, the thread blocked)
 *   event-inherit one task-clock event opened on the main thread before any thread starts,
 *                 with `inherit` and `inherit_thread` (each new thread gets its own copy,
 *                 made inside `clone`, no descriptor and no cross-CPU call), `sigtrap` and
 *                 `remove_on_exec` (Linux 5.13+: the overflow sends SIGTRAP to the thread
 *                 that overflowed, si_code TRAP_PERF): no per-thread work at all
 * The handler of SIGPROF is empty; at PERIOD_NS = 1 ms and WORK well under it, few or no
 * samples are taken, so what is measured is the trigger's creation, installation and
 * removal and what an attached event adds to each context switch.
 *
 * Usage: threads TRIGGER PERIOD_NS THREADS WORK
 * Output: one line of key=value pairs: cpu_s (the process's user + system time, every
 * thread's, the helper's included), wall_s, signals. Exit 2 on bad arguments, 1 when the
 * kernel refuses the timer or event.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "event.h"

enum trigger { NONE, TIMER, EVENT_SELF, EVENT_HELPER, EVENT_WAIT, EVENT_INHERIT };

static enum trigger trigger;
static long period, work;
static volatile double sink;

static int open_event(pid_t tid) {
    return open_task_clock("threads", tid, period);
}

/* The helper thread's mailbox: a thread id to open an event for, the descriptor it
 * opened, descriptors of ended threads to close. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t asked = PTHREAD_COND_INITIALIZER, done = PTHREAD_COND_INITIALIZER;
static pid_t to_open;
static int opened = -1, to_close = -1, quit;

static void *helper(void *arg) {
    (void)arg;
    pthread_mutex_lock(&lock);
    for (;;) {
        while (!to_open && to_close < 0 && !quit)
            pthread_cond_wait(&asked, &lock);
        if (to_close >= 0) {
            close(to_close);
            to_close = -1;
        }
        if (to_open) {
            pid_t tid = to_open;
            to_open = 0;
            pthread_mutex_unlock(&lock);
            int fd = open_event(tid);
            pthread_mutex_lock(&lock);
            opened = fd;
            pthread_cond_broadcast(&done);
        }
        if (quit)
            break;
    }
    pthread_mutex_unlock(&lock);
    return NULL;
}

static void *body(void *arg) {
    (void)arg;
    pid_t tid = (pid_t)syscall(SYS_gettid);
    timer_t timer;
    int fd = -1;
    if (trigger == TIMER) {
        struct sigevent sev;
        memset(&sev, 0, sizeof sev);
        sev.sigev_notify = SIGEV_THREAD_ID;
        sev.sigev_signo = SIGPROF;
        sev._sigev_un._tid = tid;
        if (timer_create(CLOCK_THREAD_CPUTIME_ID, &sev, &timer)) {
            fprintf(stderr, "threads: timer_create: %s\n", strerror(errno));
            exit(1);
        }
        struct itimerspec it = {{period / 1000000000L, period % 1000000000L},
                                {period / 1000000000L, period % 1000000000L}};
        timer_settime(timer, 0, &it, NULL);
    } else if (trigger == EVENT_SELF) {
        fd = open_event(0);
    } else if (trigger == EVENT_HELPER || trigger == EVENT_WAIT) {
        pthread_mutex_lock(&lock);
        to_open = tid;
        pthread_cond_signal(&asked);
        if (trigger == EVENT_WAIT)
            while (to_open || opened == -1)
                pthread_cond_wait(&done, &lock);
        pthread_mutex_unlock(&lock);
    }
    double x = 1.0;
    for (long i = 0; i < work; i++)
        x = x * 1.0000001 + 1e-9;
    sink = x;
    if (trigger == TIMER)
        timer_delete(timer);
    else if (fd >= 0)
        close(fd);
    return NULL;
}

/* The event-inherit trigger: one event on the calling (main) thread, copied by the kernel
 * into every thread it starts afterwards. */
static void open_inherited(void) {
    count_signal_on(SIGTRAP);
    struct perf_event_attr attr = task_clock_attr(period);
    attr.inherit = 1;
    attr.inherit_thread = 1;
    attr.remove_on_exec = 1;
    attr.sigtrap = 1;
    int fd = syscall(SYS_perf_event_open, &attr, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, "threads: perf_event_open (inherit, sigtrap): %s\n", strerror(errno));
        exit(1);
    }
}

static double now(clockid_t clock) {
    struct timespec t;
    clock_gettime(clock, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: threads none|timer|event-self|event-helper|event-wait|event-inherit PERIOD_NS THREADS WORK\n");
        return 2;
    }
    const char *names[] = {"none", "timer", "event-self", "event-helper", "event-wait", "event-inherit"};
    int found = 0;
    for (int i = 0; i < 6; i++)
        if (!strcmp(argv[1], names[i]))
            trigger = (enum trigger)i, found = 1;
    period = atol(argv[2]);
    long threads = atol(argv[3]);
    work = atol(argv[4]);
    if (!found || period <= 0 || threads <= 0 || work < 0) {
        fprintf(stderr, "threads: bad arguments\n");
        return 2;
    }
    if (trigger != NONE) /* under a profiler, `none` leaves SIGPROF to it */
        count_signal_on(SIGPROF);
    if (trigger == EVENT_INHERIT)
        open_inherited();
    pthread_t help;
    if (trigger == EVENT_HELPER || trigger == EVENT_WAIT)
        pthread_create(&help, NULL, helper, NULL);
    double wall0 = now(CLOCK_MONOTONIC);
    struct rusage r0, r1;
    getrusage(RUSAGE_SELF, &r0);
    for (long i = 0; i < threads; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, body, NULL)) {
            fprintf(stderr, "threads: pthread_create failed\n");
            return 1;
        }
        pthread_join(t, NULL);
        if (trigger == EVENT_HELPER || trigger == EVENT_WAIT) {
            /* The ended thread's descriptor is closed by the helper, as pyigprof's queues
             * it; its event was opened by now in the waiting variant, and at the latest
             * when the helper next runs otherwise. */
            pthread_mutex_lock(&lock);
            while (to_open || opened == -1)
                pthread_cond_wait(&done, &lock);
            to_close = opened >= 0 ? opened : -1;
            opened = -1;
            pthread_cond_signal(&asked);
            pthread_mutex_unlock(&lock);
        }
    }
    double wall = now(CLOCK_MONOTONIC) - wall0;
    if (trigger == EVENT_HELPER || trigger == EVENT_WAIT) {
        pthread_mutex_lock(&lock);
        quit = 1;
        pthread_cond_signal(&asked);
        pthread_mutex_unlock(&lock);
        pthread_join(help, NULL);
    }
    getrusage(RUSAGE_SELF, &r1);
    double cpu = (r1.ru_utime.tv_sec - r0.ru_utime.tv_sec) + (r1.ru_stime.tv_sec - r0.ru_stime.tv_sec) +
                 ((r1.ru_utime.tv_usec - r0.ru_utime.tv_usec) + (r1.ru_stime.tv_usec - r0.ru_stime.tv_usec)) * 1e-6;
    printf("cpu_s=%.6f wall_s=%.6f signals=%ld\n", cpu, wall, signals);
    return 0;
}
