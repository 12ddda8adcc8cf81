class FamilyInputError(ValueError):
    """A request the family's format cannot express; the message says why, `param` names the field."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param
