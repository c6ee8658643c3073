"""The one exception the package raises for a failed analysis."""


class Error(Exception):
    """An input the server (or this package, before sending) could not analyze.

    ``code`` is the gRPC status name, as the CLI prints it: ``"INVALID_ARGUMENT"``
    for an input that is not an image or has a shape no server takes,
    ``"UNAVAILABLE"`` for a server that cannot be reached, ``"UNAUTHENTICATED"``
    for a missing or wrong token, ``"RESOURCE_EXHAUSTED"`` past a limit, ...;
    ``message`` is the server's (or this package's) reason, and ``input`` names
    what failed (a path, ``"<bytes>"``, ``"<array>"``).
    """

    def __init__(self, code: str, message: str, input: "str | None" = None) -> None:
        self.code = code
        self.message = message
        self.input = input
        super().__init__(f"{input + ': ' if input else ''}{code}: {message}")

    def __reduce__(self):
        return (Error, (self.code, self.message, self.input))
