"""scripts/pip_index_args.py: uv is pointed where this machine's pip looks (setup_env.sh installs with uv, which
reads no pip configuration): pip's index, extra indexes, wheel folders and constraints become uv flags, an
environment variable winning over a file, another command's section ignored."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("pip_index_args", REPO / "scripts" / "pip_index_args.py")
pip_index_args = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pip_index_args)


def test_pip_config_listing_becomes_uv_flags():
    listing = "\n".join([
        ":env:.default-timeout='180'",
        ":env:.find-links='/opt/wheels'",
        "global.cert='/etc/ssl/certs/ca-certificates.crt'",
        "global.constraint='/etc/xdg/pip/constraints.txt'",
        "global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'",
        "global.find-links='/srv/other-wheels'",
        "download.index-url='https://not-for-install.example/simple'",
        "install.index-url='https://mirror.example/simple'",
    ])
    config = pip_index_args.pip_config(listing)
    assert config["find-links"] == "/opt/wheels"  # the variable wins over global's file value
    assert config["index-url"] == "https://mirror.example/simple"  # install's section, not download's
    assert pip_index_args.uv_args(config) == [
        "--index-url", "https://mirror.example/simple",
        "--extra-index-url", "file:///opt/pypi/simple", "--extra-index-url", "file:///opt/pypi-more/simple",
        "--find-links", "/opt/wheels",
        "--constraint", "/etc/xdg/pip/constraints.txt"]


def test_no_configuration_is_no_flags_and_no_index_is_passed_on():
    assert pip_index_args.uv_args(pip_index_args.pip_config("")) == []
    assert pip_index_args.uv_args(pip_index_args.pip_config(":env:.no-index='true'")) == ["--no-index"]


def test_the_script_reads_pips_own_configuration(tmp_path):
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nfind-links = /srv/wheels-a /srv/wheels-b\n")
    env = {key: value for key, value in os.environ.items() if not key.startswith("PIP_")}
    env |= {"PIP_CONFIG_FILE": str(conf), "PIP_EXTRA_INDEX_URL": "file:///srv/index/simple"}
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "pip_index_args.py")], env=env, capture_output=True,
                         text=True, check=True).stdout.split()
    assert out[out.index("--extra-index-url") + 1] == "file:///srv/index/simple"
    assert [out[i + 1] for i, arg in enumerate(out) if arg == "--find-links"] == ["/srv/wheels-a", "/srv/wheels-b"]


def test_an_unknown_installer_is_one_error_line_before_anything_is_made(tmp_path):
    venv = tmp_path / "venv"
    result = subprocess.run(["bash", str(REPO / "scripts" / "setup_env.sh")], capture_output=True, text=True,
                            env={**os.environ, "OLMOCR_RL_INSTALLER": "conda", "OLMOCR_RL_VENV": str(venv)})
    assert result.returncode == 2
    assert result.stderr.splitlines() == ["error: OLMOCR_RL_INSTALLER=conda: use uv (the default) or pip"]
    assert not venv.exists()
