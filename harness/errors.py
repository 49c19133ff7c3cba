"""The one exception type for bad input: the CLI prints it and exits non-zero, without a traceback."""


class UserError(Exception):
    """Bad input from the user (config key, file, field). The message names it and says the fix."""

    exit_code = 2


class NothingScored(UserError):
    """An audit ran and wrote its rows and summary, but scored no example (every one excluded, or none
    given). Not an error when the user passed audit.allow_empty=true."""

    exit_code = 3
