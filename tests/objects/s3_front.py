"""An S3 front for the object tests: checks every request's AWS Signature V4
(s3rver 3.7.1 accepts any V4 signature: its authentication says the V4
calculation is unimplemented), applies If-Match (which s3rver ignores), and
injects the faults a store and a network give, by key:

    faults/cut/...       the first ranged GET past byte 0 is cut halfway through its body
    faults/cuthead/...   the first GET is cut halfway through its body
    faults/slow/...      the first two requests answer 503 SlowDown
    faults/flaky/...     the first request answers 500
    faults/down/...      every request answers 503
    faults/noranges/...  ranges ignored: 200 and the whole object
    faults/replaced/...  after its first GET the object is replaced (a new ETag)
    faults/liar/...      a ranged GET past byte 0 answers another total size
    faults/longer/...    a ranged GET past byte 0 sends one byte more than asked

It forwards the rest to s3rver, unsigned (s3rver takes anonymous requests).
"""
import hashlib
import hmac
import http.client
import http.server
import socketserver
import threading
import urllib.parse

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


def aws_quote(s):
    return urllib.parse.quote(s, safe="-_.~")


def signature_problem(method, raw_path, headers, access_key, secret_key):
    """Why a request's Signature V4 is wrong, or None: recomputed from what
    arrived, as AWS documents it."""
    auth = headers.get("Authorization", "")
    if not auth.startswith("AWS4-HMAC-SHA256 "):
        return "no AWS4-HMAC-SHA256 signature"
    fields = dict(part.strip().split("=", 1) for part in auth[len("AWS4-HMAC-SHA256 "):].split(","))
    credential = fields["Credential"].split("/")
    if credential[0] != access_key:
        return "InvalidAccessKeyId"
    date, region, service = credential[1], credential[2], credential[3]
    signed = fields["SignedHeaders"].split(";")
    for required in ("host", "x-amz-date", "x-amz-content-sha256"):
        if required not in signed:
            return f"{required} not signed"
    path, _, query = raw_path.partition("?")
    pairs = []
    for part in query.split("&") if query else []:
        k, _, v = part.partition("=")
        pairs.append((aws_quote(urllib.parse.unquote(k)), aws_quote(urllib.parse.unquote(v))))
    canonical_query = "&".join(f"{k}={v}" for k, v in sorted(pairs))
    canonical_headers = "".join(f"{h}:{' '.join(headers.get(h, '').split())}\n" for h in signed)
    canonical = "\n".join([method, path, canonical_query, canonical_headers, ";".join(signed),
                           headers.get("x-amz-content-sha256", "")])
    scope = f"{date}/{region}/{service}/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", headers.get("x-amz-date", ""), scope,
                         hashlib.sha256(canonical.encode()).hexdigest()])
    key = ("AWS4" + secret_key).encode()
    for part in (date, region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    if hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest() != fields["Signature"]:
        return "SignatureDoesNotMatch"
    if headers.get("x-amz-content-sha256") not in (EMPTY_SHA256, "UNSIGNED-PAYLOAD"):
        return "a GET with a payload hash that is not the empty body's"
    return None


class Front(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address, backend_port, access_key, secret_key):
        super().__init__(address, Handler)
        self.backend_port = backend_port
        self.access_key = access_key
        self.secret_key = secret_key
        self.lock = threading.Lock()
        self.seen = {}  # key -> requests so far
        self.ranges = {}  # key -> the Range header of each GET ("" for none)
        self.requests = 0

    def handle_error(self, request, client_address):
        # A client that stops reading (a body longer than asked for) is what the tests do on purpose.
        import sys
        if not isinstance(sys.exc_info()[1], (ConnectionError, BrokenPipeError)):
            super().handle_error(request, client_address)

    def count(self, key):
        with self.lock:
            self.requests += 1
            self.seen[key] = self.seen.get(key, 0) + 1
            return self.seen[key]

    def backend(self, method, path, headers=None, body=None):
        c = http.client.HTTPConnection("127.0.0.1", self.backend_port, timeout=60)
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        data = r.read()
        c.close()
        return r, data


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send_error_xml(self, status, code, message):
        body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
                f"<Message>{message}</Message></Error>").encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        s = self.server
        problem = signature_problem("GET", self.path, self.headers, s.access_key, s.secret_key)
        if problem:
            code = problem if problem in ("InvalidAccessKeyId", "SignatureDoesNotMatch") else "AccessDenied"
            return self.send_error_xml(403, code, problem)
        path = self.path.split("?")[0]
        key = urllib.parse.unquote(path.split("/", 2)[2]) if path.count("/") >= 2 else ""
        n = s.count(key)
        fault = key.split("/")[1] if key.startswith("faults/") else ""
        if fault == "slow" and n <= 2:
            return self.send_error_xml(503, "SlowDown", "Please reduce your request rate.")
        if fault == "flaky" and n == 1:
            return self.send_error_xml(500, "InternalError", "We encountered an internal error. Please try again.")
        if fault == "down":
            return self.send_error_xml(503, "ServiceUnavailable", "Reduce your request rate.")
        headers = {}
        rng = self.headers.get("Range")
        with s.lock:
            s.ranges.setdefault(key, []).append(rng or "")
        if rng and fault != "noranges":
            headers["Range"] = rng
        r, data = s.backend("GET", self.path, headers)
        etag = r.getheader("ETag")
        if r.status in (200, 206) and self.headers.get("If-Match") and self.headers["If-Match"] != etag:
            return self.send_error_xml(412, "PreconditionFailed", "At least one of the pre-conditions you specified did not hold")
        if fault == "replaced" and n == 1 and r.status in (200, 206):
            # A new object under the key once its first answer is on its way.
            full, whole = s.backend("GET", path)
            s.backend("PUT", path, {"Content-Length": str(len(whole))}, whole[::-1])
        later = rng is not None and not rng.startswith("bytes=0-")
        total = None
        content_range = r.getheader("Content-Range")
        if fault == "liar" and later and content_range:
            first_last, total = content_range.rsplit("/", 1)
            content_range = f"{first_last}/{int(total) + 1000}"
        if fault == "longer" and later:
            data += b"!"
        self.send_response(r.status)
        for h in ("ETag", "Content-Type", "Last-Modified", "Accept-Ranges"):
            if r.getheader(h):
                self.send_header(h, r.getheader(h))
        if content_range:
            self.send_header("Content-Range", content_range)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        cut = (fault == "cut" and later and s.seen.setdefault("cut:" + key, 0) == 0) or (fault == "cuthead" and n == 1)
        if cut:
            s.seen["cut:" + key] = 1
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)
            return
        self.wfile.write(data)


def start(port, backend_port, access_key, secret_key):
    front = Front(("127.0.0.1", port), backend_port, access_key, secret_key)
    threading.Thread(target=front.serve_forever, daemon=True).start()
    return front
