"""tools/runtime_wheel.py: the runtime's wheel against the base image's glibc and machine."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.image_platform import Platform
from tools.runtime_wheel import WheelCheckError, WheelNeed, check, find_wheel, main, wheel_need

IMAGE = Platform("3.12", 39, "x86_64")


@pytest.mark.parametrize(
    ("name", "need"),
    [
        ("tritonrt-0.7.0.1-py3-none-manylinux_2_34_x86_64.whl", WheelNeed(34, "x86_64")),
        ("dist/tritonrt-0.7.0.1-cp310-abi3-manylinux_2_28_aarch64.whl", WheelNeed(28, "aarch64")),
        # A compressed tag set: the oldest glibc among its tags is what the wheel needs.
        (
            "tritonrt-1-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.manylinux_2_24_x86_64.whl",
            WheelNeed(17, "x86_64"),
        ),
        ("tritonrt-0.7.0.1-py3-none-any.whl", None),
        ("tritonrt-0.7.0.1-py3-none-linux_x86_64.whl", None),
    ],
)
def test_the_need_is_read_from_the_manylinux_tag(name: str, need: WheelNeed | None) -> None:
    assert wheel_need(name) == need


def test_a_wheel_for_an_older_or_equal_glibc_runs_in_the_image() -> None:
    for minor in (17, 39):
        message = check(Path(f"dist/tritonrt-1-py3-none-manylinux_2_{minor}_x86_64.whl"), IMAGE, "base:1")
        assert message.endswith(f"needs glibc 2.{minor} or newer; base:1 has glibc 2.39 on x86_64")


@pytest.mark.parametrize(
    ("tag", "reason"),
    [
        ("manylinux_2_40_x86_64", "needs glibc 2.40 on x86_64, but base:1 has glibc 2.39 on x86_64"),
        ("manylinux_2_17_aarch64", "needs glibc 2.17 on aarch64, but base:1 has glibc 2.39 on x86_64"),
        ("linux_x86_64", "is not a manylinux wheel: its backend library is missing"),
    ],
)
def test_a_wheel_that_cannot_run_there_is_refused_with_the_way_out(tag: str, reason: str) -> None:
    with pytest.raises(WheelCheckError, match=reason) as refused:
        check(Path(f"tritonrt-1-py3-none-{tag}.whl"), IMAGE, "base:1")
    if "manylinux_2" in tag:
        assert "TRITONRT_NATIVE_LIBRARY=<path>" in str(refused.value)


def test_dist_must_hold_exactly_one_wheel(tmp_path: Path) -> None:
    with pytest.raises(WheelCheckError, match="found 0: build it with make runtime-wheel"):
        find_wheel(tmp_path)
    (tmp_path / "tritonrt-1-py3-none-manylinux_2_17_x86_64.whl").touch()
    assert find_wheel(tmp_path).name == "tritonrt-1-py3-none-manylinux_2_17_x86_64.whl"
    (tmp_path / "tritonrt-2-py3-none-manylinux_2_17_x86_64.whl").touch()
    with pytest.raises(WheelCheckError, match="found 2"):
        find_wheel(tmp_path)


def test_the_command_removes_a_wheel_the_image_cannot_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("tools.runtime_wheel.image_platform", lambda image: IMAGE)
    good = tmp_path / "tritonrt-1-py3-none-manylinux_2_31_x86_64.whl"
    good.touch()
    assert main([str(tmp_path), "base:1"]) == 0 and good.exists()
    assert "needs glibc 2.31 or newer" in capsys.readouterr().out
    good.unlink()
    bad = tmp_path / "tritonrt-1-py3-none-manylinux_2_41_x86_64.whl"
    bad.touch()
    assert main([str(tmp_path), "base:1"]) == 1 and not bad.exists()
    assert capsys.readouterr().err.startswith("make runtime-wheel: ")
