"""The one exception type for bad input: the CLI prints it and exits non-zero, without a traceback."""


class UserError(Exception):
    """Bad input from the user (config key, file, field). The message names it and says the fix."""
