"""The package as a user installs it: a wheel (not the editable checkout) in a fresh virtual
environment. Missing package data, an import of a test-only module or a broken entry point shows
up here and not in the editable test run. Slow: `make test-all`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

from icml25 import __version__, registry

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel_env(tmp_path_factory):
    pytest.importorskip("build")
    tmp = tmp_path_factory.mktemp("wheel")
    dist = tmp / "dist"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "build",
            "--wheel",
            "--no-isolation",
            "--outdir",
            str(dist),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    wheels = list(dist.glob("icml25-*.whl"))
    assert len(wheels) == 1 and __version__ in wheels[0].name
    env_dir = tmp / "venv"
    # The heavy dependencies (torch, transformers, ...) are the ones this interpreter imports: a
    # .pth file lists the folders on its own sys.path (its site-packages, a venv's included, and
    # what their .pth files add; ``system_site_packages`` would link the base interpreter's
    # instead, where a venv's torch may be missing), less the standard library (the venv has its
    # own) and anything inside the checkout (its editable install and tests). Plain folders in a
    # .pth file are not scanned for .pth files, so no editable finder comes along either; icml25
    # itself is installed from the wheel into the venv's site-packages, first on sys.path.
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    purelib = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    stdlib = {Path(sysconfig.get_path(k)).resolve() for k in ("stdlib", "platstdlib")}
    deps = []
    for entry in dict.fromkeys(p for p in sys.path if p and Path(p).is_dir()):
        folder = Path(entry).resolve()
        dynload = folder.name == "lib-dynload" and folder.parent in stdlib
        if folder in stdlib or dynload or folder.is_relative_to(ROOT):
            continue
        deps.append(f"{folder}\n")
    (Path(purelib) / "_icml25_test_deps.pth").write_text("".join(deps))
    subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", str(wheels[0])],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return py, wheels[0], tmp, Path(purelib)


def _run(py, *args, cwd, timeout=600):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [str(py), *args], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env
    )


def test_the_wheel_is_what_gets_imported_and_every_paper_imports(wheel_env):
    py, _, tmp, purelib = wheel_env
    code = (
        "import importlib, json, icml25, icml25.registry as r; "
        "mods = [importlib.import_module(p.module).__name__ for p in r.PAPERS]; "
        "import icml25.topo_detect as t, pathlib; "
        "data = pathlib.Path(t.__file__).parent / 'data' / 'digit_prompts.json'; "
        "import icml25.lapsum._cpu as k; "
        "print(json.dumps({'file': icml25.__file__, 'version': icml25.__version__, 'mods': mods, "
        "'data': data.is_file(), 'cpp': k._SOURCE.is_file(), 'kernels': k.available()}))"
    )
    out = _run(py, "-c", code, cwd=tmp)
    assert out.returncode == 0, out.stderr[-3000:]
    info = json.loads(out.stdout.strip().splitlines()[-1])
    # the wheel installed in the venv, not the checkout's editable install
    assert Path(info["file"]).parent == purelib / "icml25", (info["file"], purelib)
    assert info["version"] == __version__ and info["data"]
    # LapSum's C++ source ships in the wheel, and its kernels build from there
    assert info["cpp"] and info["kernels"][0], info["kernels"]
    assert info["mods"] == [p.module for p in registry.PAPERS]


def test_the_command_line_lists_and_reproduces(wheel_env):
    py, _, tmp, _ = wheel_env
    out = _run(py, "-m", "icml25", "list", "--json", cwd=tmp)
    assert out.returncode == 0, out.stderr[-3000:]
    assert len(json.loads(out.stdout)) == 19
    exe = py.parent / "icml25"
    out = _run(
        exe,
        "repro",
        "lapsum",
        "--seeds",
        "1",
        "--out",
        str(tmp / "run"),
        "--quiet",
        cwd=tmp,
        timeout=900,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    res = json.loads((tmp / "run" / "results.json").read_text())
    assert [r["slug"] for r in res["results"]] == ["lapsum"] and res["results"][0][
        "status"
    ] != "error"


def test_all_extras_resolve_from_the_wheel(wheel_env):
    py, whl, tmp, _ = wheel_env
    out = _run(
        py, "-m", "pip", "install", "--dry-run", "-q", f"icml25[all] @ {whl.as_uri()}", cwd=tmp
    )
    assert out.returncode == 0, out.stderr[-3000:]
