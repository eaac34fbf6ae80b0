"""What an export refuses with."""


class ExportError(Exception):
    """A model dp cannot take, said in words for the user (the CLI exits 2 with it)."""
