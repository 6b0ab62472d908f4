"""A minimal S3 endpoint on 127.0.0.1 for role tests: ListObjectsV2, GetObject (ranges, If-Match).

The lab's object tier is a real S3 server; the role tests only need the few calls the staging
module makes, and a count of object downloads to prove a second run transfers nothing.
"""

from __future__ import annotations

import hashlib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlparse
from xml.sax.saxutils import escape


class S3Stub:
    def __init__(self, objects: dict[str, dict[str, bytes]]):
        self.objects = objects  # bucket -> key -> body
        self.gets: list[tuple[str, str | None]] = []  # (key, range header)
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output quiet
                pass

            def do_GET(self):
                url = urlparse(self.path)
                parts = unquote(url.path).lstrip("/").split("/", 1)
                bucket = stub.objects.get(parts[0])
                if bucket is None:
                    return self._send(404, b"<Error><Code>NoSuchBucket</Code></Error>")
                if len(parts) == 1 or not parts[1]:
                    q = parse_qs(url.query)
                    prefix = q.get("prefix", [""])[0]
                    rows = "".join(
                        f"<Contents><Key>{escape(k)}</Key><LastModified>2026-01-01T00:00:00.000Z</LastModified>"
                        f"<ETag>&quot;{hashlib.md5(v).hexdigest()}&quot;</ETag><Size>{len(v)}</Size>"
                        f"<StorageClass>STANDARD</StorageClass></Contents>"
                        for k, v in sorted(bucket.items()) if k.startswith(prefix))
                    body = (f'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult '
                            f'xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>{parts[0]}</Name>'
                            f"<Prefix>{escape(prefix)}</Prefix><MaxKeys>1000</MaxKeys>"
                            f"<IsTruncated>false</IsTruncated>{rows}</ListBucketResult>").encode()
                    return self._send(200, body, "application/xml")
                key = parts[1]
                data = bucket.get(key)
                if data is None:
                    return self._send(404, b"<Error><Code>NoSuchKey</Code></Error>")
                etag = f'"{hashlib.md5(data).hexdigest()}"'
                if self.headers.get("If-Match") not in (None, etag):
                    return self._send(412, b"<Error><Code>PreconditionFailed</Code></Error>")
                rng = self.headers.get("Range")
                stub.gets.append((key, rng))
                if rng:
                    start = int(rng.split("=")[1].split("-")[0])
                    return self._send(206, data[start:], etag=etag,
                                      extra={"Content-Range": f"bytes {start}-{len(data) - 1}/{len(data)}"})
                return self._send(200, data, etag=etag)

            def _send(self, code, body, ctype="application/octet-stream", etag=None, extra=None):
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                if etag:
                    self.send_header("ETag", etag)
                for k, v in (extra or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
