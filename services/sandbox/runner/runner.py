"""NOVA sandbox runner: runs node code inside bubblewrap.

Started by the Go runner in one of two modes:

  runner.py run CONFIG     one program, then exit (cold start, and the process
                           backend). The code is in CONFIG["code"], the context in
                           CONFIG["context"]; the result goes to fd 3 and, with
                           network, fd 5 is the egress broker.
  runner.py zygote CONFIG  a warm template (fork server). It imports the heavy
                           modules once, never runs user code, and hands every
                           job received on fd 3 to a pre-forked process in
                           fresh namespaces (see "Warm start").

Whatever the mode, the result is written as b"S" (once the user's code is about
to run) followed by one JSON document and a newline, on a descriptor that only
the runner holds, so nothing the code prints can corrupt it.
"""

import builtins
import datetime
import errno
import json
import linecache
import math
import os
import re
import resource
import select
import signal
import socket
import struct
import sys
import threading
import time
import traceback

FILENAME = "<node>"
# Above any descriptor number (the descriptor limit): close_stray_fds closes
# up to it.
MAX_FD = os.sysconf("SC_OPEN_MAX")
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
PROXY_PORT = 3128
# The only uid that exists inside a job's own user namespace.
JOB_UID = 65534


# ---------------------------------------------------------------------------
# Running one program (both modes)


def report_and_exit(result_fd, job):
    """Runs job() and writes its report; never returns."""
    try:
        result = job()
    except BaseException as e:  # a fault of the runner itself, not of the code
        result = {
            "status": "error",
            "error_kind": "sandbox_fault",
            "error": "runner: " + describe(e),
            "traceback": "".join(traceback.format_exception(type(e), e, e.__traceback__)),
        }
    flush_all()
    try:
        payload = result if isinstance(result, bytes) else json.dumps(result).encode()
    except MemoryError:
        payload = json.dumps(
            {"status": "error", "error_kind": "limit", "limit": "memory",
             "error": "MemoryError: result too large for the memory limit"}
        ).encode()
    if os.getpid() == 1:
        # A warm job's process: every other process of the job gets SIGKILL
        # before the result leaves, so that once the service has the result
        # nothing the code started runs again (the zygote answers the
        # service's "done" at once, without waiting for the namespace to end).
        try:
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
    write_all(result_fd, payload)
    write_all(result_fd, b"\n")
    # Skip interpreter shutdown: threads or atexit hooks of the code must not delay the result.
    os._exit(0)


def set_limits(limits, base_address_space=0):
    """RLIMIT_AS is the code's own allowance on top of base_address_space, what
    the process already maps (the pre-imported modules of a warm start)."""
    memory = limits.get("memory", 0)
    if memory > 0:
        set_limit(resource.RLIMIT_AS, memory + base_address_space)
    set_limit(resource.RLIMIT_FSIZE, limits.get("fsize", 0))
    set_limit(resource.RLIMIT_NPROC, limits.get("nproc", 0))
    allowance = limits.get("cpu", 0)
    if allowance > 0:
        # RLIMIT_CPU counts the process's whole life; a warm job already used
        # some getting ready, so the code's allowance starts from there.
        usage = resource.getrusage(resource.RUSAGE_SELF)
        cpu = int(math.ceil(usage.ru_utime + usage.ru_stime + allowance))
        # SIGXCPU at the soft limit; SIGKILL a little later if the code ignores
        # it. A warm job's process is pid 1 of its namespace, which SIGXCPU
        # does not end: SIGKILL at the limit.
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu if os.getpid() == 1 else cpu + 2))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def execute(source, raw_context, limits, result_fd):
    """Runs the code against the context; returns the report (dict or bytes)."""
    pid = os.getpid()
    write_all(result_fd, b"S")
    try:
        context = json.loads(raw_context)
        before = json.loads(raw_context)  # an independent copy to diff against
        del raw_context
    except MemoryError:
        return code_error("limit", "MemoryError: the context does not fit in the memory limit", "", "memory")

    # The code sees its source in tracebacks (line numbers refer to "<node>").
    linecache.cache[FILENAME] = (len(source), None, source.splitlines(True), FILENAME)
    env = {
        "__name__": "__main__",
        "__builtins__": builtins,
        "context": context,
        # Prelude: modules generated code commonly uses without importing them.
        "json": json,
        "math": math,
        "re": re,
        "datetime": datetime,
    }
    try:
        exec(compile(source, FILENAME, "exec"), env)
    except SystemExit as e:
        leave_if_forked(pid)
        if e.code not in (None, 0):
            return code_error("code_error", "SystemExit: %s" % (e.code,), format_tb(e))
    except BaseException as e:
        leave_if_forked(pid)
        return classify(e, limits)
    finally:
        leave_if_forked(pid)
        flush_all()

    after = env["context"]
    if not isinstance(after, dict):
        return code_error("code_error", "context must be a dict, got %s" % type(after).__name__, "")
    return diff(before, after)


def prepare_interpreter():
    """The interpreter as the code finds it; done once in a zygote, before
    its jobs (not in each: fewer of the zygote's pages for a job to write to)."""
    sys.argv = [FILENAME]
    sys.path[:] = [p for p in sys.path if p not in ("", "/nova", os.path.dirname(os.path.abspath(__file__)))]
    sys.dont_write_bytecode = True
    # Line buffering: what the code printed before a kill is not lost in a buffer.
    sys.stdout.reconfigure(line_buffering=True)
    # Integers of any size travel in the context: no 4300-digit cap on reading
    # or writing them.
    if hasattr(sys, "set_int_max_str_digits"):
        sys.set_int_max_str_digits(0)


def leave_if_forked(pid):
    """A process the code forked (os.fork) that runs off the end of the code
    must not report: only the runner's own process does."""
    if os.getpid() != pid:
        flush_all()
        os._exit(0)


def classify(e, limits):
    tb = format_tb(e)
    message = describe(e)
    if isinstance(e, MemoryError):
        memory = limits.get("memory", 0)
        if memory > 0:
            message += " (memory limit %d MiB)" % (memory >> 20)
        return code_error("limit", message, tb, "memory")
    if isinstance(e, OSError) and e.errno == errno.EFBIG:
        return code_error("limit", message + " (file size limit %d bytes)" % limits.get("fsize", 0), tb, "file_size")
    if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
        return code_error("limit", message + " (disk limit of /tmp: %d bytes)" % limits.get("disk", 0), tb, "disk")
    if out_of_processes(e, limits):
        return code_error("limit", message + " (process limit %d)" % limits.get("nproc", 0), tb, "processes")
    return code_error("code_error", message, tb)


def out_of_processes(e, limits):
    """fork, exec of a child or a new thread failed for want of a process slot."""
    nproc = limits.get("nproc", 0)
    if nproc <= 0:
        return False
    if isinstance(e, OSError) and e.errno == errno.EAGAIN:
        pass
    elif isinstance(e, RuntimeError) and "can't start new thread" in str(e):
        pass
    else:
        return False
    # EAGAIN from fork or a new thread means no process slot was left: this
    # sandbox's own, or (cold runs share the sandbox user's count on the
    # host) all of them together.
    return True


def diff(before, after):
    """Encodes the changed keys as JSON text; fails naming every key that cannot be."""
    updates, bad = [], []
    for key, value in after.items():
        if not isinstance(key, str):
            bad.append("%r (%s key)" % (key, type(key).__name__))
            continue
        if key in before and same(value, before[key]):
            continue
        text, problem = encode(value)
        if problem:
            bad.append("%s (%s)" % (json.dumps(key), problem))
        else:
            updates.append(json.dumps(key) + ":" + text)
    if bad:
        return code_error("code_error", "context values are not JSON-serializable: " + ", ".join(bad), "")
    deleted = [k for k in before if k not in after]
    return (
        '{"status":"success","updates":{%s},"deleted":%s}' % (",".join(updates), json.dumps(deleted))
    ).encode()


def same(a, b):
    """Deep equality that also tells 1, 1.0 and True apart, and 0.0 from -0.0."""
    if type(a) is not type(b):
        return False
    if type(a) is dict:
        return a.keys() == b.keys() and all(same(v, b[k]) for k, v in a.items())
    if type(a) is list:
        return len(a) == len(b) and all(map(same, a, b))
    if type(a) is float:
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    return a == b


def encode(value):
    found = []

    def unsupported(o):
        found.append(type(o).__name__)
        raise TypeError("unsupported")

    try:
        return json.dumps(value, allow_nan=False, default=unsupported), None
    except ValueError as e:
        if "Circular" in str(e):
            return None, "circular reference"
        return None, "NaN or Infinity"
    except TypeError as e:
        return None, found[0] if found else str(e)
    except RecursionError:
        return None, "nested too deeply"


def code_error(kind, message, tb, limit=""):
    out = {"status": "error", "error_kind": kind, "error": message, "traceback": tb}
    if limit:
        out["limit"] = limit
    return out


def describe(e):
    t = type(e)
    name = t.__qualname__ if t.__module__ == "builtins" else t.__module__ + "." + t.__qualname__
    try:
        message = str(e)
    except Exception:
        message = ""
    return name + ": " + message if message else name


def format_tb(e):
    """The traceback without the runner's own frames."""
    tb = e.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(e), e, tb))


def set_limit(which, value):
    if value > 0:
        resource.setrlimit(which, (value, value))


def close_stray_fds(keep):
    """Closes every descriptor above 2 but those in keep (close_range(2))."""
    low = 3
    for fd in sorted(keep):
        os.closerange(low, fd)
        low = max(low, fd + 1)
    os.closerange(low, MAX_FD)


def flush_all():
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except BaseException:
            pass


def write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def read_fd(fd):
    """Reads a memfd from its start and closes it (without io's file objects:
    fewer pages for a new process to touch)."""
    try:
        size = os.fstat(fd).st_size
        chunks, offset = [], 0
        while offset < size:
            chunk = os.pread(fd, size - offset, offset)
            if not chunk:
                break
            chunks.append(chunk)
            offset += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def write_file(path, data):
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        write_all(fd, data)
    finally:
        os.close(fd)


def proxy_env():
    url = "http://127.0.0.1:%d" % PROXY_PORT
    return {k: url for k in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")}


# ---------------------------------------------------------------------------
# Egress: the program's only way out is an HTTP proxy on its own loopback,
# forwarded to the service's egress proxy through connections that the
# service hands over the broker socket (one per request, SCM_RIGHTS).


class Forwarder:
    def __init__(self, broker_fd):
        self.broker = socket.socket(fileno=broker_fd)
        self.lock = threading.Lock()
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", PROXY_PORT))
        self.listener.listen(64)

    def start(self):
        threading.Thread(target=self.accept_loop, daemon=True).start()

    def accept_loop(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            try:
                with self.lock:
                    self.broker.send(b"c")
                    _, fds, _, _ = socket.recv_fds(self.broker, 16, 1)
            except OSError:
                fds = []
            if not fds:
                conn.close()
                continue
            upstream = socket.socket(fileno=fds[0])
            pair = [conn, upstream]
            threading.Thread(target=pump, args=(conn, upstream, pair), daemon=True).start()
            threading.Thread(target=pump, args=(upstream, conn, pair), daemon=True).start()


def pump(src, dst, pair):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    try:
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        pass
    pair.pop()
    if not pair:  # the second direction is done too
        src.close()
        dst.close()


# ---------------------------------------------------------------------------
# Cold start: one program in its own bubblewrap


def run_main(config):
    # Private, non-inheritable copies of the channels: processes the code starts
    # cannot write to them.
    result_fd = os.dup(3)
    os.close(3)
    keep = {result_fd}
    broker_fd = -1
    if config.get("network"):
        broker_fd = os.dup(5)
        keep.add(broker_fd)
    close_stray_fds(keep)

    def job():
        prepare_interpreter()
        set_limits(config)
        if broker_fd >= 0:
            Forwarder(broker_fd).start()
            os.environ.update(proxy_env())
        with open(config["code"], encoding="utf-8", errors="replace") as f:
            source = f.read()
        with open(config["context"], "rb") as f:
            raw = f.read()
        return execute(source, raw, config, result_fd)

    report_and_exit(result_fd, job)


# ---------------------------------------------------------------------------
# Warm start: the zygote
#
# bubblewrap starts the zygote as root of its own user namespace with
# CAP_SYS_ADMIN, CAP_NET_ADMIN, CAP_SETPCAP and CAP_SETFCAP there (nothing on
# the host), a read-only root and /dev, and no network. It imports the heavy
# modules and keeps spare jobs ready. A spare is one process P, pid 1 of a new
# pid namespace, with new mount, network, ipc and uts namespaces, a fresh /proc,
# /dev/shm, /dev/pts and /tmp (a tmpfs of the disk limit's size) and its own
# loopback. When its job comes, P enters a nested user namespace of its own
# (its own process count for RLIMIT_NPROC, its own keyrings), drops every
# capability, sets the rlimits and runs the code.
#
# What a job costs is mostly pages: every fork copies the page tables of the
# zygote's memory (tens of megabytes with the preloaded modules) and every
# page a new process writes costs a fault, tens of microseconds where faults
# are slow (virtual machines), and every exit frees them again. So the
# zygote's memory sits in huge pages where it can (collapse_into_huge_pages:
# one page-table entry for 512 pages), a job is one fork, not two, and P
# does as little Python as it can before the job: no
# rehearsal of the runner's path, no at-fork handlers (fork), signals set once
# in the zygote.
#
# The zygote is every job's watchdog and reaper (Supervisor): it enforces the
# wall time and kills on the service's request, by SIGKILL to P from outside
# P's namespace; the kernel then kills every other process of the namespace
# before P can be reaped, so the zygote reports once none is left. When the
# service already has P's complete report, it says "done": the zygote kills P
# and answers at once; every process of the job then has SIGKILL pending and
# never runs again, and nobody waits for the kernel to free their memory.
# Everything the code changes - files, processes, module state, environment -
# lives in P's copy of the zygote's memory or in P's namespaces, and dies with
# them; the zygote itself never runs user code.

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_CAPBSET_DROP = 1, 24
PR_SET_SECUREBITS, PR_SET_NO_NEW_PRIVS = 28, 38
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
# NOROOT, NO_SETUID_FIXUP and NO_CAP_AMBIENT_RAISE, each locked; KEEP_CAPS locked off.
SECUREBITS_LOCKED_DOWN = 0xEF
SIOCSIFFLAGS = 0x8914
IFF_UP, IFF_LOOPBACK, IFF_RUNNING = 0x1, 0x8, 0x40

# Imported by the zygote so that jobs find them loaded. A module missing from
# the system is skipped. A light zygote imports only the standard ones: a
# program that needs nothing else runs there, and its fork copies the page
# tables of about a fifth of the memory.
STANDARD_PRELOAD = [
    "json", "csv", "collections", "decimal", "statistics", "hashlib", "base64", "io", "zipfile",
    # Small modules generated code imports often (type hints, dataclasses,
    # logging boilerplate): loaded on the full zygote by its libraries, so a
    # program importing them ran there while the light one lacked them.
    "typing", "dataclasses", "copy", "string", "heapq", "uuid", "html", "unicodedata", "logging",
]
DEFAULT_PRELOAD = STANDARD_PRELOAD + [
    "numpy", "pandas", "fitz", "PIL.Image", "requests", "bs4", "lxml.etree", "lxml.html",
    "openpyxl", "pypdf",
]

libc = None
cap_last_cap = 0


def load_libc():
    global libc
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    libc.capset.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    libc.ioctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_char_p]
    libc.sethostname.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    libc.socket.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    global cap_last_cap
    with open("/proc/sys/kernel/cap_last_cap") as f:
        cap_last_cap = int(f.read())


def fork():
    """fork(2) without Python's at-fork handlers, for the zygote's children.
    Those handlers repair what other threads may have left half-done (locks,
    threading's bookkeeping); the zygote forks with a single thread, holding
    no lock, so there is nothing to repair, and the handlers cost a new
    process about 5 ms of page copies where a page fault is expensive
    (virtual machines). Python's random module reseeds at fork: P does that
    itself (reseed)."""
    if threading.active_count() != 1:
        return os.fork()
    pid = libc.fork()
    if pid < 0:
        check(-1, "fork")
    return pid


def reseed():
    """What the random module's own at-fork handler does: a job's random
    numbers are not the zygote's, nor another job's."""
    rnd = sys.modules.get("random")
    if rnd is not None:
        rnd.seed()


def check(rc, what):
    if rc != 0:
        import ctypes

        e = ctypes.get_errno()
        raise OSError(e, "%s: %s" % (what, os.strerror(e)))


def no_capabilities():
    """capset(2)'s arguments for no capability in any set of this thread."""
    import ctypes

    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this thread
    return header, (ctypes.c_uint32 * 6)()


class Call:
    """One system call of a spare's setup, its arguments made in the zygote."""

    __slots__ = ("what", "func", "args")

    def __init__(self, what, func, *args):
        self.what, self.func, self.args = what, func, args


def spare_setup(config):
    """The system calls that make a spare's namespaces, mounts and loopback
    ready (job_process runs them), with every argument built once, here in
    the zygote. A new process pays for every page of the zygote it writes to
    (a copy and a fault, tens of microseconds each in a virtual machine);
    building the arguments in each spare (string encodings, argument
    conversions, path checks) wrote to many."""
    ro = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC
    calls = [
        Call("prctl PR_SET_PDEATHSIG", libc.prctl, PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0),
        Call("unshare", libc.unshare, CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS),
        Call("mount /", libc.mount, None, b"/", None, MS_REC | MS_PRIVATE, None),
        Call("mount /proc", libc.mount, b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None),
    ]
    for p in (b"/proc/sys", b"/proc/sysrq-trigger", b"/proc/irq", b"/proc/bus"):
        if os.path.exists(p):
            calls.append(Call("mount " + p.decode(), libc.mount, p, p, None, MS_BIND | MS_REC, None))
            calls.append(Call("remount read-only " + p.decode(), libc.mount, None, p, None, ro, None))
    shm = b"size=%d,mode=1777" % config.get("shm", 64 << 20)
    tmp = b"size=%d,mode=0700" % spare_disk(config)
    calls += [
        Call("mount /dev/shm", libc.mount, b"tmpfs", b"/dev/shm", b"tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, shm),
        Call("mount /dev/pts", libc.mount, b"devpts", b"/dev/pts", b"devpts", MS_NOSUID | MS_NOEXEC,
             b"newinstance,ptmxmode=0666,mode=0620"),
        # Owned by uid 0 here, which is the job's uid in its own user
        # namespace; resized when a job asks for another size.
        Call("mount /tmp", libc.mount, b"tmpfs", b"/tmp", b"tmpfs", MS_NOSUID | MS_NODEV, tmp),
        Call("sethostname", libc.sethostname, b"nova-sandbox", len(b"nova-sandbox")),
    ]
    return tuple(calls)


def spare_disk(config):
    return max(config.get("disk", 0), 4096)


def run_calls(calls):
    for c in calls:
        if c.func(*c.args) != 0:
            check(-1, c.what)


# A job's user namespace: its only uid and gid, JOB_UID, are 0 of the spare's.
USER_MAPS = (
    ("/proc/self/setgroups", b"deny"),
    ("/proc/self/uid_map", b"%d 0 1" % JOB_UID),
    ("/proc/self/gid_map", b"%d 0 1" % JOB_UID),
)

# The loopback's SIOCSIFFLAGS request (struct ifreq) and the socket it goes
# through, made once (plain integers: the socket module's are enums, whose
# operators are Python code).
LOOPBACK_UP = struct.pack("16sH22x", b"lo", IFF_UP | IFF_LOOPBACK | IFF_RUNNING)
LOOPBACK_SOCKET = (int(socket.AF_INET), int(socket.SOCK_DGRAM) | int(socket.SOCK_CLOEXEC), 0)


def loopback_up():
    """Brings up the network namespace's loopback (libc's socket, not the
    socket module's objects: fewer pages of the zygote to write to)."""
    fd = libc.socket(*LOOPBACK_SOCKET)
    if fd < 0:
        check(-1, "socket for the loopback")
    try:
        if libc.ioctl(fd, SIOCSIFFLAGS, LOOPBACK_UP) != 0:
            check(-1, "bring up the loopback")
    finally:
        os.close(fd)


def capability_calls():
    """The calls that drop every capability of the calling thread for good:
    bounding set, ambient set, securebits, then the effective, permitted and
    inheritable sets."""
    header, data = no_capabilities()
    calls = [Call("drop capability %d from the bounding set" % cap, libc.prctl, PR_CAPBSET_DROP, cap, 0, 0, 0)
             for cap in range(cap_last_cap + 1)]
    calls += [
        Call("prctl PR_CAP_AMBIENT", libc.prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0),
        Call("prctl PR_SET_SECUREBITS", libc.prctl, PR_SET_SECUREBITS, SECUREBITS_LOCKED_DOWN, 0, 0, 0),
        Call("prctl PR_SET_NO_NEW_PRIVS", libc.prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0),
        Call("capset", libc.capset, header, data),
    ]
    return tuple(calls)


def preload(names, hung_up):
    """Imports the modules; None when hung_up() tells, between two of them,
    that nobody waits for them any more."""
    import importlib

    loaded, failed = [], {}
    for name in names:
        if hung_up():
            return None
        try:
            importlib.import_module(name)
            loaded.append(name)
        except Exception as e:  # a missing optional library is not fatal
            failed[name] = describe(e)
    return loaded, failed


HUGE_PAGE = 2 << 20
MADV_COLLAPSE = 25


def collapse_into_huge_pages():
    """Moves the zygote's private anonymous memory (the heap and the
    interpreter's arenas, with every preloaded module's objects) into
    transparent huge pages where whole aligned 2 MiB ranges of it exist,
    and returns how many bytes it moved.

    Every fork copies one page-table entry per 4 KiB page of this memory and
    every exit frees them again: with tens of megabytes preloaded, most of a
    warm job's CPU (perf: copy_page_range and unmap_page_range). A huge page
    is one entry for 512 pages; a job that writes to one gets its own copy of
    only the 4 KiB it writes. (A huge page that a process writes to while it
    shares it goes back to 4 KiB entries in that process: the zygote keeps
    in huge pages what its own loop does not touch, about half.)
    MADV_COLLAPSE (Linux 6.1) works whatever the
    system's THP setting but "never"; where it cannot (an older kernel, no
    free huge page), memory stays as it was and jobs run as before."""
    moved = 0
    with open("/proc/self/maps") as f:
        maps = f.read().splitlines()
    for line in maps:
        fields = line.split()
        perms = fields[1]
        path = fields[5] if len(fields) > 5 else ""
        if perms[1] != "w" or perms[3] != "p" or path not in ("", "[heap]"):
            continue
        low, high = (int(x, 16) for x in fields[0].split("-"))
        start = (low + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1)
        end = high & ~(HUGE_PAGE - 1)
        if end > start and libc.madvise(start, end - start, MADV_COLLAPSE) == 0:
            moved += end - start
    return moved


def peer_closed(sock):
    """Whether the other end of sock has been closed."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return any(events & (select.POLLHUP | select.POLLERR) for _, events in poller.poll(0))


def zygote_main(config):
    load_libc()
    ctl = socket.socket(fileno=3)
    close_stray_fds({ctl.fileno()})
    # The service closes the channel when it stops, possibly while the imports
    # run (they take seconds): then the zygote leaves quietly, at the next
    # module or when it would say it is ready.
    names = STANDARD_PRELOAD if config.get("light") else config.get("preload") or DEFAULT_PRELOAD
    preloaded = preload(names, lambda: peer_closed(ctl))
    if preloaded is None:
        os._exit(0)
    loaded, failed = preloaded
    prepare_interpreter()
    # A process's first compile() makes the interpreter's AST types (some 640
    # objects): made here, once, they are not made again by every job's
    # compile of its code, which wrote to some 135 pages of the zygote's
    # memory for them (a copy and a fault each).
    compile("", FILENAME, "exec")
    # The traceback of a failing program is formatted with the ast module's
    # help (the carets under the failing expression), which traceback imports
    # on first use: imported here, it is not imported again by every failing
    # run (about 1 ms each). The full zygote's libraries import it anyway.
    import ast  # noqa: F401

    # A process's first strptime imports _strptime (with calendar and locale)
    # and builds the locale's tables and patterns, some 3 ms; programs parse
    # dates often, so the zygote does it once for all of them.
    datetime.datetime.strptime("2000-01-31", "%Y-%m-%d")
    import gc

    gc.collect()
    # Objects of the template are never collected again: a job's collector does
    # not write to (and so copy) every page of the zygote.
    gc.freeze()
    huge = collapse_into_huge_pages()
    own_pidns = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    # Every signal at its default but those Python itself sets up at start
    # (SIGINT handled, SIGPIPE and SIGXFSZ ignored): a job process starts from
    # this and changes only SIGINT. The zygote learns of its children's ends
    # through pidfds, not SIGCHLD.
    for sig in signal.valid_signals():
        if sig not in (signal.SIGKILL, signal.SIGSTOP, signal.SIGINT, signal.SIGPIPE, signal.SIGXFSZ):
            try:
                signal.signal(sig, signal.SIG_DFL)
            except (OSError, ValueError):
                pass
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        # What a program finds loaded here (by top-level name) and which
        # names are standard: the service sends a program to the zygote that
        # has what it imports.
        modules = sorted({name.partition(".")[0] for name in sys.modules})
        ctl.send(json.dumps({"ready": True, "pid": os.getpid(), "loaded": loaded, "failed": failed,
                             "huge_pages_kb": huge >> 10, "modules": modules,
                             "standard": sorted(sys.stdlib_module_names)}).encode())
    except ConnectionError:  # EPIPE, ECONNRESET: the service closed the channel
        os._exit(0)
    Supervisor(ctl, own_pidns, config).loop()


class Job:
    """A job the zygote supervises: its process (P, pid 1 of the job's pid
    namespace), the service's control socket for it, its wall-time deadline."""

    __slots__ = ("pid", "pidfd", "ctl", "deadline", "killed", "limit", "answered")

    def __init__(self, pid, ctl, timeout):
        self.pid = pid
        self.pidfd = os.pidfd_open(pid)
        self.ctl = ctl
        self.deadline = time.monotonic() + timeout
        self.killed = False
        self.limit = ""  # why it was killed, for the report ("" when "done")
        self.answered = False  # "done" was answered: no report is due


class Supervisor:
    """The zygote's loop: hands jobs to spares, and is every job's watchdog
    and reaper. One process per job (P, below) runs the code as pid 1 of the
    job's namespaces; when P ends, the kernel kills whatever P left in its pid
    namespace before P can be reaped, so the report sent after the reap says
    that none of the job's processes is left."""

    def __init__(self, ctl, own_pidns, config):
        self.ctl = ctl
        self.own_pidns = own_pidns
        self.config = config
        self.spares = []  # (socket, pid)
        # What each spare runs to get ready, made once.
        self.plan = (spare_setup(config), capability_calls())
        self.jobs = {}  # by fd watched: a job's pidfd and its control socket
        self.poll = select.poll()
        self.poll.register(ctl, select.POLLIN)

    def loop(self):
        while True:
            # Spares are made ahead, so that a job finds its namespaces ready.
            while len(self.spares) < self.config.get("spares", 2):
                self.spares.append(new_spare(self.own_pidns, self.config, self.plan))
            pending = [j.deadline for j in self.jobs.values() if not j.killed]
            timeout = max(0, math.ceil((min(pending) - time.monotonic()) * 1000)) if pending else None
            for fd, _ in self.poll.poll(timeout):
                if fd == self.ctl.fileno():
                    self.take()
                    continue
                job = self.jobs.get(fd)
                if job is None:
                    continue
                if fd == job.pidfd:
                    self.reap(job)
                else:
                    self.request(job)
            now = time.monotonic()
            for job in list(self.jobs.values()):
                if not job.killed and now >= job.deadline:
                    self.kill(job, "wall_time")

    def take(self):
        try:
            msg, fds, _, _ = socket.recv_fds(self.ctl, 1 << 16, 16)
        except ConnectionError:
            # ECONNRESET: the service closed the channel before it read the
            # ready message (it stopped while the zygote started).
            msg, fds = b"", []
        if not msg:
            os._exit(0)  # the service closed the channel: bubblewrap takes everything down
        # A spare that died (it should not) is passed over; a fresh one gets
        # the last chance.
        pid = 0
        for attempt in range(len(self.spares) + 1):
            sock, spare = self.spares.pop(0) if self.spares else new_spare(self.own_pidns, self.config, self.plan)
            try:
                socket.send_fds(sock, [msg], fds[1:])
                pid = spare
                break
            except OSError:
                reap_quietly(spare)
            finally:
                sock.close()
        for fd in fds[1:]:
            os.close(fd)
        if not fds:
            return
        if not pid:
            fail_job(fds, "the zygote could not start the job")
            os.close(fds[0])
            return
        job = Job(pid, socket.socket(fileno=fds[0]), json.loads(msg).get("timeout", 30))
        for fd in (job.pidfd, job.ctl.fileno()):
            self.jobs[fd] = job
            self.poll.register(fd, select.POLLIN)

    def request(self, job):
        """A message of the service: a kill with its reason, "done" (it has the
        job's complete report), or the end of the socket (cancelled)."""
        try:
            msg = job.ctl.recv(4096)
        except OSError:
            msg = b""
        if not msg:
            self.unwatch(job.ctl.fileno())
            self.kill(job, "cancelled")
            return
        try:
            reason = json.loads(msg).get("kill") or "killed"
        except ValueError:
            reason = "killed"
        if reason == "done":
            # Every process of the job then has SIGKILL pending and never runs
            # again: the service need not wait for their memory to be freed.
            self.kill(job, "")
            try:
                job.ctl.send(b'{"done": true}')
            except OSError:
                pass
            job.answered = True
            self.unwatch(job.ctl.fileno())
            return
        self.kill(job, reason)

    def kill(self, job, limit):
        if not job.killed:
            job.killed, job.limit = True, limit
        try:
            # SIGKILL from outside its namespace ends P, and with it every
            # process of the job.
            signal.pidfd_send_signal(job.pidfd, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def unwatch(self, fd):
        if self.jobs.pop(fd, None) is not None:
            self.poll.unregister(fd)

    def reap(self, job):
        _, status, rusage = os.wait4(job.pid, 0)
        self.unwatch(job.pidfd)
        os.close(job.pidfd)
        self.unwatch(job.ctl.fileno())
        if not job.answered:
            out = {"limit": job.limit}
            if os.WIFSIGNALED(status):
                out["signal"] = os.WTERMSIG(status)
            else:
                out["exit"] = os.WEXITSTATUS(status)
            out["cpu"] = rusage.ru_utime + rusage.ru_stime
            out["maxrss_kb"] = rusage.ru_maxrss
            try:
                job.ctl.send(json.dumps(out).encode())
            except OSError:
                pass
        job.ctl.close()


def reap_quietly(pid):
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except OSError:
        pass


def fail_job(fds, message):
    if fds:
        try:
            with socket.socket(fileno=os.dup(fds[0])) as s:
                s.send(json.dumps({"fault": message}).encode())
        except OSError:
            pass


def new_spare(own_pidns, config, plan):
    parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    check(libc.unshare(CLONE_NEWPID), "unshare pid namespace")
    try:
        pid = fork()
    except BaseException:
        pid = -1
        raise
    finally:
        if pid != 0:
            # The zygote's later children must not land in this namespace.
            check(libc.setns(own_pidns, CLONE_NEWPID), "return to the zygote's pid namespace")
    if pid == 0:
        code = 0
        try:
            # Nothing of the zygote's: its control sockets, other jobs', spares'.
            close_stray_fds({child_end.fileno()})
            job_process(child_end, config, plan)
        except BaseException:
            traceback.print_exc()
            code = 1
        flush_all()
        os._exit(code)
    child_end.close()
    return parent_end, pid


def job_process(zsock, config, plan):
    """P: pid 1 of the job's namespaces, made ready ahead of its job; then the
    job's only unprivileged process, which runs the code.

    Being pid 1, P takes no signal sent from inside its namespace unless it
    handles it (a job cannot kill itself by kill -9 -1 or by killing its
    parent, which is outside); the CPU limit therefore ends P with SIGKILL
    (see set_limits), and the wall time and the service's requests by
    SIGKILL from the zygote, outside."""
    setup, caps = plan
    run_calls(setup)
    os.setsid()
    loopback_up()

    msg, fds, _, _ = socket.recv_fds(zsock, 1 << 16, 16)
    zsock.close()
    if not msg:
        os._exit(0)
    job = json.loads(msg)
    stdout, stderr, result, code_fd, context_fd = fds[:5]
    broker = fds[5] if len(fds) > 5 else -1
    if spare_disk(job) != spare_disk(config):
        size = b"size=%d" % spare_disk(job)
        check(libc.mount(None, b"/tmp", None, MS_REMOUNT | MS_NOSUID | MS_NODEV, size), "mount /tmp")

    # Its own user namespace: the job's own process count (RLIMIT_NPROC) and
    # keyrings, and no capability over anything of the zygote's.
    check(libc.unshare(CLONE_NEWUSER), "unshare user namespace")
    for path, text in USER_MAPS:
        write_file(path, text)
    run_calls(caps)
    reseed()

    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(stdout, 1)
    os.dup2(stderr, 2)
    for fd in (null, stdout, stderr):
        os.close(fd)
    os.set_inheritable(result, False)
    os.chdir("/tmp")
    os.environ["PWD"] = "/tmp"
    if broker >= 0 and job.get("network"):
        # A thread of P, as in a cold run: started after unshare(CLONE_NEWUSER),
        # which a process with threads cannot call.
        Forwarder(broker).start()
        os.environ.update(proxy_env())

    def run():
        source = read_fd(code_fd).decode("utf-8", errors="replace")
        raw = read_fd(context_fd)
        set_limits(job, base_address_space=address_space())
        return execute(source, raw, job, result)

    report_and_exit(result, run)


def address_space():
    fd = os.open("/proc/self/statm", os.O_RDONLY | os.O_CLOEXEC)
    try:
        return int(os.read(fd, 256).split()[0]) * PAGE_SIZE
    finally:
        os.close(fd)


def main():
    mode, config = sys.argv[1], json.loads(sys.argv[2])
    if mode == "zygote":
        zygote_main(config)
    else:
        run_main(config)


if __name__ == "__main__":
    main()
