"""The preloaded interpreter's launchers (tests/warm_python.py): torchrun's workers forked from the launcher's zygote.

A forked ``python -m torch.distributed.run`` starts its workers from a twin of itself made before it ran (the
zygote), so they skip the imports, and they must still be what torch elastic starts: in the launcher's process tree,
each in a session of its own, with torchrun's variables, their exit statuses reported back (a failing rank fails the
launch). A launcher started ``fresh=True`` starts fresh workers, as the reference runs of bit-exact comparisons need.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import warm_python

WORKER = textwrap.dedent('''
    import json, os, sys
    from pathlib import Path

    rank = int(os.environ["RANK"])
    parent = os.getppid()
    grandparent = int(Path(f"/proc/{parent}/stat").read_text().rsplit(")", 1)[1].split()[1])
    Path(sys.argv[1], f"rank{rank}.json").write_text(json.dumps({
        "pid": os.getpid(), "sid": os.getsid(0), "parent": parent, "grandparent": grandparent,
        "world_size": os.environ["WORLD_SIZE"], "preloaded": "transformers" in sys.modules}))
    sys.exit(int(sys.argv[2]) if rank == 1 else 0)
''')


def torchrun(tmp_path: Path, rank1_exit: int, fresh: bool = False):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script),
               str(tmp_path), str(rank1_exit)]
    proc = warm_python.popen(command, fresh=fresh, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=300)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    return proc, out, err, ranks


def test_a_forked_torchrun_forks_its_workers_in_its_own_tree_and_sessions(tmp_path):
    proc, out, err, ranks = torchrun(tmp_path, 0)
    assert proc.returncode == 0, err[-3000:]
    assert isinstance(proc, warm_python.WarmProcess)  # the launcher itself was forked
    for rank in ranks:
        assert rank["preloaded"] and rank["world_size"] == "2"  # forked: transformers came with the fork
        assert rank["sid"] == rank["pid"]  # a session of its own, as torch elastic starts a worker
        assert rank["grandparent"] == proc.pid  # launcher -> zygote -> worker: below the launcher
    assert ranks[0]["parent"] == ranks[1]["parent"] != proc.pid  # one zygote


def test_a_failing_forked_worker_fails_the_launch_with_its_status(tmp_path):
    proc, out, err, ranks = torchrun(tmp_path, 3)
    assert proc.returncode != 0
    assert "exitcode  : 3" in err, err[-3000:]  # torch elastic read rank 1's status from the zygote


def test_a_fresh_torchrun_starts_fresh_workers(tmp_path):
    proc, out, err, ranks = torchrun(tmp_path, 0, fresh=True)
    assert proc.returncode == 0, err[-3000:]
    assert not isinstance(proc, warm_python.WarmProcess)
    assert not any(rank["preloaded"] for rank in ranks)  # their own interpreters: nothing imported beforehand
    assert all(rank["parent"] == proc.pid for rank in ranks)  # torch elastic's own Popen
