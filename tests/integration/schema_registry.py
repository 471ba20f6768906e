"""A Confluent-compatible schema registry for the tests, in-process over HTTP.

No registry server installs on this machine: Karapace is not on PyPI, Confluent's Schema Registry is not
on Maven Central, and Apicurio there is a Quarkus module that does not run without its build. So the
serdes are tested against this stand-in, which answers the REST calls confluent-kafka's client makes with
the bodies and error codes Confluent's API reference documents (``{"id": 1}``, ``40401`` subject not found,
``40403`` schema not found, ``409`` incompatible). It keeps ids global (an identical schema keeps its id
across subjects, as Confluent's does) and checks BACKWARD compatibility of Avro records the simple way: a
field the new version adds needs a default, a field both versions have keeps its type.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlparse


@dataclass
class Subject:
    versions: list[int] = field(default_factory=list)  # schema ids, version n at index n - 1
    compatibility: str = "BACKWARD"


class RegistryState:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.schemas: dict[int, tuple[str, str]] = {}  # id -> (schema type, schema text)
        self.subjects: dict[str, Subject] = {}
        self.requests: list[str] = []
        self.authorizations: list[str] = []  # the Authorization header of each request that had one

    def id_of(self, schema_type: str, text: str) -> int | None:
        for schema_id, (kind, existing) in self.schemas.items():
            if kind == schema_type and _same(kind, existing, text):
                return schema_id
        return None

    def register(self, name: str, schema_type: str, text: str) -> tuple[int, dict[str, Any]]:
        subject = self.subjects.setdefault(name, Subject())
        known = self.id_of(schema_type, text)
        if known is not None and known in subject.versions:
            return 200, {"id": known}
        if subject.versions and subject.compatibility != "NONE":
            _, latest = self.schemas[subject.versions[-1]]
            if schema_type == "AVRO" and not backward_compatible(json.loads(latest), json.loads(text)):
                return 409, {
                    "error_code": 409,
                    "message": f'Schema being registered is incompatible with an earlier schema for subject "{name}"',
                }
        schema_id = known if known is not None else len(self.schemas) + 1
        self.schemas[schema_id] = (schema_type, text)
        subject.versions.append(schema_id)
        return 200, {"id": schema_id}

    def version(self, name: str, version: int) -> dict[str, Any]:
        schema_id = self.subjects[name].versions[version - 1]
        return self.record(name, schema_id, version)

    def record(self, name: str, schema_id: int, version: int) -> dict[str, Any]:
        schema_type, text = self.schemas[schema_id]
        body: dict[str, Any] = {"subject": name, "id": schema_id, "version": version, "schema": text}
        if schema_type != "AVRO":
            body["schemaType"] = schema_type
        return body


def _same(kind: str, left: str, right: str) -> bool:
    if kind == "AVRO":
        return bool(json.loads(left) == json.loads(right))
    return left == right


def backward_compatible(old: Any, new: Any) -> bool:
    """Whether a reader with ``new`` reads what ``old`` wrote, for records of named fields."""
    if not (isinstance(old, dict) and isinstance(new, dict) and old.get("type") == new.get("type") == "record"):
        return bool(old == new)
    old_fields = {f["name"]: f for f in old["fields"]}
    for new_field in new["fields"]:
        before = old_fields.get(new_field["name"])
        if before is None and "default" not in new_field:
            return False
        if before is not None and before["type"] != new_field["type"]:
            return False
    return True


_NOT_FOUND_SUBJECT = (404, {"error_code": 40401, "message": "Subject not found."})
_NOT_FOUND_SCHEMA = (404, {"error_code": 40403, "message": "Schema not found"})
_NOT_FOUND_VERSION = (404, {"error_code": 40402, "message": "Version not found."})


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._answer("GET", None)

    def do_POST(self) -> None:
        self._answer("POST", self._body())

    def do_PUT(self) -> None:
        self._answer("PUT", self._body())

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length)) if length else None

    def _answer(self, method: str, body: Any) -> None:
        path = unquote(urlparse(self.path).path)
        state = self.server.state
        with state.lock:
            state.requests.append(f"{method} {path}")
            if authorization := self.headers.get("Authorization"):
                state.authorizations.append(authorization)
            status, reply = route(state, method, path, body)
        data = json.dumps(reply).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def route(state: RegistryState, method: str, path: str, body: Any) -> tuple[int, Any]:
    """The answer to one REST call, as Confluent's Schema Registry gives it."""
    if method == "GET" and (match := re.fullmatch(r"/schemas/ids/(\d+)", path)):
        schema_id = int(match.group(1))
        if schema_id not in state.schemas:
            return _NOT_FOUND_SCHEMA
        schema_type, text = state.schemas[schema_id]
        return 200, {"schema": text} | ({"schemaType": schema_type} if schema_type != "AVRO" else {})
    if method == "GET" and path == "/subjects":
        return 200, sorted(state.subjects)
    if match := re.fullmatch(r"/subjects/([^/]+)/versions", path):
        if method == "POST":
            return state.register(match.group(1), body.get("schemaType", "AVRO"), body["schema"])
        subject = state.subjects.get(match.group(1))
        return (200, list(range(1, len(subject.versions) + 1))) if subject else _NOT_FOUND_SUBJECT
    if method == "GET" and (match := re.fullmatch(r"/subjects/([^/]+)/versions/(latest|\d+)", path)):
        name, wanted = match.groups()
        subject = state.subjects.get(name)
        if subject is None:
            return _NOT_FOUND_SUBJECT
        version = len(subject.versions) if wanted == "latest" else int(wanted)
        return (200, state.version(name, version)) if 0 < version <= len(subject.versions) else _NOT_FOUND_VERSION
    if method == "POST" and (match := re.fullmatch(r"/subjects/([^/]+)", path)):
        name = match.group(1)
        subject = state.subjects.get(name)
        if subject is None:
            return _NOT_FOUND_SUBJECT
        found = state.id_of(body.get("schemaType", "AVRO"), body["schema"])
        if found is None or found not in subject.versions:
            return _NOT_FOUND_SCHEMA
        return 200, state.record(name, found, subject.versions.index(found) + 1)
    if method == "PUT" and (match := re.fullmatch(r"/config/([^/]+)", path)):
        state.subjects.setdefault(match.group(1), Subject()).compatibility = body["compatibility"]
        return 200, {"compatibility": body["compatibility"]}
    return 404, {"error_code": 404, "message": f"HTTP 404 Not Found: {method} {path}"}


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.state = RegistryState()


class SchemaRegistryServer:
    """The stand-in registry on a free port of 127.0.0.1, serving from a thread of the test process."""

    def __init__(self) -> None:
        self._server = _Server()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="schema-registry", daemon=True)

    @property
    def state(self) -> RegistryState:
        return self._server.state

    def start(self) -> SchemaRegistryServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
