"""The one exception type the runner raises for problems a user can fix."""


class CcplabError(Exception):
    """Bad input or an unusable machine: the message says what and where.

    The CLI prints the message (no traceback) and exits with status 2.
    """
