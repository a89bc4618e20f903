"""Git as a source (``kbseek sync git``): the Markdown files of a repository at a ref become documents, each with
the commit and blob it was read from (its origin ``git:<repo>@<commit>:<path>`` and its history's ``detail``).

A sync reads from Git's objects, never from a working tree, through the ``git`` command (no shell, a timeout on
each call). The first sync reads every file; later ones only what ``git diff -M`` names between the commit last
synced (kept in ``kb_meta`` per repository and folder) and the new one, unless that commit is gone or no longer an
ancestor (a force-push): then every file is compared again. Every file is read before anything is written, so a
repository that vanishes or a git that fails changes nothing. A file that cannot be stored (binary, too large) is
reported and the others go on; a rename moves the document once its new path is stored; documents whose files are
gone upstream are deleted only with ``prune`` and only when every file was stored; the commit is recorded only
then, so the next sync retries what failed.

A URL is fetched into a bare mirror under the data home; its credentials are passed to git on the command line
only, never written to the mirror's configuration, and masked (``observability.redact``) wherever it is named.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kbseek.core.ids import sha256_hex
from kbseek.core.origins import GitOrigin, git_origin
from kbseek.core.paths import MARKDOWN_SUFFIXES
from kbseek.errors import InvalidRequest, NotFoundError, SourceError
from kbseek.home.ingest import STATUSES, FileReport
from kbseek.home.writer import DocumentWriter
from kbseek.observability.redact import redact

log = logging.getLogger("kbseek")
GIT_TIMEOUT = 60.0  # seconds for one git command on local objects
FETCH_TIMEOUT = 600.0  # a clone or fetch over the network
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://|^[^/\s:]+@[^/\s:]+:")  # scheme://… or scp-like user@host:path
# what git itself would read from the environment of whoever started kbseek (a hook, another repository)
_GIT_ENV = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_NAMESPACE",
    "GIT_CEILING_DIRECTORIES",
)


@dataclass(frozen=True, slots=True)
class Repository:
    name: str  # as recorded and shown: a local repository's resolved path, or the URL with credentials masked
    git_dir: Path  # where git runs: the working copy, the bare repository or the mirror
    remote: bool = False


@dataclass(frozen=True, slots=True)
class Entry:
    path: str  # within the repository
    blob: str
    size: int


@dataclass(slots=True)
class GitSyncReport:
    """What one sync did: per file (``files``), the moves, the deletions and the documents gone upstream but kept
    (no ``prune``); ``recorded`` says whether ``commit`` is now the repository's last synced commit."""

    request_id: str
    repo: str
    ref: str
    path: str
    commit: str = ""
    previous: str | None = None
    mode: str = "full"  # full | incremental | unchanged
    reason: str = ""
    files: list[FileReport] = field(default_factory=list)
    moved: list[dict[str, str]] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    prune_skipped: str | None = None
    recorded: bool = False
    duration_ms: float = 0.0

    @property
    def ok(self) -> bool:
        return not any(f.status == "failed" for f in self.files)

    @property
    def counts(self) -> dict[str, int]:
        counts = {status: sum(f.status == status for f in self.files) for status in STATUSES}
        counts["deleted"] = len(self.deleted)
        return counts | {"moved": len(self.moved), "kept": len(self.kept)}

    def to_dict(self) -> dict[str, Any]:
        fields = ("request_id", "repo", "ref", "path", "commit", "previous", "mode", "reason")
        return {name: getattr(self, name) for name in fields} | {
            "counts": self.counts,
            "files": [f.to_dict() for f in self.files],
            "moved": list(self.moved),
            "deleted": list(self.deleted),
            "kept": list(self.kept),
            "prune_skipped": self.prune_skipped,
            "recorded": self.recorded,
            "duration_ms": round(self.duration_ms, 3),
        }


def sync_git(
    writer: DocumentWriter,
    mirrors: Path,
    repo: str,
    *,
    ref: str = "HEAD",
    subdir: str = "",
    prune: bool = False,
    request_id: str = "-",
) -> GitSyncReport:
    """Sync the Markdown files under ``subdir`` of ``repo`` (a local path or a URL) at ``ref`` into the documents.

    ``NotFoundError`` for a repository, ref or folder that does not exist, ``SourceError`` when git fails; both
    before anything is written."""
    started = time.perf_counter()
    subdir = _subdir(subdir)
    source = open_repository(repo, mirrors)
    report = GitSyncReport(request_id=request_id, repo=source.name, ref=ref, path=subdir)
    commit = report.commit = resolve(source, ref)
    entries = list_tree(source, commit, subdir)
    key = sync_key(source.name, subdir)
    previous = report.previous = writer.repository.meta(key)
    known = writer.repository.hashes()
    ours = {p: h for p, (h, o) in known.items() if (g := git_origin(o)) and g.repo == source.name and _under(g, subdir)}
    renames: dict[str, str] = {}
    wanted: list[str] = []
    if previous == commit:
        report.mode = "unchanged"
    elif previous and _is_ancestor(source, previous, commit):
        report.mode = "incremental"
        wanted, renames = _changed(source, previous, commit, subdir, entries)
    else:
        report.reason = "first sync" if previous is None else f"{previous[:12]} is gone or not an ancestor (force-push)"
        wanted = sorted(entries)
    blobs = _read(source, [entries[p] for p in wanted], writer.chunking.max_file_bytes, report)
    added: dict[str, str] = {}
    for path in wanted:
        entry = entries[path]
        if entry.blob not in blobs:
            continue  # reported by _read
        data = blobs[entry.blob]
        origin = GitOrigin(source.name, commit, entry.path)
        stored = known.get(path)
        if stored and stored[0] == sha256_hex(data) and _same_file(stored[1], origin):
            report.files.append(FileReport(source=str(origin), status="unchanged", path=path))
            continue
        file_report = writer.store_synced(data, path, origin=str(origin), detail=f"commit {commit} blob {entry.blob}")
        report.files.append(file_report)
        if file_report.status != "failed":
            added[sha256_hex(data)] = path
    failed = {f.path for f in report.files if f.status == "failed"}
    gone = [p for p in sorted(ours) if p not in entries]
    for path in gone:  # a rename git saw, or (a full comparison) a vanished file whose text was stored elsewhere
        target = renames.get(path) or added.get(ours[path])
        if target is not None and target not in failed:
            writer.delete(path, via="sync", detail=f"commit {commit}: moved to {target}")
            report.moved.append({"from": path, "to": target})
    moved = {m["from"] for m in report.moved}
    left = [p for p in gone if p not in moved]
    if left and prune and report.ok:
        for path in left:
            writer.delete(path, via="sync", detail=f"commit {commit}: deleted upstream")
            report.deleted.append(path)
    elif left:
        report.kept = left
        if prune:
            report.prune_skipped = f"{len(failed)} file(s) failed: nothing deleted until every file is stored"
    if report.ok:
        writer.repository.set_meta(key, commit)
        report.recorded = True
    report.duration_ms = (time.perf_counter() - started) * 1000
    log.info(
        "git sync %s@%s (%s): %s",
        source.name,
        commit[:12],
        report.mode,
        " ".join(f"{k}={v}" for k, v in report.counts.items()),
    )
    return report


def sync_key(repo: str, subdir: str) -> str:
    """The ``kb_meta`` key holding the commit last synced from folder ``subdir`` of ``repo`` (as recorded)."""
    return "git-sync:" + hashlib.sha256(f"{repo}\0{subdir}".encode()).hexdigest()[:40]


def open_repository(repo: str, mirrors: Path) -> Repository:
    """The repository ``repo`` names: a local working copy or bare repository, or a URL fetched into a mirror."""
    if _URL.match(repo):
        name = redact(repo)
        mirror = mirrors / hashlib.sha256(name.encode()).hexdigest()[:16]
        if not (mirror / "HEAD").exists():
            mirror.mkdir(parents=True, exist_ok=True)
            _git(["init", "--quiet", "--bare", str(mirror)], None, f"making a mirror of {name}")
        refspecs = ["+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*", "+HEAD:refs/kbseek/HEAD"]
        fetch = ["fetch", "--quiet", "--prune", "--no-write-fetch-head", "--end-of-options", repo, *refspecs]
        _git(fetch, mirror, f"fetching {name}", timeout=FETCH_TIMEOUT)
        return Repository(name, mirror, remote=True)
    path = Path(repo).expanduser()
    if not path.is_dir():
        raise NotFoundError(
            f"no Git repository at {repo!r}: no such folder", hint="give the path of a clone, or its URL"
        )
    if _git(["rev-parse", "--git-dir"], path, "", check=False).returncode != 0:
        raise NotFoundError(f"{repo!r} is not a Git repository", hint="give the path of a clone, or its URL")
    return Repository(str(path.resolve()), path.resolve())


def resolve(source: Repository, ref: str) -> str:
    """The full hash of the commit ``ref`` names (``HEAD`` of a URL: the remote's default branch)."""
    name = "refs/kbseek/HEAD" if source.remote and ref == "HEAD" else ref
    if not ref or ref.startswith("-") or any(c.isspace() or c in "\0:" for c in ref):
        raise InvalidRequest(f"ref {ref!r} is not a branch, tag or commit name", hint="e.g. main, v1.2 or a hash")
    done = _git(["rev-parse", "--verify", "--quiet", "--end-of-options", f"{name}^{{commit}}"], source.git_dir, "")
    if done.returncode != 0:
        raise NotFoundError(
            f"ref {ref!r} not found in {source.name}: no such branch, tag or commit",
            hint=f"list them with 'git -C {source.git_dir} show-ref'",
        )
    return done.stdout.decode().strip()


def list_tree(source: Repository, commit: str, subdir: str) -> dict[str, Entry]:
    """The Markdown files under ``subdir`` at ``commit``, by document path (their path within ``subdir``)."""
    args = ["ls-tree", "-r", "-z", "-l", "--full-tree", commit, *(["--", subdir] if subdir else [])]
    if subdir and _git(["cat-file", "-t", f"{commit}:{subdir}"], source.git_dir, "").stdout.strip() != b"tree":
        raise NotFoundError(f"no folder {subdir!r} in {source.name} at {commit[:12]}", hint="check --path")
    out = _git(args, source.git_dir, f"listing {source.name} at {commit[:12]}").stdout
    entries: dict[str, Entry] = {}
    for record in out.split(b"\0"):
        meta, _, raw = record.partition(b"\t")
        if not raw:
            continue
        mode, kind, blob, size = meta.decode().split()
        path = raw.decode("utf-8", "replace")
        if kind == "blob" and mode in ("100644", "100755") and _markdown(path):  # no links, no submodules
            entries[path[len(subdir) + 1 :] if subdir else path] = Entry(path, blob, int(size))
    return entries


def _changed(
    source: Repository, old: str, new: str, subdir: str, entries: dict[str, Entry]
) -> tuple[list[str], dict[str, str]]:
    """The document paths to read (added, modified, renamed to) and the renames (old document path → new)."""
    args = ["diff", "--name-status", "-z", "-M", "--no-ext-diff", "--no-textconv", old, new]
    out = _git([*args, *(["--", subdir] if subdir else [])], source.git_dir, f"comparing {old[:12]}..{new[:12]}")
    tokens = out.stdout.decode("utf-8", "replace").split("\0")
    wanted: set[str] = set()
    renames: dict[str, str] = {}
    i = 0
    while i < len(tokens) and tokens[i]:
        status, paths = tokens[i], tokens[i + 1 : i + (3 if tokens[i][0] in "RC" else 2)]
        i += 1 + len(paths)
        target = _relative(paths[-1], subdir)
        if status[0] != "D" and target in entries:
            wanted.add(target)
        if status[0] == "R" and target in entries:
            renames[_relative(paths[0], subdir)] = target
    return sorted(wanted), renames


def _read(source: Repository, entries: list[Entry], max_bytes: int, report: GitSyncReport) -> dict[str, bytes]:
    """Every blob of ``entries`` at most ``max_bytes`` long, by hash, in one ``git cat-file``; larger ones are
    reported as failed."""
    wanted: list[str] = []
    for entry in entries:
        if entry.size > max_bytes:
            origin = str(GitOrigin(source.name, report.commit, entry.path))
            reason = f"{entry.path}: file is {entry.size:,} bytes, over the limit of {max_bytes:,}"
            report.files.append(FileReport(source=origin, status="failed", reason=reason, error_code="too_large"))
        elif entry.blob not in wanted:
            wanted.append(entry.blob)
    if not wanted:
        return {}
    out = _git(["cat-file", "--batch"], source.git_dir, f"reading {source.name}", stdin="\n".join(wanted) + "\n")
    data, blobs, at = out.stdout, {}, 0
    for blob in wanted:
        end = data.index(b"\n", at)
        header = data[at:end].split()
        if len(header) != 3 or header[0].decode() != blob:
            raise SourceError(f"reading {source.name}: blob {blob} is missing", hint="is the repository complete?")
        size = int(header[2])
        blobs[blob] = data[end + 1 : end + 1 + size]
        at = end + 1 + size + 1
    return blobs


def _is_ancestor(source: Repository, old: str, new: str) -> bool:
    if _git(["cat-file", "-e", f"{old}^{{commit}}"], source.git_dir, "", check=False).returncode != 0:
        return False
    return _git(["merge-base", "--is-ancestor", old, new], source.git_dir, "", check=False).returncode == 0


def _git(
    args: list[str],
    cwd: Path | None,
    what: str,
    *,
    check: bool | None = None,
    timeout: float = GIT_TIMEOUT,
    stdin: str | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run git (no shell, no prompt, a timeout); a failure is a ``SourceError`` saying ``what`` failed (``check``
    defaults to whether ``what`` is given)."""
    env = {k: v for k, v in os.environ.items() if k not in _GIT_ENV} | {"GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}
    command = ["git", "--literal-pathspecs", *(["-C", str(cwd)] if cwd else []), *args]
    try:
        done = subprocess.run(
            command, input=stdin.encode() if stdin else None, capture_output=True, timeout=timeout, env=env
        )
    except FileNotFoundError:
        raise SourceError("the git command is not installed", hint="install git") from None
    except subprocess.TimeoutExpired:
        raise SourceError(
            f"{what or 'git'}: no answer within {timeout:.0f}s", hint="is the remote reachable?"
        ) from None
    if (bool(what) if check is None else check) and done.returncode != 0:
        lines = done.stderr.decode("utf-8", "replace").strip().splitlines() or [f"exit code {done.returncode}"]
        raise SourceError(f"{what}: {redact(lines[-1])}", hint="check the repository and the ref")
    return done


def _subdir(subdir: str) -> str:
    parts = [p for p in subdir.strip().strip("/").split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        raise InvalidRequest(f"--path {subdir!r} leaves the repository", hint="a folder inside it, e.g. docs/runbooks")
    return "/".join(parts)


def _markdown(path: str) -> bool:
    return path.lower().endswith(MARKDOWN_SUFFIXES) and not any(p.startswith(".") for p in path.split("/"))


def _relative(path: str, subdir: str) -> str:
    return path[len(subdir) + 1 :] if subdir and path.startswith(subdir + "/") else path


def _under(origin: GitOrigin, subdir: str) -> bool:
    return not subdir or origin.path.startswith(subdir + "/")


def _same_file(stored_origin: str | None, origin: GitOrigin) -> bool:
    stored = git_origin(stored_origin)
    return stored is not None and (stored.repo, stored.path) == (origin.repo, origin.path)
