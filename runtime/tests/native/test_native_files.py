"""The files a model of backend "tritonrt" carries: the library and the connection file."""

from __future__ import annotations

import os
import stat

import pytest

from tritonrt.proxy import native_files


def test_the_connection_file_is_private_and_lists_every_instance(tmp_path):
    sockets = [tmp_path / "a.sock", tmp_path / "b.sock"]
    token = native_files.new_token()
    path = native_files.write_connection_file(tmp_path, sockets, token)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert path.read_text().splitlines() == [
        "tritonrt-connection 1",
        f"token {token}",
        "instances 2",
        f"socket 0 {sockets[0]}",
        f"socket 1 {sockets[1]}",
    ]
    assert len(token) == 64 and int(token, 16) >= 0
    before = os.stat(path).st_ino
    native_files.write_connection_file(tmp_path, sockets[:1], token)
    assert os.stat(path).st_ino != before, "replaced by a rename, never rewritten in place"
    assert [p.name for p in tmp_path.iterdir()] == [native_files.CONNECTION_FILE]


@pytest.mark.parametrize("bad", ["relative.sock", "/" + "x" * 120, "/tmp/a\nsocket 1 /evil"])
def test_a_socket_path_the_backend_cannot_use_is_refused(tmp_path, bad):
    from pathlib import Path

    with pytest.raises(ValueError, match="absolute path of at most 107 bytes"):
        native_files.write_connection_file(tmp_path, [Path(bad)], native_files.new_token())


def test_the_library_is_replaced_by_a_rename_never_rewritten_in_place(native_library, tmp_path):
    """tritonserver maps the library it loaded: writing into that file crashes it, renaming over it does not."""
    first = native_files.install_library(tmp_path)
    inode = os.stat(first).st_ino
    second = native_files.install_library(tmp_path)
    assert second == first and os.stat(second).st_ino != inode
    assert first.read_bytes() == native_library.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == [native_files.LIBRARY_NAME]


def test_a_missing_library_says_how_to_get_one(monkeypatch, tmp_path):
    monkeypatch.setenv("TRITONRT_NATIVE_LIBRARY", str(tmp_path / "nope.so"))
    with pytest.raises(FileNotFoundError, match="cargo build --release"):
        native_files.library_path()
