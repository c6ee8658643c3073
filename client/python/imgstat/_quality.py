"""cleanvision's verdicts over a dataset from per-image quality measures, as
the CLI's --aggregate --stats quality writes its dataset_quality line
(client/quality_summary.hpp says how)."""

ISSUES = ("dark", "light", "blurry", "low_information", "odd_aspect_ratio", "grayscale")
MAX_LISTED = 1000


def dataset_quality(results):
    """{"images", "images_measured", "issues": {name: count}, "flagged":
    {name: [files]}, "odd_size": {"q1", "q3", "lower", "upper"}} over
    `results` (Results of stats="quality"; images without cleanvision's
    properties, not 8-bit, are measured but not judged)."""
    import numpy as np

    counts = {name: 0 for name in ISSUES + ("odd_size",)}
    flagged = {}
    measured = 0
    sizes = []  # (size, file), in arrival order
    for r in results:
        q = r.quality
        if q is None:
            continue
        measured += 1
        c = q.get("cleanvision")
        if not c:
            continue
        for name in ISSUES:
            if c[f"is_{name}_issue"]:
                counts[name] += 1
                listed = flagged.setdefault(name, [])
                if len(listed) < MAX_LISTED:
                    listed.append(r.file)
        sizes.append((c["size"], r.file))
    out = {"images": len(sizes), "images_measured": measured, "issues": counts, "flagged": flagged,
           "odd_size": {"q1": 0.0, "q3": 0.0, "lower": 0.0, "upper": 0.0}}
    if not sizes:
        return out
    # cleanvision's SizeProperty.get_scores, iqr_factor 3.
    q1, q3 = (float(v) for v in np.percentile([s for s, _ in sizes], [25, 75]))
    lower, upper = q1 - 3.0 * (q3 - q1), q3 + 3.0 * (q3 - q1)
    mid, gap = (lower + upper) / 2, upper - lower
    norm, threshold = (gap, 0.5) if gap > 0 else (mid, 1.0)
    odd = []
    for size, file in sorted(sizes, key=lambda e: e[0]):  # by size, as the CLI lists them
        if 1 - min(max(abs(size - mid) / norm, 0.0), 1.0) < threshold:
            counts["odd_size"] += 1
            if len(odd) < MAX_LISTED:
                odd.append(file)
    if odd:
        flagged["odd_size"] = odd
    out["odd_size"] = {"q1": q1, "q3": q3, "lower": lower, "upper": upper}
    return out
