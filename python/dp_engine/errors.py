"""What dp_engine raises: a failed command's message and exit code, as the CLI prints and returns them."""


class DpError(Exception):
    """A dp command failed: its message is the CLI's (without "error: "), exit_code the CLI's (1 an
    error, 2 a usage error: a bad setting, file or data set, 3 out of memory)."""

    def __init__(self, message, exit_code=1, remedies=""):
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
        self.remedies = remedies

    def __str__(self):
        return self.message + (("\n" + self.remedies.rstrip("\n")) if self.remedies else "")


class OutOfMemoryError(DpError):
    """A device ran out of memory (exit 3): `remedies` holds what the plan found would fit (the CLI's
    lines: a smaller batch, --recompute, a ZeRO stage, ...)."""
