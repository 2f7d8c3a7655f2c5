"""Stop signals and process trees in real processes, each taking seconds (fresh interpreters, CPU burners, a
trainer that takes a second to save): reward workers die with a killed trainer and leave its process group, the
Beaker task passes SIGTERM on and waits, a late second SIGTERM ends a process with the status it said (in a stopping
run, through the CLI's main, and during the interpreter's teardown). The in-process stop-signal tests:
tests/unit/test_fault_handling.py."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

from fault_helpers import REPO, alive, descendants, real_checkpoint, run_python, survivors


def test_reward_workers_die_with_a_killed_trainer_and_leave_its_process_group():
    """Under load (CPU burners beside the trainer, and workers that start late: the second 0.5 s, the third 1 s
    after the first, as on a busy machine), three pools in a row: once the pool has answered, every worker has
    already left the trainer's process group (a Ctrl-C to the group misses it); then a SIGKILLed trainer leaves
    no worker behind."""
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        trainer = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
            import multiprocessing, os, time
            from olmocr_rl.rewards import evaluator as pool_module
            started = multiprocessing.Value("i", 0)
            first_act = pool_module._worker_start

            def late_start(*args):  # the n-th worker of a pool starts n x 0.5 s after the first
                with started.get_lock():
                    order, started.value = started.value, started.value + 1
                time.sleep(0.5 * (order % 3))
                first_act(*args)

            pool_module._worker_start = late_start
            for attempt in range(3):
                evaluator = pool_module.BenchEvaluator(workers=3, start_method="fork")
                evaluator._run_in_pool([], False)  # starts the pool
                evaluator._pool.submit(abs, -1).result()  # the pool has answered
                pids = list(evaluator._pool._processes)
                groups = [os.getpgid(pid) for pid in pids]  # at once
                print(len(pids), sum(group == os.getpgrp() for group in groups), flush=True)
                if attempt < 2:
                    evaluator.close()
            print(" ".join(str(pid) for pid in pids), os.getpgrp(), flush=True)
            time.sleep(60)
        """)], stdout=subprocess.PIPE, text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
        try:
            counts = [trainer.stdout.readline().split() for _ in range(3)]
            assert counts == [["3", "0"]] * 3  # 3 workers each time, none left in the trainer's group
            *workers, group = map(int, trainer.stdout.readline().split())
            assert len(workers) == 3 and all(alive(pid) for pid in workers)
            assert all(os.getpgid(pid) != group for pid in workers)
            assert set(workers) <= set(descendants(trainer.pid))
        finally:
            trainer.kill()
            trainer.wait()
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    assert survivors(workers, timeout=10) == []


def test_the_beaker_task_passes_sigterm_to_the_trainer_waits_for_it_and_exits_75(tmp_path):
    """A trainer that takes 1 s to save after SIGTERM: the task waits for it (its launcher died at once) and
    reports "preempted"."""
    trainer = tmp_path / "trainer.py"
    trainer.write_text(textwrap.dedent(f"""
        import signal, sys, time
        def stop(signum, frame):
            time.sleep(1)
            open({str(tmp_path / 'saved')!r}, "w").write(signal.Signals(signum).name)
            sys.exit(75)
        signal.signal(signal.SIGTERM, stop)
        open({str(tmp_path / 'started')!r}, "w").close()
        time.sleep(60)
    """))
    launcher = f"import subprocess, sys; sys.exit(subprocess.call([sys.executable, {str(trainer)!r}]))"
    code = textwrap.dedent(f"""
        import sys
        from olmocr_rl.launch import status
        from olmocr_rl.launch.plan import Command
        from olmocr_rl.launch.runtime import StopForwarder
        forwarder = StopForwarder(30)
        code = forwarder.run(Command("train", (sys.executable, "-c", {launcher!r})), False)
        sys.exit(status.PREEMPTED if forwarder.forwarded else code)
    """)
    task = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "started").exists():
            assert time.monotonic() < deadline and task.poll() is None, task.communicate()
            time.sleep(0.05)
        task.send_signal(signal.SIGTERM)
        _, err = task.communicate(timeout=30)
    finally:
        task.kill()
    assert task.returncode == 75, err
    assert (tmp_path / "saved").read_text() == "SIGTERM"  # the trainer saved before the task ended
    assert "SIGTERM: passed on to the trainer" in err


def test_a_late_second_sigterm_ends_the_process_with_the_status_the_run_said(tmp_path):
    """The first SIGTERM stops the run (status 75, said in the log); a second one 0.5 s later, while the process
    winds down, used to kill it (-15): the status stays the one said. The same through the real CLI's main."""
    result = run_python("""
        import os, signal, sys, time
        from olmocr_rl.trainer.stop_signals import Preempted, install_early, restore
        previous = install_early()
        try:
            os.kill(os.getpid(), signal.SIGTERM)
        except Preempted:
            print("exiting with status 75", flush=True)
        restore(previous, exit_status=75)
        time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
        print("not reached")
    """)
    assert (result.returncode, result.stdout) == (75, "exiting with status 75\n"), result.stderr
    out = tmp_path / "out"
    real_checkpoint(out, 8)
    for name in ("model.safetensors", "config.json", "run_summary.json"):  # its final model, whole
        shutil.copyfile(out / "checkpoint-8" / ("trainer_state.json" if name == "run_summary.json" else name), out / name)
    result = run_python(f"""
        import os, signal, sys, time
        from olmocr_rl import grpo_train
        code = grpo_train.main(["--config", "configs/tiny-cpu.yaml", "--model_name", "{out}/no-model", "--output_dir",
                                "{out}", "--max_steps", "8", "--resume_from_checkpoint", "--report_to", "none"])
        print("main returned", code, flush=True)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
        print("not reached")
    """)
    assert result.stdout == "main returned 0\n" and result.returncode == 0, (result.returncode, result.stderr[-2000:])
    assert "already finished at step 8" in result.stderr


def test_a_second_sigterm_during_the_interpreters_teardown_ends_with_the_status_said(tmp_path):
    """The interpreter puts every Python-handled signal back to its default (death) before it tears the modules
    down (torch's take a second): a SIGTERM then used to end a run that said "status 75" as -15."""
    script = textwrap.dedent("""
        import os, subprocess, sys, time
        from olmocr_rl.trainer.stop_signals import install_early, restore
        restore(install_early(), exit_status=75)
        class SlowTeardown:
            def __del__(self):
                time.sleep(2)
        keep = SlowTeardown()
        subprocess.Popen([sys.executable, "-c", f"import os, time; time.sleep(1); os.kill({os.getpid()}, 15)"])
        print("exiting with status 75", flush=True)
        sys.exit(75)
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    assert result.returncode == 75, (result.returncode, result.stderr)
    assert result.stdout == "exiting with status 75\n"
