"""Checks that TroupeVectorEnv never sends a step twice.

    PYTHONPATH=python PYENV_E2E_PYTHON python/tests/vector_retry_check.py

A step is not idempotent: the server applies it before it answers, so a
step whose answer was cut short (the connection reset mid-body) must fail,
not be sent again on a new connection, where the server would apply the
same actions to the next state. A request that a kept-alive connection the
server closed while idle never delivered is still sent once more.

It serves a fake environment server on 127.0.0.1 and exits non-zero on a
failure.
"""

import http.client
import http.server
import json
import socket
import sys
import threading

from troupe_env.vector import TroupeVectorEnv

ANSWER = {"vector_id": "v-1", "scenario": "s", "params": {}, "num_envs": 1, "obs_dim": 1, "obs_dtype": "uint8",
          "num_actions": 1, "seed": 0, "agents": [{"agent": "a", "role": "r", "actions": ["x"]}]}
steps = []
close_after_create = [True]


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path == "/vectors":
            data = json.dumps(ANSWER).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            # Closed at once, the first time: the next request finds the
            # kept-alive connection gone before it reached the server.
            self.close_connection = close_after_create[0]
            return
        steps.append(body)
        # The step is applied; its answer is cut short.
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", "1000")
        self.end_headers()
        self.wfile.write(b"TVB1")
        self.wfile.flush()
        self.connection.shutdown(socket.SHUT_RDWR)
        self.close_connection = True


def main():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}"
    # The connection closed while idle, then kept alive.
    for close in (True, False):
        close_after_create[0] = close
        steps.clear()
        env = TroupeVectorEnv("s", 1, base_url=url)
        try:
            env.step([[0]])
        except (http.client.HTTPException, OSError, ValueError) as e:
            print(f"the cut step failed: {type(e).__name__}: {e}")
        else:
            sys.exit("a step whose answer was cut short succeeded")
        if len(steps) != 1:
            sys.exit(f"connection closed after create {close}: the step reached the server {len(steps)} times, not once")
    srv.shutdown()
    print("ok: each step was sent once")


if __name__ == "__main__":
    main()
