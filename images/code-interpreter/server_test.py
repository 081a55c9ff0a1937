"""Tests for server.py over real HTTP: one server on a free 127.0.0.1 port for
the whole module. Run from this directory: python3 -m unittest -v server_test
"""

import http.client
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

SERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "server.py")

_proc = None
_port = None
_workdir = None


def setUpModule():
    global _proc, _port, _workdir
    _workdir = tempfile.TemporaryDirectory()
    _proc = subprocess.Popen(
        [sys.executable, SERVER, "--host", "127.0.0.1", "--port", "0", "--cwd", _workdir.name],
        stderr=subprocess.PIPE, text=True)
    line = _proc.stderr.readline()  # "code-interpreter: listening on http://127.0.0.1:<port>"
    match = re.search(r"127\.0\.0\.1:(\d+)", line)
    if not match:
        _proc.kill()
        raise RuntimeError(f"server did not start: {line!r}")
    _port = int(match.group(1))
    threading.Thread(target=_proc.stderr.read, daemon=True).start()  # drain the request log


def tearDownModule():
    _proc.terminate()
    _proc.wait(timeout=10)
    _workdir.cleanup()


def request(method, path, body=None, timeout=30):
    """Returns (status, parsed JSON or None)."""
    conn = http.client.HTTPConnection("127.0.0.1", _port, timeout=timeout)
    try:
        conn.request(method, path, body=None if body is None else json.dumps(body),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        return resp.status, json.loads(data) if data else None
    finally:
        conn.close()


def execute(code, **fields):
    """Runs code and returns its events (end_of_execution included); fails on a non-200."""
    conn = http.client.HTTPConnection("127.0.0.1", _port, timeout=30)
    try:
        conn.request("POST", "/execute", body=json.dumps({"code": code, **fields}))
        resp = conn.getresponse()
        if resp.status != 200:
            raise AssertionError(f"/execute: {resp.status} {resp.read()!r}")
        return [json.loads(line) for line in resp.read().splitlines() if line]
    finally:
        conn.close()


def of_type(events, kind):
    return [e for e in events if e["type"] == kind]


def main_text(events):
    results = [e for e in of_type(events, "result") if e["is_main_result"]]
    return results[0]["text"] if results else None


def stdout(events):
    return "".join(e["text"] for e in of_type(events, "stdout"))


class ExecuteTest(unittest.TestCase):
    def setUp(self):
        status, ctx = request("POST", "/contexts", {})
        self.assertEqual(status, 200)
        self.ctx = ctx["id"]
        self.addCleanup(request, "DELETE", f"/contexts/{self.ctx}")

    def run_code(self, code, **fields):
        return execute(code, context_id=self.ctx, **fields)

    def test_health(self):
        self.assertEqual(request("GET", "/health"), (200, "OK"))

    def test_state_persists_between_calls(self):
        self.assertIsNone(main_text(self.run_code("x = 1")))
        self.assertEqual(main_text(self.run_code("x + 1")), "2")

    def test_event_order(self):
        events = self.run_code("print('hi')\n41 + 1")
        self.assertEqual([e["type"] for e in events],
                         ["number_of_executions", "stdout", "result", "end_of_execution"])
        self.assertEqual(events[1]["text"], "hi\n")
        self.assertEqual(events[2], {"type": "result", "text": "42", "is_main_result": True})

    def test_no_result_for_none_or_statement_or_semicolon(self):
        for code in ("None", "y = 3", "print('x')", "3;"):
            with self.subTest(code=code):
                self.assertEqual(of_type(self.run_code(code), "result"), [])

    def test_result_text_is_repr_without_str_quotes(self):
        self.assertEqual(main_text(self.run_code("[1, 'a']")), "[1, 'a']")
        self.assertEqual(main_text(self.run_code("'abc'")), "abc")  # as E2B's server does

    def test_execution_count_increments(self):
        counts = [of_type(self.run_code("1"), "number_of_executions")[0]["execution_count"] for _ in range(3)]
        self.assertEqual(counts, [1, 2, 3])

    def test_stdout_and_stderr(self):
        events = self.run_code(
            "import sys, os\nprint('out')\nprint('err', file=sys.stderr)\nos.system('echo shell')")
        self.assertEqual(stdout(events), "out\nshell\n")
        self.assertEqual("".join(e["text"] for e in of_type(events, "stderr")), "err\n")

    def test_output_streams_while_running(self):
        # the cell prints, then waits for a file that the test creates only
        # after reading that line: output held back until the end would hang
        gate = os.path.join(_workdir.name, f"gate-{self.ctx}")
        code = (f"import os, time\nprint('first')\n"
                f"while not os.path.exists({gate!r}): time.sleep(0.02)\nprint('second')")
        conn = http.client.HTTPConnection("127.0.0.1", _port, timeout=30)
        self.addCleanup(conn.close)
        conn.request("POST", "/execute", body=json.dumps({"code": code, "context_id": self.ctx}))
        resp = conn.getresponse()
        lines = [json.loads(resp.readline()) for _ in range(2)]
        self.assertEqual(lines[1]["text"], "first\n")
        open(gate, "w").close()
        rest = [json.loads(line) for line in resp.read().splitlines() if line]
        self.assertEqual(rest[0]["text"], "second\n")

    def test_error_with_traceback(self):
        events = self.run_code("def f():\n    return 1 / 0\nf()")
        [error] = of_type(events, "error")
        self.assertEqual(error["name"], "ZeroDivisionError")
        self.assertEqual(error["value"], "division by zero")
        self.assertIn('File "<cell', error["traceback"])
        self.assertIn("return 1 / 0", error["traceback"])
        self.assertNotIn("server.py", error["traceback"])
        self.assertEqual(events[-1]["type"], "end_of_execution")

    def test_syntax_error(self):
        [error] = of_type(self.run_code("def ("), "error")
        self.assertEqual(error["name"], "SyntaxError")

    def test_output_before_error_is_kept(self):
        events = self.run_code("print('before')\nraise ValueError('boom')")
        self.assertEqual(stdout(events), "before\n")
        self.assertEqual(of_type(events, "error")[0]["value"], "boom")

    def test_env_vars_apply_to_one_call(self):
        code = "import os\nos.environ.get('CI_TEST_VAR', 'unset')"
        self.assertEqual(main_text(self.run_code(code, env_vars={"CI_TEST_VAR": "on"})), "on")
        self.assertEqual(main_text(self.run_code(code)), "unset")

    def test_top_level_await(self):
        self.assertEqual(main_text(self.run_code("import asyncio\nawait asyncio.sleep(0)\n7")), "7")

    def test_executions_in_a_context_are_serialized(self):
        slow = []
        thread = threading.Thread(target=lambda: slow.extend(self.run_code("import time\ntime.sleep(1)\n'slow'")))
        thread.start()
        time.sleep(0.3)
        fast = self.run_code("'fast'")
        thread.join()
        count = lambda events: of_type(events, "number_of_executions")[0]["execution_count"]
        self.assertEqual(count(fast), count(slow) + 1)

    def test_disconnect_interrupts_running_code(self):
        sock = socket.create_connection(("127.0.0.1", _port))
        body = json.dumps({"code": "while True: pass", "context_id": self.ctx}).encode()
        sock.sendall(b"POST /execute HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        sock.recv(4096)  # the headers and number_of_executions: it is running
        sock.close()
        start = time.monotonic()
        self.run_code("z = 1")  # waits for the loop to be interrupted
        self.assertLess(time.monotonic() - start, 5)


class ContextTest(unittest.TestCase):
    def test_create_list_delete(self):
        status, ctx = request("POST", "/contexts", {"language": "python", "cwd": _workdir.name})
        self.assertEqual(status, 200)
        self.assertEqual(set(ctx), {"id", "language", "cwd"})
        self.assertEqual((ctx["language"], ctx["cwd"]), ("python", _workdir.name))
        status, listed = request("GET", "/contexts")
        self.assertIn(ctx, listed)
        self.assertEqual(request("DELETE", f"/contexts/{ctx['id']}")[0], 204)
        self.assertEqual(request("DELETE", f"/contexts/{ctx['id']}")[0], 404)
        status, body = request("POST", "/execute", {"code": "1", "context_id": ctx["id"]})
        self.assertEqual(status, 404)
        self.assertIn("not found", body["message"])

    def test_contexts_are_isolated(self):
        _, a = request("POST", "/contexts", {})
        _, b = request("POST", "/contexts", {})
        self.addCleanup(request, "DELETE", f"/contexts/{a['id']}")
        self.addCleanup(request, "DELETE", f"/contexts/{b['id']}")
        execute("shared = 1", context_id=a["id"])
        [error] = of_type(execute("shared", context_id=b["id"]), "error")
        self.assertEqual(error["name"], "NameError")

    def test_cwd(self):
        sub = os.path.join(_workdir.name, "sub")
        os.makedirs(sub, exist_ok=True)
        _, ctx = request("POST", "/contexts", {"cwd": sub})
        self.addCleanup(request, "DELETE", f"/contexts/{ctx['id']}")
        self.assertEqual(main_text(execute("import os\nos.getcwd()", context_id=ctx["id"])), sub)
        self.assertEqual(request("POST", "/contexts", {"cwd": "/does/not/exist"})[0], 400)

    def test_restart_gives_a_fresh_namespace(self):
        _, ctx = request("POST", "/contexts", {})
        self.addCleanup(request, "DELETE", f"/contexts/{ctx['id']}")
        execute("kept = 1", context_id=ctx["id"])
        self.assertEqual(request("POST", f"/contexts/{ctx['id']}/restart"), (204, None))
        events = execute("kept", context_id=ctx["id"])
        self.assertEqual(of_type(events, "error")[0]["name"], "NameError")
        self.assertEqual(of_type(events, "number_of_executions")[0]["execution_count"], 1)
        self.assertEqual(request("POST", "/contexts/nope/restart")[0], 404)

    def test_default_context(self):
        execute("default_var = 5")
        self.assertEqual(main_text(execute("default_var")), "5")
        self.assertEqual(main_text(execute("default_var", language="python")), "5")
        self.assertEqual(main_text(execute("default_var", language="Python3")), "5")


class BadRequestTest(unittest.TestCase):
    def test_unsupported_language(self):
        status, body = request("POST", "/execute", {"code": "1", "language": "r"})
        self.assertEqual(status, 400)
        self.assertEqual(body["code"], 400)
        self.assertIn("Python only", body["message"])
        self.assertEqual(request("POST", "/contexts", {"language": "javascript"})[0], 400)

    def test_context_and_language(self):
        status, body = request("POST", "/execute", {"code": "1", "language": "python", "context_id": "x"})
        self.assertEqual(status, 400)
        self.assertIn("only one of", body["message"])

    def test_bad_bodies(self):
        for body in ({}, {"code": 1}, {"code": "1", "env_vars": []}):
            with self.subTest(body=body):
                self.assertEqual(request("POST", "/execute", body)[0], 400)

    def test_routes(self):
        self.assertEqual(request("GET", "/nope")[0], 404)
        self.assertEqual(request("GET", "/execute")[0], 405)


if __name__ == "__main__":
    unittest.main()
