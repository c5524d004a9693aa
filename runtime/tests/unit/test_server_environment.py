"""tritonserver's environment: the server's lib/ first on LD_LIBRARY_PATH, the rest as given."""

import pathlib

from tritonrt.server import environment


def test_the_server_libraries_come_first_and_nothing_else_changes(tmp_path: pathlib.Path):
    env = environment.server_environment(tmp_path, base={"LD_LIBRARY_PATH": "/opt/x", "OTHER": "1"})
    assert env["LD_LIBRARY_PATH"].split(":") == [str(tmp_path / "lib"), "/opt/x"]
    assert env["OTHER"] == "1" and set(env) == {"LD_LIBRARY_PATH", "OTHER"}
    assert environment.server_environment(tmp_path, base={})["LD_LIBRARY_PATH"] == str(tmp_path / "lib")
