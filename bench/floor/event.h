/* The sampling event of bench/floor's C programs (threads.c, rearm.c): a task-clock perf
 * event counting thread `tid` (0: the caller) in user mode, overflowing every `period_ns`
 * of its CPU time and sending SIGPROF to that thread (F_SETSIG, F_SETOWN_EX F_OWNER_TID,
 * O_ASYNC), as pyigprof's helper process sets it up (preload/src/sources/perf.rs).
 *
 * Returns the descriptor; -2 when the thread ended before its event was set up (ESRCH);
 * on any other error says so on stderr as "PROGRAM: call: reason" and exits 1.
 */
#ifndef FLOOR_EVENT_H
#define FLOOR_EVENT_H
#include <errno.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The attributes of a task-clock event overflowing every `period_ns` of CPU time in user
 * mode, nothing else set. */
static struct perf_event_attr task_clock_attr(long period_ns) {
    struct perf_event_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.size = sizeof attr;
    attr.type = PERF_TYPE_SOFTWARE;
    attr.config = PERF_COUNT_SW_TASK_CLOCK;
    attr.sample_period = period_ns;
    attr.exclude_kernel = 1;
    attr.exclude_hv = 1;
    return attr;
}

static int open_task_clock(const char *program, pid_t tid, long period_ns) {
    struct perf_event_attr attr = task_clock_attr(period_ns);
    attr.wakeup_events = 1;
    int fd = syscall(SYS_perf_event_open, &attr, tid, -1, -1, PERF_FLAG_FD_CLOEXEC);
    if (fd < 0 && errno == ESRCH)
        return -2;
    if (fd < 0) {
        fprintf(stderr, "%s: perf_event_open: %s\n", program, strerror(errno));
        exit(1);
    }
    struct f_owner_ex owner = {F_OWNER_TID, tid ? tid : (pid_t)syscall(SYS_gettid)};
    if (fcntl(fd, F_SETSIG, SIGPROF) || fcntl(fd, F_SETOWN_EX, &owner) ||
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_ASYNC)) {
        if (errno == ESRCH) {
            close(fd);
            return -2;
        }
        fprintf(stderr, "%s: fcntl: %s\n", program, strerror(errno));
        exit(1);
    }
    return fd;
}

/* An empty handler that counts the signals in `signals`. */
static volatile long signals;

static void count_signal(int sig, siginfo_t *info, void *uc) {
    (void)sig, (void)info, (void)uc;
    signals++;
}

/* Installs count_signal for `sig` (SIGPROF for the events above, SIGTRAP for a `sigtrap`
 * event's). */
static void count_signal_on(int sig) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = count_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigaction(sig, &sa, NULL);
}
#endif
