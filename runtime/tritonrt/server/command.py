"""Build tritonserver's command line from a TritonConfig (only the fields that are set)."""

from __future__ import annotations

import pathlib

from tritonrt.server.config import TritonConfig

__all__ = ["SERVER_EXIT_TIMEOUT_S", "config_flags", "server_command"]

# tritonrt decides these itself; user values for them are applied elsewhere: model_repository by Triton,
# exit_timeout_secs by tritonrt's own drain (tritonrt.server.drain).
_MANAGED = {"model_repository", "exit_timeout_secs"}
SERVER_EXIT_TIMEOUT_S = 0
"""tritonserver's own ``--exit-timeout-secs``: tritonrt drains the models before it signals the server
(tritonrt.server.drain), so Triton has nothing left to wait for; with more, it would wait for idle keep-alive
connections (they never close by themselves), up to this long."""


def _format(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, pathlib.Path):
        return value.as_posix()
    return str(value)


def config_flags(config: TritonConfig) -> list[str]:
    """``--flag=value`` for each set field; list fields repeat their flag."""
    flags = []
    for name, value in config.to_dict().items():
        if value is None or name in _MANAGED:
            continue
        flag = "--" + name.replace("_", "-")
        for item in value if isinstance(value, list) else [value]:
            flags.append(f"{flag}={_format(item)}")
    return flags


def server_command(
    server_dir: pathlib.Path,
    config: TritonConfig,
    model_repository: pathlib.Path,
    extra_flags: list[str],
) -> list[str]:
    """The full argv for tritonserver."""
    command = [
        str(server_dir / "bin" / "tritonserver"),
        f"--model-repository={model_repository}",
        f"--backend-directory={server_dir / 'backends'}",
        "--model-control-mode=explicit",
    ]
    if config.cache_directory is None and (server_dir / "caches").is_dir():
        command.append(f"--cache-directory={server_dir / 'caches'}")
    drain = SERVER_EXIT_TIMEOUT_S if config.exit_timeout_secs is None else config.exit_timeout_secs
    command.append(f"--exit-timeout-secs={min(drain, SERVER_EXIT_TIMEOUT_S)}")
    return command + config_flags(config) + extra_flags
