"""What every module shares: the version, exit statuses and the one error type."""

VERSION = "0.1.0"  # GPUCACHE_VERSION in include/gpucache.h
SCHEMA_VERSION = 1

EXIT_OK, EXIT_EXCEEDED, EXIT_USAGE = 0, 1, 2


class CliError(Exception):
    """A clear one-line error: printed as 'gpucache: MESSAGE', then exit with `code`."""

    def __init__(self, message, code=EXIT_USAGE):
        super().__init__(message)
        self.code = code
