"""The numpy-checking scripts' verdicts: each failure printed as it is met
and kept in `failures`, for the script's exit status."""
import sys

failures = []


def fail(what):
    failures.append(what)
    print("FAIL:", what)


def equal(got, want, what):
    if got != want:
        fail(f"{what}: got {str(got)[:200]}, numpy {str(want)[:200]}")


def close(got, want, rel, what):
    if got is None or not (abs(got - want) <= rel * abs(want) + 1e-300):
        fail(f"{what}: got {got!r}, numpy {want!r}")


def finish(done):
    """Exit 1 after any failure, else print what was checked."""
    if failures:
        print(f"{len(failures)} failures")
        sys.exit(1)
    print(done)


def corpus_dir():
    """The test corpus: $IMGSTAT_CORPUS, else ../shared/corpus beside the checkout."""
    import os
    here = os.path.dirname(os.path.abspath(__file__))
    return os.environ.get("IMGSTAT_CORPUS", os.path.join(here, "..", "..", "..", "shared", "corpus"))
