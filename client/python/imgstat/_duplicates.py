"""Exact and near duplicates over results with hashes, as the CLI's
--aggregate --duplicates groups them (client/duplicates.hpp says how)."""


def find_duplicates(results, distance=4):
    """Groups of files among `results` (Results of stats="hashes", or
    (name, hashes dict) pairs): {"exact": [[names]], "near": [[names]]}.
    exact: equal pixel hashes; near: phashes within `distance` bits (0 to
    16), joined transitively, each exact group once, a group of at least two
    different images. Pairs are found by a multi-index, not by comparing
    every pair."""
    if not isinstance(distance, int) or isinstance(distance, bool) or not 0 <= distance <= 16:
        from ._errors import Error
        raise Error("INVALID_ARGUMENT", f"distance must be 0 to 16 bits; got {distance!r}")
    items = []
    for r in results:
        name, h = (r.file, r.hashes) if hasattr(r, "hashes") else r
        if h:
            items.append((name, h["pixels"], int(h["phash"], 16) if "phash" in h else None))
    parent = list(range(len(items)))

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def join(a, b):
        a, b = find(a), find(b)
        if a != b:
            parent[max(a, b)] = min(a, b)

    first = {}
    same = []
    for i, (_, pixels, _) in enumerate(items):
        same.append(first.setdefault(pixels, i))
        if same[i] != i:
            join(same[i], i)

    def groups_of(members):
        by_root = {}
        for i in members:
            by_root.setdefault(find(i), []).append(i)
        return [g for g in by_root.values() if len(g) > 1]

    exact = [[items[i][0] for i in g] for g in groups_of(range(len(items)))]
    nodes = [i for i in range(len(items)) if same[i] == i and items[i][2] is not None]
    parent = list(range(len(items)))
    by_phash = {}
    for i in nodes:
        j = by_phash.setdefault(items[i][2], i)
        if j != i:
            join(j, i)
    distinct = list(by_phash.items())
    if distance and len(distinct) > 1:
        blocks = distance + 1
        offset = 0
        for b in range(blocks):
            width = 64 // blocks + (1 if b < 64 % blocks else 0)
            mask = (1 << width) - 1
            bucket = {}
            for value, node in distinct:
                seen = bucket.setdefault((value >> offset) & mask, [])
                for other, other_node in seen:
                    if bin(value ^ other).count("1") <= distance:
                        join(node, other_node)
                seen.append((value, node))
            offset += width
    copies = {}
    for i in range(len(items)):
        copies.setdefault(same[i], []).append(i)
    near = [[items[i][0] for n in g for i in copies[n]] for g in groups_of(nodes)]
    return {"exact": exact, "near": near}
