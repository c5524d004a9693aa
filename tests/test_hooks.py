"""Unit tests of the hooks: tensor specs, answer validation, rendering filters, post-generation steps."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT
from cookiecutter.environment import StrictEnvironment
from jinja2 import Environment

from hooks import answers, generate, render
from hooks.tensor_spec import MAX_ELEMENTS, TensorSpec, TensorSpecError, parse_tensor, parse_tensors

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

DEFAULTS = {
    key: value
    for key, value in json.loads((REPO_ROOT / "cookiecutter.json").read_text()).items()
    if not key.startswith("_")
}
# The defaults as cookiecutter renders them (the derived answers filled in).
GOOD = {
    **DEFAULTS,
    "project": "my-service",
    "package": "my_service",
    "model_name": "my_service",
    "framework": "numpy",
    "streaming": "no",
}
HOSTILE_TEXT = [
    'He said "hi"',
    "it's",
    "back\\slash \\n \\u0041",
    "triple \"\"\" quotes '''",
    "two\nlines\r\nand\ttab",
    "{{ cookiecutter.project }} {% raw %} {# comment #}",
    "<script>alert(1)</script> *bold* _it_ `code` [link](http://x) ![img](y) | a | # h ~s~ &amp;",
    "".join(chr(code) for code in range(0x20)) + "\x7f",
    "emoji 🚀 and ünïcödé and \u2028 line separator",
    '"); import os; os.system("touch /tmp/pwned") #',
]


# --- tensor specs -----------------------------------------------------------------------------------


def test_a_tensor_spec_parses_into_name_dtype_and_shape() -> None:
    specs = parse_tensors(" image : uint8 : 3x224x224 , mask:bool:-1x-1,text:bytes:1", "inputs")
    assert specs == [
        TensorSpec("image", "uint8", (3, 224, 224)),
        TensorSpec("mask", "bool", (-1, -1)),
        TensorSpec("text", "bytes", (1,)),
    ]
    assert [spec.numpy_type for spec in specs] == ["np.uint8", "np.bool_", "np.bytes_"]
    assert [spec.shape_literal for spec in specs] == ["(3, 224, 224)", "(-1, -1)", "(1,)"]
    assert [spec.shape_text() for spec in specs] == ["(3, 224, 224)", "(any, any)", "(1,)"]
    assert [spec.shape_text(batched=True) for spec in specs][1:] == ["(batch, any, any)", "(batch, 1)"]
    assert [spec.is_bytes for spec in specs] == [False, False, True]
    assert str(specs[0]) == "image:uint8:3x224x224"


@pytest.mark.parametrize(
    "dtype", ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
              "float32", "float64", "bytes"],
)  # fmt: skip
def test_every_supported_dtype_parses(dtype: str) -> None:
    assert parse_tensor(f"x:{dtype}:-1", "inputs").dtype == dtype


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "is empty; give at least one tensor"),
        ("   ", "is empty; give at least one tensor"),
        ("x:float32:-1,", "an item is empty (a stray comma?)"),
        ("x:float32:-1,,y:float32:1", "an item is empty (a stray comma?)"),
        ("x:float32", "is not name:dtype:shape"),
        ("x:float32:-1:extra", "is not name:dtype:shape"),
        ("x float32 -1", "is not name:dtype:shape"),
        ("2x:float32:-1", "has the name '2x'"),
        ("my-input:float32:-1", "has the name 'my-input'"),
        ("_hidden:float32:-1", "has the name '_hidden'"),
        (":float32:-1", "has the name ''"),
        ("é:float32:-1", "has the name 'é'"),
        ("a" * 33 + ":float32:-1", "1 to 32 letters, digits and underscores"),
        ("class:float32:-1", "'class', which is reserved in Python code"),
        ("self:float32:-1", "'self', which is reserved in Python code"),
        ("x:float:-1", "unknown dtype 'float' (did you mean float32?)"),
        ("x:string:-1", "unknown dtype 'string' (did you mean bytes?)"),
        ("x:flot32:-1", "unknown dtype 'flot32' (did you mean float32?)"),
        ("x:complex64:-1", "unknown dtype 'complex64'; use one of: bool, uint8"),
        ("x:float32:", "has the shape ''"),
        ("x:float32:0", "has the shape '0'"),
        ("x:float32:-2", "has the shape '-2'"),
        ("x:float32:3x", "has the shape '3x'"),
        ("x:float32:3*4", "has the shape '3*4'"),
        ("x:float32:+3", "has the shape '+3'"),
        ("x:float32:03", "has the shape '03'"),
        ("x:float32:1.5", "has the shape '1.5'"),
        ("x:float32:" + "x".join(["2"] * 9), "has 9 dimensions; at most 8"),
        ("x:float32:4096x4097", f"more than {MAX_ELEMENTS} fixed elements"),
        ("x:float32:-1,x:int32:2", "repeats the name(s) x"),
        (",".join(f"t{i}:float32:1" for i in range(17)), "17 tensors given; at most 16"),
    ],
)
def test_a_bad_tensor_spec_is_rejected_with_the_rule(text: str, fragment: str) -> None:
    with pytest.raises(TensorSpecError) as error:
        parse_tensors(text, "inputs")
    assert str(error.value).startswith("inputs: ")
    assert fragment in str(error.value)


def test_large_dynamic_dimensions_are_allowed() -> None:
    assert parse_tensor("x:float32:-1x-1x4096", "inputs").shape == (-1, -1, 4096)


# --- answers ---------------------------------------------------------------------------------------


def test_the_defaults_are_valid() -> None:
    assert answers.validate(GOOD) == []


def test_every_prompt_has_readable_text() -> None:
    config = json.loads((REPO_ROOT / "cookiecutter.json").read_text())
    assert set(config["__prompts__"]) == set(DEFAULTS)


@pytest.mark.parametrize("value", ["my-service", "svc", "a1", "fraud_detector-v2", "x" * 40])
def test_good_project_slugs(value: str) -> None:
    assert answers.check_project(value) == []


@pytest.mark.parametrize("value", ["", "My-Service", "2fast", "-svc", "svc-", "a--b", "a b", "a/b", "../x",
                                   "x" * 41, "svc;rm -rf /", "svc\n"])  # fmt: skip
def test_bad_project_slugs(value: str) -> None:
    (problem,) = answers.check_project(value)
    assert problem.startswith(f"project: {value!r} is not a valid project slug")


@pytest.mark.parametrize("value", ["my_service", "svc2", "a", "x" * 32])
def test_good_package_names(value: str) -> None:
    assert answers.check_package(value) == []


@pytest.mark.parametrize("value", ["", "My_service", "2svc", "my-service", "my.service", "_svc", "class",
                                   "x" * 33])  # fmt: skip
def test_bad_package_names(value: str) -> None:
    (problem,) = answers.check_package(value)
    assert problem.startswith(f"package: {value!r} is not a valid Python package name")


@pytest.mark.parametrize("value", ["json", "os", "typing", "numpy", "tritonrt", "loadtests", "tests", "torch"])
def test_package_names_that_shadow_an_import_are_rejected(value: str) -> None:
    (problem,) = answers.check_package(value)
    assert f"package: {value!r} is already the name of a module the service imports" in problem


@pytest.mark.parametrize("value", ["my_service", "resnet50_v1.2", "Model-X", "7b", "x" * 40])
def test_good_model_names(value: str) -> None:
    assert answers.check_model_name(value, streaming="no") == []


@pytest.mark.parametrize("value", ["", ".", "..", ".hidden", "-x", "my model", "a/b", "a:b", "é", "x" * 41])
def test_bad_model_names(value: str) -> None:
    (problem,) = answers.check_model_name(value, streaming="no")
    assert problem.startswith(f"model_name: {value!r} is not a name Triton accepts")


def test_with_streaming_the_model_name_leaves_room_for_the_stream_model() -> None:
    assert answers.check_model_name("x" * 33, streaming="yes") == []
    (problem,) = answers.check_model_name("x" * 34, streaming="yes")
    assert "use 1 to 33" in problem and "'_stream' is appended" in problem


@pytest.mark.parametrize("value", ["0", "1", "64", "65536"])
def test_good_max_batch_sizes(value: str) -> None:
    assert answers.check_max_batch_size(value) == []


@pytest.mark.parametrize("value", ["", "-1", "1.5", "abc", "65537", "007", " 8", "1e3"])
def test_bad_max_batch_sizes(value: str) -> None:
    (problem,) = answers.check_max_batch_size(value)
    assert problem.startswith(f"max_batch_size: {value!r} is out of range: use a whole number from 0")


@pytest.mark.parametrize(
    "value",
    [
        "nvcr.io/nvidia/tritonserver:25.10-py3",
        "tritonserver",
        "localhost:5000/team/triton:latest",
        "registry.example.com/a/b_c/d-e:v1.2",
        "tritonrt/tritonserver-cpu:2.52.0",
        "nvcr.io/nvidia/tritonserver@sha256:" + "a" * 64,
    ],
)
def test_good_base_images(value: str) -> None:
    assert answers.check_triton_image(value) == []


@pytest.mark.parametrize(
    "value",
    ["", "nvcr.io/NVIDIA/tritonserver:1", "image; rm -rf /", "$(whoami)", "image:tag with space", "a:b:c",
     "image`id`", "image\n", "image:" + "t" * 129, 'image"quoted"'],
)  # fmt: skip
def test_bad_base_images(value: str) -> None:
    (problem,) = answers.check_triton_image(value)
    assert problem.startswith(f"triton_image: {value!r} is not a Docker image reference")


@pytest.mark.parametrize(("field", "value"), [("framework", "tensorflow"), ("streaming", "true")])
def test_unknown_options_are_rejected(field: str, value: str) -> None:
    (problem,) = answers.check_choice(field, value)
    assert problem == f"{field}: {value!r} is not an option; choose one of: {', '.join(answers.CHOICES[field])}."


@pytest.mark.parametrize("value", HOSTILE_TEXT)
def test_hostile_free_text_is_accepted(value: str) -> None:
    assert answers.validate({**GOOD, "project_name": value, "description": value, "author": value}) == []


@pytest.mark.parametrize(
    ("field", "value", "fragment"),
    [
        ("project_name", "", "is empty; give the project a name"),
        ("project_name", " \n ", "is empty; give the project a name"),
        ("description", "x" * 501, "the answer is 501 characters long; keep it to 500"),
        ("author", "bad \udcff byte", "is not valid Unicode text"),
    ],
)
def test_unusable_free_text_is_rejected(field: str, value: str, fragment: str) -> None:
    (problem,) = answers.check_free_text(field, value)
    assert problem.startswith(f"{field}: ") and fragment in problem


def test_an_input_and_an_output_cannot_share_a_name() -> None:
    (problem,) = answers.check_tensors("x:float32:-1,y:float32:-1", "y:float32:-1")
    assert problem.startswith("outputs: y is also an input name")


def test_both_tensor_lists_are_checked() -> None:
    problems = answers.check_tensors("x:float:-1", "y:float32:0")
    assert [problem.split(":")[0] for problem in problems] == ["inputs", "outputs"]


def test_every_problem_is_reported_at_once() -> None:
    bad = {**GOOD, "project": "Bad Slug", "package": "json", "max_batch_size": "-1", "inputs": "x"}
    problems = answers.validate(bad)
    assert [problem.split(":")[0] for problem in problems] == ["project", "package", "inputs", "max_batch_size"]


def test_main_prints_the_problems_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert answers.main({**GOOD, "model_name": "my model"}) == 1
    err = capsys.readouterr().err
    assert "Cannot generate the project: 1 answer(s) need fixing." in err
    assert "  - model_name: 'my model' is not a name Triton accepts" in err
    assert answers.main(GOOD) == 0


# --- rendering -------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", HOSTILE_TEXT)
def test_toml_str_holds_any_text_exactly(value: str) -> None:
    assert tomllib.loads(f"value = {render.toml_str(value)}\n")["value"] == value


@pytest.mark.parametrize("value", HOSTILE_TEXT)
def test_markdown_is_one_line_with_markup_escaped(value: str) -> None:
    text = render.markdown(value)
    assert "\n" not in text and "\r" not in text
    unescaped = re.sub(r"\\.", "", text)  # what is left once every backslash escape is taken out
    assert not set(unescaped) & set("\\`*_[]<>!|~&#")


def test_markdown_keeps_ordinary_text_readable() -> None:
    assert render.markdown("My Service v1.2 - fast, small (and free)") == "My Service v1.2 - fast, small (and free)"
    assert render.markdown("a <b> *c*") == "a \\<b\\> \\*c\\*"


def test_one_line_collapses_every_kind_of_whitespace() -> None:
    assert render.one_line("  a\n\tb \r\n c\u2028d  ") == "a b c d"


def test_the_extension_adds_the_filters_and_the_template_root() -> None:
    env = Environment(extensions=[render.TemplateExtension])
    template = env.from_string('{{ "x:int8:2,y:bytes:-1" | tensors("inputs") | map(attribute="name") | join }}')
    assert template.render() == "xy"
    assert env.from_string("{{ 'a\"b' | toml_str }}|{{ '<x>' | markdown }}").render() == '"a\\"b"|\\<x\\>'
    assert env.globals["template_root"] == str(REPO_ROOT)


# --- the hook scripts --------------------------------------------------------------------------------


def run_hook(name: str, context: dict, cwd: Path) -> subprocess.CompletedProcess:
    """Render a hook script as cookiecutter does (its Jinja environment, this context) and run it."""
    env = StrictEnvironment(context={"cookiecutter": context}, keep_trailing_newline=True)
    env.add_extension(render.TemplateExtension)
    script = cwd / f"{name}.py"
    script.write_text(env.from_string((REPO_ROOT / "hooks" / f"{name}.py").read_text()).render(cookiecutter=context))
    return subprocess.run([sys.executable, str(script)], cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("value", HOSTILE_TEXT)
def test_the_pre_gen_hook_reads_answers_as_data_never_as_code(tmp_path: Path, value: str) -> None:
    result = run_hook("pre_gen_project", {**GOOD, "description": value, "model_name": value}, tmp_path)
    assert result.returncode == 1
    assert f"model_name: {value!r} is not a name Triton accepts" in result.stderr
    assert not Path("/tmp/pwned").exists()


def test_the_pre_gen_hook_passes_good_answers(tmp_path: Path) -> None:
    result = run_hook("pre_gen_project", GOOD, tmp_path)
    assert (result.returncode, result.stderr) == (0, "")


# --- post-generation steps -------------------------------------------------------------------------


def make_tree(root: Path, files: list[str]) -> None:
    for name in files:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(f"content of {name}")


def test_vendor_copies_the_tree_without_tests_caches_and_build_output(tmp_path: Path) -> None:
    source, destination = tmp_path / "runtime", tmp_path / "project" / "runtime"
    make_tree(source, ["pyproject.toml", "pkg/__init__.py", "pkg/sub/mod.py", "pkg/tests/data.txt",
                       "tests/test_x.py", "pkg/__pycache__/mod.cpython-311.pyc", "pkg/stale.pyc",
                       "pkg.egg-info/PKG-INFO", "build/lib/pkg/__init__.py", ".pytest_cache/v/x"])  # fmt: skip
    copied = generate.vendor(source, destination, skip=("tests",))
    assert sorted(map(str, copied)) == ["pkg/__init__.py", "pkg/sub/mod.py", "pkg/tests/data.txt", "pyproject.toml"]
    assert (destination / "pkg" / "sub" / "mod.py").read_text() == "content of pkg/sub/mod.py"
    assert not (destination / "tests").exists()


def test_the_runtime_is_vendored_with_the_backend_sources_but_no_build_output(tmp_path: Path) -> None:
    source, destination = tmp_path / "runtime", tmp_path / "project" / "runtime"
    make_tree(source, ["setup.py", "native/Cargo.toml", "native/Cargo.lock", "native/src/lib.rs",
                       "native/src/wire/mod.rs", "native/tests/golden/hello.bin", "native/tests/spec.rs",
                       "native/abi/triton/core/tritonserver.h", "native/debian_cargo.py",
                       "native/target/release/libtriton_tritonrt.so", "native/target/release/deps/x.rlib",
                       "tritonrt/__init__.py", "tritonrt/_native/libtriton_tritonrt.so",
                       "tests/test_x.py"])  # fmt: skip
    copied = generate.vendor(source, destination, skip=generate.RUNTIME_SKIPPED)
    assert sorted(map(str, copied)) == ["native/Cargo.lock", "native/Cargo.toml", "native/debian_cargo.py",
                                        "native/src/lib.rs", "native/src/wire/mod.rs", "setup.py",
                                        "tritonrt/__init__.py"]  # fmt: skip


def test_vendor_keeps_the_files_the_template_already_wrote(tmp_path: Path) -> None:
    source, destination = tmp_path / "loadtests", tmp_path / "project" / "loadtests"
    make_tree(source, ["__init__.py", "locustfile.py"])
    destination.mkdir(parents=True)
    (destination / "locustfile.py").write_text("the project's own")
    assert generate.vendor(source, destination) == [Path("__init__.py")]
    assert (destination / "locustfile.py").read_text() == "the project's own"


def test_vendor_says_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="The template has no runtime/ directory"):
        generate.vendor(tmp_path / "runtime", tmp_path / "out")


@pytest.mark.parametrize(("streaming", "kept"), [("yes", True), ("no", False)])
def test_remove_unused_drops_the_files_of_options_not_chosen(tmp_path: Path, streaming: str, kept: bool) -> None:
    make_tree(tmp_path, ["tests/test_streaming.py", "tests/test_model.py"])
    removed = generate.remove_unused(tmp_path, {"streaming": streaming})
    assert removed == ([] if kept else ["tests/test_streaming.py"])
    assert (tmp_path / "tests" / "test_streaming.py").exists() == kept
    assert (tmp_path / "tests" / "test_model.py").exists()


def test_the_answers_are_recorded_in_replay_format(tmp_path: Path) -> None:
    context = {**GOOD, "description": HOSTILE_TEXT[4], "_template": "gh:team/template", "_output_dir": "/x",
               "_repo_dir": "/y", "_checkout": None, "_commit": "0" * 40,
               "_extensions": ["hooks.render.TemplateExtension"]}  # fmt: skip
    path = generate.record_answers(tmp_path, context)
    recorded = json.loads(path.read_text(encoding="utf-8"))
    assert path.name == ".cookiecutter.json"
    assert recorded == {"cookiecutter": {key: value for key, value in context.items() if key not in
                                         {"_output_dir", "_repo_dir", "_checkout", "_commit"}}}  # fmt: skip


def test_next_steps_lead_to_a_served_request(tmp_path: Path) -> None:
    text = generate.next_steps(tmp_path, GOOD)
    for step in (f"cd {tmp_path}", "make install", "make serve", "python -m my_service.client", "make test"):
        assert step in text


def test_main_reports_a_template_without_its_runtime(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert generate.main(GOOD, template_root=tmp_path / "template", project_dir=tmp_path) == 1
    assert "Cannot finish the project: The template has no runtime/ directory" in capsys.readouterr().err


def test_the_post_gen_hook_vendors_and_records(tmp_path: Path) -> None:
    project = tmp_path / "my-service"
    make_tree(project, ["loadtests/locustfile.py", "tests/test_streaming.py"])
    result = run_hook("post_gen_project", {**GOOD, "_template": str(REPO_ROOT)}, project)
    assert result.returncode == 0, result.stderr
    assert (project / "runtime" / "tritonrt" / "__init__.py").is_file()
    assert (project / "loadtests" / "__main__.py").is_file()
    assert (project / "loadtests" / "locustfile.py").read_text() == "content of loadtests/locustfile.py"
    assert not (project / "runtime" / "tests").exists() and not (project / "loadtests" / "tests").exists()
    assert not (project / "tests" / "test_streaming.py").exists()
    assert json.loads((project / ".cookiecutter.json").read_text())["cookiecutter"]["package"] == "my_service"
    assert "Next steps:" in result.stdout
