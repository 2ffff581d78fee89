"""Stand-in for Cloud Storage's JSON API uploads, as google-cloud-storage makes them, on loopback.

The benchmark pod uploads its reports with google-cloud-storage (pods/benchmark_run.py), which sends
every file smaller than its chunk size as one multipart upload: `POST /upload/storage/v1/b/<bucket>/o
?uploadType=multipart` with a `multipart/related` body of the object's metadata (JSON, with `name`)
and its bytes (Cloud Storage JSON API, "Objects: insert" and "Perform a multipart upload"). Pointed
at with `STORAGE_EMULATOR_HOST`, which the client honours without credentials (google/cloud/storage/
client.py). The answer is the object's resource (`kind` storage#object, `name`, `bucket`, `size`).

It refuses what the pod's identity may not do: a write to another bucket, or outside the one
prefix its conditional grant allows (workloads/bucket_access.py), with the JSON API's 403 error body.

What it cannot show: resumable uploads (files above the client's 100 MiB multipart threshold), IAM's
evaluation itself, retries on 5xx.
"""

from __future__ import annotations

import contextlib
import email.parser
import email.policy
import http.server
import json
import threading
import urllib.parse
from collections.abc import Iterator

from tests.standins.poller import JsonHandler


class _Handler(JsonHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:  # noqa: N802
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        parts = url.path.split("/")
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if (
            parts[:5] != ["", "upload", "storage", "v1", "b"]
            or parts[6:] != ["o"]
            or query.get("uploadType") != ["multipart"]
        ):
            self.send_json(400, {"error": {"code": 400, "message": f"not a multipart upload: {self.path}"}})
            return
        bucket = urllib.parse.unquote(parts[5])
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            b"Content-Type: " + self.headers["Content-Type"].encode() + b"\r\n\r\n" + body
        )
        metadata_part, media_part = list(message.iter_parts())
        metadata = json.loads(bytes(metadata_part.get_payload(decode=True)))
        name = metadata.get("name") or (query.get("name") or [""])[0]
        if bucket != self.server.bucket or not name.startswith(self.server.writable_prefix):
            message_text = f"caller does not have storage.objects.create access to the object {name}"
            self.send_json(403, {"error": {"code": 403, "message": message_text, "errors": [{"reason": "forbidden"}]}})
            return
        data = bytes(media_part.get_payload(decode=True))
        self.server.objects[name] = data
        self.send_json(
            200,
            {"kind": "storage#object", "bucket": bucket, "name": name, "size": str(len(data)), "generation": "1"},
        )


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, bucket: str, writable_prefix: str) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.bucket, self.writable_prefix = bucket, writable_prefix
        self.objects: dict[str, bytes] = {}

    @property
    def host(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@contextlib.contextmanager
def storage(bucket: str, writable_prefix: str) -> Iterator[_Server]:
    server = _Server(bucket, writable_prefix)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
