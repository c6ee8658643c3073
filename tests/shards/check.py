#!/usr/bin/python3
"""Datasets in archives: tar shards (ustar, GNU and pax headers; gzip, xz,
bzip2 and zstd), zip files (stored and deflated) and WebDataset brace ranges,
through imgstat-client --local and a live server, against the same files
unpacked in a folder.

    check.py SERVER_BIN CLIENT_BIN CORPUS WORK

The files are corpus images (a spread of formats, good and bad) and a large
one (streamed from where it lies in an uncompressed tar), named as
WebDataset names them (KEY.EXT, members that share a key), with members
that are no images (.json, .cls), a folder, a long name, an empty member.
Every answer from an archive is the folder's answer, byte for byte in
--json but for its name (ARCHIVE:MEMBER); --aggregate too. WebDataset keys:
each image's label or mask image beside it (--labels .seg.png), in a shard,
a zip and the folder, as each pair named apart. Then what an
archive may do wrong: a member declaring more bytes than the archive holds,
a compressed member past what is held in memory (a zip bomb), a member that
decompresses past its declared size, a file that is no archive, an empty
archive: clear errors by status name, the other members answered.
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tarfile
import zipfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from large_image import write_large_pgm  # noqa: E402
from live_server import start_server  # noqa: E402
from verdicts import equal, fail, finish  # noqa: E402

TIMES = ("decode_ms", "compute_ms")  # how long it took: the one thing that differs
EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".pgm", ".ppm", ".pnm", ".webp")


def corpus_files(corpus):
    found = []
    for folder in sorted(os.listdir(corpus)):
        path = os.path.join(corpus, folder)
        if not os.path.isdir(path):
            continue
        for name in sorted(os.listdir(path)):
            if name.lower().endswith(EXTENSIONS):
                found.append(os.path.join(path, name))
    return found[::5]  # a spread of every folder's formats, good and bad


def make_folder(work, corpus):
    """The dataset unpacked: KEY.EXT files (and KEY.json, KEY.cls beside
    some), one in a subfolder, one with a long name, one large, one empty."""
    folder = os.path.join(work, "unpacked")
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(os.path.join(folder, "sub"))
    names = []
    for k, src in enumerate(corpus_files(corpus)):
        ext = os.path.splitext(src)[1].lower()
        key = f"{k:06d}"
        name = ("sub/" if k == 3 else "") + key + ext
        shutil.copyfile(src, os.path.join(folder, name))
        names.append(name)
        if k % 4 == 0:
            with open(os.path.join(folder, key + ".json"), "w") as f:
                json.dump({"key": key, "source": os.path.basename(src)}, f)
            with open(os.path.join(folder, key + ".cls"), "w") as f:
                f.write(str(k % 7))
    long_name = "a-folder-whose-name-is-long/" * 5 + "an-image-whose-name-is-longer-than-a-ustar-header-holds.png"
    os.makedirs(os.path.dirname(os.path.join(folder, long_name)))
    shutil.copyfile(os.path.join(folder, names[1]), os.path.join(folder, long_name))
    names.append(long_name)
    # Large: streamed from an uncompressed tar (past the client's one-message size).
    write_large_pgm(os.path.join(folder, "large.pgm"))
    names.append("large.pgm")
    open(os.path.join(folder, "empty.png"), "wb").close()
    names.append("empty.png")
    return folder, names


def members(folder):
    """Every file under the folder, by its relative name, sorted."""
    out = []
    for root, _, files in os.walk(folder):
        for f in files:
            out.append(os.path.relpath(os.path.join(root, f), folder))
    return sorted(out)


def write_tar(path, folder, names, mode="w", fmt=tarfile.PAX_FORMAT, with_dir=True):
    with tarfile.open(path, mode, format=fmt) as t:
        if with_dir:
            t.add(os.path.join(folder, "sub"), arcname="sub", recursive=False)
        for n in names:
            t.add(os.path.join(folder, n), arcname=n)


def write_zip(path, folder, names, compression):
    with zipfile.ZipFile(path, "w", compression=compression) as z:
        z.write(os.path.join(folder, "sub"), arcname="sub/")
        for n in names:
            z.write(os.path.join(folder, n), arcname=n)


def run(client_bin, where, *args):
    return subprocess.run([client_bin, *where, "--json", *args], capture_output=True, text=True, timeout=900)


def by_member(out, archive):
    """The JSON lines of an archive's answers by member name, "file" taken out."""
    got = {}
    for line in out.stdout.splitlines():
        if not line.strip():
            continue
        obj = json.loads(line)
        name = obj.get("file", "")
        if archive is not None:
            if not name.startswith(archive + ":"):
                fail(f"{archive}: an answer named {name!r}")
                continue
            name = name[len(archive) + 1:]
        for key in ("file",) + TIMES:
            obj.pop(key, None)
        got[name] = json.dumps(obj, sort_keys=False)
    return got


def check_archive(client_bin, where, folder_answers, archive, expect, what, *args):
    out = run(client_bin, where, *args, archive)
    got = by_member(out, archive)
    equal(sorted(got), sorted(expect), f"{what}: the members answered")
    for name in expect:
        if name in got:
            equal(got[name], folder_answers[name], f"{what}: {name}'s answer")
    return out


def check_keys(client_bin, work, archives):
    """WebDataset keys: each image's label image beside it (KEY.ppm and
    KEY.seg.png), by --labels .seg.png in a shard and in the folder, as
    each pair named apart; --mask .mask.png; a key without its map. The
    images are chosen by --extensions .ppm (the other maps are images too)."""
    from PIL import Image
    rng = np.random.default_rng(51)
    keyed = os.path.join(work, "keyed")
    shutil.rmtree(keyed, ignore_errors=True)
    os.makedirs(keyed)
    keys = [f"{k:06d}" for k in range(5)]
    for k in keys:
        h, w = (int(v) for v in rng.integers(3, 60, 2))
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(os.path.join(keyed, k + ".ppm"))
        Image.fromarray(rng.integers(0, 4, (h, w), dtype=np.uint8)).save(os.path.join(keyed, k + ".seg.png"))
        Image.fromarray((rng.integers(0, 2, (h, w)) * 255).astype(np.uint8)).save(os.path.join(keyed, k + ".mask.png"))
        with open(os.path.join(keyed, k + ".json"), "w") as f:
            f.write("{}")
    os.remove(os.path.join(keyed, keys[-1] + ".seg.png"))  # a key without its label image
    shard = os.path.join(archives, "keyed.tar")
    write_tar(shard, keyed, sorted(os.listdir(keyed)), with_dir=False)
    zipped = os.path.join(archives, "keyed.zip")
    with zipfile.ZipFile(zipped, "w") as z:
        for n in sorted(os.listdir(keyed)):
            z.write(os.path.join(keyed, n), arcname=n)
    local = ["--local"]
    for flag, ext, with_map in (("--labels", ".seg.png", keys[:-1]), ("--mask", ".mask.png", keys)):
        want = {}
        for k in with_map:
            out = run(client_bin, local, flag, os.path.join(keyed, k + ext), os.path.join(keyed, k + ".ppm"))
            want[k + ".ppm"] = by_member(out, None)[os.path.join(keyed, k + ".ppm")]
        for archive in (shard, zipped, keyed):
            out = run(client_bin, local, flag, ext, "--extensions", ".ppm", archive)
            got = by_member(out, archive if archive != keyed else None)
            if archive == keyed:
                got = {os.path.relpath(k, keyed): v for k, v in got.items()}
            equal(sorted(got), [k + ".ppm" for k in keys], f"{flag} {ext} {archive}: the inputs (maps are none)")
            for name, line in want.items():
                equal(got.get(name), line, f"{flag} {ext} {archive}: {name}")
            if with_map != keys:
                missing = json.loads(got.get(keys[-1] + ".ppm", "{}"))
                if missing.get("code") != "NOT_FOUND" or ".seg.png beside it" not in missing.get("error", ""):
                    fail(f"{flag} {ext} {archive}: a key without its map: {missing}")
            members = len(os.listdir(keyed))
            left_out = members - len(keys) - len(with_map)  # the .json and the other maps; this map is used
            if archive != keyed and f"{left_out} of its {members} members left out" not in out.stderr:
                fail(f"{flag} {ext} {archive}: not {left_out} of {members} said left out: {out.stderr[-300:]}")
    a = run(client_bin, local, "--aggregate", "--labels", ".seg.png", "--extensions", ".ppm", shard)
    b = run(client_bin, local, "--aggregate", "--labels", ".seg.png", *[os.path.join(keyed, k + ".ppm") for k in keys[:-1]])
    untimed = [[{k: v for k, v in json.loads(line).items() if k not in TIMES} for line in o.stdout.splitlines()
                if line.strip()] for o in (a, b)]
    equal(untimed[0], untimed[1], "--aggregate --labels .seg.png over a shard against its files")


def main():
    server_bin, client_bin, corpus, work = sys.argv[1:5]
    os.makedirs(work, exist_ok=True)
    folder, names = make_folder(work, corpus)
    images = sorted(names)
    every = members(folder)
    local = ["--local"]

    # The folder's answers: what every archive must give (--bytes: of every file).
    out = run(client_bin, local, *[os.path.join(folder, n) for n in images])
    folder_answers = {os.path.relpath(k, folder): v for k, v in by_member(out, None).items()}
    equal(sorted(folder_answers), images, "the folder's answers")
    out = run(client_bin, local, "--bytes", *[os.path.join(folder, n) for n in every])
    folder_bytes = {os.path.relpath(k, folder): v for k, v in by_member(out, None).items()}

    archives = os.path.join(work, "archives")
    shutil.rmtree(archives, ignore_errors=True)
    os.makedirs(archives)
    made = {}
    for label, fmt in (("pax", tarfile.PAX_FORMAT), ("gnu", tarfile.GNU_FORMAT)):
        made[f"{label}.tar"] = lambda p, fmt=fmt: write_tar(p, folder, every, "w", fmt)
    made["ustar.tar"] = lambda p: write_tar(p, folder, [n for n in every if len(n) < 100], "w", tarfile.USTAR_FORMAT)
    made["set.tar.gz"] = lambda p: write_tar(p, folder, every, "w:gz")
    made["set.tgz"] = lambda p: write_tar(p, folder, every, "w:gz")
    made["set.tar.xz"] = lambda p: write_tar(p, folder, every, "w:xz")
    made["set.tar.bz2"] = lambda p: write_tar(p, folder, every, "w:bz2")
    made["stored.zip"] = lambda p: write_zip(p, folder, every, zipfile.ZIP_STORED)
    made["deflated.zip"] = lambda p: write_zip(p, folder, every, zipfile.ZIP_DEFLATED)
    for name, make in made.items():
        make(os.path.join(archives, name))
    if shutil.which("zstd"):
        subprocess.run(["zstd", "-q", "-f", "-3", os.path.join(archives, "pax.tar"), "-o",
                        os.path.join(archives, "set.tar.zst")], check=True)
        made["set.tar.zst"] = None

    # Each archive, --local: every image member, answered as its file.
    for name in made:
        archive = os.path.join(archives, name)
        expect = [n for n in images if name != "ustar.tar" or len(n) < 100]
        out = check_archive(client_bin, local, folder_answers, archive, expect, name)
        left_out = sum(1 for n in every if not n.endswith(EXTENSIONS) and (name != "ustar.tar" or len(n) < 100))
        if f"{left_out} of its" not in out.stderr or "left out" not in out.stderr:
            fail(f"{name}: the members left out are not said ({left_out}): {out.stderr[-400:]}")
        # An empty member is the empty file's answer (an error): exit 1 as for the folder.
        equal(out.returncode, 1, f"{name}: exit status with one empty image")

    # --bytes: every member, the .json and .cls too; --extensions: those only.
    pax = os.path.join(archives, "pax.tar")
    check_archive(client_bin, local, folder_bytes, pax, every, "pax.tar --bytes", "--bytes")
    out = run(client_bin, local, "--extensions", ".png,.PGM", pax)
    got = by_member(out, pax)
    equal(sorted(got), [n for n in images if n.lower().endswith((".png", ".pgm"))], "--extensions .png,.PGM")

    # A live server: small members in one message, the large one streamed
    # from where it lies (an uncompressed tar) or from memory (gzip, zip).
    server, address = start_server(server_bin, work)
    try:
        remote = ["--server", address]
        out = run(client_bin, remote, *[os.path.join(folder, n) for n in images])
        served = {os.path.relpath(k, folder): v for k, v in by_member(out, None).items()}
        for name in ("pax.tar", "set.tar.gz", "deflated.zip", "stored.zip"):
            check_archive(client_bin, remote, served, os.path.join(archives, name), images, name + " (server)")
        # Brace ranges over shards, as WebDataset names them; in order.
        shard_names = []
        for s in range(4):
            part = images[s::4]
            p = os.path.join(archives, f"shard-{s:06d}.tar")
            write_tar(p, folder, part, with_dir=False)
            shard_names += [(p, n) for n in part]
        out = run(client_bin, remote, os.path.join(archives, "shard-{000000..000003}.tar"))
        order = [json.loads(line)["file"] for line in out.stdout.splitlines() if line.strip()]
        equal(order, [f"{p}:{n}" for p, n in shard_names], "shard-{000000..000003}.tar: the inputs, in order")
        # --aggregate over the shards is the folder's, byte for byte.
        a = run(client_bin, remote, "--aggregate", os.path.join(archives, "shard-{000000..000003}.tar"))
        b = run(client_bin, remote, "--aggregate", *[os.path.join(folder, n) for n in images])
        # Each kind of image merged apart, the kinds in the order first met (which differs).
        untimed = [sorted((json.dumps({k: v for k, v in json.loads(line).items() if k not in TIMES})
                           for line in out.stdout.splitlines() if line.strip())) for out in (a, b)]
        equal(untimed[0], untimed[1], "--aggregate over four shards against the folder")
        if not a.stdout.strip():
            fail("--aggregate over four shards answered nothing: " + a.stderr[-400:])
    finally:
        server.terminate()
        server.wait(timeout=30)

    # A server on this host with a region socket: a plain tar's members of
    # 1 MiB or more are read by the server where they lie in the archive
    # (a region of it, as a file is), not sent; the answers the same.
    sock = os.path.join(work, "regions.sock")
    server, address = start_server(server_bin, work, "--region-socket", sock, log_name="server-regions.log")
    try:
        remote = ["--server", address]
        out = run(client_bin, remote, *[os.path.join(folder, n) for n in images])
        served = {os.path.relpath(k, folder): v for k, v in by_member(out, None).items()}
        check_archive(client_bin, remote, served, pax, images, "pax.tar (server, regions)")
    finally:
        server.terminate()
        server.wait(timeout=30)
    large = [n for n in images if os.path.getsize(os.path.join(folder, n)) >= 1 << 20]
    registered = open(os.path.join(work, "server-regions.log")).read().count("RegisterRegion id=")
    if not large:
        fail("the folder holds no image of 1 MiB or more: the region path is not tried")
    equal(registered, 2 * len(large), "regions registered: each large file, then each large member of pax.tar")

    check_keys(client_bin, work, archives)

    # What an archive may do wrong (beside a member the folder answers).
    good = next(n for n in images if '"ok": true' in folder_answers[n] and "/" not in n)
    # A member declaring more than the archive holds: the tar cut inside it.
    cut = os.path.join(archives, "cut.tar")
    write_tar(cut, folder, [good, "large.pgm"], with_dir=False)
    with open(cut, "r+b") as f:
        f.truncate(os.path.getsize(cut) - 4 * 1024 * 1024)
    out = run(client_bin, local, cut)
    got = {json.loads(line)["file"]: json.loads(line) for line in out.stdout.splitlines() if line.strip()}
    equal(got.get(cut + ":" + good, {}).get("code"), None, "cut.tar: the whole member is answered")
    equal(got.get(cut + ":large.pgm", {}).get("code"), "DATA_LOSS", "cut.tar: the member cut short")
    if "damaged" not in out.stderr or out.returncode == 0:
        fail(f"cut.tar: the damage is not said: exit {out.returncode}, {out.stderr[-400:]}")

    # A zip bomb: a deflated member past what is held (kMaxHeldMemberBytes).
    bomb = os.path.join(archives, "bomb.zip")
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as z:
        with z.open("zeros.pgm", "w", force_zip64=True) as f:
            f.write(b"P5\n32768 20480\n255\n")
            chunk = bytes(1 << 24)
            for _ in range(40):
                f.write(chunk)
        z.write(os.path.join(folder, good), arcname=good)
    out = run(client_bin, local, bomb)
    got = {json.loads(line)["file"]: json.loads(line) for line in out.stdout.splitlines() if line.strip()}
    equal(got.get(bomb + ":zeros.pgm", {}).get("code"), "RESOURCE_EXHAUSTED", "bomb.zip: the large member")
    equal(got.get(bomb + ":" + good, {}).get("code"), None, "bomb.zip: the other member is answered")

    # A member that decompresses past the size its headers declare.
    liar = os.path.join(archives, "liar.zip")
    data = open(os.path.join(folder, "large.pgm"), "rb").read()[:200000]
    with zipfile.ZipFile(liar, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("liar.pgm", data)
    raw = bytearray(open(liar, "rb").read())
    local_at = raw.find(b"PK\x03\x04")
    central_at = raw.find(b"PK\x01\x02")
    struct.pack_into("<I", raw, local_at + 22, 1000)
    struct.pack_into("<I", raw, central_at + 24, 1000)
    open(liar, "wb").write(bytes(raw))
    out = run(client_bin, local, liar)
    got = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    equal([g.get("code") for g in got], ["DATA_LOSS"], "liar.zip: a member longer than declared")

    # No archive, and an empty one: said, exit 1.
    bogus = os.path.join(archives, "bogus.tar")
    with open(bogus, "wb") as f:
        f.write(os.urandom(5000))
    out = run(client_bin, local, bogus)
    if out.returncode == 0 or "bogus.tar (" not in out.stderr:
        fail(f"bogus.tar: exit {out.returncode}, {out.stderr[-300:]}")
    empty = os.path.join(archives, "empty.tar")
    tarfile.open(empty, "w").close()
    out = run(client_bin, local, empty)
    if out.returncode == 0 or "an empty archive" not in out.stderr:
        fail(f"empty.tar: exit {out.returncode}, {out.stderr[-300:]}")

    finish(f"{len(made)} archives of {len(images)} images (and {len(every) - len(images)} other members) "
           "answered as the folder, by --local and a server; brace ranges, --aggregate, --bytes, --extensions; "
           "WebDataset keys' --labels .seg.png and --mask .mask.png in shards, zips and the folder; "
           "a cut tar, a zip bomb, a lying zip, no archive, an empty one")


if __name__ == "__main__":
    main()
