"""The one error `cirrus pack` raises: its message is the whole story, shown as one line."""


class PackError(Exception):
    pass
