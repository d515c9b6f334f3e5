"""Process exit codes of the ``geoconsole`` command, documented in the README."""

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    #: The command ran but its result is a failure (a selftest check, a failed rank).
    FAILED = 1
    #: Bad input: a malformed file, flag or value. The message names it.
    USAGE = 2
    #: Remote trouble: hosts unreachable, refused host keys, probe or launch errors.
    REMOTE = 3
    #: Interrupted by the operator (Ctrl-C); partial results were kept.
    INTERRUPTED = 130
