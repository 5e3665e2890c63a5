"""The CLI sets a passive OpenMP wait policy before torch loads, unless the user set one."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

# Import the CLI (must not load torch: libgomp reads the policy when torch loads it), run it,
# then report the policy it left and whether torch was loaded before main() ran.
CHECK = ("import os, sys, runpy\nsys.argv = ['gpt1', '--help']\n"
         "import gpt1.__main__\nearly = 'torch' in sys.modules\n"
         "try:\n    runpy.run_module('gpt1', run_name='__main__')\nexcept SystemExit:\n    pass\n"
         "print(os.environ['OMP_WAIT_POLICY'], early)")


@pytest.mark.parametrize(("given", "expected"), [(None, "PASSIVE"), ("ACTIVE", "ACTIVE")])
def test_policy_set_before_torch_loads(given, expected):
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if given:
        env["OMP_WAIT_POLICY"] = given
    out = subprocess.run([sys.executable, "-c", CHECK], env=env, capture_output=True, text=True,
                         check=True).stdout
    assert out.split()[-2:] == [expected, "False"]
