#!/usr/bin/python3
"""Datasets in object storage: https:// objects from nginx (TLS, HTTP/2,
ranges, a redirect) and s3:// keys, prefixes and patterns from an S3-protocol
server (s3rver from npm, behind s3_front.py, which checks every request's
Signature V4 and injects faults), through imgstat-client --local and a live
server, against the same files on disk.

    check.py SERVER_BIN CLIENT_BIN CORPUS WORK

Every answer from an object is the file's answer, byte for byte in --json
but for its name; --aggregate too. Then what a store and a network do: a
connection cut mid-object (resumed from the byte it was cut at), 503
SlowDown and a 500 (retried), a store that stays down (UNAVAILABLE), one that
ignores ranges, an object replaced mid-read, a wrong total size and a body
longer than asked (DATA_LOSS), a missing key (NOT_FOUND), a wrong secret
(PERMISSION_DENIED), a certificate not trusted, and a listing of 5,000 keys
in pages.
"""
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import time

import numpy as np


HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, HERE)
from large_image import write_large_pgm  # noqa: E402
from live_server import start_server  # noqa: E402
from verdicts import equal, fail, finish  # noqa: E402
import s3_front  # noqa: E402

TIMES = ("decode_ms", "compute_ms")
EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".pgm", ".ppm", ".pnm", ".webp")
KEY, SECRET = "S3RVER", "S3RVER"  # s3rver's own account


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, what, proc=None):
    for _ in range(300):
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f"{what} exited: {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"{what} did not listen on {port}")


def make_folder(work, corpus):
    """Corpus images (a spread of every folder's formats, good and bad), a
    large one (read by ranges, several at once), an odd name, a file that
    is no image."""
    folder = os.path.join(work, "files")
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(os.path.join(folder, "sub"))
    found = []
    for sub in sorted(os.listdir(corpus)):
        path = os.path.join(corpus, sub)
        if os.path.isdir(path):
            found += [os.path.join(path, n) for n in sorted(os.listdir(path)) if n.lower().endswith(EXTENSIONS)]
    names = []
    for k, src in enumerate(found[::6]):
        name = ("sub/" if k % 5 == 0 else "") + f"{k:04d}-" + os.path.basename(src)
        shutil.copyfile(src, os.path.join(folder, name))
        names.append(name)
    write_large_pgm(os.path.join(folder, "large.pgm"))
    names.append("large.pgm")
    # A PNG past the first request (4 MiB): a fetching server analyzes it as it
    # arrives, spooled as an upload is.
    from PIL import Image
    noise = np.random.default_rng(51).integers(0, 256, (1201, 1999, 3), dtype=np.uint8)
    Image.fromarray(noise).save(os.path.join(folder, "large.png"), compress_level=1)
    names.append("large.png")
    shutil.copyfile(os.path.join(folder, names[1]), os.path.join(folder, "an odd name +&=%.png"))
    names.append("an odd name +&=%.png")
    with open(os.path.join(folder, "notes.txt"), "w") as f:
        f.write("not an image\n")
    return folder, names


def run(client_bin, where, *args, env=None):
    return subprocess.run([client_bin, *where, "--json", *args], capture_output=True, text=True, timeout=900,
                          env=env)


def answers(out, strip=""):
    """JSON lines by name (strip taken off its front), times taken out."""
    got = {}
    for line in out.stdout.splitlines():
        if not line.strip():
            continue
        obj = json.loads(line)
        name = obj.pop("file", "")
        for t in TIMES:
            obj.pop(t, None)
        got[name[len(strip):] if name.startswith(strip) else name] = json.dumps(obj)
    return got


def codes(out):
    return {json.loads(line)["file"]: (json.loads(line).get("code"), json.loads(line).get("error", ""))
            for line in out.stdout.splitlines() if line.strip()}


def start_nginx(work, folder):
    """nginx with TLS and HTTP/2 over the folder at /data/, a redirect at /moved/."""
    tls = os.path.join(work, "tls")
    os.makedirs(tls, exist_ok=True)
    cert, key = os.path.join(tls, "cert.pem"), os.path.join(tls, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout", key, "-out", cert],
                   check=True, capture_output=True)
    port = free_port()
    temp = os.path.join(work, "nginx")
    os.makedirs(temp, exist_ok=True)
    user = "user root;" if os.geteuid() == 0 else ""
    conf = os.path.join(temp, "nginx.conf")
    with open(conf, "w") as f:
        f.write(f"""{user}
daemon off; worker_processes 2; pid {temp}/nginx.pid; error_log {temp}/error.log;
events {{ worker_connections 256; }}
http {{
  access_log off;
  client_body_temp_path {temp}/body; proxy_temp_path {temp}/proxy; fastcgi_temp_path {temp}/fastcgi;
  uwsgi_temp_path {temp}/uwsgi; scgi_temp_path {temp}/scgi;
  server {{
    listen 127.0.0.1:{port} ssl http2;
    ssl_certificate {cert}; ssl_certificate_key {key};
    location /data/ {{ alias {folder}/; }}
    location /moved/ {{ rewrite ^/moved/(.*)$ /data/$1 redirect; }}
    location /away/ {{ rewrite ^/away/(.*)$ /private/$1 redirect; }}
    location /private/ {{ alias {folder}/; }}
  }}
}}
""")
    proc = subprocess.Popen([shutil.which("nginx") or "/usr/sbin/nginx", "-c", conf, "-p", temp], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wait_port(port, "nginx", proc)
    return proc, port, cert


def start_s3(work):
    """s3rver (npm ci once per work folder) with a bucket, and the front."""
    npm = os.path.join(work, "npm")
    os.makedirs(npm, exist_ok=True)
    for f in ("package.json", "package-lock.json"):
        shutil.copyfile(os.path.join(HERE, f), os.path.join(npm, f))
    if not os.path.isdir(os.path.join(npm, "node_modules", "s3rver")):
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=npm, check=True)
    data = os.path.join(work, "s3-data")
    shutil.rmtree(data, ignore_errors=True)
    os.makedirs(data)
    port = free_port()
    # s3rver's continuation tokens are DES-encrypted: OpenSSL 3 keeps DES in its legacy provider.
    proc = subprocess.Popen(["node", "--openssl-legacy-provider", os.path.join(npm, "node_modules", "s3rver", "bin", "s3rver.js"), "-d", data,
                             "-a", "127.0.0.1", "-p", str(port), "--silent", "--configure-bucket", "bucket"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wait_port(port, "s3rver", proc)
    front_port = free_port()
    front = s3_front.start(front_port, port, KEY, SECRET)
    return proc, front, front_port


def put(front, key, data):
    import urllib.parse
    r, body = front.backend("PUT", "/bucket/" + urllib.parse.quote(key), {"Content-Length": str(len(data))}, data)
    if r.status != 200:
        raise SystemExit(f"PUT {key}: {r.status} {body[:200]}")


def check_https(client_bin, folder, names, want, port, cert, server_address):
    base = f"https://127.0.0.1:{port}/data/"
    import urllib.parse
    urls = [base + urllib.parse.quote(n) for n in names]
    env = dict(os.environ, CURL_CA_BUNDLE=cert, AWS_CA_BUNDLE=cert)
    for where, what in ((["--local"], "--local"), (["--server", server_address], "a live server")):
        got = answers(run(client_bin, where, *urls, env=env))
        by_name = {urllib.parse.unquote(k[len(base):]): v for k, v in got.items()}
        equal(sorted(by_name), sorted(names), f"https, {what}: the objects answered")
        for n in names:
            equal(by_name.get(n), want[n], f"https, {what}: {n}")
    # A redirect is followed (to the same object).
    got = answers(run(client_bin, ["--local"], f"https://127.0.0.1:{port}/moved/large.pgm", env=env))
    equal(list(got.values()), [want["large.pgm"]], "https: a redirect followed")
    # Not found; a certificate nobody trusts.
    out = run(client_bin, ["--local"], base + "missing.png", env=env)
    equal(codes(out).get(base + "missing.png", (None,))[0], "NOT_FOUND", "https: a missing object")
    no_ca = {k: v for k, v in os.environ.items() if k not in ("CURL_CA_BUNDLE", "AWS_CA_BUNDLE")}
    out = run(client_bin, ["--local"], base + "large.pgm", env=no_ca)
    code, error = codes(out).get(base + "large.pgm", (None, ""))
    if code != "FAILED_PRECONDITION" or "certificate" not in error.lower():
        fail(f"https: a certificate not trusted: {code} {error}")


def check_s3(client_bin, folder, names, want, front, front_port, server_address, work):
    env = dict(os.environ, AWS_ACCESS_KEY_ID=KEY, AWS_SECRET_ACCESS_KEY=SECRET, AWS_REGION="eu-west-3",
               AWS_ENDPOINT_URL_S3=f"http://127.0.0.1:{front_port}")
    for n in names + ["notes.txt"]:
        with open(os.path.join(folder, n), "rb") as f:
            put(front, "dataset/" + n, f.read())
    prefix = "s3://bucket/dataset/"
    for where, what in ((["--local"], "--local"), (["--server", server_address], "a live server")):
        out = run(client_bin, where, prefix, env=env)
        got = answers(out, prefix)
        equal(sorted(got), sorted(names), f"s3 prefix, {what}: the objects answered")
        for n in names:
            equal(got.get(n), want[n], f"s3 prefix, {what}: {n}")
        if "1 objects left out, not images" not in out.stderr:
            fail(f"s3 prefix, {what}: notes.txt not said left out: {out.stderr[-300:]}")
    # --aggregate over a prefix equals the folder's.
    a = run(client_bin, ["--server", server_address], "--aggregate", prefix, env=env)
    b = run(client_bin, ["--server", server_address], "--aggregate", folder)
    untimed = [[{k: v for k, v in json.loads(line).items() if k not in TIMES} for line in o.stdout.splitlines() if line.strip()]
               for o in (a, b)]
    equal(untimed[0], untimed[1], "s3: --aggregate over a prefix against its folder")
    # A pattern: * stays in its folder, ** crosses folders.
    top_png = sorted(n for n in names if n.endswith(".png") and "/" not in n)
    got = answers(run(client_bin, ["--local"], prefix + "*.png", env=env), prefix)
    equal(sorted(got), top_png, "s3 pattern *.png")
    all_png = sorted(n for n in names if n.endswith(".png"))
    got = answers(run(client_bin, ["--local"], prefix + "**.png", env=env), prefix)
    equal(sorted(got), all_png, "s3 pattern **.png")
    # Credentials from a profile of the shared files, none in the environment.
    creds = os.path.join(work, "aws-credentials")
    with open(creds, "w") as f:
        f.write(f"[default]\naws_access_key_id = nobody\naws_secret_access_key = x\n\n[test]\n"
                f"aws_access_key_id = {KEY}\naws_secret_access_key = {SECRET}\n")
    config = os.path.join(work, "aws-config")
    with open(config, "w") as f:
        f.write(f"[profile test]\nregion = ap-south-2\nendpoint_url = http://127.0.0.1:{front_port}\n")
    bare = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    profile = dict(bare, AWS_SHARED_CREDENTIALS_FILE=creds, AWS_CONFIG_FILE=config, AWS_PROFILE="test")
    got = answers(run(client_bin, ["--local"], prefix + "large.pgm", env=profile), prefix)
    equal(got, {"large.pgm": want["large.pgm"]}, "s3: credentials, region and endpoint from a profile")
    # Wrong secret, missing key, missing bucket.
    wrong = dict(env, AWS_SECRET_ACCESS_KEY="not-the-secret")
    out = run(client_bin, ["--local"], prefix + "large.pgm", env=wrong)
    code, error = codes(out).get(prefix + "large.pgm", (None, ""))
    if code != "PERMISSION_DENIED" or "SignatureDoesNotMatch" not in error:
        fail(f"s3: a wrong secret: {code} {error}")
    out = run(client_bin, ["--local"], prefix, env=wrong)
    if out.returncode == 0 or "SignatureDoesNotMatch" not in out.stderr:
        fail(f"s3: a listing with a wrong secret: {out.returncode} {out.stderr[-300:]}")
    out = run(client_bin, ["--local"], prefix + "missing.png", env=env)
    equal(codes(out).get(prefix + "missing.png", (None,))[0], "NOT_FOUND", "s3: a missing key")
    out = run(client_bin, ["--local"], "s3://no-such-bucket/", env=env)
    if out.returncode == 0 or "NoSuchBucket" not in out.stderr:
        fail(f"s3: a missing bucket: {out.returncode} {out.stderr[-300:]}")
    return env


def check_faults(client_bin, folder, want, front, env):
    with open(os.path.join(folder, "large.pgm"), "rb") as f:
        large = f.read()
    small_name = sorted(n for n in want if n.endswith(".png") and "/" not in n)[0]
    with open(os.path.join(folder, small_name), "rb") as f:
        small = f.read()
    answered = {"cut": large, "cuthead": large, "slow": large, "flaky": small, "noranges-small": small}
    refused = {"down": ("UNAVAILABLE", "503"), "noranges": ("FAILED_PRECONDITION", "no ranged requests"),
               "replaced": ("DATA_LOSS", "changed while it was read"), "liar": ("DATA_LOSS", "another range"),
               "longer": ("DATA_LOSS", "more bytes")}
    for fault, data in answered.items():
        put(front, f"faults/{fault.split('-')[0]}/{fault}.img", data)
    for fault in refused:
        put(front, f"faults/{fault}/{fault}.img", large)
    for fault, data in answered.items():
        name = f"s3://bucket/faults/{fault.split('-')[0]}/{fault}.img"
        got = answers(run(client_bin, ["--local"], name, env=env))
        equal(got.get(name), want["large.pgm" if data is large else small_name], f"fault {fault}: answered as the file")
    if front.seen.get("cut:faults/cut/cut.img") != 1:
        fail("fault cut: no connection was cut")
    for fault, (code, says) in refused.items():
        name = f"s3://bucket/faults/{fault}/{fault}.img"
        got_code, error = codes(run(client_bin, ["--local"], name, env=env)).get(name, (None, ""))
        if got_code != code or says not in error:
            fail(f"fault {fault}: {got_code} {error!r}, not {code} saying {says!r}")


def check_listing(client_bin, front, env, want, folder):
    """5,000 keys in pages of s3rver's 1,000: the three images among them found, the rest said left out."""
    before = front.requests
    images = ["many/k01234.png", "many/k03000.png", "many/k04999.png"]
    small_name = sorted(n for n in want if n.endswith(".png") and "/" not in n)[0]
    with open(os.path.join(folder, small_name), "rb") as f:
        small = f.read()
    for k in range(5000):
        key = f"many/k{k:05d}" + (".png" if f"many/k{k:05d}.png" in images else ".txt")
        put(front, key, small if key in images else b"x")
    out = run(client_bin, ["--local"], "s3://bucket/many/", env=env)
    got = answers(out, "s3://bucket/")
    equal(sorted(got), images, "a listing of 5,000 keys: the images among them")
    if "4997 objects left out" not in out.stderr:
        fail(f"a listing of 5,000 keys: the rest not said left out: {out.stderr[-300:]}")
    if front.requests - before < 5 + len(images):
        fail(f"a listing of 5,000 keys: {front.requests - before} requests, not 5 pages and the objects")


def make_shards(work, folder, names):
    """Shards of the folder's files as WebDataset writes them, with members
    that are no images (a key's .json), in every kind a bucket holds: two
    uncompressed tars (one with a member larger than a read window), a
    .tar.gz and a zip."""
    import tarfile
    import zipfile
    out = os.path.join(folder, "shards")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    write_large_pgm(os.path.join(work, "huge.pgm"), width=5003, height=4001)  # 20 MB: past the 16 MiB window
    parts = [names[0::4], names[1::4] + ["../huge.pgm"], names[2::4], names[3::4]]
    kinds = ["shard-000000.tar", "shard-000001.tar", "shard-000002.tar.gz", "shard-000003.zip"]
    for shard, members in zip(kinds, parts):
        path = os.path.join(out, shard)
        if shard.endswith(".zip"):
            with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
                for k, n in enumerate(members):
                    z.write(os.path.join(folder, n), n.replace("../", ""))
                    z.writestr(f"{k:06d}.json", json.dumps({"key": k}))
        else:
            with tarfile.open(path, "w:gz" if shard.endswith(".gz") else "w") as t:
                for k, n in enumerate(members):
                    t.add(os.path.join(folder, n), n.replace("../", ""))
                    data = json.dumps({"key": k}).encode()
                    info = tarfile.TarInfo(f"{k:06d}.json")
                    info.size = len(data)
                    t.addfile(info, io.BytesIO(data))
    return out, kinds


def check_shards(client_bin, server_bin, folder, names, front, env, port, cert, address, work):
    """Shards in a bucket and behind https:// answer as the same shards on
    disk: every member, byte for byte in --json but for the shard's name,
    --aggregate too; read through a cut connection; an object replaced while
    it is read is DATA_LOSS; a server that may fetch the bucket still gets
    the members' bytes from the client (they are no objects of their own)."""
    out_dir, kinds = make_shards(work, folder, names)
    for k in kinds:
        with open(os.path.join(out_dir, k), "rb") as f:
            put(front, "shards/" + k, f.read())
    local = answers(run(client_bin, ["--local"], *[os.path.join(out_dir, k) for k in kinds]), out_dir + "/")
    members = sum(1 for _ in local)
    if members < len(names):
        fail(f"shards on disk: {members} members answered, not {len(names) + 1}")
    https_env = dict(env, CURL_CA_BUNDLE=cert, AWS_CA_BUNDLE=cert)
    s3 = "s3://bucket/shards/"
    web = f"https://127.0.0.1:{port}/data/shards/"
    saved = dict(os.environ)
    os.environ.update({k: v for k, v in env.items() if k.startswith("AWS_")})
    try:
        fetching, fetching_address = start_server(server_bin, work, "--fetch-allow", s3, log_name="fetching-shards.log")
    finally:
        os.environ.clear()
        os.environ.update(saved)
    try:
        for where, what in ((["--local"], "--local"), (["--server", address], "a live server"),
                            (["--server", fetching_address], "a server that may fetch the bucket")):
            for base in (s3, web):
                front.ranges.clear()
                got = answers(run(client_bin, where, *[base + k for k in kinds], env=https_env), base)
                equal(sorted(got), sorted(local), f"shards at {base}, {what}: the members answered")
                for n in local:
                    equal(got.get(n), local[n], f"shards at {base}, {what}: {n}")
                if base == s3:
                    # Where the server may fetch the bucket, it reads each member of
                    # an uncompressed tar by its own range (the client only lists).
                    import tarfile
                    with tarfile.open(os.path.join(out_dir, kinds[0])) as t:
                        wanted_ranges = {f"bytes={m.offset_data}-{m.offset_data + m.size - 1}" for m in t.getmembers()
                                         if m.isfile() and not m.name.endswith(".json")}
                    asked = set(front.ranges.get("shards/" + kinds[0], []))
                    equal(wanted_ranges <= asked, "may fetch" in what, f"shards at {base}, {what}: members read by range")
        # Ranges the server is asked for by hand: the right one answers; the
        # wrong ETag or size is DATA_LOSS; past the end, empty, or without
        # a url INVALID_ARGUMENT; outside the rules PERMISSION_DENIED.
        import tarfile
        with tarfile.open(os.path.join(out_dir, kinds[0])) as t:
            m = next(m for m in t.getmembers() if m.isfile() and m.name.endswith(".png"))
        size = os.path.getsize(os.path.join(out_dir, kinds[0]))
        analyze = grpc_analyze(work, fetching_address)
        etag = '"' + __import__("hashlib").md5(open(os.path.join(out_dir, kinds[0]), "rb").read()).hexdigest() + '"'
        cases = [((s3 + kinds[0], (m.offset_data, m.size, size, etag)), "OK", ""),
                 ((s3 + kinds[0], (m.offset_data, m.size, size, '"0123"')), "DATA_LOSS", ""),
                 ((s3 + kinds[0], (m.offset_data, m.size, size + 1, etag)), "DATA_LOSS", ""),
                 ((s3 + kinds[0], (size - 10, 11, size, etag)), "INVALID_ARGUMENT", "past its end"),
                 ((s3 + kinds[0], (0, 0, size, etag)), "INVALID_ARGUMENT", "empty"),
                 (("", (0, 10, size, etag)), "INVALID_ARGUMENT", "no url"),
                 (("s3://bucket/dataset/large.pgm", (0, 10, 100, "")), "PERMISSION_DENIED", "--fetch-allow")]
        for (url, rng), code, says in cases:
            got_code, details = analyze(url, rng)
            if got_code != code or says not in details:
                fail(f"a range by hand {url} {rng}: {got_code} {details!r}, not {code} saying {says!r}")
        # WebDataset keys: each image's label image beside it in the same shard,
        # --labels .seg.png by key, from the bucket as from the disk, through a
        # plain server and one that reads the members' ranges itself.
        import tarfile
        from PIL import Image
        rng = np.random.default_rng(52)
        keyed = os.path.join(work, "keyed.tar")
        with tarfile.open(keyed, "w") as t:
            for k in range(6):
                h, w = (int(v) for v in rng.integers(5, 70, 2))
                for name, pixels in ((f"{k:06d}.ppm", rng.integers(0, 256, (h, w, 3), dtype=np.uint8)),
                                     (f"{k:06d}.seg.png", rng.integers(0, 5, (h, w), dtype=np.uint8))):
                    data = io.BytesIO()
                    Image.fromarray(pixels).save(data, format="PPM" if name.endswith(".ppm") else "PNG")
                    info = tarfile.TarInfo(name)
                    info.size = len(data.getvalue())
                    t.addfile(info, io.BytesIO(data.getvalue()))
        with open(keyed, "rb") as f:
            put(front, "shards/keyed.tar", f.read())
        keyed_args = ["--aggregate", "--labels", ".seg.png", "--extensions", ".ppm"]
        want_keyed = run(client_bin, ["--server", address], *keyed_args, keyed)
        for where in (address, fetching_address):
            got_keyed = run(client_bin, ["--server", where], *keyed_args, s3 + "keyed.tar", env=env)
            untimed = [[{k: v for k, v in json.loads(line).items() if k not in TIMES} for line in o.stdout.splitlines()
                        if line.strip()] for o in (got_keyed, want_keyed)]
            equal(untimed[0], untimed[1], f"--labels .seg.png by key over a shard in a bucket ({where}): as on disk")
            if not untimed[1] or "parts" not in untimed[1][0]:
                fail(f"--labels .seg.png by key: no parts in {untimed[1]!r:.300}")
    finally:
        fetching.terminate()
        fetching.wait()
    # Brace ranges and patterns name shards in a bucket as they name files.
    got = answers(run(client_bin, ["--local"], s3 + "shard-{000000..000001}.tar", env=env), s3)
    equal(sorted(got), sorted(n for n in local if n.startswith(("shard-000000.tar:", "shard-000001.tar:"))),
          "shards in a bucket by a brace range")
    got = answers(run(client_bin, ["--local"], s3 + "shard-*.tar*", env=env), s3)
    equal(sorted(got), sorted(n for n in local if ".zip:" not in n), "shards in a bucket by a pattern")
    # --aggregate over the bucket's shards equals it over the disk's.
    a = run(client_bin, ["--server", address], "--aggregate", *[s3 + k for k in kinds], env=env)
    b = run(client_bin, ["--server", address], "--aggregate", *[os.path.join(out_dir, k) for k in kinds])
    untimed = [[{k: v for k, v in json.loads(line).items() if k not in TIMES} for line in o.stdout.splitlines() if line.strip()]
               for o in (a, b)]
    equal(untimed[0], untimed[1], "shards in a bucket: --aggregate against the same shards on disk")
    # --resume over shards in a bucket: a shard done whole is kept by its name,
    # and a pass that goes on does not list (download) it again.
    state = os.path.join(work, "shards.resume")
    if os.path.exists(state):
        os.remove(state)
    two = s3 + "shard-{000000..000001}.tar"
    first = run(client_bin, ["--server", address], "--aggregate", "--resume", state, two, env=env)
    before = {k: front.seen.get("shards/" + k, 0) for k in kinds}
    again = run(client_bin, ["--server", address], "--aggregate", "--resume", state, two, env=env)
    equal({k: front.seen.get("shards/" + k, 0) for k in kinds}, before, "--resume: shards done whole not read again")
    untimed = [[{k: v for k, v in json.loads(line).items() if k not in TIMES} for line in o.stdout.splitlines() if line.strip()]
               for o in (first, again)]
    equal(untimed[1], untimed[0], f"--resume: the answer of a pass with nothing left ({again.stderr[-200:]})")
    more = run(client_bin, ["--server", address], "--aggregate", "--resume", state, two, s3 + kinds[2], env=env)
    equal({k: front.seen.get("shards/" + k, 0) for k in kinds[:2]}, {k: before[k] for k in kinds[:2]},
          "--resume: the shards done not read again beside a new one")
    whole = run(client_bin, ["--server", address], "--aggregate", *[os.path.join(out_dir, k) for k in kinds[:3]])
    untimed = [[{k: v for k, v in json.loads(line).items() if k not in TIMES} for line in o.stdout.splitlines() if line.strip()]
               for o in (more, whole)]
    equal(untimed[0], untimed[1], "--resume: two shards done, a third added, against one pass over the three on disk")
    # A connection cut mid-shard is resumed; a shard replaced mid-read is DATA_LOSS, never a mixed answer.
    with open(os.path.join(out_dir, kinds[1]), "rb") as f:
        plain = f.read()
    put(front, "faults/cut/shard.tar", plain)
    put(front, "faults/replaced/shard.tar", plain)
    got = answers(run(client_bin, ["--local"], "s3://bucket/faults/cut/shard.tar", env=env), "s3://bucket/faults/cut/")
    want_cut = {n: v for n, v in local.items() if n.startswith(kinds[1] + ":")}
    equal(got, {n.replace(kinds[1], "shard.tar", 1): v for n, v in want_cut.items()}, "a shard read through a cut connection")
    if front.seen.get("cut:faults/cut/shard.tar") != 1:
        fail("shard fault cut: no connection was cut")
    out = run(client_bin, ["--local"], "s3://bucket/faults/replaced/shard.tar", env=env)
    if out.returncode == 0 or "changed while it was read" not in out.stdout + out.stderr:
        fail(f"a shard replaced while it is read: rc {out.returncode} {(out.stdout + out.stderr)[-400:]}")
    out = run(client_bin, ["--local"], s3 + "shard-999999.tar", env=env)
    if out.returncode == 0 or "NoSuchKey" not in out.stderr and "not found" not in out.stderr.lower():
        fail(f"a missing shard in a bucket: rc {out.returncode} {out.stderr[-300:]}")
    return members


def grpc_analyze(work, address):
    """Analyze by hand (the CLI sends names only where a server allows
    them): the contract's messages from protoc, a generic unary call."""
    import grpc
    out = os.path.join(work, "pb")
    os.makedirs(out, exist_ok=True)
    subprocess.run(["protoc", "-I", os.path.join(HERE, "..", "..", "proto"), "--python_out=" + out,
                    "imgstat/v1/imgstat.proto"], check=True)
    sys.path.insert(0, out)
    from imgstat.v1 import imgstat_pb2 as pb
    channel = grpc.insecure_channel(address)
    call = channel.unary_unary("/imgstat.v1.ImageStats/Analyze", request_serializer=pb.AnalyzeRequest.SerializeToString,
                               response_deserializer=pb.AnalyzeResponse.FromString)

    def analyze(url, url_range=None):
        """url_range: (offset, length, object_size, etag)."""
        rng = None
        if url_range is not None:
            rng = pb.ObjectRange(offset=url_range[0], length=url_range[1], object_size=url_range[2], etag=url_range[3])
        try:
            call(pb.AnalyzeRequest(input=pb.Input(url=url, url_range=rng)), timeout=120)
            return "OK", ""
        except grpc.RpcError as e:
            return e.code().name, e.details()
    return analyze


def grpc_lister(work, address):
    """ListObjects by hand: ([(name, size)], code name, details)."""
    import grpc
    grpc_analyze(work, address)  # the messages, made once
    from imgstat.v1 import imgstat_pb2 as pb
    channel = grpc.insecure_channel(address)
    call = channel.unary_stream("/imgstat.v1.ImageStats/ListObjects", request_serializer=pb.ListObjectsRequest.SerializeToString,
                                response_deserializer=pb.ListObjectsResponse.FromString)

    def lister(prefix):
        out = []
        try:
            for page in call(pb.ListObjectsRequest(prefix=prefix), timeout=120):
                out += [(o.name, o.size) for o in page.objects]
            return out, "OK", ""
        except grpc.RpcError as e:
            return out, e.code().name, e.details()
    return lister


def check_server_fetch(server_bin, client_bin, folder, names, want, port, cert, front, front_port, work, plain_address):
    """A server started with --fetch-allow reads the objects itself: the
    client, with neither credentials nor the certificate, sends names."""
    rules = [f"s3://bucket/dataset/", f"https://127.0.0.1:{port}/data/", f"https://127.0.0.1:{port}/away/",
             f"https://localhost:{port}/data/", "s3://bucket/many/"]
    saved = dict(os.environ)
    os.environ.update(AWS_ACCESS_KEY_ID=KEY, AWS_SECRET_ACCESS_KEY=SECRET, AWS_REGION="eu-west-3",
                      AWS_ENDPOINT_URL_S3=f"http://127.0.0.1:{front_port}", AWS_CA_BUNDLE=cert, CURL_CA_BUNDLE=cert)
    try:
        server, address = start_server(server_bin, work, "--fetch-allow", ",".join(rules), log_name="fetching.log")
    finally:
        os.environ.clear()
        os.environ.update(saved)
    bare = {k: v for k, v in os.environ.items() if not k.startswith("AWS_") and k != "CURL_CA_BUNDLE"}
    bare["AWS_ENDPOINT_URL_S3"] = "http://127.0.0.1:9"  # the client could reach nothing itself
    try:
        import urllib.parse
        for prefix in ("s3://bucket/dataset/", f"https://127.0.0.1:{port}/data/"):
            quoted = [prefix + (urllib.parse.quote(n) if prefix.startswith("https") else n) for n in names]
            out = run(client_bin, ["--server", address], *quoted, env=bare)
            got = {urllib.parse.unquote(k[len(prefix):]): v for k, v in answers(out).items()}
            equal(sorted(got), sorted(names), f"server fetch {prefix}: the objects answered")
            for n in names:
                equal(got.get(n), want[n], f"server fetch {prefix}: {n}")
        a = run(client_bin, ["--server", address], "--aggregate", *["s3://bucket/dataset/" + n for n in names], env=bare)
        b = run(client_bin, ["--server", address], "--aggregate", *[os.path.join(folder, n) for n in names])
        untimed = [[{k: v for k, v in json.loads(line).items() if k not in TIMES} for line in o.stdout.splitlines()
                    if line.strip()] for o in (a, b)]
        equal(untimed[0], untimed[1], "server fetch: --aggregate over s3:// names against the files")
        # Prefixes and patterns: listed by the server (the client has no credentials).
        a = run(client_bin, ["--server", address], "--aggregate", "s3://bucket/dataset/", env=bare)
        untimed_prefix = [{k: v for k, v in json.loads(line).items() if k not in TIMES} for line in a.stdout.splitlines()
                          if line.strip()]
        equal(untimed_prefix, untimed[1], f"server fetch: --aggregate over a prefix the server lists ({a.stderr[-200:]})")
        if "1 objects left out, not images" not in a.stderr:
            fail(f"server listing: notes.txt not said left out: {a.stderr[-300:]}")
        got = answers(run(client_bin, ["--server", address], "s3://bucket/dataset/*.png", env=bare), "s3://bucket/dataset/")
        equal(sorted(got), sorted(n for n in names if n.endswith(".png") and "/" not in n), "server listing: a pattern")
        out = run(client_bin, ["--server", address], "s3://bucket/", env=bare)  # not covered: the client lists, and cannot
        if out.returncode == 0 or "s3://bucket/" not in out.stderr:
            fail(f"server listing: a prefix outside the rules: {out.returncode} {out.stderr[-300:]}")
        lister = grpc_lister(work, address)
        listed, code, details = lister("s3://bucket/many/")
        equal((len(listed), code), (5000, "OK"), f"server listing: 5,000 keys in pages ({details})")
        equal(listed[:2], [("s3://bucket/many/k00000.txt", 1), ("s3://bucket/many/k00001.txt", 1)], "server listing: names and sizes")
        for prefix, want_code, says in (("s3://bucket/", "PERMISSION_DENIED", "--fetch-allow"),
                                        (f"https://127.0.0.1:{port}/data/", "INVALID_ARGUMENT", "HTTP has no listing"),
                                        ("s3://bucket/dataset/no-such/", "OK", "")):
            listed, code, details = lister(prefix)
            if code != want_code or says not in details or listed:
                fail(f"server listing {prefix}: {code} {details!r} {len(listed)} names, not {want_code} saying {says!r}")
        listed, code, details = grpc_lister(work, plain_address)("s3://bucket/dataset/")
        if code != "PERMISSION_DENIED" or "it fetches nothing" not in details:
            fail(f"server listing on a server without --fetch-allow: {code} {details!r}")
        analyze = grpc_analyze(work, address)
        refused = {
            "s3://bucket/faults/flaky/flaky.img": "outside what this server may fetch (--fetch-allow " + ",".join(rules),
            "https://169.254.169.254/latest/meta-data/": "outside what this server may fetch",
            f"https://127.0.0.1:{port}/data/../private/large.pgm": "outside what this server may fetch",
            f"https://127.0.0.1:{port}/data/%2e%2e/private/large.pgm": "outside what this server may fetch",
            f"https://localhost:{port}/data/large.pgm": "an internal address",
            f"https://127.0.0.1:{port}/away/large.pgm": "which no --fetch-allow rule allows",
            "file:///etc/passwd": "outside what this server may fetch",
        }
        for url, says in refused.items():
            code, details = analyze(url)
            if code != "PERMISSION_DENIED" or says not in details:
                fail(f"server fetch {url}: {code} {details!r}, not PERMISSION_DENIED saying {says!r}")
        code, details = analyze("s3://bucket/dataset/missing.png")
        equal(code, "NOT_FOUND", f"server fetch: a missing key ({details})")
        code, details = analyze("s3://bucket/dataset/large.pgm")
        equal(code, "OK", f"server fetch: served on after refusals ({details})")
        # Past --max-input-bytes: refused from the first answer's size, before the rest is read.
        os.environ.update(AWS_ACCESS_KEY_ID=KEY, AWS_SECRET_ACCESS_KEY=SECRET,
                          AWS_ENDPOINT_URL_S3=f"http://127.0.0.1:{front_port}")
        try:
            small, small_address = start_server(server_bin, work, "--fetch-allow", "s3://bucket/dataset/",
                                                "--max-input-bytes", "1000000", log_name="fetching-small.log")
        finally:
            os.environ.clear()
            os.environ.update(saved)
        before = front.seen.get("dataset/large.pgm", 0)
        code, details = grpc_analyze(work, small_address)("s3://bucket/dataset/large.pgm")
        small.terminate()
        small.wait()
        if code != "RESOURCE_EXHAUSTED" or "--max-input-bytes" not in details:
            fail(f"server fetch past --max-input-bytes: {code} {details!r}")
        equal(front.seen.get("dataset/large.pgm", 0) - before, 1, "server fetch past --max-input-bytes: requests made")
        code, details = grpc_analyze(work, plain_address)("s3://bucket/dataset/large.pgm")
        if code != "PERMISSION_DENIED" or "it fetches nothing" not in details:
            fail(f"a server without --fetch-allow: {code} {details!r}")
    finally:
        server.terminate()
        server.wait()


def main():
    server_bin, client_bin, corpus, work = sys.argv[1:5]
    for tool in ("nginx", "node", "npm", "openssl"):
        if not shutil.which(tool) and not os.path.exists("/usr/sbin/" + tool):
            print(f"skipped: no {tool} (scripts/install-deps installs it)")
            sys.exit(77)
    if not os.path.isdir(corpus):
        print(f"skipped: no corpus at {corpus}")
        sys.exit(77)
    os.makedirs(work, exist_ok=True)
    folder, names = make_folder(work, corpus)
    local = answers(run(client_bin, ["--local"], *[os.path.join(folder, n) for n in names]), folder + "/")
    equal(sorted(local), sorted(names), "the files answered")
    want = {n: local.get(n) for n in names}
    nginx, port, cert = start_nginx(work, folder)
    s3rver, front, front_port = start_s3(work)
    server, address = start_server(server_bin, work)
    try:
        check_https(client_bin, folder, names, want, port, cert, address)
        env = check_s3(client_bin, folder, names, want, front, front_port, address, work)
        check_faults(client_bin, folder, want, front, env)
        check_listing(client_bin, front, env, want, folder)
        members = check_shards(client_bin, server_bin, folder, names, front, env, port, cert, address, work)
        check_server_fetch(server_bin, client_bin, folder, names, want, port, cert, front, front_port, work, address)
    finally:
        for p in (nginx, s3rver):
            p.terminate()
            p.wait()
        front.shutdown()
        server.terminate()
        server.wait()
    finish(f"objects: {len(names)} objects by https:// and s3:// equal to their files, faults, listings; "
           f"{members} members of 4 shards in a bucket equal to the same shards on disk")


if __name__ == "__main__":
    main()
