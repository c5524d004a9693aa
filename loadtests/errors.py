"""The one exception type the load-test library raises for problems a user can fix."""


class LoadTestSetupError(Exception):
    """A load test cannot start: a bad option, an unreachable server, a model or sample mismatch.

    The message says what was wrong and how to fix it; the CLI prints it and exits with status 2.

    Example::

        raise LoadTestSetupError("model_name is empty on MyUser; set model_name = '<your model>'")
    """
