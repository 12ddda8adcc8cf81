"""The one error the evaluation tools raise: its message names what was wrong, for a one-line report."""


class EvalError(RuntimeError):
    pass
