/* An LD_PRELOAD library for the clock-step tests: it moves the wall clock only (CLOCK_REALTIME,
 * gettimeofday, time) by the seconds written in the file $WALLCLOCK_SHIFT_FILE, read again at most
 * every 20 ms, so a test steps a running process's clock the way NTP or a restored VM does; the
 * monotonic clock stays real. Built by the tests with the machine's C compiler. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

static int (*real_clock_gettime)(clockid_t, struct timespec *);
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static long long shift_ns, read_at_ns;

static long long ns(const struct timespec *ts) { return ts->tv_sec * 1000000000LL + ts->tv_nsec; }

static long long current_shift(void) {
    struct timespec mono;
    real_clock_gettime(CLOCK_MONOTONIC, &mono);
    pthread_mutex_lock(&lock);
    if (read_at_ns == 0 || ns(&mono) - read_at_ns > 20000000LL) {
        const char *path = getenv("WALLCLOCK_SHIFT_FILE");
        FILE *f = path ? fopen(path, "r") : NULL;
        double seconds;
        if (f) {
            if (fscanf(f, "%lf", &seconds) == 1) shift_ns = (long long)(seconds * 1e9);
            fclose(f);
        }
        read_at_ns = ns(&mono);
    }
    long long shift = shift_ns;
    pthread_mutex_unlock(&lock);
    return shift;
}

static void shifted_now(struct timespec *ts) {
    real_clock_gettime(CLOCK_REALTIME, ts);
    long long t = ns(ts) + current_shift();
    ts->tv_sec = t / 1000000000LL;
    ts->tv_nsec = t % 1000000000LL;
}

__attribute__((constructor)) static void init(void) {
    real_clock_gettime = dlsym(RTLD_NEXT, "clock_gettime");
}

int clock_gettime(clockid_t clock, struct timespec *ts) {
    if (clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE) {
        shifted_now(ts);
        return 0;
    }
    return real_clock_gettime(clock, ts);
}

int gettimeofday(struct timeval *tv, void *tz) {
    (void)tz;
    struct timespec ts;
    shifted_now(&ts);
    if (tv) {
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
    }
    return 0;
}

time_t time(time_t *out) {
    struct timespec ts;
    shifted_now(&ts);
    if (out) *out = ts.tv_sec;
    return ts.tv_sec;
}
