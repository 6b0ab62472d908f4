"""Why a pulumi command failed, in one line (railyard.engine.pulumi.failure_line), as `railyard
review` and verify's record of the node states show it."""

from __future__ import annotations

import subprocess

from railyard.engine.pulumi import failure_line


def proc(stdout: str, stderr: str, rc: int = 255) -> subprocess.CompletedProcess[str]:
    return subprocess.CompletedProcess(["pulumi"], rc, stdout, stderr)


def test_the_first_error_line_after_any_noise_wherever_it_is():
    assert failure_line(proc("", "warning: x\nerror: the stack is currently locked by 1 lock(s)\nmore\n"),
                        "refresh") == "error: the stack is currently locked by 1 lock(s)"
    assert failure_line(proc("Updating (t):\nerror: update failed\n", "noise\n"), "up") == "error: update failed"


def test_without_an_error_line_stderr_says_why_not_a_json_document_on_stdout():
    assert failure_line(proc('{\n  "steps": []\n}\n', "no Python interpreter found\n"), "preview") == \
        "no Python interpreter found"
    assert failure_line(proc('{\n  "steps": []\n}\n', ""), "preview") == "pulumi preview exited 255"
