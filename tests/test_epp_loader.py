"""The endpoint picker config the program generates is the one the pinned router's own loader accepted.

tools/epp_loader/verify.sh builds llm-d-router's loader (cmd/epp/runner, config phases one and two,
every in-tree plugin registered) at the picker image's tag and loads each generated config with it;
tools/epp_loader/verdict.json records what it accepted. These tests refuse any other text, arguments
or tag until the loader has been run on them again, and run it themselves in module mode when the
Go module proxy serves the router module (it did not serve github.com/llm-d/llm-d-router@v0.9.0 when
this was written: the recorded run used the tag's source from a git mirror).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from k8s import epp_config
from k8s.epp_config import Plugin
from k8s.router import EPP_CONFIG_FILE, PD_PLUGIN_SET, PD_PLUGINS, PD_PROFILES
from settings.loader import load
from tests import epp_loader_config as elc

REVERIFY = "re-verify with the pinned loader"


@pytest.fixture(scope="module")
def generated() -> list[elc.Generated]:
    return elc.generated_configs()


@pytest.fixture(scope="module")
def verdict() -> dict[str, Any]:
    return elc.load_verdict()


def _vllm_pd_stacks() -> list[str]:
    from plan import engine

    stacks = []
    for stack in elc.stack_names():
        raw, secrets = engine.read_stack_config(engine.stack_file(stack))
        config = load(raw, stack=stack, project=raw.get("gcp:project"), secret_keys=secrets)
        if config.serving.backend == "vllm-pd":
            stacks.append(stack)
    return stacks


# --- (a) the recorded verdict covers exactly the generated text --------------------------------------


def test_the_recorded_verdict_covers_exactly_the_generated_configs(
    generated: list[elc.Generated], verdict: dict[str, Any]
) -> None:
    problems = elc.check_recorded(verdict, generated)
    assert problems == [], "\n".join(problems)


def test_every_stack_that_deploys_the_picker_is_covered(generated: list[elc.Generated]) -> None:
    covered = {stack for config in generated for stack in config.stacks}
    assert "dev" in covered
    assert set(_vllm_pd_stacks()) <= covered


def test_the_checked_text_is_the_configmap_text_the_router_writes(generated: list[elc.Generated]) -> None:
    # The text is read from the registered ConfigMap, not rebuilt: it must be the router's dump.
    dev = next(c for c in generated if "dev" in c.stacks)
    assert dev.key == EPP_CONFIG_FILE
    assert dev.text == yaml.safe_dump(PD_PLUGINS, sort_keys=False)
    assert elc.config_file_arg(dev.epp_args) == f"/config/{EPP_CONFIG_FILE}"


def test_a_changed_config_is_refused_until_re_verified(generated: list[elc.Generated], verdict: dict[str, Any]) -> None:
    dev = next(c for c in generated if "dev" in c.stacks)
    # A parameter the loader would have to see again: the decider's threshold, one token more.
    plugins = [
        Plugin(p.type, {**p.parameters, "nonCachedTokens": 17}) if p.type == "prefix-based-pd-decider" else p
        for p in PD_PLUGIN_SET
    ]
    changed_text = yaml.safe_dump(epp_config.config(plugins, PD_PROFILES), sort_keys=False)
    for text in (changed_text, dev.text + "\n", dev.text.replace("v1alpha1", "v1", 1)):
        changed = dataclasses.replace(dev, text=text)
        assert changed.sha256 != dev.sha256
        problems = elc.check_recorded(verdict, [changed])
        assert problems, "a changed config text passed the recorded verdict"
        assert any(changed.sha256 in p and "no recorded verdict covers" in p for p in problems)
        assert problems[-1].startswith(f"{REVERIFY}: ")
        assert "tools/epp_loader/verify.sh" in problems[-1] and "--record" in problems[-1]


def test_a_change_in_what_the_program_writes_reaches_the_check(
    monkeypatch: pytest.MonkeyPatch, verdict: dict[str, Any]
) -> None:
    # End to end: the router's ConfigMap dumps k8s.router.PD_PLUGINS; a different document there is
    # a different generated text for the dev stack, and the recorded verdict no longer covers it.
    from k8s import router

    reordered = {**router.PD_PLUGINS, "plugins": [p.body() for p in PD_PLUGIN_SET]}  # the written order
    monkeypatch.setattr(router, "PD_PLUGINS", reordered)
    (changed,) = elc.generated_configs(["dev"])
    assert changed.text == yaml.safe_dump(reordered, sort_keys=False)
    problems = elc.check_recorded(verdict, [changed])
    assert any("no recorded verdict covers" in p for p in problems)
    assert problems[-1].startswith(f"{REVERIFY}: tools/epp_loader/verify.sh")


def test_changed_arguments_image_or_tag_are_refused_too(
    generated: list[elc.Generated], verdict: dict[str, Any]
) -> None:
    dev = next(c for c in generated if "dev" in c.stacks)
    for changed in (
        dataclasses.replace(dev, epp_args=(*dev.epp_args, "--v=4")),
        dataclasses.replace(dev, image=f"{elc.PICKER_IMAGE_REPOSITORY}:v0.9.1"),
    ):
        problems = elc.check_recorded(verdict, [changed])
        assert problems and problems[-1].startswith(REVERIFY), changed


def test_a_refusal_recorded_as_the_verdict_does_not_pass(
    generated: list[elc.Generated], verdict: dict[str, Any]
) -> None:
    refused = json.loads(json.dumps(verdict))
    for entry in refused["configs"]:
        entry["verdict"] = entry["verdict"].replace("ACCEPTED", "REFUSED", 1)
    assert elc.check_recorded(refused, generated)[-1].startswith(REVERIFY)


# --- (c) the recorded tag is the pinned picker image's ------------------------------------------


def test_the_recorded_tag_is_the_pinned_picker_image_tag(
    generated: list[elc.Generated], verdict: dict[str, Any]
) -> None:
    pinned = elc.pinned_default_tag()
    assert verdict["module"] == elc.ROUTER_MODULE
    assert verdict["tag"] == pinned, f"recorded {verdict['tag']}, settings pin {pinned}: {REVERIFY}"
    for config in generated:
        assert config.image.startswith(f"{elc.PICKER_IMAGE_REPOSITORY}:")
        assert config.tag == verdict["tag"], f"{config.stacks} pin {config.image}: {REVERIFY}"
    for entry in verdict["configs"]:
        assert entry["tag"] == pinned and entry["module"] == elc.ROUTER_MODULE
        assert entry["verdict"].startswith(f"ACCEPTED by llm-d-router {pinned} ({verdict['commit']}): ")


# --- (b) the loader itself, when the proxy serves the router module ----------------------------------


def _router_module_served(tag: str) -> str | None:
    """Why `go mod download` cannot fetch the router module at `tag`, or None when it can."""
    if shutil.which("go") is None:
        return "no go on PATH"
    cache = Path(os.environ.get("TPU_SLICING_EPP_LOADER", Path.home() / ".cache" / "tpu-slicing" / "epp-loader"))
    env = {**os.environ, "GOPATH": str(cache / "gopath"), "GOMODCACHE": str(cache / "gopath" / "pkg" / "mod")}
    env["GOFLAGS"] = "-mod=mod"
    with tempfile.TemporaryDirectory() as tmp:
        try:
            done = subprocess.run(
                ["go", "mod", "download", "-json", f"{elc.ROUTER_MODULE}@{tag}"],
                cwd=tmp,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return "go mod download timed out"
    if done.returncode == 0:
        return None
    try:
        error = json.loads(done.stdout).get("Error")
    except ValueError:
        error = None
    return str(error or done.stderr or done.stdout or f"exit {done.returncode}").strip().splitlines()[0]


def test_the_pinned_loader_accepts_the_generated_configs_in_module_mode() -> None:
    tag = elc.pinned_default_tag()
    why = _router_module_served(tag)
    if why is not None:
        pytest.skip(f"router module not served ({why}); the recorded tag is still checked against the pin")
    done = subprocess.run(
        ["bash", str(elc.ROOT / elc.VERIFY_SCRIPT), "--tag", tag, "--check"],
        cwd=elc.ROOT,
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )
    assert done.returncode == 0, f"verify.sh --check exited {done.returncode}:\n{done.stdout}\n{done.stderr[-4000:]}"
    assert "ACCEPTED by llm-d-router" in done.stdout
