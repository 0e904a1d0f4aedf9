"""NOVA sandbox runner: runs one node's code inside bubblewrap.

Started by the Go runner as `python3 runner.py MEMORY FSIZE NPROC`, with the node's
code in /nova/code.py and its context in /nova/context.json. The result goes to fd 3
as b"S" (written once the user's code is about to run) followed by one JSON document
and a newline, so nothing the code prints on stdout or stderr can corrupt it.
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
import sys
import traceback

CODE_PATH = "/nova/code.py"
CONTEXT_PATH = "/nova/context.json"
FILENAME = "<node>"


def main():
    # A private, non-inheritable copy of the result channel: processes the code
    # starts cannot write to it.
    result_fd = os.dup(3)
    os.close(3)
    close_stray_fds(keep=result_fd)
    try:
        result = run(result_fd)
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
            {"status": "error", "error_kind": "limit", "error": "MemoryError: result too large for the memory limit"}
        ).encode()
    write_all(result_fd, payload)
    write_all(result_fd, b"\n")
    # Skip interpreter shutdown: threads or atexit hooks of the code must not delay the result.
    os._exit(0)


def run(result_fd):
    memory, fsize, nproc = (int(a) for a in sys.argv[1:4])
    set_limit(resource.RLIMIT_AS, memory)
    set_limit(resource.RLIMIT_FSIZE, fsize)
    set_limit(resource.RLIMIT_NPROC, nproc)
    set_limit(resource.RLIMIT_CORE, 0)

    sys.argv = [FILENAME]
    sys.path[:] = [p for p in sys.path if p != os.path.dirname(os.path.abspath(__file__))]
    sys.dont_write_bytecode = True
    # Line buffering: what the code printed before a timeout kill is not lost in a buffer.
    sys.stdout.reconfigure(line_buffering=True)

    with open(CODE_PATH, encoding="utf-8", errors="replace") as f:
        source = f.read()
    write_all(result_fd, b"S")
    try:
        with open(CONTEXT_PATH, "rb") as f:
            raw = f.read()
        context = json.loads(raw)
        before = json.loads(raw)  # an independent copy to diff against
        del raw
    except MemoryError:
        return code_error("limit", "MemoryError: the context does not fit in the memory limit", "")

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
        if e.code not in (None, 0):
            return code_error("code_error", "SystemExit: %s" % (e.code,), format_tb(e))
    except MemoryError as e:
        return code_error("limit", describe(e) + " (memory limit %d MiB)" % (memory >> 20), format_tb(e))
    except OSError as e:
        kind = "limit" if e.errno == errno.EFBIG else "code_error"
        return code_error(kind, describe(e), format_tb(e))
    except BaseException as e:
        return code_error("code_error", describe(e), format_tb(e))
    finally:
        flush_all()

    after = env["context"]
    if not isinstance(after, dict):
        return code_error("code_error", "context must be a dict, got %s" % type(after).__name__, "")
    return diff(before, after)


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
    """Deep equality that also tells 1, 1.0 and True apart."""
    if type(a) is not type(b):
        return False
    if type(a) is dict:
        return a.keys() == b.keys() and all(same(v, b[k]) for k, v in a.items())
    if type(a) is list:
        return len(a) == len(b) and all(map(same, a, b))
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


def code_error(kind, message, tb):
    return {"status": "error", "error_kind": kind, "error": message, "traceback": tb}


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
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2 and fd != keep:
            try:
                os.close(fd)
            except OSError:
                pass  # the fd of the listdir itself, already closed


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


if __name__ == "__main__":
    main()
