"""tritonserver's environment: library paths first, glibc malloc settings for the stubs unless set."""

import pathlib

from tritonrt.server import environment


def test_malloc_settings_are_added_and_user_values_win(tmp_path: pathlib.Path):
    env = environment.server_environment(tmp_path, base={"LD_LIBRARY_PATH": "/opt/x"})
    assert env["MALLOC_MMAP_THRESHOLD_"] == str(32 << 20)
    assert env["MALLOC_TRIM_THRESHOLD_"] == str(256 << 20)
    assert env["LD_LIBRARY_PATH"].split(":") == [
        str(environment.python_library_dir()),
        str(tmp_path / "lib"),
        "/opt/x",
    ]
    mine = environment.server_environment(tmp_path, base={"MALLOC_TRIM_THRESHOLD_": "1000"})
    assert mine["MALLOC_TRIM_THRESHOLD_"] == "1000"
    assert mine["MALLOC_MMAP_THRESHOLD_"] == str(32 << 20)
