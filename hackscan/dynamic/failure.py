"""Why a dynamic run ends unproven without the candidate to blame (stage.py and its parts raise it)."""


class DynamicFailure(Exception):
    """The run cannot be completed for a reason the candidate is not known to have caused: the
    verdict becomes ``error`` (fail closed), with this message in ``report.dynamic["reason"]``."""
