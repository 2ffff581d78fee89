"""The wrong program in an image slot (settings/rules_versions.py `check_images`): every known program
in every other program's slot is refused naming the slot, from any registry; its own, mirrored, plans."""

from __future__ import annotations

from pydantic.alias_generators import to_camel

from settings import rules_versions
from tests.conftest import config_with, refusal


def test_every_known_program_in_another_slot_is_refused_naming_the_slot() -> None:
    for slot, own in rules_versions.SLOTS.items():
        key = f"versions.{to_camel(slot)}"
        for name in sorted(set(rules_versions.PROGRAMS) - own):
            image = f"example-registry.test/some/path/{name}:v1.2.3"
            message = refusal({"versions": {to_camel(slot): image}})
            if slot == "routing_sidecar_image":  # the picker's own release is the only sidecar (one_llm_d_release)
                assert f"{key} {image} is not from the endpoint picker's llm-d release" in message, message
                continue
            assert f"{key} {image!r} is {rules_versions.PROGRAMS[name]}" in message, message
            assert f"allowed: an image named {' or '.join(sorted(own))}" in message


def test_a_slots_own_program_from_a_mirror_and_a_custom_build_plan() -> None:
    mirrored = "us-docker.pkg.dev/example-tpu-project/dockerhub/vllm/vllm-tpu:v0.26.0"
    custom = "us-docker.pkg.dev/example-tpu-project/builds/team-vllm:v0.26.0-patched.1"
    for image in (mirrored, custom):
        assert config_with({"versions": {"vllmImage": image}}).versions.vllm_image == image
