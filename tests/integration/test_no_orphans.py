"""No orphans: every process a test session starts dies with its pytest, even when pytest itself is SIGKILLed.

An inner pytest session (this repository's conftest, so its reaper) runs one test that starts a plain child, a
child in a session of its own (as torchrun's workers and the vLLM server's engine are), a grandchild whose parent
has exited (re-parented away from pytest's tree), a run forked from the preloaded interpreter, and a forked torchrun
whose two workers come from its zygote (each in a session of its own); the outer test SIGKILLs the inner pytest and
then every one of those processes must be gone within seconds.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from fault_helpers import alive, survivors

REPO = Path(__file__).resolve().parents[2]

INNER_TEST = textwrap.dedent('''
    import json, os, subprocess, sys, time
    from pathlib import Path

    import warm_python

    SLEEP = [sys.executable, "-c", "import time; time.sleep(600)"]


    def test_starts_processes_then_hangs():
        plain = subprocess.Popen(SLEEP)
        own_session = subprocess.Popen(SLEEP, start_new_session=True)
        # A grandchild whose parent exits at once: re-parented, no longer below pytest.
        spawner = subprocess.run([sys.executable, "-c",
                                  "import subprocess, sys; p = subprocess.Popen(" + repr(SLEEP) + ", stdout=subprocess.DEVNULL,"
                                  " stderr=subprocess.DEVNULL);"
                                  " print(p.pid)"],
                                 capture_output=True, text=True, check=True)
        forked = warm_python.popen([sys.executable, "-m", "http.server", "--bind", "127.0.0.1", "0"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        folder = Path(os.environ["OLMOCR_RL_TEST_PIDS"]).parent
        worker = folder / "sleeping_worker.py"
        worker.write_text("import os, sys, time\\nfrom pathlib import Path\\n"
                          "Path(sys.argv[1], 'worker' + os.environ['RANK']).write_text(str(os.getpid()))\\n"
                          "time.sleep(600)\\n")
        launcher = warm_python.popen([sys.executable, "-m", "torch.distributed.run", "--standalone",
                                      "--nproc_per_node=2", str(worker), str(folder)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while not all((folder / f"worker{r}").is_file() for r in range(2)) and time.monotonic() < deadline:
            time.sleep(0.1)
        pids = {"plain": plain.pid, "own_session": own_session.pid, "orphaned_grandchild": int(spawner.stdout),
                "forked_run": forked.pid, "preloaded_interpreter": warm_python.server_pids()[0],
                "forked_torchrun": launcher.pid,
                **{f"torchrun_worker{r}": int((folder / f"worker{r}").read_text()) for r in range(2)}}
        Path(os.environ["OLMOCR_RL_TEST_PIDS"]).write_text(json.dumps(pids))
        time.sleep(600)
''')


def test_every_process_of_a_killed_pytest_session_dies_with_it(tmp_path):
    (tmp_path / "test_inner_hang.py").write_text(INNER_TEST)
    pids_file = tmp_path / "pids.json"
    env = {k: v for k, v in os.environ.items() if k != "OLMOCR_RL_TEST_SESSION"}  # the inner session's own mark
    env.update(OLMOCR_RL_TEST_PIDS=str(pids_file), PYTHONPATH=str(REPO / "tests"))
    inner = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "conftest", "-p", "no:cacheprovider",
                              "--rootdir", str(tmp_path), str(tmp_path / "test_inner_hang.py")],
                             cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             start_new_session=True)
    pids: dict[str, int] = {}
    try:
        deadline = time.monotonic() + 240
        while not pids_file.is_file() and inner.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert pids_file.is_file(), inner.communicate(timeout=30)[0].decode()[-3000:]
        time.sleep(0.2)
        pids = json.loads(pids_file.read_text())
        assert all(alive(pid) for pid in pids.values()), pids

        os.kill(inner.pid, signal.SIGKILL)  # pytest alone, with no chance to clean up
        inner.wait(timeout=30)

        deadline = time.monotonic() + 20
        while any(alive(pid) for pid in pids.values()) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = {name: pid for name, pid in pids.items() if alive(pid)}
        assert not left, f"outlived their pytest: {left}"
    finally:
        survivors(list(pids.values()), timeout=0)  # whatever is left is killed, so a failure leaves nothing behind
