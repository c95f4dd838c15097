"""A user's script (user_script.py: every op family forward + backward, then to_static → jit.save → jit.load
in a fresh process) passes under the Paddle this suite runs with, as installed (from the wheel in
`make test-compat`)."""

import pathlib
import subprocess
import sys


def test_a_users_script_passes(tmp_path):
    script = pathlib.Path(__file__).with_name("user_script.py")
    done = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True,
                          timeout=900, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "USER SCRIPT OK" in done.stdout
