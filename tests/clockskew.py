"""A process whose wall clock is off by a set amount, for tests of clock correction between hosts.

Network namespaces share the kernel's one wall clock (time namespaces move the monotonic and boot
clocks only), so a worker "on another host" reads the master's time exactly. ``build`` compiles a
small ``LD_PRELOAD`` library that adds ``LOADGEN_TEST_SKEW_NS`` to every ``CLOCK_REALTIME`` reading
of the process it is loaded into (``clock_gettime``, ``gettimeofday``, ``time``, and the kernel's
receive times that ``recvmsg`` hands over), the way a host whose NTP is off would read; the
monotonic clocks are left alone, as they are on such a host.

    env = skewed_env(lib, 300_000_000)   # this process's wall clock 300 ms ahead
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

_SOURCE = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>

static long long skew_ns;
static int (*real_clock_gettime)(clockid_t, struct timespec *);
static ssize_t (*real_recvmsg)(int, struct msghdr *, int);

__attribute__((constructor)) static void init(void) {
    const char *s = getenv("LOADGEN_TEST_SKEW_NS");
    skew_ns = s ? atoll(s) : 0;
    real_clock_gettime = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
    real_recvmsg = (ssize_t (*)(int, struct msghdr *, int))dlsym(RTLD_NEXT, "recvmsg");
}

static void shift(struct timespec *ts) {
    long long ns = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + skew_ns;
    ts->tv_sec = ns / 1000000000LL;
    ts->tv_nsec = ns % 1000000000LL;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    int rc = real_clock_gettime(id, ts);
    if (rc == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) shift(ts);
    return rc;
}

int gettimeofday(struct timeval *tv, void *tz) {
    struct timespec ts;
    int rc = clock_gettime(CLOCK_REALTIME, &ts);
    (void)tz;
    if (rc == 0 && tv) { tv->tv_sec = ts.tv_sec; tv->tv_usec = ts.tv_nsec / 1000; }
    return rc;
}

/* the kernel's receive times (SO_TIMESTAMPNS, SO_TIMESTAMP) read on the same wrong clock */
ssize_t recvmsg(int fd, struct msghdr *msg, int flags) {
    ssize_t n = real_recvmsg(fd, msg, flags);
    if (n < 0 || msg->msg_controllen == 0) return n;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(msg); c; c = CMSG_NXTHDR(msg, c)) {
        if (c->cmsg_level != SOL_SOCKET) continue;
        if (c->cmsg_type == SCM_TIMESTAMPNS) shift((struct timespec *)CMSG_DATA(c));
        if (c->cmsg_type == SCM_TIMESTAMP) {
            struct timeval *tv = (struct timeval *)CMSG_DATA(c);
            struct timespec ts = {tv->tv_sec, tv->tv_usec * 1000};
            shift(&ts);
            tv->tv_sec = ts.tv_sec;
            tv->tv_usec = ts.tv_nsec / 1000;
        }
    }
    return n;
}

time_t time(time_t *out) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (out) *out = ts.tv_sec;
    return ts.tv_sec;
}
"""


def build(where: Path) -> Path | str:
    """The library's path, or why it could not be made (no C compiler here)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return "no C compiler to build the clock-skew library"
    src, lib = where / "skew.c", where / "libskew.so"
    src.write_text(_SOURCE)
    argv = [cc, "-shared", "-fPIC", "-O2", "-o", str(lib), str(src), "-ldl"]
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        return f"cc could not build the clock-skew library: {proc.stderr.strip()[-300:]}"
    return lib


def skewed_env(lib: Path, skew_ns: int) -> dict[str, str]:
    return {**os.environ, "LD_PRELOAD": str(lib), "LOADGEN_TEST_SKEW_NS": str(skew_ns)}
