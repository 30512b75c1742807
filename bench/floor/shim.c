/* The floor under a per-thread sampler in a real program: an LD_PRELOAD library that gives
 * every thread of the process a sampling trigger of its own and does nothing else — no
 * stack capture, no profile, no helper process. What a program pays for it is what any
 * profiler of that scheme pays on this machine before doing any work (bench/server/run.py
 * runs a thread-per-request server under it).
 *
 * FLOOR_TRIGGER (environment):
 *   event  each thread opens its own task-clock perf event as it starts (pid 0, SIGPROF to
 *          the thread: event.h) and closes it as it ends: the cheapest way to attach an
 *          event to a thread (pyigprof's helper process opens it instead, which costs the
 *          thread a cross-CPU call more: threads.c's event-helper)
 *   timer  each thread creates a POSIX CPU timer on its own CPU clock (SIGEV_THREAD_ID,
 *          SIGPROF) and deletes it as it ends (pyigprof's PYIGPROF_PERF_EVENTS=0)
 * FLOOR_PERIOD_NS: the period, ns of the thread's CPU time (default 4,000,000: 250 Hz).
 * The SIGPROF handler is empty. The main thread gets its trigger in the constructor, every
 * other thread in a wrapper of its start routine (pthread_create is interposed), removed by
 * a thread-specific data destructor at its exit.
 *
 * Build: cc -O2 -shared -fPIC -o shim.so shim.c -ldl -lpthread (bench/server/run.py does).
 * An unknown FLOOR_TRIGGER or a refused event or timer: a message on stderr, exit 1.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <time.h>

#include "event.h"

enum trigger { EVENT, TIMER };
static enum trigger trigger;
static long period = 4000000;
static pthread_key_t key;

/* What a thread's destructor removes: its event's descriptor or its timer. */
struct attached {
    int fd;
    timer_t timer;
};

static void detach(void *arg) {
    struct attached *a = arg;
    if (trigger == TIMER)
        timer_delete(a->timer);
    else if (a->fd >= 0)
        close(a->fd);
    free(a);
}

static void attach(void) {
    struct attached *a = malloc(sizeof *a);
    if (!a)
        return;
    a->fd = -1;
    if (trigger == TIMER) {
        struct sigevent sev;
        memset(&sev, 0, sizeof sev);
        sev.sigev_notify = SIGEV_THREAD_ID;
        sev.sigev_signo = SIGPROF;
        sev._sigev_un._tid = (pid_t)syscall(SYS_gettid);
        if (timer_create(CLOCK_THREAD_CPUTIME_ID, &sev, &a->timer)) {
            fprintf(stderr, "shim: timer_create: %s\n", strerror(errno));
            exit(1);
        }
        struct itimerspec it = {{period / 1000000000L, period % 1000000000L},
                                {period / 1000000000L, period % 1000000000L}};
        timer_settime(a->timer, 0, &it, NULL);
    } else {
        a->fd = open_task_clock("shim", 0, period);
    }
    pthread_setspecific(key, a);
}

struct start {
    void *(*routine)(void *);
    void *arg;
};

static void *started(void *arg) {
    struct start s = *(struct start *)arg;
    free(arg);
    attach();
    return s.routine(s.arg);
}

int pthread_create(pthread_t *thread, const pthread_attr_t *attr, void *(*routine)(void *),
                   void *arg) {
    static int (*real)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
    if (!real)
        real = (int (*)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *))dlsym(
            RTLD_NEXT, "pthread_create");
    struct start *s = malloc(sizeof *s);
    if (!s)
        return real(thread, attr, routine, arg);
    s->routine = routine;
    s->arg = arg;
    int err = real(thread, attr, started, s);
    if (err)
        free(s);
    return err;
}

__attribute__((constructor)) static void start_floor(void) {
    const char *t = getenv("FLOOR_TRIGGER");
    if (!t || !strcmp(t, "event"))
        trigger = EVENT;
    else if (!strcmp(t, "timer"))
        trigger = TIMER;
    else {
        fprintf(stderr, "shim: FLOOR_TRIGGER=%s: expected event or timer\n", t);
        exit(1);
    }
    const char *p = getenv("FLOOR_PERIOD_NS");
    if (p && atol(p) > 0)
        period = atol(p);
    count_signal_on(SIGPROF);
    pthread_key_create(&key, detach);
    attach();
}
