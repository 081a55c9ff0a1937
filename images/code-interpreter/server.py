#!/usr/bin/env python3
"""The code-interpreter server of sandboxd's `code-interpreter-v1` template.

It speaks the HTTP wire that `@e2b/code-interpreter` 2.8.0 (and the Python
`e2b-code-interpreter`) use on port 49999, for Python only, with nothing but
the Python 3.11 standard library:

  GET    /health                 200 "OK"
  POST   /execute                {code, context_id?, language?, env_vars?}
                                 -> 200 NDJSON, streamed, one event per line:
                                    number_of_executions, stdout/stderr (as
                                    they are written), result, error, and
                                    end_of_execution last
  POST   /contexts               {language?, cwd?} -> 200 {id, language, cwd}
  GET    /contexts               200 [{id, language, cwd}, ...]
  DELETE /contexts/{id}          204; 404 when unknown
  POST   /contexts/{id}/restart  204 (fresh interpreter); 404 when unknown

Errors are JSON {"code": <status>, "message": "..."}: 400 for a bad request
(a language other than Python, both context_id and language, a bad field),
404 for an unknown context or route, 405 for a wrong method. The JS SDK shows
the body of a 404 (NotFoundError) but only "400 Bad Request" for a 400 unless
E2B_USER_AGENT_SOURCE=ci; the Python SDK shows the body in both cases.

Design. Each context is one Python worker process (this file run with
--worker), like a Jupyter kernel: its namespace, working directory, environment
and execution count are its own, a restart kills it (and everything it
started) and starts a fresh one, and contexts never block one another.
Executions within one context are serialized. The worker points file
descriptors 1 and 2 at pipes, so print(), sys.stderr, warnings and the output
of child processes (os.system, subprocess without capture) are all captured and
streamed to the caller line by line while the code runs. When the caller goes away
mid-execution the worker gets SIGINT (KeyboardInterrupt in the user's code) and,
if it does not finish within INTERRUPT_GRACE_S, it is killed and the context
starts afresh on its next execution.

Run: python3 server.py [--host 127.0.0.1] [--port 49999] [--cwd /home/user]
(environment: CODE_INTERPRETER_HOST, CODE_INTERPRETER_PORT, CODE_INTERPRETER_CWD).
Run it as the sandbox's unprivileged user: the code it executes runs as that user.
"""

import argparse
import ast
import asyncio
import builtins
import codecs
import datetime
import inspect
import json
import linecache
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DEFAULT_PORT = 49999
LANGUAGES = ("python", "python3")  # accepted values of `language`, compared lowercased
INTERRUPT_GRACE_S = 5.0  # how long interrupted code may take to stop before the worker is killed
SYNC_TIMEOUT_S = 10.0  # bound on waiting for a capture pipe to drain at the end of a cell
SYNC = b"\x00\x1esandboxd-sync\x1e\x00"  # marker written through fd 1/2 to drain the pipes


# --------------------------------------------------------------------------
# Worker: one per context. Reads one JSON request per line on stdin, writes
# the execution's events as NDJSON on its original stdout.
# --------------------------------------------------------------------------


class Channel:
    """The worker's event stream to the server. Output events are sent only
    while a cell runs, so nothing printed between executions (by a background
    thread or process) is attributed to the next one."""

    def __init__(self, fd):
        self._fd = fd
        self._lock = threading.Lock()
        self._active = False

    def emit(self, event, output=False):
        data = (json.dumps(event) + "\n").encode()
        with self._lock:
            if output and not self._active:
                return
            while data:
                data = data[os.write(self._fd, data):]

    def begin(self, count):
        with self._lock:
            self._active = True
        self.emit({"type": "number_of_executions", "execution_count": count})

    def end(self):
        with self._lock:
            self._active = False
        self.emit({"type": "end_of_execution"})


class FdCapture:
    """Points file descriptor fd at a pipe and turns what is written to it
    into stdout/stderr events, as it arrives."""

    def __init__(self, fd, name, channel):
        self._fd, self._name, self._channel = fd, name, channel
        read_end, write_end = os.pipe()
        os.dup2(write_end, fd)
        os.close(write_end)
        self._read_end = read_end
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._synced = threading.Semaphore(0)
        threading.Thread(target=self._pump, name=f"capture-{name}", daemon=True).start()

    def sync(self):
        """Waits until everything written to fd so far has been sent."""
        try:
            os.write(self._fd, SYNC)
        except OSError:  # the user's code closed the descriptor
            return
        self._synced.acquire(timeout=SYNC_TIMEOUT_S)

    def _pump(self):
        pending = b""
        while True:
            chunk = os.read(self._read_end, 65536)
            if not chunk:
                return
            pending += chunk
            while (i := pending.find(SYNC)) >= 0:
                self._send(pending[:i])
                pending = pending[i + len(SYNC):]
                self._synced.release()
            keep = _partial_marker_len(pending)
            self._send(pending[:len(pending) - keep])
            pending = pending[len(pending) - keep:]

    def _send(self, data):
        text = self._decoder.decode(data)
        if text:
            self._channel.emit({"type": self._name, "text": text, "timestamp": _now()}, output=True)


def _partial_marker_len(data):
    """Length of the longest suffix of data that is a proper prefix of SYNC."""
    for n in range(min(len(data), len(SYNC) - 1), 0, -1):
        if data.endswith(SYNC[:n]):
            return n
    return 0


def _now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat().replace("+00:00", "Z")


class _UserCode:
    """SIGINT raises KeyboardInterrupt only while the user's code runs, so an
    interrupt can never cut an event line in half."""

    running = False

    @classmethod
    def on_sigint(cls, signum, frame):
        if cls.running:
            raise KeyboardInterrupt


def worker_main():
    events = os.dup(1)
    requests = os.fdopen(os.dup(0), "rb")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # input() gets EOF instead of reading the protocol
    os.close(devnull)
    channel = Channel(events)
    captures = [FdCapture(1, "stdout", channel), FdCapture(2, "stderr", channel)]
    sys.stdout = open(1, "w", encoding="utf-8", errors="backslashreplace", buffering=1, closefd=False)
    sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", buffering=1, closefd=False)
    sys.path[0] = ""  # like an interactive interpreter: modules in the cwd are importable
    signal.signal(signal.SIGINT, _UserCode.on_sigint)

    namespace = {"__name__": "__main__", "__builtins__": builtins}
    count = 0
    while line := requests.readline():
        request = json.loads(line)
        count += 1
        run_cell(request["code"], request.get("env_vars") or {}, namespace, count, channel, captures)


def run_cell(code, env_vars, namespace, count, channel, captures):
    """Runs one execution and emits its events; end_of_execution always comes last."""
    channel.begin(count)
    try:
        filename = f"<cell {count}>"
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        saved = {k: os.environ.get(k) for k in env_vars}
        os.environ.update({k: str(v) for k, v in env_vars.items()})
        error, value = None, None
        try:
            _UserCode.running = True
            value = _execute(code, namespace, filename)
        except BaseException as exc:  # SystemExit and KeyboardInterrupt are the cell's errors too
            error = exc
        finally:
            _UserCode.running = False
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        for capture in captures:
            capture.sync()
        if error is None and value is not None:
            try:
                namespace["_"] = value
                channel.emit({"type": "result", "text": _text(value), "is_main_result": True})
            except Exception as exc:  # a failing __repr__
                error = exc
        if error is not None:
            channel.emit(_error_event(error))
    finally:
        channel.end()


def _execute(code, namespace, filename):
    """Runs code like a notebook cell: the value of a final expression
    statement is returned (None when there is none, or when the cell ends with
    ';'). Top-level await works."""
    tree = ast.parse(code, filename, "exec")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr) and not code.rstrip().endswith(";"):
        last = ast.Expression(tree.body.pop().value)
    _run(compile(tree, filename, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT), namespace)
    if last is None:
        return None
    return _run(compile(last, filename, "eval", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT), namespace)


def _run(code_object, namespace):
    result = eval(code_object, namespace)
    if code_object.co_flags & inspect.CO_COROUTINE:
        result = asyncio.run(result)
    return result


def _text(value):
    """The text/plain form of a result. Like E2B's server, a repr in single
    quotes (a str) loses its quotes: 'abc' gives abc."""
    text = repr(value)
    if len(text) >= 2 and text.startswith("'") and text.endswith("'"):
        text = text[1:-1]
    return text


def _error_event(exc):
    """The error event of exc, its traceback reduced to the user's frames."""
    if isinstance(exc, SyntaxError):
        lines = traceback.format_exception_only(type(exc), exc)
    else:
        report = traceback.TracebackException.from_exception(exc)
        report.stack = traceback.StackSummary.from_list(
            [f for f in report.stack if f.filename != __file__ and not f.filename.startswith(_ASYNCIO_DIR)])
        lines = report.format()
    return {"type": "error", "name": type(exc).__name__, "value": str(exc), "traceback": "".join(lines)}


_ASYNCIO_DIR = os.path.dirname(asyncio.__file__) + os.sep  # top-level await runs through asyncio


# --------------------------------------------------------------------------
# Server: contexts and HTTP.
# --------------------------------------------------------------------------


class ApiError(Exception):
    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


class Context:
    """One execution context: a worker process, started lazily again after it
    died. Executions and restarts take the context's lock, in order."""

    def __init__(self, language, cwd):
        self.id = str(uuid.uuid4())
        self.language = language
        self.cwd = cwd
        self._lock = threading.Lock()
        self._proc = None
        self._pending = b""  # bytes read from the worker past the last full line
        with self._lock:
            self._start()

    def info(self):
        return {"id": self.id, "language": self.language, "cwd": self.cwd}

    def execute(self, code, env_vars, send, caller_gone):
        """Runs code, passing each NDJSON event line to send(line) -> bool
        (False once the caller is gone). Returns when the execution ended."""
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._stop()
                self._start()
            try:
                self._proc.stdin.write((json.dumps({"code": code, "env_vars": env_vars}) + "\n").encode())
                self._proc.stdin.flush()
            except OSError:
                pass  # the worker died; reading below sees EOF
            interrupted_at = None
            while True:
                line = self._read_line(0.25)
                if line is None:  # nothing yet: is anyone still waiting for it?
                    if interrupted_at is None and caller_gone():
                        interrupted_at = self._interrupt()
                    elif interrupted_at is not None and time.monotonic() - interrupted_at > INTERRUPT_GRACE_S:
                        self._kill()  # the code ignored KeyboardInterrupt; the read sees EOF next
                    continue
                if line == b"":  # the worker exited: restarted, deleted, killed or crashed
                    self._stop()
                    send(json.dumps({
                        "type": "error",
                        "name": "ContextDied",
                        "value": "the context's Python process exited; its state is lost",
                        "traceback": "",
                    }).encode())
                    send(b'{"type": "end_of_execution"}')
                    return
                if not send(line) and interrupted_at is None:
                    interrupted_at = self._interrupt()
                if json.loads(line).get("type") == "end_of_execution":
                    return

    def restart(self):
        """Replaces the worker with a fresh one; a running execution ends with a ContextDied error."""
        self._kill()
        with self._lock:
            self._stop()
            self._start()

    def close(self):
        self._kill()
        with self._lock:
            self._stop()

    def _start(self):
        self._proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--worker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=self.cwd, start_new_session=True)
        self._pending = b""

    def _stop(self):
        if self._proc is not None:
            self._kill()
            self._proc.wait()
            self._proc.stdin.close()
            self._proc.stdout.close()
            self._proc = None

    def _kill(self):
        """Kills the worker and everything it started (its process group)."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass

    def _interrupt(self):
        try:
            self._proc.send_signal(signal.SIGINT)
        except OSError:
            pass
        return time.monotonic()

    def _read_line(self, timeout):
        """One line from the worker without its newline; None after timeout; b"" at EOF."""
        while b"\n" not in self._pending:
            fd = self._proc.stdout.fileno()
            if not select.select([fd], [], [], timeout)[0]:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                return b""
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        return line


class Registry:
    """The contexts by id, and which one is the default (used when a request names none)."""

    def __init__(self, default_cwd):
        self.default_cwd = default_cwd
        self._lock = threading.Lock()
        self._contexts = {}
        self._default_lock = threading.Lock()  # creating the default context is one step
        self._default_id = None

    def create(self, cwd=None):
        cwd = cwd or self.default_cwd
        if not os.path.isdir(cwd):
            raise ApiError(400, f"cwd {cwd!r} is not a directory")
        context = Context("python", cwd)
        with self._lock:
            self._contexts[context.id] = context
        return context

    def default(self):
        """The default context, created again if it was deleted."""
        with self._default_lock:
            with self._lock:
                context = self._contexts.get(self._default_id)
            if context is None:
                context = self.create()
                self._default_id = context.id
            return context

    def get(self, context_id):
        with self._lock:
            context = self._contexts.get(context_id)
        if context is None:
            raise ApiError(404, f"context {context_id} not found")
        return context

    def list(self):
        with self._lock:
            return [c.info() for c in self._contexts.values()]

    def remove(self, context_id):
        with self._lock:
            context = self._contexts.pop(context_id, None)
        if context is None:
            raise ApiError(404, f"context {context_id} not found")
        context.close()

    def close_all(self):
        with self._lock:
            contexts, self._contexts = list(self._contexts.values()), {}
        for context in contexts:
            context.close()


def check_language(language):
    """Accepts Python (or no language); anything else is a 400."""
    if language is None:
        return
    if not isinstance(language, str):
        raise ApiError(400, "language must be a string")
    if language.strip().lower() not in ("",) + LANGUAGES:
        raise ApiError(400, f"unsupported language {language!r}: this sandbox runs Python only "
                            "(language \"python\")")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "sandboxd-code-interpreter/1"

    def do_GET(self):
        self._dispatch("GET")

    def do_POST(self):
        self._dispatch("POST")

    def do_DELETE(self):
        self._dispatch("DELETE")

    def do_PUT(self):
        self._dispatch("PUT")

    def log_message(self, format, *args):
        sys.stderr.write(f"code-interpreter: {self.address_string()} {format % args}\n")

    def _dispatch(self, method):
        registry = self.server.registry
        self._streaming = False  # set once an /execute response has begun
        try:
            body = self._read_body()  # always, so that the connection stays usable
            path = urllib.parse.urlsplit(self.path).path.rstrip("/") or "/"
            parts = path.strip("/").split("/")
            if path == "/health":
                self._allow(method, "GET")
                return self._reply(200, "OK")
            if path == "/execute":
                self._allow(method, "POST")
                return self._execute(registry, _json_object(body))
            if path == "/contexts":
                self._allow(method, "GET", "POST")
                if method == "GET":
                    return self._reply(200, registry.list())
                request = _json_object(body)
                check_language(request.get("language"))
                cwd = _optional_str(request, "cwd")
                return self._reply(200, registry.create(cwd).info())
            if len(parts) == 2 and parts[0] == "contexts":
                self._allow(method, "DELETE")
                registry.remove(parts[1])
                return self._reply(204)
            if len(parts) == 3 and parts[0] == "contexts" and parts[2] == "restart":
                self._allow(method, "POST")
                registry.get(parts[1]).restart()
                return self._reply(204)
            raise ApiError(404, f"no route {method} {path}")
        except ApiError as err:
            self._reply(err.status, {"code": err.status, "message": str(err)})
        except Exception as err:  # a bug; answer if the response has not begun
            traceback.print_exc()
            self.close_connection = True
            if not self._streaming:
                self._reply(500, {"code": 500, "message": f"internal error: {err}"})

    def _execute(self, registry, request):
        code = request.get("code")
        if not isinstance(code, str):
            raise ApiError(400, "code must be a string")
        context_id = _optional_str(request, "context_id")
        language = request.get("language")
        if context_id and language:
            raise ApiError(400, "only one of context_id or language can be provided")
        check_language(language)
        env_vars = request.get("env_vars")
        env_vars = {} if env_vars is None else env_vars
        if not isinstance(env_vars, dict):
            raise ApiError(400, "env_vars must be an object of strings")
        context = registry.get(context_id) if context_id else registry.default()

        self._streaming = True
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Cache-Control", "no-store")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        gone = False

        def send(line):
            nonlocal gone
            if not gone:
                try:
                    line += b"\n"
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))  # one chunk, sent now
                except OSError:
                    gone = True
            return not gone

        context.execute(code, env_vars, send, self._caller_gone)
        if not gone:
            try:
                self.wfile.write(b"0\r\n\r\n")
            except OSError:
                gone = True
        if gone:
            self.close_connection = True

    def _caller_gone(self):
        """True when the client closed its connection."""
        try:
            if not select.select([self.connection], [], [], 0)[0]:
                return False
            return self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def _allow(self, method, *allowed):
        if method not in allowed:
            raise ApiError(405, f"method {method} not allowed; use {' or '.join(allowed)}")

    def _read_body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return body
                body += self.rfile.read(size)
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _reply(self, status, payload=None):
        self.send_response(status)
        if status == 204:
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        data = json.dumps(payload).encode()
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _json_object(body):
    try:
        value = json.loads(body or b"{}")
    except ValueError as err:
        raise ApiError(400, f"request body is not JSON: {err}") from None
    if not isinstance(value, dict):
        raise ApiError(400, "request body must be a JSON object")
    return value


def _optional_str(request, key):
    value = request.get(key)
    if value is not None and not isinstance(value, str):
        raise ApiError(400, f"{key} must be a string")
    return value


def main(argv=None):
    home = "/home/user" if os.path.isdir("/home/user") else os.getcwd()
    parser = argparse.ArgumentParser(description="sandboxd code-interpreter server (E2B wire, Python)")
    parser.add_argument("--host", default=os.environ.get("CODE_INTERPRETER_HOST", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("CODE_INTERPRETER_PORT", DEFAULT_PORT)))
    parser.add_argument("--cwd", default=os.environ.get("CODE_INTERPRETER_CWD") or home,
                        help="working directory of contexts created without one")
    args = parser.parse_args(argv)

    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.daemon_threads = True
    server.registry = registry = Registry(args.cwd)
    registry.default()  # the first execution should not wait for a worker to start
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    sys.stderr.write(f"code-interpreter: listening on http://{args.host}:{server.server_port}\n")
    sys.stderr.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        registry.close_all()


if __name__ == "__main__":
    if sys.argv[1:] == ["--worker"]:
        worker_main()
    else:
        main()
