"""The smoke pod stand-in ends a container as the kubelet does (tests/standins/smoke_pod.py cites
kuberuntime_container.go): a termination message from the log only under FallbackToLogsOnError and
a non-zero exit, its last 80 lines, at most its last 2048 bytes."""

from __future__ import annotations

from tests.standins.smoke_pod import FALLBACK, termination_message


def test_no_message_without_the_fallback_policy_or_on_success() -> None:
    log = "attempt 1: HTTP 404\nsmoke test failed\n"
    assert termination_message(log, None, 1) == ""
    assert termination_message(log, "File", 1) == ""
    assert termination_message(log, FALLBACK, 0) == ""
    assert termination_message(log, FALLBACK, 1) == log


def test_the_last_80_lines_then_the_last_2048_bytes() -> None:
    lines = [f"line {i}\n" for i in range(200)]
    message = termination_message("".join(lines), FALLBACK, 1)
    assert message == "".join(lines[-80:])
    long = [f"{i:04d} " + "x" * 95 + "\n" for i in range(80)]  # 101 bytes a line
    message = termination_message("".join(long), FALLBACK, 2)
    assert len(message.encode()) == 2048
    assert message.endswith(long[-1]) and "".join(long).endswith(message)
