"""Where the model's files come from: the packaged weights/ folder (also in the wheel), or MODEL_DIR."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import PACKAGE, PROJECT_DIR

from {{ cookiecutter.package }} import model_files
from {{ cookiecutter.package }}.model_files import MODEL_DIR_VARIABLE, model_dir, model_file

__all__: list[str] = []

WEIGHTS = PROJECT_DIR / "src" / PACKAGE / "weights"


def files_of(directory: Path) -> dict[str, bytes]:
    """Every file under ``directory`` (its path relative to it, POSIX style) and its contents."""
    return {path.relative_to(directory).as_posix(): path.read_bytes() for path in sorted(directory.rglob("*"))
            if path.is_file()}  # fmt: skip


def test_the_files_are_the_installed_weights_folder_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(MODEL_DIR_VARIABLE, raising=False)
    installed = model_dir()
    assert installed == Path(model_files.__file__).parent / "weights"
    assert files_of(installed) == files_of(WEIGHTS)


def test_every_weights_file_is_in_the_wheel(tmp_path: Path) -> None:
    # The image installs the service's wheel: a file missing from it is missing in the image.
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--wheel-dir", str(tmp_path), str(PROJECT_DIR)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    (wheel,) = tmp_path.glob("*.whl")
    prefix = f"{PACKAGE}/weights/"
    names = zipfile.ZipFile(wheel).namelist()
    packaged = {name.removeprefix(prefix) for name in names if name.startswith(prefix)}
    assert packaged == set(files_of(WEIGHTS))


def test_model_dir_replaces_the_packaged_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "large.bin").write_bytes(b"weights")
    monkeypatch.setenv(MODEL_DIR_VARIABLE, str(tmp_path))
    assert model_file("large.bin") == tmp_path / "large.bin"


def test_a_model_dir_that_is_no_directory_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MODEL_DIR_VARIABLE, str(tmp_path / "not-mounted"))
    with pytest.raises(FileNotFoundError, match=f"{MODEL_DIR_VARIABLE}=.*not-mounted.*mount the volume"):
        model_file("model.npz")


def test_a_missing_file_says_where_to_put_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(MODEL_DIR_VARIABLE, raising=False)
    with pytest.raises(FileNotFoundError, match=f"'missing.npz' is missing .* src/{PACKAGE}/weights/"):
        model_file("missing.npz")
