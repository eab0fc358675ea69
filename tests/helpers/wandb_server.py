"""A W&B server small enough for a test: it answers what `wandb.init`, `log` and `finish`
(and `wandb sync`) ask of an online run (the GraphQL operations Viewer, UpsertBucket and
CreateRunFiles; the file stream; file uploads) and records the history rows and files it
receives, per run. `stop()` closes its socket, as a server that went away; `start()` on
the same port brings it back.

Found by pointing wandb 0.31 at a server that logs every request: operations it does not
know (ServerFeaturesQuery, the organisation query, telemetry) are answered with empty
data, which the client accepts."""

from __future__ import annotations

import json
import re
import socket
import threading
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

API_KEY = "0123456789abcdef" * 2 + "01234567"  # the 40 characters wandb expects


class FakeWandb:
    def __init__(self) -> None:
        with socket.socket() as probe:  # a free port, kept across stop() and start()
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.operations: list[str] = []
        self.history: dict[str, list[dict]] = defaultdict(list)  # run id -> rows received
        self.uploads: dict[str, set[str]] = defaultdict(set)  # run id -> files uploaded
        self._server: ThreadingHTTPServer | None = None

    def env(self) -> dict[str, str]:
        return {"WANDB_BASE_URL": self.url, "WANDB_API_KEY": API_KEY}

    def start(self) -> FakeWandb:
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), _handler(self))
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        """Stop answering: the socket closes, connections are refused."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def steps(self, run_id: str) -> set[int]:
        return {row["_step"] for row in self.history[run_id] if "_step" in row}

    def _graphql(self, request: dict) -> dict:
        operation, v = request.get("operationName"), request.get("variables") or {}
        self.operations.append(operation)
        if operation == "Viewer":
            user = {"id": "u", "entity": "e", "username": "u", "email": "u@e", "flags": "{}"}
            return {"viewer": user | {"teams": {"edges": []}}}
        if operation == "UpsertBucket":
            name = v.get("name") or "run"
            project = {"id": "p", "name": v.get("project"), "entity": {"id": "e", "name": "e"}}
            bucket = {"id": name, "name": name, "displayName": name, "project": project}
            return {"upsertBucket": {"inserted": True, "bucket": bucket | {"config": "{}"}}}
        if operation == "CreateRunFiles":
            run = v["run"]
            files = [{"name": f, "uploadUrl": f"{self.url}/upload/{run}/{f}"} for f in v["files"]]
            return {"createRunFiles": {"runID": run, "uploadHeaders": [], "files": files}}
        return {}

    def _file_stream(self, run_id: str, request: dict) -> None:
        history = (request.get("files") or {}).get("wandb-history.jsonl") or {}
        self.history[run_id] += [json.loads(line) for line in history.get("content", [])]


def _handler(server: FakeWandb) -> type[BaseHTTPRequestHandler]:
    stream = re.compile(r"^/files/[^/]+/[^/]+/([^/]+)/file_stream")

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:  # quiet
            pass

        def _body(self) -> bytes:
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def _answer(self, payload: dict | None = None) -> None:
            out = json.dumps(payload or {}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = self._body()
            if self.path.startswith("/graphql"):
                return self._answer({"data": server._graphql(json.loads(body))})
            if match := stream.match(self.path):
                server._file_stream(match[1], json.loads(body))
                return self._answer({"exitcode": None, "limits": {}})
            return self._answer()  # telemetry

        def do_PUT(self) -> None:  # noqa: N802
            self._body()
            _, _, run, name = self.path.split("/", 3)
            server.uploads[run].add(name)
            self._answer()

    return Handler
