"""settings/esc_environment.py: the config an imported ESC environment gives `pulumi up`, offline.

The judge is the pinned CLI itself (tests/engine.py `esc_config`, tools/engine/pulumi/escconfig):
its ESC evaluator opens each environment as `pulumi env open NAME --format detailed` prints it, and
its config merge and checks give what `pulumi up` hands the program. The offline plan is handed the
opened environments and must reach the same config, for environments and stack files hypothesis
makes up; the refusals are judged on their own.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plan import engine as offline
from settings import esc_environment
from settings.esc_environment import EscValuesError
from settings.stack_file import StackFileError
from tests.engine import esc_config

ROOT = Path(__file__).resolve().parent.parent
SECRET_PREFIX = "s3cr3t-"

# Keys an environment may set. None has a bare and a namespaced spelling at once (that is a
# refusal of its own, test_a_key_set_twice_by_its_two_spellings_is_refused); tpu-slicing:zone is the
# project's required string (Pulumi.yaml), so it is always a string.
ENV_KEYS = ("zone", "gcp:project", "gcp:region", "tpu-slicing:obj", "tpu-slicing:list", "hfToken")
NAMES = ("team/base", "team/prod", "team/extra")

words = st.text(alphabet="abcdefgh-", min_size=1, max_size=6).filter(lambda w: not w.startswith("-"))
secrets = words.map(lambda w: {"fn::secret": SECRET_PREFIX + w})
# Numbers as the CLI writes them back (an int64 or a float64): ints, big ints, floats with and without
# a fraction, an exponent past Go's plain notation.
numbers = st.one_of(st.integers(-5, 5), st.sampled_from([1.5, 2.0, 0.1, 1.5e20, 1e21, 2**70]))
scalars = st.one_of(words, numbers, st.booleans(), secrets)
leaves = st.recursive(
    scalars,
    lambda inner: st.one_of(st.dictionaries(st.sampled_from("abcd"), inner, max_size=3), st.lists(inner, max_size=2)),
    max_leaves=6,
)


def _value(key: str) -> st.SearchStrategy[Any]:
    return st.one_of(words, secrets) if key in ("zone", "hfToken") else leaves


@st.composite
def environments(draw: st.DrawFn) -> dict[str, Any]:
    """Up to three environments, each maybe importing an earlier one, and a stack importing some."""
    defined: dict[str, str] = {}
    for index, name in enumerate(NAMES[: draw(st.integers(1, 3))]):
        keys = draw(st.lists(st.sampled_from(ENV_KEYS), unique=True, max_size=4))
        document: dict[str, Any] = {"values": {"pulumiConfig": {k: draw(_value(k)) for k in keys}}}
        if index and draw(st.booleans()):
            document["imports"] = [NAMES[draw(st.integers(0, index - 1))]]
        if draw(st.booleans()):
            document["values"]["region"] = draw(words)
        defined[name] = yaml.safe_dump(document, sort_keys=False)
    imported = draw(st.lists(st.sampled_from(sorted(defined)), unique=True, min_size=1))
    stack_keys = draw(st.lists(st.sampled_from(("gcp:project", "tpu-slicing:obj", "tpu-slicing:list")), unique=True))
    config: dict[str, Any] = {key: _plain_for_stack(draw(leaves)) for key in stack_keys}
    config["tpu-slicing:zone"] = draw(words)  # the project requires it (Pulumi.yaml)
    if draw(st.booleans()):
        config["hfToken"] = {"secure": base64.b64encode(b"s3cr3t-stack").decode()}
    return {"environments": defined, "imports": imported, "config": config}


def _plain_for_stack(value: Any) -> Any:
    """A stack file has no fn::secret: its secrets are `secure:` values. Its floats and integers past
    int64 are left out: how the CLI writes those of a stack file back as text (`2.0` reaches the
    program as `2`) is the stack-file reader's business, not the merge's."""
    if isinstance(value, float) or (isinstance(value, int) and not -(1 << 63) <= value < (1 << 63)):
        return 7
    if isinstance(value, dict) and set(value) == {"fn::secret"}:
        return {"secure": base64.b64encode(value["fn::secret"].encode()).decode()}
    if isinstance(value, dict):
        return {k: _plain_for_stack(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain_for_stack(v) for v in value]
    return value


def _redacted(value: Any) -> Any:
    if isinstance(value, str) and value.startswith(SECRET_PREFIX):
        return esc_environment.SECRET_PLACEHOLDER
    if isinstance(value, dict):
        return {k: _redacted(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_redacted(v) for v in value]
    return value


def _typed(value: Any) -> Any:
    """`value` with each number tagged with its type."""
    if isinstance(value, dict):
        return {k: _typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_typed(v) for v in value]
    return (type(value).__name__, value)


def _write(folder: Path, case: dict[str, Any]) -> tuple[Path, Path]:
    project = folder / "Pulumi.yaml"
    shutil.copy(ROOT / "Pulumi.yaml", project)
    stack = folder / "Pulumi.esc.yaml"
    stack.write_text(yaml.safe_dump({"environment": case["imports"], "config": case["config"]}, sort_keys=False))
    return project, stack


def _opened(folder: Path, answer: dict[str, Any], names: list[str]) -> dict[str, Path]:
    files = {}
    for index, name in enumerate(names):
        files[name] = folder / f"opened-{index}.json"
        files[name].write_text(json.dumps(answer["opened"][name]))
    return files


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=environments())
def test_the_plan_gets_the_config_pulumi_up_gets_from_imported_environments(
    case: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> None:
    folder = tmp_path_factory.mktemp("esc")
    project, stack = _write(folder, case)
    answer = esc_config(project, stack, case["environments"])
    assert "error" not in answer, answer
    config, secret_keys = offline.read_stack_config(stack, _opened(folder, answer, case["imports"]))
    expected = {key: json.loads(s["value"]) if s["object"] else s["value"] for key, s in answer["config"].items()}
    got = {key: json.loads(value) if answer["config"][key]["object"] else value for key, value in config.items()}
    assert set(got) == set(expected)
    assert set(secret_keys) == {key for key, s in answer["config"].items() if s["secret"]}
    for key, value in expected.items():
        want = (
            esc_environment.SECRET_PLACEHOLDER if key in secret_keys and not answer["config"][key]["object"] else value
        )
        assert _typed(got[key]) == _typed(_redacted(want)), key  # 1 and 1.0 are not the same to the program


def test_a_stack_with_imports_not_handed_over_is_refused_naming_them(tmp_path: Path) -> None:
    case = {"environments": {}, "imports": ["team/base", "team/prod"], "config": {"tpu-slicing:zone": "z"}}
    _, stack = _write(tmp_path, case)
    opened = tmp_path / "base.json"
    opened.write_text(json.dumps({"value": {}, "trace": {"def": {}}}))
    with pytest.raises(StackFileError) as err:
        offline.read_stack_config(stack, {"team/base": opened})
    said = str(err.value)
    assert said.startswith("Pulumi.esc.yaml: imports the ESC environment(s) team/prod, ") and "\n" not in said
    assert "pulumi env open team/prod --format detailed > FILE" in said and "ESC_VALUES='team/prod=FILE'" in said


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ('{"pulumiConfig": {"zone": "z"}}', "is not an environment opened with `--format detailed`"),
        ("not json", "is not an environment opened with `--format detailed`"),
        (
            '{"value": {"pulumiConfig": {"value": {"zone": {"unknown": true, "trace": {}}}, "trace": {}}},'
            ' "trace": {}}',
            "pulumiConfig.zone is unknown",
        ),
        ('{"value": {"pulumiConfig": {"value": "z", "trace": {}}}, "trace": {}}', "pulumiConfig is not an object"),
    ],
)
def test_an_opened_environment_not_in_the_detailed_form_is_refused(content: str, said: str, tmp_path: Path) -> None:
    """Plain `--format json` loses which values are secret, so the plan could show one: refused."""
    path = tmp_path / "opened.json"
    path.write_text(content)
    with pytest.raises(EscValuesError) as err:
        esc_environment.read_opened("team/prod", path)
    assert said in str(err.value) and "\n" not in str(err.value)


def test_a_device_pipe_deep_or_missing_file_is_refused_in_one_line(tmp_path: Path) -> None:
    """A pipe would be read empty by the second stack of `make fleet` and by `plan diff`'s base run."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000)
    for path in (Path("/dev/zero"), fifo, deep, tmp_path / "absent.json"):
        with pytest.raises(EscValuesError) as err:
            esc_environment.read_opened("team/prod", path)
        assert str(err.value).startswith(f"the opened environment team/prod ({path}) ")


@pytest.mark.parametrize("text", ["team/prod", "=x", "team/prod=", "a=1 a=2"])
def test_the_variable_takes_name_file_pairs(text: str) -> None:
    with pytest.raises(EscValuesError) as err:
        esc_environment.locations(text)
    assert esc_environment.VARIABLE in str(err.value)


@pytest.mark.parametrize(
    ("key", "value", "said"),
    [
        ("tpu-slicing:a:b", "x", "is not a configuration key"),
        ("obj", {"a": {"secure": "x"}}, "pulumiConfig.obj.a is a mapping of the one key `secure`"),
    ],
)
def test_what_pulumi_up_would_refuse_is_refused(key: str, value: Any, said: str) -> None:
    """ParseKey refuses a key with two colons unless its middle is `config`; a `secure:` mapping is
    reserved for ciphertext, which `pulumi up` would try to decrypt."""

    def detailed(item: Any) -> dict[str, Any]:
        inner = {k: detailed(v) for k, v in item.items()} if isinstance(item, dict) else item
        return {"value": inner, "trace": {}}

    with pytest.raises(EscValuesError, match=re.escape(said)):
        esc_environment.merge({}, detailed({key: value}), "tpu-slicing")


def test_the_old_config_form_of_a_key_is_its_short_form() -> None:
    merged = esc_environment.merge({}, {"value": {"gcp:config:project": {"value": "p", "trace": {}}}, "trace": {}}, "x")
    assert merged.config == {"gcp:project": "p"}


def test_a_key_set_twice_by_its_two_spellings_is_refused() -> None:
    """`pulumi up` would keep whichever of the two its map iteration met last (toConfigMap)."""
    opened = {
        "value": {"zone": {"value": "a", "trace": {}}, "tpu-slicing:zone": {"value": "b", "trace": {}}},
        "trace": {},
    }
    with pytest.raises(EscValuesError, match="sets 'tpu-slicing:zone' twice"):
        esc_environment.merge({}, opened, "tpu-slicing")


def test_the_dev_stack_planned_from_an_environment_is_the_dev_stack(tmp_path: Path) -> None:
    """The committed dev stack with its project and zone moved into an imported environment plans
    to the same resources as the stack file alone, and is refused without the environment."""
    document = yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())
    moved = {k: document["config"].pop(k) for k in ("gcp:project", "tpu-slicing:zone")}
    project, stack = tmp_path / "Pulumi.yaml", tmp_path / "Pulumi.dev.yaml"
    shutil.copy(ROOT / "Pulumi.yaml", project)
    stack.write_text(yaml.safe_dump({"environment": ["tpu/fleet"], "config": document["config"]}, sort_keys=False))
    definition = yaml.safe_dump(
        {"values": {"pulumiConfig": {"gcp:project": moved["gcp:project"], "zone": moved["tpu-slicing:zone"]}}}
    )
    answer = esc_config(project, stack, {"tpu/fleet": definition})
    assert "error" not in answer, answer
    opened = tmp_path / "fleet.json"
    opened.write_text(json.dumps(answer["opened"]["tpu/fleet"]))
    with pytest.raises(StackFileError, match="imports the ESC environment"):
        offline.read_stack_config(stack, {})
    config, secret_keys = offline.read_stack_config(stack, {"tpu/fleet": opened})
    planned = offline.run(config, stack="dev", secret_keys=secret_keys)
    committed = offline.run_stack("dev")
    assert sorted(
        (r.type, r.name, json.dumps(r.inputs, sort_keys=True, default=str)) for r in planned.resources
    ) == sorted((r.type, r.name, json.dumps(r.inputs, sort_keys=True, default=str)) for r in committed.resources)


def test_a_secure_value_inside_a_stack_object_makes_the_key_secret_and_is_never_held(tmp_path: Path) -> None:
    """The CLI reads a `secure:` mapping at any depth of a config object as a ciphertext and marks
    the key secret (sdk/go/common/resource/config/object.go); the plan once passed the ciphertext
    mapping on as a plain value."""
    stack = tmp_path / "Pulumi.esc.yaml"
    stack.write_text("config:\n  tpu-slicing:zone: z\n  tpu-slicing:obj:\n    a:\n      secure: czNjcjN0\n    b: 1\n")
    config, secret_keys = offline.read_stack_config(stack, {})
    assert json.loads(config["tpu-slicing:obj"]) == {"a": esc_environment.SECRET_PLACEHOLDER, "b": 1}
    assert secret_keys == ["tpu-slicing:obj"]


def test_plan_diff_hands_its_base_run_absolute_paths_and_caches_no_plan_made_with_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The base revision is planned in a child in another folder, from a cache keyed by the tree:
    an opened environment is neither in the tree nor in that folder."""
    from plan.__main__ import _opened_environments, _PlanAt

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(esc_environment.VARIABLE, "tpu/fleet=fleet.json")
    assert _opened_environments() == f"tpu/fleet={tmp_path / 'fleet.json'}"
    import plan.__main__ as plan_main

    started: list[dict[str, Any]] = []  # the options of each `python -m plan` child
    real = plan_main.subprocess.Popen

    def recording(command: Any, *args: Any, **kwargs: Any) -> Any:
        if "plan" in command:
            started.append(kwargs)
        return real(command, *args, **kwargs)

    monkeypatch.setattr(plan_main.subprocess, "Popen", recording)
    base = _PlanAt("HEAD", "dev", cache=True)
    try:
        assert base._cached is None
        assert [(kw.get("env") or {}).get(esc_environment.VARIABLE) for kw in started] == [
            f"tpu/fleet={tmp_path / 'fleet.json'}"
        ]
    finally:
        base.document()
